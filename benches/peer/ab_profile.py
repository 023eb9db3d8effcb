#!/usr/bin/env python3
"""A/B of Ferrite binaries on one model or graph, robust to a noisy machine.

    python3 benches/peer/ab_profile.py --rounds 3 OLD_BIN NEW_BIN -- \
        examples/onnx/mobilenetv2/model.onnx --input image=img.npy --threads 1 --runs 10

Runs `BIN profile ARGS --format json` for each binary in turn, `--rounds` times, and prints
per binary the minimum over rounds of the fused schedule's whole run (`wall_ns`) and of each
kernel's median. Alternating the binaries and taking minimums cancels most of what a shared
VM does to one run (steal time comes in phases of seconds). Kernels under --min-us in every
binary are left out of the table.
"""
import argparse
import collections
import json
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-us", type=float, default=150.0)
    ap.add_argument("bins", nargs="+")
    argv = sys.argv[1:]
    if "--" not in argv:
        ap.error("give the profile arguments after --")
    cut = argv.index("--")
    a = ap.parse_args(argv[:cut])
    args = argv[cut + 1:]
    best = collections.defaultdict(dict)
    for _ in range(a.rounds):
        for b in a.bins:
            out = subprocess.run([b, "profile", *args, "--format", "json"],
                                 capture_output=True, text=True, check=True).stdout
            s = json.loads(out)["schedules"]["fused"]
            vals = {"whole": s["wall_ns"]}
            vals.update((k["name"], k["time_ns"]) for k in s["kernels"])
            for k, v in vals.items():
                best[b][k] = min(best[b].get(k, float("inf")), v)
    print("| kernel | " + " | ".join(b.split("/")[-1] for b in a.bins) + " |")
    print("|---|" + "---:|" * len(a.bins))
    for name in best[a.bins[0]]:
        row = [best[b].get(name, 0) / 1e3 for b in a.bins]
        if name == "whole" or max(row) >= a.min_us:
            print(f"| {name} | " + " | ".join(f"{x:.0f} us" for x in row) + " |")


if __name__ == "__main__":
    main()
