"""The torch.compile backend.

Without torch, the ATen mapping runs on stand-ins for FX nodes and tensors (the region builder
reads only `op`, `target`, `args`, `kwargs`, `meta`, and tensors' `dtype` and `shape`), and the
entry point is checked. With torch installed (`pip install torch transformers`; scripts/python-test.sh does), the backend
runs small functions over every mapped op and transformers' GPT-2, BERT and LLaMA against eager.
"""

import importlib
import importlib.metadata
import operator
import os

import numpy as np
import pytest

import ferrite
from ferrite import dynamo


def test_backend_is_registered_under_its_entry_point():
    eps = importlib.metadata.entry_points()
    group = (
        eps.select(group="torch_dynamo_backends")
        if hasattr(eps, "select")
        else eps.get("torch_dynamo_backends", [])
    )
    (ep,) = [e for e in group if e.name == "ferrite"]
    assert ep.value == "ferrite.dynamo:ferrite_backend"
    assert ep.load() is dynamo.ferrite_backend


# --- Stand-ins for FX, to run the mapping without torch. ----------------------------------------


class Op:
    """An ATen overload: its str is its name, as torch prints `node.target`."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


class DType:
    def __init__(self, numpy_dtype):
        self.numpy = np.dtype(numpy_dtype)

    def __str__(self):
        return "torch." + {"bool": "bool"}.get(self.numpy.name, self.numpy.name)


class Meta:
    """What `node.meta["val"]` holds: a tensor's dtype and shape."""

    def __init__(self, array):
        self.dtype = DType(array.dtype)
        self.shape = array.shape


class Node:
    def __init__(self, graph, op, target=None, args=(), kwargs=None, name=None, val=None):
        self.op, self.target, self.args, self.kwargs = op, target, tuple(args), kwargs or {}
        self.name = name or f"n{len(graph.nodes)}"
        self.meta = {} if val is None else {"val": val}
        graph.nodes.append(self)


class Graph:
    def __init__(self):
        self.nodes = []


class Module:
    """An FX graph module of ATen calls, evaluated by numpy for the expected values."""

    def __init__(self):
        self.graph = Graph()

    def input(self, array):
        return Node(self.graph, "placeholder", val=Meta(array))

    def call(self, name, *args, **kwargs):
        target = operator.getitem if name == "getitem" else Op(name)
        return Node(self.graph, "call_function", target, args, kwargs)

    def output(self, *nodes):
        Node(self.graph, "output", args=(tuple(nodes),))


def run_region(build, *arrays):
    m = Module()
    nodes = [m.input(a) for a in arrays]
    outs = build(m, *nodes)
    m.output(*outs)
    program, ops = dynamo.build_region(m, [Meta(a) for a in arrays])
    return program.run(*arrays), ops


RNG = np.random.default_rng(1)


