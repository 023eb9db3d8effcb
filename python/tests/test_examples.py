"""The repository's examples through the Python package: every .fg example on every target
against the reference interpreter, the ONNX models against ONNX Runtime's outputs."""

from pathlib import Path

import numpy as np
import pytest

import ferrite
from conftest import EXAMPLES, assert_close

FG = sorted(p.name for p in EXAMPLES.glob("*.fg")) + ["weights/mlp.fg"]
MODELS = ["gpt2", "bert", "llama"]


@pytest.mark.parametrize("name", FG)
def test_fg_example_matches_interpreter(name):
    graph = ferrite.load(EXAMPLES / name)
    reference = ferrite.compile(graph, target="interp")
    inputs = reference.random_inputs(seed=0)
    want = reference.run(*inputs)
    for target in ["cpu", "sim"]:
        prog = ferrite.compile(graph, target=target)
        got = prog.run(*inputs)
        assert len(got) == len(want)
        for g, w, (dtype, shape) in zip(got, want, prog.output_types):
            assert g.shape == shape and g.dtype == w.dtype
            assert_close(g, w, f"{name} on {target}")


def test_graph_describes_its_inputs_and_outputs():
    g = ferrite.load(EXAMPLES / "mlp.fg")
    assert g.name == "mlp"
    assert g.inputs == [
        ("x", "f32", (64, 784)),
        ("w1", "f32", (784, 256)),
        ("b1", "f32", (256,)),
        ("w2", "f32", (256, 10)),
        ("b2", "f32", (10,)),
    ]
    assert g.outputs == [("logits", "f32", (64, 10))]
    assert "graph mlp(" in str(g)
    # The text is .fg: it parses back into the same graph.
    assert g.op_count == 5


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_onnx_model_matches_onnx_runtime(model, target):
    folder = EXAMPLES / "onnx" / model
    graph = ferrite.load(folder / "model.onnx")
    prog = ferrite.compile(graph, target=target)
    inputs = {p.stem: np.load(p) for p in (folder / "inputs").glob("*.npy")}
    outputs = prog.run(**inputs)
    assert len(outputs) == len(prog.output_names)
    for name, got in zip(prog.output_names, outputs):
        assert_close(got, np.load(folder / "expected" / f"{name}.npy"), f"{model} {name}")


def test_onnx_model_by_position_and_threads():
    folder = EXAMPLES / "onnx" / "gpt2"
    prog1 = ferrite.compile(ferrite.load(folder / "model.onnx"), threads=1)
    prog3 = ferrite.compile(ferrite.load(folder / "model.onnx"), threads=3)
    ids = np.load(folder / "inputs" / "input_ids.npy")
    want = np.load(folder / "expected" / "logits.npy")
    (one,) = prog1.run(ids)
    (three,) = prog3.run(ids)
    assert_close(one, want)
    assert_close(three, want)


DATA = Path(__file__).resolve().parent / "data"


def test_onnx_symbolic_dims_and_onnx_names():
    path = DATA / "dynamic.onnx"
    with pytest.raises(ferrite.OnnxError) as e:
        ferrite.load(path)
    assert str(e.value) == (
        f"{path}: input `x:0` has symbolic dimension `batch` (axis 0); "
        'give it a value with dims={"batch": N}'
    )
    w = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.5) / 4
    b = np.array([0.5, -0.25, 0.0], dtype=np.float32)
    for batch in [1, 5]:
        g = ferrite.load(path, dims={"batch": batch})
        assert g.inputs == [("x:0", "f32", (batch, 4))]
        assert g.outputs == [("y", "f32", (batch, 3))]
        prog = ferrite.compile(g)
        assert prog.input_names == ["x:0"] and prog.output_names == ["y"]
        x = np.linspace(-1, 1, batch * 4, dtype=np.float32).reshape(batch, 4)
        want = np.maximum(x @ w + b, 0)
        # By the ONNX name, by Ferrite's mapped name, and by position.
        for got in [prog.run(**{"x:0": x}), prog.run(x_0=x), prog.run(x)]:
            np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6)


def test_onnx_input_needed_at_import_time():
    path = DATA / "reshape_input.onnx"
    with pytest.raises(ferrite.OnnxError, match=r'give it with values=\{"shape": array\}'):
        ferrite.load(path)
    g = ferrite.load(path, values={"shape": np.array([3, 4], np.int64)})
    # The shape became a constant: the program takes only `x`.
    prog = ferrite.compile(g)
    assert prog.input_names == ["x"]
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(prog(x), x.reshape(3, 4))
