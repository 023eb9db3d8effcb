#!/usr/bin/env python3
"""How evenly a profile's parallel kernels spread their work over the threads.

    ferrite profile MODEL --threads 16 --runs 20 --trace tr.json
    python3 benches/peer/trace_balance.py tr.json            # per kernel, then totals
    python3 benches/peer/trace_balance.py tr.json k5,k11     # chunks of these kernels, per worker

Reads the fused schedule's kernel spans and their chunk spans (`cat: chunk`, one per chunk,
`tid` 1000 + worker). Per kernel: its time, chunks, threads used, the first and last chunk's
start after the kernel's, the mean and largest chunk, and how busy its threads were. Totals:
each category's time against its work spread evenly over the threads it used (products,
other parallel kernels, kernels on one thread), i.e. what perfect balance would save.
Accepts a `.json` or `.json.gz` trace.
"""
import collections
import gzip
import json
import sys


def load(path):
    d = json.load(gzip.open(path) if path.endswith(".gz") else open(path))
    ev = d["traceEvents"] if isinstance(d, dict) else d
    pid = next(e["pid"] for e in ev if e.get("name") == "process_name"
               and e["args"]["name"].startswith("fused"))
    kernels = [e for e in ev if e.get("pid") == pid and e.get("cat") == "kernel"]
    chunks = collections.defaultdict(list)
    for e in ev:
        if e.get("pid") == pid and e.get("cat") == "chunk":
            chunks[e["name"]].append(e)
    return kernels, chunks


def main():
    kernels, chunks = load(sys.argv[1])
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    totals = collections.Counter()
    if not only:
        print(f"{'kernel':28s} {'us':>7s} {'n':>3s} {'thr':>3s} {'lag0':>6s} {'lagmax':>6s}"
              f" {'cmean':>7s} {'cmax':>7s} {'busy%':>5s}")
    for k in kernels:
        cs = [c for c in chunks[k["name"]] if k["ts"] <= c["ts"] <= k["ts"] + k["dur"]]
        if not cs:
            continue
        if only:
            if k["name"].split("_")[0] not in only:
                continue
            print(k["name"], f"{k['dur']:.1f} us")
            by = collections.defaultdict(list)
            for c in cs:
                by[c["tid"] - 1000].append((round(c["ts"] - k["ts"], 1), round(c["dur"], 1),
                                            c["args"]["chunk"]))
            for w, spans in sorted(by.items()):
                print(f"  worker {w:2d}: (start, us, chunk) {spans}")
            continue
        threads = len({c["tid"] for c in cs})
        lags = [c["ts"] - k["ts"] for c in cs]
        durs = [c["dur"] for c in cs]
        print(f"{k['name'][:28]:28s} {k['dur']:7.1f} {len(cs):3d} {threads:3d} {min(lags):6.1f}"
              f" {max(lags):6.1f} {sum(durs) / len(durs):7.1f} {max(durs):7.1f}"
              f" {sum(durs) / (k['dur'] * threads) * 100:5.0f}")
        cat = "product" if "matmul" in k["name"] else ("one thread" if threads == 1 else "other")
        totals[cat, "time"] += k["dur"]
        totals[cat, "even"] += sum(durs) / threads
    for cat in ("product", "other", "one thread"):
        if totals[cat, "time"]:
            print(f"{cat}: {totals[cat, 'time'] / 1e3:.2f} ms, spread evenly"
                  f" {totals[cat, 'even'] / 1e3:.2f} ms")


if __name__ == "__main__":
    main()
