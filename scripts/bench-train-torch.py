#!/usr/bin/env python3
"""Times a training step of the models of examples/training/ in PyTorch: eager, torch.compile
with Inductor, and torch.compile(backend="ferrite"), beside Ferrite's own TrainStep (which
`cargo bench --bench train` times on the same models and sizes).

    python3 scripts/bench-train-torch.py [--models mlp_classifier,tiny_lm,dlrm]
        [--backends eager,inductor,ferrite] [--runs 30] [--native]

`--native` first runs `cargo bench --bench train` (release) and adds Ferrite's own rows from
criterion's medians (target/criterion/): "first step" is `train_compile/<model>` (building
and compiling the step; the step itself is microseconds to milliseconds more), the steps are
`train_step/<model>/<threads>t` and `dlrm_step/<threads>t`.

A step is what tests/autodiff.rs and benches/train.rs run: forward, backward and the optimizer
update, with the models rebuilt from their `.fg` semantics by scripts/train-torch.py (random
weights here): `mlp_classifier` and `tiny_lm` at the `.fg` sizes with Adam on every weight;
`dlrm` at the bench's size (8 tables of 100k x 64 rows, batch 512, bags of 1 to 40 lookups),
its tables from sparse embedding_bag gradients with row-wise Adagrad, its MLPs with Adam.
torch.compile compiles the loss (forward and, through AOT autograd, backward); the optimizers
run eagerly (torch's default foreach Adam).

The `ferrite` rows run the installed extension: build it in release for figures worth
comparing (`cd python && maturin develop --release`; scripts/python-test.sh builds a dev one).
Per model, backend and thread count (1, then all cores), one fresh process with
torch.set_num_threads, OMP_NUM_THREADS and FERRITE_NUM_THREADS at that count and Inductor's
cache in a fresh folder, so nothing is warm: "first step" is the first step's wall time in the
all-threads process (Dynamo, AOT, the backend's compile, the step itself); "step" is the
steady-state median after three warm-up steps. Prints a Markdown table.
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = ["mlp_classifier", "tiny_lm", "dlrm"]
BACKENDS = ["eager", "inductor", "ferrite"]


def shapes(name):
    """Each model's tensors by name: (shape, dtype, high) with `high` bounding integer data."""
    if name == "mlp_classifier":
        return {
            "x": ([8, 12], "f", 0), "w1": ([12, 32], "f", 0), "b1": ([32], "f", 0),
            "w2": ([32, 5], "f", 0), "t": ([8, 1], "i", 5),
        }
    if name == "tiny_lm":
        d = {"ids": ([2, 8], "i", 16), "targets": ([2, 8, 1], "i", 16)}
        for n, s in [("wte", [16, 12]), ("wpe", [8, 12]), ("wqkv", [12, 36]), ("wo", [12, 12]),
                     ("wfc", [12, 48]), ("wpr", [48, 12])]:
            d[n] = (s, "f", 0)
        for n in ["g1", "b1", "g2", "b2", "gf", "bf"]:
            d[n] = ([12], "f", 0)
        return d
    raise KeyError(name)


def dlrm_tensors(torch, features=8, batch=512, rows=100_000, d=64):
    """benches/train.rs's DLRM inputs, drawn the same way (the weights at random)."""
    lengths = [1 + (b * 17 + 5) % 40 for b in range(batch)]
    n = sum(lengths)
    k = features + 1
    pairs = k * (k - 1) // 2
    t = {
        "dense": torch.randn(batch, 13) * 0.05,
        "y": torch.tensor([[b % 2] for b in range(batch)]),
        "w0": torch.randn(13, 64) * 0.05, "c0": torch.randn(64) * 0.05,
        "w1": torch.randn(64, d) * 0.05, "c1": torch.randn(d) * 0.05,
        "u0": torch.randn(d + pairs, 64) * 0.05, "v0": torch.randn(64) * 0.05,
        "u1": torch.randn(64, 1) * 0.05, "v1": torch.randn(1) * 0.05,
    }
    offsets = torch.tensor([sum(lengths[:b]) for b in range(batch)])
    for f in range(features):
        t[f"t{f}"] = torch.randn(rows, d) * 0.05
        t[f"idx{f}"] = (torch.arange(n) * 7919 + f) % rows
        t[f"offs{f}"] = offsets
    return t


