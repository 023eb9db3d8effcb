#!/usr/bin/env python3
"""torch.compile backends on the tiny GPT-2, BERT and LLaMA models of examples/onnx/: eager,
inductor, ferrite, and ONNX Runtime on the committed exports; per model the first call in a
fresh process (cold compile), the steady-state time of a call at 1 thread and at all threads,
and the largest difference from ONNX Runtime's committed outputs.

Needs torch (and onnxruntime for its row) in the Python that runs it, and
the ferrite package installed there (scripts/python-test.sh builds it into its venv; a release
build is what to measure: `cd python && maturin develop --release`). Prints a Markdown table.

    python scripts/bench-torch.py [--models gpt2,bert,llama,mlp,hf-gpt2] [--backends eager,ferrite] [--runs 20]
    python scripts/bench-torch.py --breakdown [--models gpt2] [--repeat 5]

Each measurement runs in a subprocess of its own, so that the first call is cold (no compiled
code, no warm caches) for every backend. `mlp` is a 32x256 -> 1024 -> 1024 -> 256 GELU MLP
(`mlp_large`'s shape, seeded weights) and `hf-gpt2` transformers' GPT-2 as the tests build it
(random weights, returning the logits); both are compared against eager instead of ONNX Runtime.

`--breakdown` splits the first ferrite call of a fresh process: `import torch`, the model's
construction, then within the first call Dynamo's tracing (the rest), AOT dispatch with the
core ATen decompositions, the partitioner, Ferrite's graph building and its compile, as the
backend's `Explanation.seconds` records them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ["eager", "inductor", "ferrite", "onnxruntime"]
#: Models without an ONNX export, compared against eager instead.
EAGER_REFERENCE = ["mlp", "hf-gpt2"]


class Mlp:
    """Built on first use, so that torch is imported only in the subprocesses."""

    @staticmethod
    def make():
        import torch

        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
            torch.nn.GELU(), torch.nn.Linear(1024, 256),
        )


def hf_gpt2():
    """transformers' GPT-2 as python/tests/test_dynamo.py builds it (random weights, 2 layers,
    64 wide, 16 tokens), returning its logits."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=256, n_positions=64)
    model = transformers.GPT2LMHeadModel(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids).logits

    return Logits().eval(), {"input_ids": torch.randint(0, 256, (1, 16))}


def build(name):
    """The model as scripts/export-models.py defines and seeds it (so its weights are those of
    the committed ONNX export, examples/onnx/NAME/), with the committed inputs."""
    import importlib.util

    import numpy as np
    import torch

    if name == "mlp":
        model = Mlp.make()
        return model.eval(), {"input": torch.randn(32, 256, generator=torch.Generator().manual_seed(1))}
    if name == "hf-gpt2":
        return hf_gpt2()
    spec = importlib.util.spec_from_file_location("export_models", REPO / "scripts" / "export-models.py")
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)
    torch.manual_seed(0)  # as export-models.py does, before making the three in this order
    models = {"gpt2": export.Gpt2(), "bert": export.Bert(), "llama": export.Llama()}
    folder = REPO / "examples" / "onnx" / name
    inputs = {p.stem: torch.from_numpy(np.load(p)) for p in (folder / "inputs").glob("*.npy")}
    return models[name].eval(), inputs


def max_diff(name, outputs):
    """The largest difference from ONNX Runtime's committed outputs."""
    import numpy as np

    if name in EAGER_REFERENCE:
        import torch

        model, inputs = build(name)
        with torch.no_grad():
            want = model(**inputs)
        return float((outputs - want).abs().max())
    folder = REPO / "examples" / "onnx" / name
    names = [o["output"] for o in json.loads((folder / "reference.json").read_text())["outputs"]]
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    return max(
        float(np.max(np.abs(o.numpy() - np.load(folder / "expected" / f"{n}.npy"))))
        for n, o in zip(names, outputs)
    )


