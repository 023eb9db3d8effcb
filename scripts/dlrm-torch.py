#!/usr/bin/env python3
"""Trains the DLRM-style model of examples/training/dlrm.fg in PyTorch, from the initial
weights and data that tests/autodiff.rs writes, and compares its per-step losses with
Ferrite's (the interpreter's curve, which the test checks cpu and sim against).

    FERRITE_DLRM_DUMP=/tmp/dlrm cargo test --test autodiff a_dlrm_style_model
    python3 scripts/dlrm-torch.py /tmp/dlrm

The tables are trained as the test trains them: embedding_bag with sparse=True
gradients, coalesced, and fbgemm's exact row-wise Adagrad (one accumulator per row, the
mean of the row's squared gradient; lr 0.1, eps 1e-8) on the touched rows only; the
MLPs with torch.optim.Adam(lr=0.01). Prints one line per step and the largest relative
difference; exits 1 when it is above 1e-3.
"""

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

FEATURES = 8
STEPS = 100


def main() -> int:
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/dlrm")
    load = lambda n: torch.from_numpy(np.load(d / f"{n}.npy"))
    tables = [load(f"t{f}").clone().requires_grad_(True) for f in range(FEATURES)]
    mlp_names = ["w0", "c0", "w1", "c1", "u0", "v0", "u1", "v1"]
    mlp = {n: load(n).clone().requires_grad_(True) for n in mlp_names}
    dense, y = load("dense"), load("y").to(torch.float32)
    idx = [load(f"idx{f}") for f in range(FEATURES)]
    offs = [load(f"offs{f}") for f in range(FEATURES)]
    ferrite = np.load(d / "losses.npy")

    k = FEATURES + 1
    tri = [i * k + j for i in range(k) for j in range(i)]
    adam = torch.optim.Adam(list(mlp.values()), lr=0.01)
    state = [torch.zeros(t.shape[0], 1) for t in tables]
    lr, eps = 0.1, 1e-8

    worst = 0.0
    for step in range(STEPS):
        m = mlp
        z0 = torch.relu(torch.relu(dense @ m["w0"] + m["c0"]) @ m["w1"] + m["c1"])
        es = [
            F.embedding_bag(idx[f], tables[f], offs[f], mode="sum", sparse=True)
            for f in range(FEATURES)
        ]
        t = torch.stack([z0] + es, dim=1)
        z = torch.bmm(t, t.transpose(1, 2)).reshape(t.shape[0], k * k)
        inter = z[:, tri]
        top = torch.relu(torch.cat([z0, inter], dim=1) @ m["u0"] + m["v0"])
        logit = top @ m["u1"] + m["v1"]
        sp = torch.clamp(logit, min=0) + torch.log(torch.exp(-logit.abs()) + 1)
        loss = (sp - y * logit).mean()

        adam.zero_grad()
        for tb in tables:
            tb.grad = None
        loss.backward()
        adam.step()
        with torch.no_grad():
            for f, tb in enumerate(tables):
                g = tb.grad.coalesce()
                rows, vals = g.indices()[0], g.values()
                state[f][rows] += vals.pow(2).mean(dim=1, keepdim=True)
                tb[rows] -= lr * vals / (state[f][rows].sqrt() + eps)

        a, b = loss.item(), float(ferrite[step])
        rel = abs(a - b) / max(abs(b), 1e-2)
        worst = max(worst, rel)
        print(f"step {step:3d}  torch {a:.7f}  ferrite {b:.7f}  rel {rel:.2e}")
    print(f"largest relative difference {worst:.2e}")
    return 0 if worst <= 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
