#!/usr/bin/env python3
"""Trains the models of examples/training/ in PyTorch, from the initial weights and data that
tests/autodiff.rs writes, and compares their per-step losses with Ferrite's (the
interpreter's curves, which the tests check cpu and sim against):

    FERRITE_TRAIN_DUMP=/tmp/train cargo test --test autodiff trains
    python3 scripts/train-torch.py /tmp/train

Each model is rebuilt from its `.fg` file's semantics and trained for 100 steps on the same
batch as the test trains it: `mlp_classifier` and `tiny_lm` with torch.optim.Adam(lr=0.01)
on every float parameter of the graph (the MLP's features `x` included); `dlrm` with its
tables trained as the test trains them (embedding_bag with sparse=True gradients, coalesced,
and fbgemm's exact row-wise Adagrad: one accumulator per row, the mean of the row's squared
gradient; lr 0.1, eps 1e-8, on the touched rows only) and its MLPs with
torch.optim.Adam(lr=0.01). Prints, per model found in the folder (or named
with --models), one line per step with --verbose and the largest relative difference;
exits 1 when one is above 1e-3.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

STEPS = 100
TOLERANCE = 1e-3


def loader(folder: Path):
    return lambda name: torch.from_numpy(np.load(folder / f"{name}.npy"))


def mlp_classifier(load):
    """examples/training/mlp_classifier.fg. The test trains every float parameter of the
    graph, so the features `x` too."""
    w = {n: load(n).clone().requires_grad_(True) for n in ["x", "w1", "b1", "w2"]}
    t = load("t")

    def loss():
        h = F.gelu(w["x"] @ w["w1"] + w["b1"])
        lp = torch.log_softmax(h @ w["w2"], dim=1)
        return -lp.gather(1, t).mean()

    return loss, [torch.optim.Adam(list(w.values()), lr=0.01)], []


def tiny_lm(load):
    """examples/training/tiny_lm.fg: one pre-norm GPT-2 block, 2 heads of 6, tied logits."""
    names = ["wte", "wpe", "g1", "b1", "wqkv", "wo", "g2", "b2", "wfc", "wpr", "gf", "bf"]
    w = {n: load(n).clone().requires_grad_(True) for n in names}
    ids, targets = load("ids"), load("targets")
    b, t, d = 2, 8, 12
    causal = torch.arange(t).reshape(t, 1) >= torch.arange(t).reshape(1, t)

    def loss():
        x = w["wte"][ids] + w["wpe"]
        qkv = F.layer_norm(x, (d,), w["g1"], w["b1"]) @ w["wqkv"]
        heads = lambda z: z.reshape(b, t, 2, 6).permute(0, 2, 1, 3)
        q, k, v = heads(qkv[..., 0:12]), heads(qkv[..., 12:24]), heads(qkv[..., 24:36])
        s = torch.where(causal, (q @ k.transpose(-2, -1)) * 0.408248290463863, -1e9)
        att = torch.softmax(s, dim=-1) @ v
        a = x + att.permute(0, 2, 1, 3).reshape(b, t, d) @ w["wo"]
        fc = F.layer_norm(a, (d,), w["g2"], w["b2"]) @ w["wfc"]
        h = a + F.gelu(fc, approximate="tanh") @ w["wpr"]
        logits = F.layer_norm(h, (d,), w["gf"], w["bf"]) @ w["wte"].t()
        return -torch.log_softmax(logits, dim=-1).gather(2, targets).mean()

    return loss, [torch.optim.Adam(list(w.values()), lr=0.01)], []


def dlrm(load, features=8):
    """examples/training/dlrm.fg."""
    tables = [load(f"t{f}").clone().requires_grad_(True) for f in range(features)]
    mlp_names = ["w0", "c0", "w1", "c1", "u0", "v0", "u1", "v1"]
    m = {n: load(n).clone().requires_grad_(True) for n in mlp_names}
    dense, y = load("dense"), load("y").to(torch.float32)
    idx = [load(f"idx{f}") for f in range(features)]
    offs = [load(f"offs{f}") for f in range(features)]
    k = features + 1
    tri = [i * k + j for i in range(k) for j in range(i)]

    def loss():
        z0 = torch.relu(torch.relu(dense @ m["w0"] + m["c0"]) @ m["w1"] + m["c1"])
        es = [
            F.embedding_bag(idx[f], tables[f], offs[f], mode="sum", sparse=True)
            for f in range(features)
        ]
        t = torch.stack([z0] + es, dim=1)
        z = torch.bmm(t, t.transpose(1, 2)).reshape(t.shape[0], k * k)
        top = torch.relu(torch.cat([z0, z[:, tri]], dim=1) @ m["u0"] + m["v0"])
        logit = top @ m["u1"] + m["v1"]
        sp = torch.clamp(logit, min=0) + torch.log(torch.exp(-logit.abs()) + 1)
        return (sp - y * logit).mean()

    return loss, [torch.optim.Adam(list(m.values()), lr=0.01)], [RowWiseAdagrad(tables)]


class RowWiseAdagrad:
    """fbgemm's exact row-wise Adagrad on the rows a sparse gradient touches."""

    def __init__(self, tables, lr=0.1, eps=1e-8):
        self.tables, self.lr, self.eps = tables, lr, eps
        self.state = [torch.zeros(t.shape[0], 1) for t in tables]

    def zero_grad(self):
        for t in self.tables:
            t.grad = None

    @torch.no_grad()
    def step(self):
        for table, state in zip(self.tables, self.state):
            g = table.grad.coalesce()
            rows, values = g.indices()[0], g.values()
            state[rows] += values.pow(2).mean(dim=1, keepdim=True)
            table[rows] -= self.lr * values / (state[rows].sqrt() + self.eps)


MODELS = {"mlp_classifier": mlp_classifier, "tiny_lm": tiny_lm, "dlrm": dlrm}


def train_step(loss, optimizers):
    """One step: the loss, its gradients, every optimizer's update; returns the loss."""
    value = loss()
    for o in optimizers:
        o.zero_grad()
    value.backward()
    for o in optimizers:
        o.step()
    return value


def compare(name: str, folder: Path, verbose: bool) -> float:
    """Trains `name` from `folder`'s dump; returns the largest relative loss difference."""
    loss, optimizers, sparse = MODELS[name](loader(folder))
    ferrite = np.load(folder / "losses.npy")
    worst = 0.0
    for step in range(STEPS):
        value = train_step(loss, optimizers + sparse)
        a, b = value.item(), float(ferrite[step])
        rel = abs(a - b) / max(abs(b), 1e-2)
        worst = max(worst, rel)
        if verbose:
            print(f"{name} step {step:3d}  torch {a:.7f}  ferrite {b:.7f}  rel {rel:.2e}")
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", nargs="?", default="/tmp/train", help="FERRITE_TRAIN_DUMP's folder")
    parser.add_argument("--models", help="comma-separated; default: those dumped")
    parser.add_argument("--verbose", action="store_true", help="print every step")
    args = parser.parse_args()
    root = Path(args.dump)
    names = args.models.split(",") if args.models else [n for n in MODELS if (root / n).is_dir()]
    if not names:
        print(f"no model dumped under {root}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    failed = False
    for name in names:
        worst = compare(name, root / name, args.verbose)
        verdict = "ok" if worst <= TOLERANCE else "ABOVE 1e-3"
        print(f"{name}: {STEPS} steps, largest relative difference {worst:.2e} ({verdict})")
        failed |= worst > TOLERANCE
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
