"""Writes tests/onnx/recurrent/<case>/: small RNN, GRU and LSTM models with the attributes
the ONNX node tests leave out (both directions, reverse, sequence_lens, clip, custom
activations, linear_before_reset, peepholes, input_forget, layout=1), their inputs and the
outputs ONNX Runtime gives (`oracle.txt` says how they were made). `tests/models.rs` runs them on every target.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install onnx onnxruntime numpy
    /tmp/v/bin/python scripts/gen-recurrent-cases.py
"""
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx", "recurrent")
F = TensorProto.FLOAT


def run_ort(op, opset, node_inputs, outputs, feeds, attrs):
    """ONNX Runtime's outputs. It runs only layout 0, so a layout-1 case runs time-major:
    inputs transposed in, outputs transposed back (the operator defines layout 1 so)."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    layout = attrs.get("layout", 0)
    attrs = {k: v for k, v in attrs.items() if k != "layout"}
    feeds = dict(feeds)
    if layout == 1:
        feeds["X"] = feeds["X"].transpose(1, 0, 2)
        for k in ("initial_h", "initial_c"):
            if k in feeds:
                feeds[k] = feeds[k].transpose(1, 0, 2)
    vis = [helper.make_tensor_value_info(n, TensorProto.INT32 if a.dtype == np.int32 else F,
                                         list(a.shape)) for n, a in feeds.items()]
    named = [o for o in outputs if o]
    outs = [helper.make_tensor_value_info(o, F, []) for o in named]
    g = helper.make_graph([helper.make_node(op, node_inputs, outputs, **attrs)], "g", vis, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = s.run(None, feeds)
    if layout == 1:
        got = [a.transpose(2, 0, 1, 3) if a.ndim == 4 else a.transpose(1, 0, 2) for a in got]
    note = " on the time-major (layout 0) form" if layout == 1 else ""
    return got, f"onnxruntime {ort.__version__}{note}"


def case(name, op, opset, inputs, outputs, **attrs):
    """inputs: [(name, array or None)]; an array that is a weight becomes a graph input too,
    so every value is fed (the importer's constant path is tested by the node tests)."""
    rng_inputs = [(n, a) for n, a in inputs]
    node_inputs = [n if a is not None else "" for n, a in rng_inputs]
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()
    feeds = {n: a for n, a in rng_inputs if a is not None}
    vis = []
    for n, a in feeds.items():
        et = TensorProto.INT32 if a.dtype == np.int32 else F
        vis.append(helper.make_tensor_value_info(n, et, list(a.shape)))
    named = [o for o in outputs if o]
    got, oracle = run_ort(op, opset, node_inputs, outputs, feeds, attrs)
    outs = [helper.make_tensor_value_info(o, F, list(a.shape)) for o, a in zip(named, got)]
    node = helper.make_node(op, node_inputs, outputs, **attrs)
    g = helper.make_graph([node], name, vis, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    d = os.path.join(ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "inputs"))
    os.makedirs(os.path.join(d, "expected"))
    onnx.save(m, os.path.join(d, "model.onnx"))
    for n, a in feeds.items():
        np.save(os.path.join(d, "inputs", f"{n}.npy"), a)
    for n, a in zip(named, got):
        np.save(os.path.join(d, "expected", f"{n}.npy"), np.asarray(a, dtype=np.float32))
    with open(os.path.join(d, "oracle.txt"), "w") as f:
        f.write(oracle + "\n")
    print(name, oracle)


def main():
    r = np.random.default_rng(7)

    def f(*shape, scale=0.5):
        return (r.standard_normal(shape) * scale).astype(np.float32)

    seq, batch, inp, hid = 5, 3, 4, 3
    lens = np.array([5, 3, 1], dtype=np.int32)

    # LSTM, both directions, sequence_lens, initial state, peepholes, clip.
    d = 2
    case(
        "lstm_bidirectional_lens_peepholes_clip", "LSTM", 14,
        [("X", f(seq, batch, inp)), ("W", f(d, 4 * hid, inp)), ("R", f(d, 4 * hid, hid)),
         ("B", f(d, 8 * hid)), ("sequence_lens", lens), ("initial_h", f(d, batch, hid)),
         ("initial_c", f(d, batch, hid)), ("P", f(d, 3 * hid))],
        ["Y", "Y_h", "Y_c"], hidden_size=hid, direction="bidirectional", clip=0.9,
    )
    # LSTM, reverse, input_forget, custom activations.
    case(
        "lstm_reverse_input_forget_activations", "LSTM", 14,
        [("X", f(seq, batch, inp)), ("W", f(1, 4 * hid, inp)), ("R", f(1, 4 * hid, hid)),
         ("B", f(1, 8 * hid))],
        ["Y", "Y_h", "Y_c"], hidden_size=hid, direction="reverse", input_forget=1,
        activations=["HardSigmoid", "Softsign", "ScaledTanh"],
        activation_alpha=[0.3, 0.8], activation_beta=[0.4, 1.2],
    )
    # LSTM, layout 1 (batch-major) with initial state.
    case(
        "lstm_layout1", "LSTM", 14,
        [("X", f(batch, seq, inp)), ("W", f(1, 4 * hid, inp)), ("R", f(1, 4 * hid, hid)),
         ("B", f(1, 8 * hid)), ("sequence_lens", None), ("initial_h", f(batch, 1, hid)),
         ("initial_c", f(batch, 1, hid))],
        ["Y", "Y_h", "Y_c"], hidden_size=hid, layout=1,
    )
    # GRU, reverse, linear_before_reset, sequence_lens.
    case(
        "gru_reverse_linear_before_reset_lens", "GRU", 14,
        [("X", f(seq, batch, inp)), ("W", f(1, 3 * hid, inp)), ("R", f(1, 3 * hid, hid)),
         ("B", f(1, 6 * hid)), ("sequence_lens", lens), ("initial_h", f(1, batch, hid))],
        ["Y", "Y_h"], hidden_size=hid, direction="reverse", linear_before_reset=1,
    )
    # GRU, both directions, activations per direction, clip.
    case(
        "gru_bidirectional_activations_clip", "GRU", 14,
        [("X", f(seq, batch, inp)), ("W", f(2, 3 * hid, inp)), ("R", f(2, 3 * hid, hid)),
         ("B", f(2, 6 * hid))],
        ["Y", "Y_h"], hidden_size=hid, direction="bidirectional", clip=1.5,
        activations=["Sigmoid", "Tanh", "HardSigmoid", "Softsign"],
    )
    # RNN, both directions, Relu and Affine, sequence_lens.
    case(
        "rnn_bidirectional_relu_affine_lens", "RNN", 14,
        [("X", f(seq, batch, inp)), ("W", f(2, hid, inp)), ("R", f(2, hid, hid)),
         ("B", f(2, 2 * hid)), ("sequence_lens", lens), ("initial_h", f(2, batch, hid))],
        ["Y", "Y_h"], hidden_size=hid, direction="bidirectional",
        activations=["Relu", "Affine"], activation_alpha=[0.7], activation_beta=[0.1],
    )
    # RNN, Y_h only (Y left out), LeakyRelu, opset 7.
    case(
        "rnn_only_last_state_opset7", "RNN", 7,
        [("X", f(seq, batch, inp)), ("W", f(1, hid, inp)), ("R", f(1, hid, hid))],
        ["", "Y_h"], hidden_size=hid, activations=["LeakyRelu"], activation_alpha=[0.2],
    )


if __name__ == "__main__":
    main()