def test_aten_arithmetic_products_and_reductions():
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    w = RNG.standard_normal((6, 3)).astype(np.float32)
    b = RNG.standard_normal((3,)).astype(np.float32)

    def build(m, a, w, b):
        mm = m.call("aten.addmm.default", b, a, w, beta=1, alpha=2)
        return [
            m.call("aten.relu.default", mm),
            m.call("aten.add.Tensor", a, a, alpha=3),
            m.call("aten.rsub.Scalar", a, 1.0),
            m.call("aten.div.Tensor_mode", a, 0.5, rounding_mode="floor"),
            m.call("aten.pow.Tensor_Scalar", a, 2),
            m.call("aten.sum.dim_IntList", a, [1], True),
            m.call("aten.amax.default", a, []),
            m.call("aten.mean.dim", a, [0]),
            m.call("aten.var.correction", a, [1], correction=0),
            m.call("aten._softmax.default", a, -1, False),
            m.call("aten.argmax.default", a, 1),
            m.call("aten.where.self", m.call("aten.gt.Scalar", a, 0.0), a, 0.0),
            m.call("aten._to_copy.default", a, dtype=DType(np.float64)),
        ]

    got, ops = run_region(build, a, w, b)
    e = np.exp(a - a.max(-1, keepdims=True))
    want = [
        np.maximum(2 * (a @ w) + b, 0),
        a + 3 * a,
        1.0 - a,
        np.floor_divide(a, np.float32(0.5)),
        a**2,
        a.sum(1, keepdims=True),
        a.max(),
        a.mean(0),
        a.var(1),
        e / e.sum(-1, keepdims=True),
        a.argmax(1),
        np.where(a > 0, a, 0),
        a.astype(np.float64),
    ]
    for i, (g, w_) in enumerate(zip(got, want)):
        assert g.dtype == np.asarray(w_).dtype, i
        np.testing.assert_allclose(g, w_, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")
    assert "aten.addmm.default" in ops


def test_aten_movement_and_layer_norm():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    ids = np.array([2, 0, 1], dtype=np.int64)
    gamma = RNG.standard_normal((4,)).astype(np.float32)

    def build(m, x, ids, gamma):
        ln = m.call("aten.native_layer_norm.default", x, [4], gamma, None, 1e-5)
        parts = m.call("aten.split_with_sizes.default", x, [1, 3], 2)
        return [
            m.call("getitem", ln, 0),
            m.call("aten.view.default", x, [6, -1]),
            m.call("aten.permute.default", x, [2, 0, 1]),
            m.call("aten.slice.Tensor", x, 2, 1, 2**63 - 1),
            m.call("aten.select.int", x, 1, -1),
            m.call("aten.expand.default", m.call("aten.unsqueeze.default", x, 0), [5, -1, -1, -1]),
            m.call("aten.cat.default", [x, x], 1),
            m.call("getitem", parts, 1),
            m.call("aten.constant_pad_nd.default", x, [1, 2], 0.5),
            m.call("aten.index_select.default", x, 1, ids),
            m.call("aten.embedding.default", m.call("aten.view.default", x, [6, 4]), ids),
            m.call("aten.squeeze.dim", m.call("aten.unsqueeze.default", x, 1), 1),
            m.call("aten.full.default", [2, 2], 7.0, dtype=DType(np.int64)),
            m.call("aten.index.Tensor", x, [None, ids]),
            m.call("getitem", m.call("aten.var_mean.correction", x, [2], correction=1), 1),
            # What a training forward graph saves for layer_norm's backward one.
            m.call("getitem", ln, 1),
            m.call("getitem", ln, 2),
        ]

    got, _ = run_region(build, x, ids, gamma)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    want = [
        (x - mu) / np.sqrt(var + 1e-5) * gamma,
        x.reshape(6, 4),
        x.transpose(2, 0, 1),
        x[:, :, 1:],
        x[:, -1],
        np.broadcast_to(x, (5, 2, 3, 4)),
        np.concatenate([x, x], 1),
        x[:, :, 1:],
        np.pad(x, [(0, 0), (0, 0), (1, 2)], constant_values=0.5),
        x[:, ids],
        x.reshape(6, 4)[ids],
        x,
        np.full((2, 2), 7, np.int64),
        x[:, ids],
        x.mean(2),
        mu,
        1 / np.sqrt(var + 1e-5),
    ]
    for i, (g, w_) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w_, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")


def test_aten_ops_of_backward_graphs():
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    labels = np.array([[1], [4], [0], [1]], dtype=np.int64)
    rows = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    ids = np.array([[3, 0, 3], [1, 3, 2]], dtype=np.int64)
    src = RNG.standard_normal((4, 2)).astype(np.float32)

    def build(m, x, labels, rows, ids, src):
        return [
            # nll_loss's backward: the one-hot gradient.
            m.call("aten.scatter.value", x, 1, labels, -1.0),
            # embedding's backward: rows added into the table, duplicates accumulating.
            m.call("aten.index_put.default", x, [ids], rows, True),
            # a slice's backward.
            m.call("aten.slice_scatter.default", x, src, 1, 2, 4),
        ]

    got, ops = run_region(build, x, labels, rows, ids, src)
    one_hot = x.copy()
    np.put_along_axis(one_hot, labels, -1.0, axis=1)
    table = x.copy()
    np.add.at(table, ids.reshape(-1), rows.reshape(-1, 5))
    scattered = x.copy()
    scattered[:, 2:4] = src
    for i, (g, w_) in enumerate(zip(got, [one_hot, table, scattered])):
        np.testing.assert_allclose(g, w_, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")
    assert "aten.index_put.default" in ops


def test_unmapped_ops_and_wrong_types_are_reported():
    m = Module()
    x = m.input(np.zeros((2, 2), np.float32))
    node = m.call("aten.cumsum.default", x, 0)
    assert dynamo.unsupported_reason(node) == "no mapping for aten.cumsum.default"
    # A mapping whose result differs from PyTorch's type is refused, not run.
    m = Module()
    x = m.input(np.zeros((2, 2), np.float32))
    bad = m.call("aten.relu.default", x)
    bad.meta["val"] = Meta(np.zeros((3,), np.float32))
    m.output(bad)
    with pytest.raises(dynamo.Unsupported, match=r"Ferrite computes f32\[2, 2\]"):
        dynamo.build_region(m, [Meta(np.zeros((2, 2), np.float32))])


# --- With torch. ---------------------------------------------------------------------------------


def _needed(module):
    """`module`, or a skip where it is not installed; scripts/python-test.sh installs torch and
    transformers and sets FERRITE_REQUIRE_TORCH=1, under which a missing one fails the test."""
    if os.environ.get("FERRITE_REQUIRE_TORCH") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module)


def _torch():
    return _needed("torch")


FUNCTIONS = {
    "mlp": (lambda x, w, b: torch.relu(x @ w + b) * 0.5, [(8, 16), (16, 4), (4,)]),
    "softmax": (lambda x: torch.softmax(x / 0.7, dim=-1), [(4, 32)]),
    "layer_norm": (lambda x: torch.nn.functional.layer_norm(x, (32,)), [(4, 32)]),
    "gelu": (lambda x: torch.nn.functional.gelu(x) + torch.nn.functional.silu(x), [(64,)]),
    "movement": (lambda x: x.transpose(0, 1).reshape(4, -1)[:, 1:3].contiguous(), [(2, 8)]),
    "reductions": (lambda x: (x.sum(1), x.mean(0), x.amax(-1), x.argmax(1)), [(5, 7)]),
    "compare": (lambda x, y: torch.where(x > y, x, y * 2), [(3, 4), (3, 4)]),
    "attention": (
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
        [(1, 2, 8, 16)] * 3,
    ),
    "cat_split": (lambda x: torch.cat(x.split([1, 3], dim=1)[::-1], dim=1), [(2, 4)]),
    "pad": (lambda x: torch.nn.functional.pad(x, (1, 2), value=0.5), [(3, 3)]),
    # A transformers KV cache starts as torch.tensor([]), which torch.cat skips.
    "cat_legacy_empty": (
        lambda x: torch.cat([torch.tensor([]), torch.tanh(x)], dim=-2), [(2, 3, 4)],
    ),
    "any_all": (lambda x: ((x > 0).any(-1), (x != 0).all(0), (x > 1).any(), x.all()), [(3, 5)]),
    "index_add_reduce": (
        lambda x, s: (
            x.index_add(0, torch.tensor([3, 0, 3, 1]), s, alpha=2.0),
            x.index_reduce(0, torch.tensor([3, 0, 3, 1]), s, "amax"),
            x.index_reduce(0, torch.tensor([3, 0, 3, 1]), s, "mean", include_self=False),
        ),
        [(5, 3), (4, 3)],
    ),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_functions_match_eager(name):
    global torch
    torch = _torch()
    fn, shapes = FUNCTIONS[name]
    args = [torch.randn(*s) for s in shapes]
    torch._dynamo.reset()
    record = dynamo.Explanation()
    compiled = torch.compile(fn, backend=dynamo.make_backend(record), dynamic=False)
    with torch.no_grad():
        want, got = fn(*args), compiled(*args)
    assert record.regions and all(r.compiled for r in record.regions), str(record)
    assert record.fallbacks == [], str(record)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_explain_reports_regions_and_fallbacks():
    global torch
    torch = _torch()

    def fn(x):
        return torch.cumsum(torch.relu(x), 0) * 2

    report = ferrite.explain(fn, torch.randn(4, 4))
    assert any(r.compiled for r in report.regions)
    assert any(f.op == "aten.cumsum.default" and "no mapping" in f.reason for f in report.fallbacks)
    assert "aten.cumsum.default" in str(report)


def test_training_graphs_compile_forward_and_backward():
    # More in test_dynamo_training.py: models trained against eager.
    global torch
    torch = _torch()
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    record = dynamo.Explanation()
    compiled = torch.compile(model, backend=dynamo.make_backend(record), dynamic=False)
    x = torch.randn(2, 4)
    compiled(x).square().sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    for g, w in zip(got, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(g, w)
    assert [r.graph for r in record.regions] == ["forward", "backward"], str(record)
    assert all(r.compiled and r.frozen == 0 for r in record.regions), str(record)


def test_inference_graphs_are_traced_directly_unless_they_mutate():
    global torch
    torch = _torch()

    def pure(x):
        return torch.nn.functional.gelu(x) * 2

    def mutating(x):
        y = x.clone()
        y.add_(1.0)
        return torch.tanh(y) * x

    def mutating_its_input(x):
        x.mul_(2.0)
        return torch.tanh(x)

    # An in-place op on the graph's own tensor is functionalized away; one on an input is left
    # to AOT.
    x = torch.randn(3, 4)
    for fn, lowering in [(pure, "trace"), (mutating, "trace"), (mutating_its_input, "aot")]:
        record = dynamo.Explanation()
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=dynamo.make_backend(record), dynamic=False)
        a, b = x.clone(), x.clone()
        with torch.no_grad():
            torch.testing.assert_close(compiled(a), fn(b))
        torch.testing.assert_close(a, b)
        assert record.lowerings == [lowering], fn.__name__
        assert any(r.compiled for r in record.regions), str(record)
    torch._dynamo.reset()


def _shares(a, b) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _aliasing(inputs, outputs):
    """Which outputs share storage with which inputs and with which other outputs."""
    return [
        [_shares(o, t) for t in inputs] + [_shares(o, p) for p in outputs[:i]]
        for i, o in enumerate(outputs)
    ]


def _run_and_write(fn, inputs):
    """`fn(*inputs)` under no_grad, then a write into each output in turn and one into each
    input: returns the aliasing of the first outputs, and the outputs and inputs after the
    writes (what a caller sees)."""
    with torch.no_grad():
        out = fn(*inputs)
        outputs = list(out) if isinstance(out, (tuple, list)) else [out]
        aliasing = _aliasing(inputs, outputs)
        for i, o in enumerate(outputs):
            o.mul_(2.0).add_(float(i + 1))
        for t in inputs:
            t.sub_(3.0)
    return aliasing, [o.clone() for o in outputs], [t.clone() for t in inputs]


#: Functions whose outputs eager returns as views of their inputs or of each other.
ALIASING = {
    "transpose": lambda x: x.transpose(0, 1),
    "slice": lambda x: x[1:],
    "view": lambda x: x.view(-1),
    "select_and_compute": lambda x: (x[0], torch.relu(x) * 2),
    "view_also_computed_on": lambda x: (x.t(), x.t() @ x),
    "input_itself": lambda x: (x, torch.tanh(x)),
    "output_and_its_views": lambda x: (lambda y: (y, y.view(-1), y[1:]))(torch.tanh(x) + 1),
    "views_of_one_intermediate": lambda x: (torch.tanh(x) * 3).split(2),
    "views_of_a_parameter_and_input": lambda x, w: (w.t(), x.unsqueeze(0), x @ w),
}


@pytest.mark.parametrize("name", sorted(ALIASING))
def test_outputs_alias_inputs_and_each_other_as_in_eager(name):
    global torch
    torch = _torch()
    fn = ALIASING[name]
    shapes = [(4, 4), (4, 4)][: fn.__code__.co_argcount]
    torch.manual_seed(0)
    inputs = [torch.randn(*s) for s in shapes]
    if len(inputs) == 2:
        inputs[1] = torch.nn.Parameter(inputs[1], requires_grad=False)
    record = dynamo.Explanation()
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=dynamo.make_backend(record), dynamic=False)
    want = _run_and_write(fn, [t.detach().clone() for t in inputs])
    got = _run_and_write(compiled, [t.detach().clone() for t in inputs])
    assert got[0] == want[0], f"which outputs share storage: {got[0]}, eager {want[0]}"
    for g, w in zip(got[1] + got[2], want[1] + want[2]):
        torch.testing.assert_close(g, w)
    assert set(record.lowerings) <= {"trace"}, str(record)
    torch._dynamo.reset()


def test_in_place_ops_on_inputs_mutate_them_as_in_eager():
    global torch
    torch = _torch()

    def add_then_use(x):
        x.add_(1.0)
        return torch.tanh(x) * 2

    def returns_the_mutated_input(x):
        return x.add_(1.0)

    def through_a_view(x):
        x.view(-1)[1:3].mul_(5.0)
        return x.sum(0)

    def returns_views_of_the_mutated_input(x):
        x.mul_(2.0)
        return x.t(), x[1:], torch.relu(x)

    # AOT dispatch functionalizes the mutation and writes the input back after the call.
    _in_place_matches_eager(
        [add_then_use, returns_the_mutated_input, through_a_view,
         returns_views_of_the_mutated_input],
        "aot",
    )


def test_in_place_ops_on_the_graphs_own_tensors_match_eager():
    global torch
    torch = _torch()

    def read_before_and_after(x):
        y = x * 2
        before = y.sum(0)
        y.mul_(3.0)
        return before, y + 1

    def arange_offset(x):
        # transformers' masks: kv_idx = arange(n); kv_idx += offset.
        idx = torch.arange(x.shape[1])
        idx += 2
        return x * idx

    def through_a_view_taken_before(x):
        y = x * 2
        row = y[0]
        y.add_(1.0)
        return row * 3

    def narrower_dtype(x):
        y = x.half()
        y.add_(x)
        return y.float()

    def twice(x):
        y = torch.tanh(x)
        y.add_(1.0)
        y.mul_(y)
        return y

    _in_place_matches_eager(
        [read_before_and_after, arange_offset, through_a_view_taken_before, narrower_dtype,
         twice],
        "trace",
    )


def _in_place_matches_eager(fns, lowering):
    """Each of `fns`, compiled, returns and writes what eager does (`_run_and_write` on a
    fresh (3, 4) input), lowered by the route `lowering` names."""
    for fn in fns:
        record = dynamo.Explanation()
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=dynamo.make_backend(record), dynamic=False)
        x = torch.randn(3, 4)
        want = _run_and_write(fn, [x.clone()])
        got = _run_and_write(compiled, [x.clone()])
        assert got[0] == want[0], fn.__name__
        for g, w in zip(got[1] + got[2], want[1] + want[2]):
            torch.testing.assert_close(g, w, msg=fn.__name__)
        assert record.lowerings == [lowering], fn.__name__
    torch._dynamo.reset()