def one_process(name, backend, threads, runs):
    """Runs in the child: the first step, then the steady state."""
    import torch

    torch.set_num_threads(threads)
    path = REPO / "scripts" / "train-torch.py"
    spec = importlib.util.spec_from_file_location("train_torch", path)
    train_torch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_torch)
    torch.manual_seed(0)
    if name == "dlrm":
        tensors = dlrm_tensors(torch)
    else:
        tensors = {}
        for n, (shape, kind, high) in shapes(name).items():
            tensors[n] = torch.randint(0, high, shape) if kind == "i" else torch.randn(*shape) * 0.5
    loss, optimizers, sparse = train_torch.MODELS[name](lambda n: tensors[n])
    if backend == "inductor":
        loss = torch.compile(loss, dynamic=False)
    elif backend == "ferrite":
        import ferrite.dynamo  # noqa: F401 (the entry point would find it too)

        loss = torch.compile(loss, backend="ferrite", dynamic=False)

    def step():
        return train_torch.train_step(loss, optimizers + sparse)

    started = time.perf_counter()
    step()
    first = time.perf_counter() - started
    for _ in range(3):
        step()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return {"first": first, "steady": statistics.median(times)}


def criterion_median(name):
    """Seconds: criterion's median estimate of bench `name`, or None where it did not run.
    Criterion keeps a group's bench as group/bench and writes a plain bench's slashes as _."""
    for folder in [name, name.replace("/", "_")]:
        path = REPO / "target" / "criterion" / folder / "new" / "estimates.json"
        if path.exists():
            return json.loads(path.read_text())["median"]["point_estimate"] * 1e-9
    return None


def native_row(name, cores):
    """Ferrite's own TrainStep (benches/train.rs) as a table row."""
    def step(threads):
        return f"dlrm_step/{threads}t" if name == "dlrm" else f"train_step/{name}/{threads}t"

    times = [criterion_median(f"train_compile/{name}")] + [
        criterion_median(step(t)) for t in [1, cores]
    ]
    cells = [
        "not run" if t is None else (f"{t:.3f} s" if i == 0 else f"{t * 1e3:.4g} ms")
        for i, t in enumerate(times)
    ]
    return f"| {name} | Ferrite TrainStep | " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--native", action="store_true", help="also run cargo bench --bench train")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, backend, threads = args.child.split(":")
        print(json.dumps(one_process(name, backend, int(threads), args.runs)))
        return 0

    rows, cores = [], os.cpu_count()
    if args.native:
        subprocess.run(["cargo", "bench", "--bench", "train"], cwd=REPO, check=True)
    for name in args.models.split(","):
        if args.native:
            rows.append(native_row(name, cores))
        for backend in args.backends.split(","):
            results = {}
            for threads in sorted({1, cores}):
                with tempfile.TemporaryDirectory() as cache:
                    env = dict(
                        os.environ, TORCHINDUCTOR_CACHE_DIR=cache, OMP_NUM_THREADS=str(threads),
                        FERRITE_NUM_THREADS=str(threads),
                    )
                    run = subprocess.run(
                        [sys.executable, __file__, "--child", f"{name}:{backend}:{threads}",
                         "--runs", str(args.runs)],
                        capture_output=True, text=True, env=env,
                    )
                if run.returncode != 0:
                    why = (run.stderr.strip().splitlines() or ["?"])[-1]
                    print(f"{name} {backend} {threads}t: failed: {why}", file=sys.stderr)
                    results[threads] = why
                else:
                    results[threads] = json.loads(run.stdout.strip().splitlines()[-1])
            cells = []
            for threads in [cores, 1, cores]:
                r = results[threads]
                if isinstance(r, str):
                    cells.append(f"failed: {r[:60]}")
                elif not cells:
                    cells.append(f"{r['first']:.3f} s")
                else:
                    cells.append(f"{r['steady'] * 1e3:.3f} ms")
            rows.append(f"| {name} | {backend} | " + " | ".join(cells) + " |")
            print(rows[-1], file=sys.stderr)
    print(f"| model | backend | first step (cold) | step, 1 thread | step, {cores} threads |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
