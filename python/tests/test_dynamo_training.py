"""Training through the torch.compile backend: AOT autograd's forward and backward graphs, both
compiled by Ferrite, against eager PyTorch from the same initialization and data.

Each model is trained with torch.optim.Adam twice, eagerly and under `backend="ferrite"`; the
losses must agree within 1e-3 relative at every step and the gradients closely. Needs torch
(scripts/python-test.sh installs it); skipped without it unless FERRITE_REQUIRE_TORCH=1.
"""

import copy
import importlib
import os

import pytest

from ferrite import dynamo


def _torch():
    if os.environ.get("FERRITE_REQUIRE_TORCH") == "1":
        return importlib.import_module("torch")
    return pytest.importorskip("torch")


def _mlp_classifier(torch):
    class MlpClassifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = torch.nn.Linear(16, 32)
            self.out = torch.nn.Linear(32, 5)

        def forward(self, x, labels):
            logits = self.out(torch.nn.functional.gelu(self.hidden(x)))
            return torch.nn.functional.cross_entropy(logits, labels)

    def batch(generator):
        x = torch.randn(8, 16, generator=generator)
        return x, (x[:, :5].argmax(1) + (x[:, 5] > 0).long()) % 5

    return MlpClassifier(), batch


def _tiny_gpt(torch):
    """One GPT-2-style block: token and position embeddings, pre-norm causal attention and a
    GELU MLP with residuals, a final layer norm and a head, next-token cross-entropy."""

    vocab, width, heads, steps = 24, 16, 2, 8

    class TinyGpt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = torch.nn.Embedding(vocab, width)
            self.positions = torch.nn.Parameter(torch.randn(steps, width) * 0.1)
            self.ln1 = torch.nn.LayerNorm(width)
            self.qkv = torch.nn.Linear(width, 3 * width)
            self.proj = torch.nn.Linear(width, width)
            self.ln2 = torch.nn.LayerNorm(width)
            self.fc = torch.nn.Linear(width, 4 * width)
            self.fc_out = torch.nn.Linear(4 * width, width)
            self.ln_f = torch.nn.LayerNorm(width)
            self.head = torch.nn.Linear(width, vocab)

        def forward(self, ids, targets):
            b, t = ids.shape
            x = self.tokens(ids) + self.positions[:t]
            q, k, v = self.qkv(self.ln1(x)).split(width, dim=-1)
            q, k, v = [z.view(b, t, heads, -1).transpose(1, 2) for z in (q, k, v)]
            scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
            future = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
            attention = scores.masked_fill(future, float("-inf")).softmax(-1)
            x = x + self.proj((attention @ v).transpose(1, 2).reshape(b, t, width))
            x = x + self.fc_out(torch.nn.functional.gelu(self.fc(self.ln2(x))))
            logits = self.head(self.ln_f(x))
            return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    def batch(generator):
        # Counting sequences from random starts: the next token is learnable.
        start = torch.randint(0, vocab, (4, 1), generator=generator)
        ids = (start + torch.arange(steps + 1)) % vocab
        return ids[:, :-1], ids[:, 1:]

    return TinyGpt(), batch


def _train_both(torch, build, steps=20):
    """Trains the model twice from one initialization on one stream of batches, eagerly and
    compiled; returns both runs' losses and gradients per step and the backend's record."""
    torch.manual_seed(0)
    eager, batch = build(torch)
    model = copy.deepcopy(eager)
    record = dynamo.Explanation()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=dynamo.make_backend(record), dynamic=False)
    runs = []
    for module, call in [(eager, eager), (model, compiled)]:
        optimizer = torch.optim.Adam(module.parameters(), lr=1e-2)
        generator = torch.Generator().manual_seed(1)
        losses, grads = [], []
        for _ in range(steps):
            optimizer.zero_grad()
            loss = call(*batch(generator))
            loss.backward()
            losses.append(loss.item())
            grads.append([p.grad.clone() for p in module.parameters()])
            optimizer.step()
        runs.append((losses, grads))
    torch._dynamo.reset()
    return runs, record


def _check_training(torch, build):
    (want_losses, want_grads), (got_losses, got_grads) = _train_both(torch, build)[0]
    worst = max(abs(g - w) / abs(w) for g, w in zip(got_losses, want_losses))
    assert worst <= 1e-3, f"losses {got_losses} vs eager {want_losses}"
    assert want_losses[-1] < want_losses[0], "the model does not learn: a weak comparison"
    for step, (got, want) in enumerate(zip(got_grads, want_grads)):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-4, msg=f"step {step}")


@pytest.mark.parametrize("name", ["mlp_classifier", "tiny_gpt"])
def test_training_matches_eager(name):
    torch = _torch()
    build = {"mlp_classifier": _mlp_classifier, "tiny_gpt": _tiny_gpt}[name]
    _check_training(torch, build)
    _, record = _train_both(torch, build, steps=1)
    # Both graphs compile whole: every op of the forward and backward graphs is mapped.
    assert {r.graph for r in record.regions} == {"forward", "backward"}, str(record)
    assert all(r.compiled for r in record.regions), str(record)
    assert record.fallbacks == [], str(record)
    # The parameters stay inputs: they change at every step.
    assert all(r.frozen == 0 for r in record.regions)


def test_backward_through_a_fallback_op():
    torch = _torch()
    torch.manual_seed(0)
    x = torch.randn(6, 4)
    w = torch.randn(4, 4, requires_grad=True)

    def fn(x, w):
        return (torch.cumsum(torch.tanh(x @ w), 0) ** 2).sum()

    want = torch.autograd.grad(fn(x, w), w)[0]
    torch._dynamo.reset()
    got = torch.autograd.grad(torch.compile(fn, backend="ferrite", dynamic=False)(x, w), w)[0]
    torch._dynamo.reset()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    report = dynamo.explain_training(fn, x, w)
    assert any(r.compiled and r.graph == "forward" for r in report.regions), str(report)
    assert any(r.compiled and r.graph == "backward" for r in report.regions), str(report)
    assert any(f.op == "aten.cumsum.default" and f.graph == "forward" for f in report.fallbacks)
    assert "eager (forward): aten.cumsum.default: no mapping" in str(report)