def test_shape_change_recompiles():
    global torch
    torch = _torch()
    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.tanh(x) * 3, backend="ferrite", dynamic=False)
    with torch.no_grad():
        for n in [3, 5, 3]:
            x = torch.randn(n, 2)
            torch.testing.assert_close(fn(x), torch.tanh(x) * 3)


def test_parameters_are_frozen_and_follow_in_place_updates():
    global torch
    torch = _torch()
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    record = dynamo.Explanation()
    compiled = torch.compile(model, backend=dynamo.make_backend(record), dynamic=False)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        # Two weights and two biases are constants of the program; x is its one input.
        assert [r.frozen for r in record.regions] == [4]
        assert "4 input(s) frozen" in str(record)
        # The first call's time is split into the backend's steps.
        assert set(record.seconds) == {"aot", "partition", "ferrite_build", "ferrite_compile"}
        assert all(v > 0 for v in record.seconds.values()), record.seconds
        compiled(x)
        assert len(record.regions) == 1, "an unchanged parameter must not rebuild"
        # An in-place write bumps the weight's version counter: the region is rebuilt with it.
        model[0].weight.mul_(2.0)
        torch.testing.assert_close(compiled(x), model(x))
        assert len(record.regions) == 2
        # So does a parameter replaced by another tensor.
        model[2].bias = torch.nn.Parameter(torch.randn(4), requires_grad=False)
        torch.testing.assert_close(compiled(x), model(x))


