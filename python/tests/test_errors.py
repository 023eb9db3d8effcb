"""Errors: FerriteError subclasses carrying the CLI's located messages."""

import subprocess

import numpy as np
import pytest

import ferrite
from conftest import EXAMPLES, REPO


def test_malformed_fg_is_a_parse_error_with_file_line_col(tmp_path):
    path = tmp_path / "bad.fg"
    path.write_text("graph bad(x: f32[4]) {\n  y = relu(x, 3)\n  return y\n}\n")
    with pytest.raises(ferrite.ParseError) as e:
        ferrite.load(path)
    message = str(e.value)
    assert message.startswith(f"{path}:2:"), message
    assert "error:" in message and "^" in message
    assert isinstance(e.value, ferrite.FerriteError)


def test_type_error_in_fg_is_located(tmp_path):
    path = tmp_path / "shapes.fg"
    path.write_text(
        "graph shapes(a: f32[2, 3], b: f32[4, 5]) {\n  c = matmul(a, b)\n  return c\n}\n"
    )
    with pytest.raises(ferrite.ParseError, match=r"shapes\.fg:2:7: error: .*matmul"):
        ferrite.load(path)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ferrite.FileError, match="cannot read"):
        ferrite.load(tmp_path / "missing.fg")
    with pytest.raises(ferrite.FileError):
        ferrite.load(tmp_path)


def test_text_size_limit(tmp_path):
    path = tmp_path / "big.fg"
    path.write_text("# " + "x" * 5000 + "\n")
    with pytest.raises(ferrite.FileError, match="max_text_size="):
        ferrite.load(path, max_text_size=1000)


def test_build_error_is_located_at_the_python_line():
    g = ferrite.Graph("bad")
    a = g.input("a", "f32", [2, 3])
    b = g.input("b", "f32", [4, 5])
    with pytest.raises(ferrite.BuildError) as e:
        a @ b  # noqa: B018 -- the op itself raises
    message = str(e.value)
    assert "matmul(f32[2, 3], f32[4, 5]): inner dimensions differ" in message
    assert message.startswith(f"{__file__}:"), message
    # The graph keeps the error: marking outputs and compiling raise it again, still
    # located at the line of the op that failed.
    with pytest.raises(ferrite.BuildError) as again:
        g.output(a)
    assert str(again.value) == message
    with pytest.raises(ferrite.BuildError) as again:
        ferrite.compile(g)
    assert str(again.value) == message


def test_graph_without_outputs():
    g = ferrite.Graph("empty")
    g.input("x", "f32", [2])
    with pytest.raises(ferrite.BuildError, match="has no outputs"):
        ferrite.compile(g)


def test_vars_of_two_graphs_do_not_mix():
    g1, g2 = ferrite.Graph("one"), ferrite.Graph("two")
    x = g1.input("x", "f32", [2])
    y = g2.input("y", "f32", [2])
    with pytest.raises(ferrite.BuildError, match="different graphs"):
        x + y  # noqa: B018


def test_wrong_inputs():
    prog = ferrite.compile(ferrite.load(EXAMPLES / "softmax_rows.fg"))
    with pytest.raises(ferrite.InputError, match="expected 1 input, got 0"):
        prog.run()
    with pytest.raises(ferrite.InputError, match=r"has shape \[2, 2\] but the parameter is \[128, 512\]"):
        prog.run(np.zeros((2, 2), np.float32))
    with pytest.raises(ferrite.InputError, match="has dtype f64 but the parameter is f32"):
        prog.run(np.zeros((128, 512)))
    with pytest.raises(ferrite.InputError, match="no input `x`"):
        prog.run(x=np.zeros((128, 512), np.float32))
    with pytest.raises(ferrite.InputError, match="complex64 has no Ferrite dtype"):
        prog.run(np.zeros((128, 512), np.complex64))


def test_run_time_error():
    g = ferrite.Graph("lookup")
    table = g.input("table", "f32", [4, 2])
    ids = g.input("ids", "i64", [3])
    g.output(table.index_select(0, ids))
    prog = ferrite.compile(g)
    with pytest.raises(ferrite.RunError, match="out of range|outside"):
        prog.run(np.zeros((4, 2), np.float32), np.array([0, 7, 1]))


def test_options():
    g = ferrite.load(EXAMPLES / "mlp.fg")
    with pytest.raises(ferrite.OptionError, match="unknown target `gpu`"):
        ferrite.compile(g, target="gpu")
    with pytest.raises(ferrite.FerriteError, match="1024"):
        ferrite.compile(g, threads=5000)
    interp = ferrite.compile(g, target="interp")
    with pytest.raises(ferrite.OptionError, match="needs the cpu or sim target"):
        interp.profile(*interp.random_inputs())


def test_memory_budget():
    prog = ferrite.compile(ferrite.load(EXAMPLES / "softmax_rows.fg"), memory_limit=1000)
    with pytest.raises(ferrite.MemoryBudgetError, match="over the memory budget of 1000 bytes"):
        prog.run(np.zeros((128, 512), np.float32))


def test_truncated_onnx_model(tmp_path):
    path = tmp_path / "cut.onnx"
    path.write_bytes((EXAMPLES / "onnx" / "gpt2" / "model.onnx").read_bytes()[:5000])
    with pytest.raises(ferrite.OnnxError, match="cut.onnx"):
        ferrite.load(path)


def test_onnx_unsupported_op_names_the_node(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("StringNormalizer", ["x"], ["y"], name="normalize")
    graph = helper.make_graph(
        [node],
        "strings",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, [2])],
    )
    path = tmp_path / "strings.onnx"
    onnx.save(helper.make_model(graph), path)
    with pytest.raises(ferrite.OnnxError, match="strings.onnx"):
        ferrite.load(path)


def test_messages_equal_the_cli(tmp_path):
    """The same mistake gives the same message in Python and from `ferrite check`."""
    cli = REPO / "target" / "debug" / "ferrite"
    if not cli.exists():
        pytest.skip("the ferrite binary is not built (cargo build)")
    path = tmp_path / "bad.fg"
    path.write_text("graph bad(x: f32[4]) {\n  y = relu(x, 3)\n  return y\n}\n")
    out = subprocess.run([cli, "check", path], capture_output=True, text=True)
    assert out.returncode == 1
    with pytest.raises(ferrite.ParseError) as e:
        ferrite.load(path)
    assert out.stderr.strip() == str(e.value)
