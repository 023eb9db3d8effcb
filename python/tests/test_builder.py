"""The builder: ops and operators on Vars, constants, compiled and run against numpy."""

import numpy as np
import pytest

import ferrite

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def run(g, *inputs, target="cpu"):
    return ferrite.compile(g, target=target).run(*inputs)


def test_mlp_matches_numpy():
    g = ferrite.Graph("mlp")
    x = g.input("x", "f32", [8, 16])
    w = g.input("w", np.float32, (16, 4))
    b = g.input("b", "float32", [4])
    y = (x @ w + b).relu() * 0.5
    assert y.shape == (8, 4) and y.dtype == "f32"
    g.output(y)
    xs, ws, bs = rand(8, 16), rand(16, 4), rand(4)
    for target in ["cpu", "sim", "interp"]:
        (got,) = run(g, xs, ws, bs, target=target)
        np.testing.assert_allclose(got, np.maximum(xs @ ws + bs, 0) * 0.5, rtol=1e-5, atol=1e-5)


def test_operators_and_scalars_on_either_side():
    g = ferrite.Graph("ops")
    x = g.input("x", "f32", [3, 5])
    y = g.input("y", "f32", [3, 5])
    outs = [
        1.0 - x,
        2 / (x * x + 1.0),
        x ** 2,
        2.0 ** x,
        -x,
        abs(x),
        x // 0.5,
        x % 0.75,
        3.0 % (x * x + 1.0),
        (x > y) & (x > 0.0),
        (x < y) | (y == 0.0),
        ~(x >= y),
        x != y,
        x <= 0.25,
    ]
    g.output(*outs)
    xs, ys = rand(3, 5), rand(3, 5)
    want = [
        1.0 - xs,
        2 / (xs * xs + 1.0),
        xs**2,
        2.0**xs,
        -xs,
        np.abs(xs),
        np.floor_divide(xs, np.float32(0.5)),
        np.mod(xs, np.float32(0.75)),
        np.mod(np.float32(3.0), xs * xs + 1.0),
        (xs > ys) & (xs > 0),
        (xs < ys) | (ys == 0),
        ~(xs >= ys),
        xs != ys,
        xs <= 0.25,
    ]
    got = run(g, xs, ys)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype, i
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")


def test_reductions_softmax_and_norms():
    g = ferrite.Graph("reduce")
    x = g.input("x", "f32", [4, 6])
    w = g.input("w", "f32", [6])
    b = g.input("b", "f32", [6])
    g.output(
        x.sum(),
        x.sum(1),
        x.mean((0, 1), keepdim=True),
        x.max(0),
        x.min(-1, keepdim=True),
        x.argmax(1),
        x.softmax(-1),
        x.layer_norm(w, b, eps=1e-5),
        x.var(1),
    )
    xs, ws, bs = rand(4, 6), rand(6), rand(6)
    got = run(g, xs, ws, bs)
    e = np.exp(xs - xs.max(-1, keepdims=True))
    mu, var = xs.mean(-1, keepdims=True), xs.var(-1, keepdims=True)
    want = [
        xs.sum(),
        xs.sum(1),
        xs.mean((0, 1), keepdims=True),
        xs.max(0),
        xs.min(-1, keepdims=True),
        xs.argmax(1),
        e / e.sum(-1, keepdims=True),
        (xs - mu) / np.sqrt(var + 1e-5) * ws + bs,
        xs.var(1, ddof=1),
    ]
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == np.shape(b), i
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"output {i}")
    assert got[5].dtype == np.int64