def _transformers():
    _torch()
    return _needed("transformers")


def _check_model(model, inputs):
    import torch as t

    model.eval()
    record = dynamo.Explanation()
    with t.no_grad():
        want = model(**inputs)
        t._dynamo.reset()
        got = t.compile(model, backend=dynamo.make_backend(record), dynamic=False)(**inputs)
    # Matching eager is not enough: a region that fails to build runs eagerly.
    assert record.regions and all(r.compiled for r in record.regions), str(record)
    assert record.fallbacks == [], str(record)
    # The tensors (logits, hidden states); a KV cache object (transformers' DynamicCache)
    # holds the same keys and values the model computed from them.
    compared = 0
    for key in want.keys():
        if isinstance(want[key], t.Tensor):
            t.testing.assert_close(got[key], want[key], rtol=1e-3, atol=1e-3)
            compared += 1
    assert compared > 0, f"no tensor output among {list(want.keys())}"


def test_gpt2():
    tr = _transformers()
    import torch as t

    t.manual_seed(0)
    config = tr.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=256, n_positions=64)
    _check_model(tr.GPT2LMHeadModel(config), {"input_ids": t.randint(0, 256, (1, 16))})


def test_bert():
    tr = _transformers()
    import torch as t

    t.manual_seed(0)
    config = tr.BertConfig(
        num_hidden_layers=2, num_attention_heads=4, hidden_size=64, intermediate_size=128,
        vocab_size=256, max_position_embeddings=64,
    )
    ids = t.randint(0, 256, (1, 16))
    mask = t.ones(1, 16, dtype=t.int64)
    mask[0, 12:] = 0
    _check_model(tr.BertModel(config), {"input_ids": ids, "attention_mask": mask})