def measure(name, backend, threads, runs):
    """One subprocess's work: first call and steady state of one backend."""
    import torch

    torch.set_num_threads(threads)
    if backend == "onnxruntime":
        import numpy as np
        import onnxruntime as ort

        folder = REPO / "examples" / "onnx" / name
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        start = time.perf_counter()
        session = ort.InferenceSession(str(folder / "model.onnx"), options)
        feeds = {p.stem: np.load(p) for p in (folder / "inputs").glob("*.npy")}
        session.run(None, feeds)
        first = time.perf_counter() - start
        call = lambda: session.run(None, feeds)  # noqa: E731
        diff = 0.0
    else:
        # backend="ferrite" is found through the package's torch_dynamo_backends entry point.

        model, inputs = build(name)
        fn = model if backend == "eager" else torch.compile(model, backend=backend, dynamic=False)
        with torch.no_grad():
            start = time.perf_counter()
            out = fn(**inputs)
            first = time.perf_counter() - start
        diff = max_diff(name, out)
        call = lambda: fn(**inputs)  # noqa: E731
    times = []
    with torch.no_grad():
        for _ in range(runs):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    return {"first_s": first, "steady_ms": 1e3 * statistics.median(times), "max_diff": diff}


BREAKDOWN = [
    "import torch", "build model", "first call", "dynamo and the rest", "aot", "partition",
    "ferrite_build", "ferrite_compile",
]


def breakdown(name):
    """One subprocess's work: where the first ferrite call's time goes."""
    start = time.perf_counter()
    import torch

    imported = time.perf_counter()
    import ferrite.dynamo

    model, inputs = build(name)
    built = time.perf_counter()
    record = ferrite.dynamo.Explanation()
    fn = torch.compile(model, backend=ferrite.dynamo.make_backend(record), dynamic=False)
    with torch.no_grad():
        call = time.perf_counter()
        fn(**inputs)
        first = time.perf_counter() - call
    parts = {"import torch": imported - start, "build model": built - imported, "first call": first}
    parts.update(record.seconds)
    parts["dynamo and the rest"] = first - sum(record.seconds.values())
    return parts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,bert,llama")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--breakdown", action="store_true", help="split the first ferrite call")
    parser.add_argument(
        "--repeat", type=int, default=1, help="--breakdown: fresh processes per model, medians shown"
    )
    parser.add_argument("--breakdown-one", metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "BACKEND", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.breakdown_one:
        print(json.dumps(breakdown(args.breakdown_one)))
        return
    if args.breakdown:
        print("| model | " + " | ".join(BREAKDOWN) + " |")
        print("|---|" + "---:|" * len(BREAKDOWN))
        for name in args.models.split(","):
            runs = []
            for _ in range(args.repeat):
                out = subprocess.run(
                    [sys.executable, __file__, "--breakdown-one", name], capture_output=True, text=True, check=True
                )
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            cells = [statistics.median(r.get(k, 0.0) for r in runs) for k in BREAKDOWN]
            print(f"| {name} | " + " | ".join(f"{1e3 * c:.0f} ms" for c in cells) + " |")
        return
    if args.one:
        name, backend, threads = args.one
        print(json.dumps(measure(name, backend, int(threads), args.runs)))
        return
    cores = os.cpu_count() or 1
    print(f"| model | backend | first call (cold) | steady, 1 thread | steady, {cores} threads | max diff vs ORT |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.models.split(","):
        for backend in args.backends.split(","):
            cells = []
            for threads in [1, cores]:
                env = dict(os.environ, OMP_NUM_THREADS=str(threads), FERRITE_NUM_THREADS=str(threads))
                out = subprocess.run(
                    [sys.executable, __file__, "--one", name, backend, str(threads), "--runs", str(args.runs)],
                    capture_output=True, text=True, env=env,
                )
                if out.returncode != 0:
                    cells.append(None)
                    print(f"<!-- {name} {backend} {threads}: {out.stderr.strip().splitlines()[-1:]} -->")
                    continue
                cells.append(json.loads(out.stdout.strip().splitlines()[-1]))
            first = next((c["first_s"] for c in cells if c), None)
            row = [name, backend, f"{first:.3f} s" if first is not None else "failed"]
            row += [f"{c['steady_ms']:.3f} ms" if c else "failed" for c in cells]
            row.append(f"{cells[0]['max_diff']:.2e}" if cells[0] else "")
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
