#!/usr/bin/env python3
"""Medians over several `compare.py --json` files, as a Markdown table.

    for i in 1 2 3; do python3 benches/peer/compare.py --json peer-$i.json; done
    python3 benches/peer/summarize.py peer-1.json peer-2.json peer-3.json

Each cell is the median over the files of that file's figure; the speedup column also
shows the range. The files must agree on threads and runs (they are one setting measured
several times), and every check must have passed in every file.
"""

import json
import statistics
import sys


def main(paths):
    if not paths:
        sys.exit(__doc__.strip())
    docs = [json.load(open(p)) for p in paths]
    settings = {(d["threads"], d["runs"], d["seed"]) for d in docs}
    if len(settings) != 1:
        sys.exit(f"summarize.py: the files measure different settings (threads, runs, seed): {settings}")
    threads, runs, seed = settings.pop()
    by_example = {}
    for d in docs:
        for r in d["results"]:
            by_example.setdefault(r["example"], []).append(r)
    print(f"NumPy {docs[0]['numpy']} eager ({docs[0]['blas']['name']}, erf: {docs[0].get('erf', '?')}) vs "
          f"Ferrite CPU, {threads} thread(s), {runs} timed runs, seed {seed}: medians over "
          f"{len(docs)} invocations ({docs[0]['cpu']}; load averages "
          + ", ".join(f"{d['load_average'][0]:.2f}" for d in docs) + ")")
    print()
    print("| example | kernels fused / unfused | numpy eager µs | ferrite unfused µs | ferrite fused µs "
          "| fused wall µs | fused vs numpy (range) | check: max err / scale |")
    print("|---|---|---:|---:|---:|---:|---|---|")
    failed = False
    for ex, recs in by_example.items():
        errors = [r["error"] for r in recs if "error" in r]
        if errors:
            print(f"| `{ex}` | error: {errors[0]} | | | | | | |")
            failed = True
            continue
        med = {k: statistics.median(r[k] for r in recs)
               for k in ("numpy_us", "ferrite_unfused_us", "ferrite_fused_us", "ferrite_fused_wall_us",
                         "fused_vs_numpy")}
        speedups = [r["fused_vs_numpy"] for r in recs]
        worst = max((c["max_error_over_scale"] or 0.0) for r in recs for o in r["outputs"]
                    for c in o["checks"].values())
        ok = all(r["check_ok"] for r in recs)
        failed |= not ok
        print(f"| `{ex}` | {recs[0]['ferrite_fused_kernels']} / {recs[0]['ferrite_unfused_kernels']} "
              f"| {med['numpy_us']:.1f} | {med['ferrite_unfused_us']:.1f} | {med['ferrite_fused_us']:.1f} "
              f"| {med['ferrite_fused_wall_us']:.1f} | {med['fused_vs_numpy']:.2f}x "
              f"({min(speedups):.2f}-{max(speedups):.2f}) | {'ok' if ok else 'MISMATCH'} ({worst:.1e}) |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
