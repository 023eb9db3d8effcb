"""Every dtype in and out, numpy layouts, and what is copied."""

import numpy as np
import pytest

import ferrite

NUMPY = {
    "f32": np.float32,
    "f16": np.float16,
    "f64": np.float64,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "bool": np.bool_,
}


@pytest.mark.parametrize("dtype", sorted(NUMPY))
@pytest.mark.parametrize("target", ["cpu", "sim", "interp"])
def test_identity_like_ops_keep_every_dtype(dtype, target):
    g = ferrite.Graph("dtypes")
    x = g.input("x", dtype, [3, 4])
    g.output(x.transpose(0, 1), x.reshape(12)[::3])
    values = (np.arange(12).reshape(3, 4) % 5).astype(NUMPY[dtype])
    t, strided = ferrite.compile(g, target=target).run(values)
    assert t.dtype == NUMPY[dtype] and strided.dtype == NUMPY[dtype]
    np.testing.assert_array_equal(t, values.T)
    np.testing.assert_array_equal(strided, values.reshape(12)[::3])


@pytest.mark.parametrize("dtype", ["f16", "f64", "i32", "i64", "u8"])
def test_arithmetic_in_each_dtype(dtype):
    g = ferrite.Graph("arith")
    a = g.input("a", dtype, [16])
    b = g.input("b", dtype, [16])
    g.output(a * b + a, a.maximum(b), (a + b).sum())
    av = (np.arange(16) % 7).astype(NUMPY[dtype])
    bv = (np.arange(16)[::-1] % 5).astype(NUMPY[dtype])
    prod, mx, total = ferrite.compile(g).run(av, bv)
    np.testing.assert_array_equal(prod, av * bv + av)
    np.testing.assert_array_equal(mx, np.maximum(av, bv))
    assert total == (av + bv).sum()


def test_bf16_round_trips_as_bits():
    g = ferrite.Graph("bf16")
    x = g.input("x", "bf16", [4])
    g.output(x * 2.0, x.cast("f32"))
    # bfloat16 1.0, 1.5, -2.0, 0.0 as their bits, read through a uint16 view.
    bits = np.array([0x3F80, 0x3FC0, 0xC000, 0x0000], dtype=np.uint16)
    try:
        import ml_dtypes

        x_in = bits.view(ml_dtypes.bfloat16)
    except ImportError:
        pytest.skip("bf16 inputs need ml_dtypes")
    doubled, as_f32 = ferrite.compile(g).run(x_in)
    np.testing.assert_array_equal(as_f32, [1.0, 1.5, -2.0, 0.0])
    np.testing.assert_array_equal(doubled.view(np.uint16), [0x4000, 0x4040, 0xC080, 0])


def test_non_contiguous_inputs_are_read_in_row_major_order():
    g = ferrite.Graph("layouts")
    x = g.input("x", "f32", [4, 3])
    g.output(x + 0.0)
    prog = ferrite.compile(g)
    base = np.arange(24, dtype=np.float32).reshape(3, 8)
    for view in [base[:, ::2].T, np.asfortranarray(base[:, :4].T), base.T[::2]]:
        (got,) = prog.run(view)
        np.testing.assert_array_equal(got, view)


def test_inputs_are_copied_and_outputs_are_fresh_arrays():
    g = ferrite.Graph("copy")
    x = g.input("x", "f32", [1000])
    g.output(x * 1.0)
    prog = ferrite.compile(g)
    data = np.ones(1000, np.float32)
    (a,) = prog.run(data)
    (b,) = prog.run(data)
    assert a.flags.owndata or a.base is not None
    assert not np.shares_memory(a, b) and not np.shares_memory(a, data)
    a[:] = 5.0  # The output is the caller's, writable.
    assert b[0] == 1.0


def test_lists_and_scalars_are_arrays():
    g = ferrite.Graph("lists")
    x = g.input("x", "i64", [3])
    s = g.input("s", "f64", [])
    g.output(x * 2, s + 1.0)
    doubled, plus = ferrite.compile(g).run([1, 2, 3], 0.5)
    np.testing.assert_array_equal(doubled, [2, 4, 6])
    assert plus.shape == () and plus == 1.5


def test_unknown_dtype_name():
    g = ferrite.Graph("g")
    with pytest.raises(ValueError, match="unknown dtype `f8`"):
        g.input("x", "f8", [2])
    assert "bf16" in ferrite.DTYPES and len(ferrite.DTYPES) == 13


def test_big_endian_arrays_are_read_by_value():
    g = ferrite.Graph("endian")
    x = g.input("x", "f32", [3])
    i = g.input("i", "i64", [3])
    g.output(x * 2.0, i + 1)
    doubled, plus = ferrite.compile(g).run(
        np.array([1.5, -2.0, 3.25], dtype=">f4"), np.array([1, 2, 3], dtype=">i8")
    )
    np.testing.assert_array_equal(doubled, [3.0, -4.0, 6.5])
    np.testing.assert_array_equal(plus, [2, 3, 4])