def test_movement_and_indexing():
    g = ferrite.Graph("movement")
    x = g.input("x", "f32", [2, 3, 4])
    ids = g.input("ids", "i64", [5])
    parts = x.split(2, axis=2)
    g.output(
        x.reshape(6, 4),
        x.reshape((4, -1)),
        x.permute(2, 0, 1),
        x.transpose(0, 2),
        x[1],
        x[:, 1:3, ::2],
        x[..., -1],
        x[None, 0, :, 1:],
        x.unsqueeze(0).squeeze(0),
        ferrite.concat(parts, axis=2),
        ferrite.stack([x, x], axis=0),
        x.reshape(6, 4).index_select(0, ids),
        x.flatten(1),
        x.pad([0, 0, 1, 0, 0, 2], value=9.0),
        ferrite.where(x > 0.0, x, 0.0),
        x.reshape(6, 4).tril(),
    )
    xs = rand(2, 3, 4)
    idx = np.array([0, 5, 2, 2, 1], dtype=np.int64)
    got = run(g, xs, idx)
    want = [
        xs.reshape(6, 4),
        xs.reshape(4, -1),
        xs.transpose(2, 0, 1),
        xs.transpose(2, 1, 0),
        xs[1],
        xs[:, 1:3, ::2],
        xs[..., -1],
        xs[None, 0, :, 1:],
        xs,
        xs,
        np.stack([xs, xs]),
        xs.reshape(6, 4)[idx],
        xs.reshape(2, 12),
        np.pad(xs, [(0, 0), (1, 0), (0, 2)], constant_values=9.0),
        np.where(xs > 0, xs, 0),
        np.tril(xs.reshape(6, 4)),
    ]
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(a, b, err_msg=f"output {i}")


def test_constants_are_owned_by_the_program():
    weight = rand(16, 8)
    g = ferrite.Graph("linear")
    x = g.input("x", "f32", [4, 16])
    w = g.constant("fc.weight", weight)
    g.output(x @ w)
    prog = ferrite.compile(g)
    assert prog.input_names == ["x"]
    xs = rand(4, 16)
    want = xs @ weight
    weight[:] = 0  # The graph holds its own copy.
    np.testing.assert_allclose(prog(xs), want, rtol=1e-5, atol=1e-5)


def test_attention_composite():
    g = ferrite.Graph("attention")
    q = g.input("q", "f32", [2, 4, 8])
    k = g.input("k", "f32", [2, 4, 8])
    v = g.input("v", "f32", [2, 4, 8])
    g.output(ferrite.scaled_dot_product_attention(q, k, v, causal=True))
    qs, ks, vs = rand(2, 4, 8), rand(2, 4, 8), rand(2, 4, 8)
    s = qs @ ks.transpose(0, 2, 1) / np.sqrt(8)
    s = np.where(np.tril(np.ones((4, 4), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ vs
    np.testing.assert_allclose(run(g, qs, ks, vs)[0], want, rtol=1e-4, atol=1e-5)


def test_save_and_load_round_trip(tmp_path):
    g = ferrite.Graph("saved")
    x = g.input("x", "f32", [4, 32])
    w = g.constant("w", rand(32, 32))
    g.output((x @ w).tanh())
    g.save(tmp_path / "saved.fg")
    assert (tmp_path / "saved.safetensors").exists()
    back = ferrite.load(tmp_path / "saved.fg")
    xs = rand(4, 32)
    np.testing.assert_array_equal(run(back, xs)[0], run(g, xs)[0])


def test_run_by_name_and_call_forms():
    g = ferrite.Graph("two")
    a = g.input("a", "f32", [3])
    b = g.input("b", "f32", [3])
    g.output(a - b, a * b)
    prog = ferrite.compile(g)
    av, bv = rand(3), rand(3)
    d, p = prog(b=bv, a=av)
    np.testing.assert_allclose(d, av - bv)
    np.testing.assert_allclose(p, av * bv)
    assert prog.output_names == ["output0", "output1"]
    assert prog.input_types == [("f32", (3,)), ("f32", (3,))]
    assert prog.kernel_count >= 1 and prog.compile_time > 0
    assert "<ferrite.Program two on cpu" in repr(prog)


def test_var_has_no_truth_value():
    g = ferrite.Graph("g")
    x = g.input("x", "f32", [2])
    with pytest.raises(TypeError, match="no truth value"):
        bool(x > 0.0)


def test_one_program_runs_from_many_threads_at_once():
    from concurrent.futures import ThreadPoolExecutor

    g = ferrite.Graph("threads")
    x = g.input("x", "f32", [64, 64])
    g.output((x @ x).tanh().sum(1))
    prog = ferrite.compile(g, threads=2)
    inputs = [rand(64, 64) for _ in range(8)]
    want = [prog(a) for a in inputs]
    # The GIL is released while a program runs, and a Program may run on several threads.
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(prog, inputs))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
