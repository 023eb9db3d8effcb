#!/usr/bin/env python3
"""Export the tiny random-init models under examples/onnx/ and their ONNX Runtime references.

Run once by hand on a machine with torch, onnx, onnxscript and onnxruntime (not in CI; the
results are committed):

    python3 scripts/export-models.py examples/onnx

For each model (gpt2, bert, llama) it writes DIR/NAME/model.onnx, the inputs as
DIR/NAME/inputs/<input name>.npy, ONNX Runtime's outputs as DIR/NAME/expected/<output name>.npy
(the name sanitized as `ferrite run --out` does), and DIR/NAME/reference.json with the torch vs
ONNX Runtime agreement and ONNX Runtime's session-creation and run times on this machine.

The models are written in plain torch, mirroring the Hugging Face architectures (GPT-2: learned
positions, pre-LN, tanh GELU, tied head; BERT: post-LN, erf GELU, token types, padding mask,
pooler; LLaMA: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention), so that nothing is
downloaded and the sizes stay small enough to commit. Weights come from a fixed seed.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEQ = 16
VOCAB = 256


def causal_bias(t, dtype):
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    return torch.zeros(t, t, dtype=dtype).masked_fill(~mask, float("-inf"))


class Gpt2Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj2 = nn.Linear(4 * d, d)
        self.register_buffer("bias", causal_bias(SEQ, torch.float32), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h)) + self.bias[:t, :t]
        y = F.softmax(att, dim=-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.c_proj2(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, d=64, layers=2, heads=4):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, d)
        self.wpe = nn.Embedding(SEQ, d)
        self.h = nn.ModuleList([Gpt2Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        x = self.wte(input_ids) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


class BertLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln_1 = nn.LayerNorm(d, eps=1e-12)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)
        self.ln_2 = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, mask_bias):
        b, t, d = x.shape
        h = self.heads

        def split(y):
            return y.view(b, t, h, d // h).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h) + mask_bias
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = self.ln_1(x + self.o(y))
        return self.ln_2(x + self.down(F.gelu(self.up(x))))


class Bert(nn.Module):
    def __init__(self, d=64, layers=2, heads=4):
        super().__init__()
        self.word = nn.Embedding(VOCAB, d)
        self.position = nn.Embedding(SEQ, d)
        self.token_type = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(d, heads) for _ in range(layers)])
        self.pooler = nn.Linear(d, d)

    def forward(self, input_ids, attention_mask, token_type_ids):
        t = input_ids.shape[1]
        x = self.word(input_ids) + self.position(torch.arange(t)) + self.token_type(token_type_ids)
        x = self.ln(x)
        # HF's extended mask: 0 where attended, the dtype's minimum where padded.
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


class RmsNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaLayer(nn.Module):
    def __init__(self, d, heads, kv_heads, hidden):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.input_norm = RmsNorm(d)
        self.q = nn.Linear(d, heads * self.hd, bias=False)
        self.k = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(heads * self.hd, d, bias=False)
        self.post_norm = RmsNorm(d)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin, bias):
        b, t, _ = x.shape
        y = self.input_norm(x)
        q = self.q(y).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k(y).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(y).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k[:, :, None].expand(b, self.kv_heads, rep, t, self.hd).reshape(b, self.heads, t, self.hd)
        v = v[:, :, None].expand(b, self.kv_heads, rep, t, self.hd).reshape(b, self.heads, t, self.hd)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd) + bias
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.o(y)
        y = self.post_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    def __init__(self, d=64, layers=2, heads=4, kv_heads=2, hidden=172, theta=10000.0):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.layers = nn.ModuleList([LlamaLayer(d, heads, kv_heads, hidden) for _ in range(layers)])
        self.norm = RmsNorm(d)
        self.lm_head = nn.Linear(d, VOCAB, bias=False)
        hd = d // heads
        inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("bias", causal_bias(SEQ, torch.float32), persistent=False)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        freqs = torch.arange(t, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, self.bias[:t, :t])
        return self.lm_head(self.norm(x))


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def export(model, args, names, outputs, path):
    """torch.onnx.export, the dynamo exporter first, the TorchScript one if that fails."""
    kwargs = dict(input_names=names, output_names=outputs)
    try:
        torch.onnx.export(model, args, path, dynamo=True, external_data=False, **kwargs)
        return "dynamo"
    except Exception as e:  # noqa: BLE001 - any exporter failure falls back
        print(f"  dynamo exporter failed ({type(e).__name__}: {e}); trying the TorchScript one",
              file=sys.stderr)
        torch.onnx.export(model, args, path, dynamo=False, opset_version=17, **kwargs)
        return "torchscript"


def ort_times(path, feeds, threads, runs=50):
    import onnxruntime as ort

    creates = []
    for _ in range(5):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        t0 = time.perf_counter()
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        creates.append(time.perf_counter() - t0)
    for _ in range(5):
        sess.run(None, feeds)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        ts.append(time.perf_counter() - t0)
    return statistics.median(creates) * 1e3, statistics.median(ts) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="folder to write NAME/model.onnx and its data into")
    ap.add_argument("--only", help="comma-separated model names")
    a = ap.parse_args()

    import onnxruntime as ort

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, size=(1, SEQ), dtype=np.int64)
    mask = np.ones((1, SEQ), dtype=np.int64)
    mask[0, SEQ - 3:] = 0  # three padded positions
    types = np.zeros((1, SEQ), dtype=np.int64)
    types[0, SEQ // 2:] = 1

    models = {
        "gpt2": (Gpt2(), {"input_ids": ids}, ["logits"]),
        "bert": (Bert(), {"input_ids": ids, "attention_mask": mask, "token_type_ids": types},
                 ["last_hidden_state", "pooler_output"]),
        "llama": (Llama(), {"input_ids": ids}, ["logits"]),
    }
    only = set(a.only.split(",")) if a.only else set(models)
    for name, (model, feeds, outputs) in models.items():
        if name not in only:
            continue
        print(f"{name}:", file=sys.stderr)
        model.eval()
        d = os.path.join(a.out, name)
        os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
        os.makedirs(os.path.join(d, "expected"), exist_ok=True)
        path = os.path.join(d, "model.onnx")
        args = tuple(torch.from_numpy(v) for v in feeds.values())
        with torch.no_grad():
            want = model(*args)
            want = want if isinstance(want, tuple) else (want,)
            exporter = export(model, args, list(feeds), outputs, path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = sess.run(None, feeds)
        onames = [o.name for o in sess.get_outputs()]
        for k, v in feeds.items():
            np.save(os.path.join(d, "inputs", f"{sanitize(k)}.npy"), v)
        agree = []
        for oname, g, w in zip(onames, got, want):
            np.save(os.path.join(d, "expected", f"{sanitize(oname)}.npy"), g)
            agree.append({"output": oname, "shape": list(g.shape),
                          "max_abs_diff_torch_vs_ort": float(np.max(np.abs(g - w.numpy())))})
        create1, run1 = ort_times(path, feeds, 1)
        create_all, run_all = ort_times(path, feeds, os.cpu_count())
        ref = {
            "model": name,
            "exporter": exporter,
            "torch": torch.__version__,
            "onnxruntime": ort.__version__,
            "params": sum(p.numel() for p in model.parameters()),
            "bytes": os.path.getsize(path),
            "outputs": agree,
            "ort_ms": {"machine": f"{os.cpu_count()} CPUs", "session_create_1t": create1,
                       "run_1t": run1, "session_create_all": create_all, "run_all": run_all},
        }
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f, indent=2)
            f.write("\n")
        print(json.dumps(ref, indent=2), file=sys.stderr)


if __name__ == "__main__":
    main()
