#!/usr/bin/env python3
"""Ferrite's CPU target against NumPy eager on the same graphs, the same inputs, one run.

For each example graph (default: every examples/*.fg; or the names or paths given):

1. makes Ferrite's own random inputs in NumPy (parameter i is `Tensor::random(type,
   seed + i)`, SplitMix64, reproduced bit for bit) and writes them as .npy files;
2. runs `ferrite run` twice on the CPU, once with `--seed` and once with `--input` for
   every parameter, and requires bit-identical outputs: that proves the .npy inputs are
   the inputs `ferrite profile --seed` times (profile takes no `--input`);
3. evaluates the graph with NumPy (benches/peer/fg_numpy.py) and checks its outputs
   against Ferrite's fused and unfused CPU outputs and the reference interpreter's;
4. times NumPy eager (warm-up, then --runs runs, median of time.perf_counter) with
   NumPy's BLAS limited to --threads threads;
5. times Ferrite with `ferrite profile --format json --runs N --threads T --seed S`
   (fused and unfused: median kernel total, and median wall time of a whole run);
6. prints a table (and writes JSON with --json FILE).

Python and NumPy are needed here only: Ferrite's build and CI never use this script.
"""

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))

# Tolerance of the output checks, relative to the output's scale (its largest magnitude):
# |numpy - ferrite| <= ATOL_SCALE * max|ferrite| + RTOL * |ferrite| elementwise. Both
# sides compute in float32 with different summation orders and different exp/log/tanh
# implementations, so agreement to about 1e-6 of the scale is what float32 allows; 1e-4
# leaves room for long reductions (matmul over 784 terms) and still catches any wrong op.
RTOL = 1e-3
ATOL_SCALE = 1e-4

# An output with more than this share of zero-or-subnormal floats is flagged: subnormal
# arithmetic takes microcode assists on x86, which slows both sides.
SUBNORMAL_FLAG = 0.5
# An intermediate with more than this share of subnormals is named in the notes.
SUBNORMAL_NOTE = 0.01


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Time Ferrite's CPU target against NumPy eager on the same graphs and inputs.")
    p.add_argument("graphs", nargs="*",
                   help="example names (`mlp`) or .fg paths; default: every examples/*.fg")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for Ferrite and for NumPy's BLAS (default 1)")
    p.add_argument("--runs", type=int, default=20, help="timed runs per side (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="NumPy warm-up runs (default 3)")
    p.add_argument("--repeat", type=int, default=1,
                   help="timing rounds over all graphs (default 1); each cell is then the median "
                        "over rounds, and the speedup shows its range")
    p.add_argument("--seed", type=int, default=0, help="input seed, as `ferrite run --seed`")
    p.add_argument("--ferrite", default=os.path.join(REPO, "target", "release", "ferrite"),
                   help="the ferrite binary (default: target/release/ferrite)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--no-interp", action="store_true",
                   help="skip the check against the reference interpreter (it is slow on big graphs)")
    p.add_argument("--numpy-ops", action="store_true",
                   help="also print where NumPy's time goes, op by op (the 3 slowest ops per graph)")
    p.add_argument("--keep", metavar="DIR", help="keep the .npy inputs and outputs in DIR")
    p.add_argument("--check-only", action="store_true",
                   help="no timing: only check NumPy's outputs against the reference interpreter "
                        "(works on any .fg file, e.g. tests/parse/*.fg)")
    return p.parse_args(argv)


ARGS = parse_args(sys.argv[1:])
if ARGS.threads < 1 or ARGS.runs < 1 or ARGS.repeat < 1 or ARGS.warmup < 0:
    sys.exit("compare.py: --threads, --runs and --repeat must be at least 1")
# NumPy's BLAS reads its thread count when it loads: set it before `import numpy`.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402

sys.path.insert(0, HERE)
import fg_numpy  # noqa: E402
from fg_numpy import FgError  # noqa: E402


def blas_info():
    """NumPy's BLAS (name, version) and the thread count it actually uses, asked from the
    library itself when it is the scipy-openblas NumPy wheels ship."""
    info = {"name": "unknown", "version": None, "threads": None}
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        info["name"], info["version"] = blas.get("name"), blas.get("version")
    except Exception:  # older NumPy: no dict mode
        pass
    try:
        import ctypes
        libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*"))
        for path in libs:
            lib = ctypes.CDLL(path)
            for sym in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                        "openblas_get_num_threads64_", "openblas_get_num_threads"):
                f = getattr(lib, sym, None)
                if f is not None:
                    f.restype = ctypes.c_int
                    info["threads"] = int(f())
                    return info
    except OSError:
        pass
    return info


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def resolve_graphs(names):
    if not names:
        return sorted(glob.glob(os.path.join(REPO, "examples", "*.fg")))
    out = []
    for n in names:
        if os.path.exists(n):
            out.append(n)
        else:
            path = os.path.join(REPO, "examples", n if n.endswith(".fg") else n + ".fg")
            if not os.path.exists(path):
                sys.exit(f"compare.py: no graph `{n}` (not a file, not examples/{n}.fg)")
            out.append(path)
    return out