def test_llama():
    tr = _transformers()
    import torch as t

    t.manual_seed(0)
    config = tr.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        intermediate_size=128, vocab_size=256, max_position_embeddings=64,
    )
    _check_model(tr.LlamaForCausalLM(config), {"input_ids": t.randint(0, 256, (1, 16))})


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_committed_models_match_onnx_runtime(name):
    """The models of scripts/export-models.py, seeded as it seeds them, under the backend
    against ONNX Runtime's committed outputs (examples/onnx/NAME/expected/)."""
    import importlib.util
    import json

    from conftest import EXAMPLES, REPO, assert_close

    t = _torch()
    spec = importlib.util.spec_from_file_location("export_models", REPO / "scripts" / "export-models.py")
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)
    t.manual_seed(0)
    models = {"gpt2": export.Gpt2(), "bert": export.Bert(), "llama": export.Llama()}
    folder = EXAMPLES / "onnx" / name
    inputs = {p.stem: t.from_numpy(np.load(p)) for p in (folder / "inputs").glob("*.npy")}
    t._dynamo.reset()
    with t.no_grad():
        got = t.compile(models[name].eval(), backend="ferrite", dynamic=False)(**inputs)
    got = got if isinstance(got, tuple) else (got,)
    names = [o["output"] for o in json.loads((folder / "reference.json").read_text())["outputs"]]
    for n, g in zip(names, got):
        assert_close(g.numpy(), np.load(folder / "expected" / f"{n}.npy"), f"{name} {n}")


