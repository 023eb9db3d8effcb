#!/usr/bin/env python3
"""Ferrite against ONNX Runtime on ONNX models, in one run, on the same inputs.

    python3 benches/peer/onnx_vs_ort.py --ferrite target/release/ferrite \
        --threads 1,4,16 examples/onnx/gpt2 examples/onnx/resnet18 ...

For each model directory (model.onnx, inputs/*.npy; a model without inputs/ whose only input
is `image` gets the drawn image of scripts/export-conv-models.py, the one tests/models.rs
checks) it measures:

- compile: `ferrite compile MODEL` (load + import + passes + codegen, the `total` it prints),
  median of --compiles, against the median time of creating an ONNX Runtime
  `InferenceSession` for the same file (graph optimizations at their default, all);
- steady state at each thread count: `ferrite profile --input ... --format json`, the fused
  schedule's whole-run median (`wall_ns`, buffer setup included), against the median of
  `session.run` (intra_op_num_threads = T, one warm-up call).

Values are not compared here: tests/models.rs checks every model against ONNX Runtime's
outputs on every target.

Prints a Markdown table and, with --out, one JSON line per model. Needs numpy and
onnxruntime; Ferrite's build and CI never run it. ResNet-18 and MobileNetV2 at 224 need
their git-ignored weights.bin: `python3 scripts/export-conv-models.py --full examples/onnx`
(or `cargo test --test models` once) writes it.
"""

import argparse
import glob
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def drawn_image(size):
    spec = importlib.util.spec_from_file_location(
        "export_conv", os.path.join(REPO, "scripts", "export-conv-models.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m.draw(m.IMAGE_START, 3 * size * size, 0.0, 1.0).reshape(1, 3, size, size)


def model_inputs(d, model, tmp):
    """{name: path} of the model's inputs."""
    files = sorted(glob.glob(os.path.join(d, "inputs", "*.npy")))
    if files:
        return {os.path.basename(f)[:-4]: f for f in files}
    import onnxruntime as ort
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    size = inp.shape[-1]
    path = os.path.join(tmp, f"{os.path.basename(d)}_{inp.name}.npy")
    np.save(path, drawn_image(size))
    return {inp.name: path}


def ferrite_compile_ms(bin_, model, n):
    totals, stages = [], None
    for _ in range(n):
        p = subprocess.run([bin_, "compile", model], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.strip()[-300:])
        line = [l for l in p.stdout.splitlines() if l.startswith("time:")][-1]
        totals.append(float(re.search(r"total ([0-9.]+) ms", line).group(1)))
        stages = line
    return statistics.median(totals), stages


def ort_session_ms(model, n, threads=1):
    import onnxruntime as ort
    ts = []
    for _ in range(n):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        t0 = time.perf_counter()
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def ferrite_run_ms(bin_, model, inputs, threads, runs):
    flags = []
    for k, v in inputs.items():
        flags += ["--input", f"{k}={v}"]
    p = subprocess.run([bin_, "profile", model, "--threads", str(threads), "--runs", str(runs),
                        "--format", "json", *flags], capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip()[-300:])
    s = json.loads(p.stdout)["schedules"]
    return s["fused"]["wall_ns"] / 1e6, s["unfused"]["wall_ns"] / 1e6, s["fused"]["kernel_count"]


def ort_run_ms(model, inputs, threads, runs):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    feed = {k: np.load(v) for k, v in inputs.items()}
    sess.run(None, feed)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feed)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+", help="model directories (or model.onnx paths)")
    ap.add_argument("--ferrite", required=True)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--compiles", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    tmp = tempfile.mkdtemp(prefix="onnxvsort.")
    rows = []
    for m in a.models:
        d, model = (os.path.dirname(m), m) if m.endswith(".onnx") else (m, os.path.join(m, "model.onnx"))
        name = os.path.basename(os.path.normpath(d))
        rec = {"model": name}
        try:
            inputs = model_inputs(d, model, tmp)
            rec["compile_ms"], rec["compile_stages"] = ferrite_compile_ms(a.ferrite, model, a.compiles)
            rec["ort_session_ms"] = ort_session_ms(model, a.compiles)
            for t in threads:
                f, u, k = ferrite_run_ms(a.ferrite, model, inputs, t, a.runs)
                o = ort_run_ms(model, inputs, t, a.runs)
                rec[f"t{t}"] = {"fused_ms": f, "unfused_ms": u, "ort_ms": o, "ratio": o / f}
                rec["kernels"] = k
        except Exception as e:  # a model that fails is reported, the others still run
            rec["error"] = str(e)[-300:]
        rows.append(rec)
        print(json.dumps(rec), file=sys.stderr, flush=True)
        if a.out:
            with open(a.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
    head = "| model | kernels | Ferrite compile ms | ORT session ms |"
    sep = "|---|---:|---:|---:|"
    for t in threads:
        head += f" Ferrite {t}t | ORT {t}t | ORT/Ferrite {t}t |"
        sep += "---:|---:|---:|"
    print(head)
    print(sep)
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | error: {r['error'][:120]} |")
            continue
        line = f"| {r['model']} | {r['kernels']} | {r['compile_ms']:.1f} | {r['ort_session_ms']:.1f} |"
        for t in threads:
            x = r[f"t{t}"]
            line += f" {x['fused_ms']:.3f} | {x['ort_ms']:.3f} | {x['ratio']:.2f}x |"
        print(line)


if __name__ == "__main__":
    main()