def ferrite(*args):
    """Runs the ferrite binary; returns stdout, or raises with its error message."""
    r = subprocess.run([ARGS.ferrite, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"`ferrite {' '.join(args)}` failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def load_outputs(graph, out_dir):
    return [np.load(os.path.join(out_dir, name + ".npy")) for name in graph.output_names]


def compare(ours, theirs):
    """(max abs error, max error over the output's scale, within tolerance?, note)."""
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None, None, False, f"{ours.dtype}{list(ours.shape)} vs {theirs.dtype}{list(theirs.shape)}"
    if ours.dtype.kind not in "fc":
        diff = int(np.sum(ours != theirs))
        return float(diff), float(diff), diff == 0, f"{diff} elements differ"
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    same = (a == b) | both_nan  # equal infinities included
    err = np.where(same, 0.0, np.abs(a - b))
    err = np.where(np.isnan(err), np.inf, err)
    finite = np.abs(b[np.isfinite(b)])
    scale = float(finite.max()) if finite.size else 1.0
    scale = scale if scale > 0 else 1.0
    ok = bool(np.all(err <= ATOL_SCALE * scale + RTOL * np.abs(np.where(np.isfinite(b), b, 0.0))))
    max_abs = float(err.max()) if err.size else 0.0
    return max_abs, max_abs / scale, ok, ""


def float_stats(x):
    """(share of zeros, share of subnormals) of a float array."""
    if x.dtype.kind != "f" or x.size == 0:
        return 0.0, 0.0
    ax = np.abs(x)
    zero = float(np.mean(ax == 0))
    sub = float(np.mean((ax != 0) & (ax < np.finfo(x.dtype).tiny)))
    return zero, sub


def time_numpy(prog, inputs):
    for _ in range(ARGS.warmup):
        prog.run(inputs)
    times = []
    for _ in range(ARGS.runs):
        t0 = time.perf_counter()
        prog.run(inputs)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6, float(min(times)) * 1e6


def numpy_op_profile(prog, inputs, runs=10):
    """Median time of each graph op over `runs` runs, slowest first: [(label, µs)]."""
    g = prog.graph
    samples = {}
    for r in range(runs + 1):
        env = prog._env(inputs)
        for i, f, args, free in prog.steps:
            t0 = time.perf_counter()
            env[i] = f(*[env[a] for a in args])
            dt = time.perf_counter() - t0
            if r:  # the first run warms up
                samples.setdefault(i, []).append(dt)
            for a in free:
                env[a] = None
    rows = []
    for i, ts in samples.items():
        n = g.nodes[i]
        rows.append((f"{n.name or '%' + str(i)} ({n.op})", float(np.median(ts)) * 1e6))
    rows.sort(key=lambda r: -r[1])
    return rows


def prepare(path, work):
    """Checks one graph (steps 1-3); returns its record, NumPy program and inputs."""
    graph = fg_numpy.parse_file(path)
    name = graph.name
    rec = {"example": os.path.splitext(os.path.basename(path))[0], "graph": name, "file": os.path.relpath(path, REPO)}
    d = os.path.join(work, rec["example"])
    os.makedirs(d, exist_ok=True)
    inputs = fg_numpy.ferrite_random_inputs(graph, ARGS.seed)
    in_flags = []
    for (pname, _, _), x in zip(graph.param_types(), inputs):
        f = os.path.join(d, f"in_{pname}.npy")
        np.save(f, x)
        in_flags += ["--input", f"{pname}={f}"]
    threads = ["--threads", str(ARGS.threads)]

    # Ferrite's outputs: from its own random inputs, and from the .npy files.
    first = ["--target", "interp"] if ARGS.check_only else threads
    ferrite("run", path, "--seed", str(ARGS.seed), "--out", os.path.join(d, "seeded"), *first)
    ferrite("run", path, *in_flags, "--out", os.path.join(d, "first"), *first)
    seeded = load_outputs(graph, os.path.join(d, "seeded"))
    first_out = load_outputs(graph, os.path.join(d, "first"))
    same_inputs = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(seeded, first_out))
    rec["inputs_match_ferrite_seed"] = same_inputs
    if not same_inputs:
        raise RuntimeError("the .npy inputs do not reproduce Ferrite's random inputs "
                           "(outputs of --seed and --input runs differ)")
    if ARGS.check_only:
        refs = {"interp": first_out}
    else:
        refs = {"fused": first_out}
        ferrite("run", path, *in_flags, "--no-fuse", "--out", os.path.join(d, "unfused"), *threads)
        refs["unfused"] = load_outputs(graph, os.path.join(d, "unfused"))
        if not ARGS.no_interp:
            ferrite("run", path, *in_flags, "--target", "interp", "--out", os.path.join(d, "interp"))
            refs["interp"] = load_outputs(graph, os.path.join(d, "interp"))

    # NumPy's outputs, with the share of zero/subnormal values of every float value.
    prog = fg_numpy.Program(graph)
    worst = {"node": None, "zero": 0.0, "subnormal": 0.0}

    def visit(node, arr):
        z, s = float_stats(arr)
        if s > worst["subnormal"]:
            worst.update(node=f"{node.name or node.op} ({node.op})", zero=z, subnormal=s)
    ours = prog.run_checked(inputs, visit)
    rec["input_stats"] = {p: dict(zip(("zero", "subnormal"), float_stats(x)))
                          for (p, _, _), x in zip(graph.param_types(), inputs)}
    rec["most_subnormal_value"] = worst
    rec["outputs"] = []
    for k, oname in enumerate(graph.output_names):
        z, s = float_stats(ours[k])
        o = {"name": oname, "dtype": str(ours[k].dtype), "shape": list(ours[k].shape),
             "zero": z, "subnormal": s, "checks": {}}
        for ref_name, ref in refs.items():
            max_abs, max_rel, ok, why = compare(ours[k], ref[k])
            o["checks"][ref_name] = {"max_abs_error": max_abs, "max_error_over_scale": max_rel,
                                    "ok": ok, "note": why}
        rec["outputs"].append(o)
    rec["check_ok"] = all(c["ok"] for o in rec["outputs"] for c in o["checks"].values())
    if ARGS.numpy_ops:
        rec["numpy_ops"] = numpy_op_profile(prog, inputs)
    return rec, prog, inputs


def time_round(rec, prog, inputs):
    """Times one graph once (steps 4-5): NumPy eager, then Ferrite, one after the other so
    that they never compete for cores. Returns the round's figures."""
    r = {}
    r["numpy_us"], r["numpy_min_us"] = time_numpy(prog, inputs)
    prof = json.loads(ferrite("profile", os.path.join(REPO, rec["file"]), "--format", "json",
                              "--runs", str(ARGS.runs), "--seed", str(ARGS.seed),
                              "--threads", str(ARGS.threads)))
    for sched in ("fused", "unfused"):
        s = prof["schedules"][sched]
        r[f"ferrite_{sched}_us"] = s["total_ns"] / 1e3
        r[f"ferrite_{sched}_wall_us"] = s["wall_ns"] / 1e3 if s["wall_ns"] is not None else None
        rec[f"ferrite_{sched}_kernels"] = s["kernel_count"]
    r["ferrite_fused_vs_unfused"] = prof["speedup"]
    r["fused_vs_numpy"] = r["numpy_us"] / r["ferrite_fused_us"]
    r["fused_wall_vs_numpy"] = r["numpy_us"] / r["ferrite_fused_wall_us"] if r["ferrite_fused_wall_us"] else None
    return r


def summarize_rounds(rec):
    """Each timed figure as the median over rounds, with its range."""
    rounds = rec["rounds"]
    for key in rounds[0]:
        vals = [r[key] for r in rounds if r[key] is not None]
        if vals:
            rec[key] = float(np.median(vals))
            rec[key + "_range"] = [float(min(vals)), float(max(vals))]


def worst_error(r):
    return max((c["max_error_over_scale"] or 0.0) for o in r["outputs"] for c in o["checks"].values())


def print_table(records):
    if ARGS.check_only:
        cols = ("example", "outputs", "check")
        rows = [(r["example"], "-", "ERROR") if "error" in r else
                (r["example"], str(len(r["outputs"])),
                 ("ok" if r["check_ok"] else "MISMATCH") + f" ({worst_error(r):.1e})")
                for r in records]
    else:
        cols = ("example", "numpy eager µs", "ferrite unfused µs", "ferrite fused µs",
                "fused wall µs", "fused vs numpy", "check")
        rows = []
        for r in records:
            if "error" in r:
                rows.append((r["example"], "-", "-", "-", "-", "-", "ERROR"))
                continue
            speedup = f"{r['fused_vs_numpy']:.2f}x"
            if len(r["rounds"]) > 1:
                lo, hi = r["fused_vs_numpy_range"]
                speedup += f" ({lo:.2f}-{hi:.2f})"
            rows.append((r["example"], f"{r['numpy_us']:.1f}", f"{r['ferrite_unfused_us']:.1f}",
                         f"{r['ferrite_fused_us']:.1f}", f"{r['ferrite_fused_wall_us']:.1f}",
                         speedup,
                         ("ok" if r["check_ok"] else "MISMATCH") + f" ({worst_error(r):.1e})"))
    if ARGS.markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + "|".join("---" if i in (0, len(cols) - 1) else "---:" for i in range(len(cols))) + "|")
        for row in rows:
            print("| " + " | ".join([f"`{row[0]}`", *row[1:]]) + " |")
        return
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    last = len(cols) - 1

    def line(cells):
        return "  ".join(c.ljust(w) if i in (0, last) else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    print(line(cols))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def main():
    if not os.access(ARGS.ferrite, os.X_OK):
        sys.exit(f"compare.py: no ferrite binary at {ARGS.ferrite}: run `cargo build --release` first "
                 "(or pass --ferrite PATH)")
    np.seterr(all="ignore")  # log(0), exp overflow etc. are values here, as in PyTorch
    blas = blas_info()
    if blas["threads"] is not None and blas["threads"] != ARGS.threads:
        print(f"warning: NumPy's BLAS runs {blas['threads']} threads, not {ARGS.threads}", file=sys.stderr)
    paths = resolve_graphs(ARGS.graphs)
    work = ARGS.keep or tempfile.mkdtemp(prefix="ferrite-peer-")
    os.makedirs(work, exist_ok=True)
    load_before = load_average()
    print(f"NumPy {np.__version__} eager ({blas['name']} {blas['version'] or ''}, "
          f"{blas['threads'] if blas['threads'] is not None else '?'} BLAS thread(s); erf: "
          f"{fg_numpy.ERF_IMPL}) vs Ferrite CPU, {ARGS.threads} thread(s); {ARGS.runs} timed runs "
          f"each, medians; inputs: Ferrite's random inputs, seed {ARGS.seed}; {cpu_model()}, "
          f"{os.cpu_count()} cores, load average {load_before:.2f}", flush=True)
    records, ready = [], []
    try:
        for path in paths:
            label = os.path.splitext(os.path.basename(path))[0]
            print(f"  checking {label} ...", file=sys.stderr, flush=True)
            try:
                rec, prog, inputs = prepare(path, work)
                records.append(rec)
                ready.append((rec, prog, inputs))
            except (FgError, RuntimeError, OSError) as e:
                records.append({"example": label, "file": os.path.relpath(path, REPO), "error": str(e)})
        # Rounds go over every graph in turn, so a burst of load on a shared machine
        # lands in one round of several graphs rather than in every round of one.
        for k in range(0 if ARGS.check_only else ARGS.repeat):
            for rec, prog, inputs in ready:
                print(f"  timing {rec['example']} (round {k + 1} of {ARGS.repeat}) ...",
                      file=sys.stderr, flush=True)
                try:
                    rec.setdefault("rounds", []).append(time_round(rec, prog, inputs))
                except RuntimeError as e:
                    rec["error"] = str(e)
        for rec, _, _ in ready:
            if "error" not in rec and not ARGS.check_only:
                summarize_rounds(rec)
    finally:
        if not ARGS.keep:
            shutil.rmtree(work, ignore_errors=True)
    load_after = load_average()
    print()
    print_table(records)
    print()
    if ARGS.check_only:
        print(f"check: NumPy vs the reference interpreter, |err| <= {ATOL_SCALE:g} * scale + "
              f"{RTOL:g} * |ref|; in parentheses the largest |err| / scale.")
    else:
        print(f"load average {load_before:.2f} before, {load_after:.2f} after (on {os.cpu_count()} cores).")
        rounds = f"medians over {ARGS.repeat} rounds of " if ARGS.repeat > 1 else ""
        print(f"µs: {rounds}medians of {ARGS.runs} timed runs. ferrite columns: `ferrite profile` kernel time "
              "(median over runs of the per-run sum of kernel times); fused wall: the median time "
              "of a whole fused run. fused vs numpy = numpy eager / ferrite fused (kernel time)"
              + (", with its range over the rounds." if ARGS.repeat > 1 else "."))
        print(f"check: NumPy vs Ferrite fused, unfused{'' if ARGS.no_interp else ' and the reference interpreter'}, "
              f"|err| <= {ATOL_SCALE:g} * scale + {RTOL:g} * |ref|; in parentheses the largest |err| / "
              "scale, scale = the output's largest magnitude.")
    for r in records:
        if "error" in r:
            print(f"{r['example']}: ERROR: {r['error']}")
            continue
        for o in r["outputs"]:
            if o["zero"] + o["subnormal"] > SUBNORMAL_FLAG:
                print(f"{r['example']}: output `{o['name']}` is {o['zero']:.0%} zero and "
                      f"{o['subnormal']:.0%} subnormal")
            for ref, c in o["checks"].items():
                if not c["ok"]:
                    print(f"{r['example']}: MISMATCH in `{o['name']}` against ferrite {ref}: max abs "
                          f"error {c['max_abs_error']:.3g} ({c['max_error_over_scale']:.3g} of the scale) "
                          f"{c['note']} (seed {ARGS.seed})")
        w = r["most_subnormal_value"]
        if w["node"] and w["subnormal"] > SUBNORMAL_NOTE:
            print(f"{r['example']}: intermediate `{w['node']}` is {w['zero']:.0%} zero and "
                  f"{w['subnormal']:.1%} subnormal")
        if ARGS.numpy_ops:
            top = ", ".join(f"{lbl} {us:.1f} µs" for lbl, us in r["numpy_ops"][:3])
            print(f"{r['example']}: NumPy's slowest ops: {top}")
    if ARGS.json:
        doc = {
            "format": "ferrite-peer-compare", "version": 1,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpu": cpu_model(), "threads": ARGS.threads, "runs": ARGS.runs, "repeat": ARGS.repeat,
            "seed": ARGS.seed,
            "numpy": np.__version__, "python": platform.python_version(), "blas": blas,
            "erf": fg_numpy.ERF_IMPL, "load_average": [load_before, load_after],
            "tolerance": {"rtol": RTOL, "atol_of_scale": ATOL_SCALE},
            "results": records,
        }
        with open(ARGS.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    return 0 if all("error" not in r and r["check_ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