def test_dynamic_shapes_compile_per_shape_instead_of_running_eagerly():
    global torch
    torch = _torch()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.LayerNorm(32), torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)
    ).eval()

    def fn(x):
        # Sizes flow into a view: Dynamo passes them as SymInts.
        b, t, d = x.shape
        return model(x).reshape(b * t, d).softmax(-1).reshape(b, t, d)

    torch._dynamo.reset()
    record = dynamo.Explanation()
    compiled = torch.compile(fn, backend=dynamo.make_backend(record), dynamic=True)
    with torch.no_grad():
        for b, t in [(2, 3), (1, 7), (3, 5), (2, 3)]:
            x = torch.randn(b, t, 32)
            torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)
    assert "per-shape" in record.lowerings, str(record)
    # Every shape compiled by Ferrite: regions, no eager fallback.
    assert record.regions and all(r.compiled for r in record.regions), str(record)
    assert record.fallbacks == [], str(record)
    assert record.graphs == 3, str(record)
    # Traced directly (no AOT dispatch), with the parameters frozen in.
    assert record.lowerings.count("trace") == 3, str(record)
    assert all(r.frozen == 6 for r in record.regions), str(record)


def test_dynamic_shapes_key_on_scalars_the_graph_reads():
    global torch
    torch = _torch()

    def fn(x, scale: float):
        return torch.relu(x) * scale + x.shape[0]

    torch._dynamo.reset()
    record = dynamo.Explanation()
    compiled = torch.compile(fn, backend=dynamo.make_backend(record), dynamic=True)
    with torch.no_grad():
        for n, scale in [(3, 0.5), (5, 0.5), (5, 2.0), (3, -1.5)]:
            x = torch.randn(n, 4)
            torch.testing.assert_close(compiled(x, scale), fn(x, scale))
    assert record.fallbacks == [], str(record)
