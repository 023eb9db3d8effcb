"""Writes the small ONNX models the Python tests load (run by hand, needs the onnx package;
the models are committed beside this script):

- dynamic.onnx: relu(x @ W + b) with a symbolic batch dimension and an input named `x:0`
  (outside Ferrite's name syntax), W and b initializers of fixed values;
- reshape_input.onnx: a Reshape whose shape is a graph input, needed at import time.
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


def dynamic():
    w = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.5) / 4
    b = np.array([0.5, -0.25, 0.0], dtype=np.float32)
    nodes = [
        helper.make_node("MatMul", ["x:0", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["pre"], name="bias"),
        helper.make_node("Relu", ["pre"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "dynamic",
        [helper.make_tensor_value_info("x:0", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, HERE / "dynamic.onnx")


def reshape_input():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    graph = helper.make_graph(
        nodes,
        "reshape_input",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, HERE / "reshape_input.onnx")


if __name__ == "__main__":
    dynamic()
    reshape_input()
