#!/usr/bin/env python3
"""Build the tiny random-init convolutional models under examples/onnx/ and their ONNX Runtime
references, without torch: the graphs are written with onnx.helper, the weights drawn with
numpy from a fixed seed.

    python3 -m venv venv && venv/bin/pip install onnx onnxruntime numpy
    venv/bin/python scripts/export-conv-models.py examples/onnx

For each model it writes DIR/NAME/model.onnx, the input as DIR/NAME/inputs/<name>.npy, ONNX
Runtime's output as DIR/NAME/expected/<name>.npy and DIR/NAME/reference.json (ONNX Runtime's
version and run time on this machine). tests/models.rs runs them on every target.

- resnet_tiny: ResNet-18's structure at a size small enough to commit: a 7x7 stride-2 stem
  conv, batch norm, ReLU and a 3x3 stride-2 max pool, then four stages of two basic blocks
  (3x3 conv, BN, ReLU, 3x3 conv, BN, residual add, ReLU; a 1x1 stride-2 conv with BN on the
  shortcut where the stage downsamples), global average pool, flatten and a linear head.
  Widths 8, 16, 32, 64; input 1x3x64x64.
- mobilenetv2_tiny: MobileNetV2's structure: a 3x3 stride-2 stem conv with BN and ReLU6
  (Clip 0..6), inverted residual blocks (1x1 expand + BN + ReLU6, 3x3 depthwise + BN + ReLU6,
  1x1 project + BN, the residual add where the shapes allow), a 1x1 conv to the last width,
  global average pool and a linear head. Input 1x3x64x64.

Batch norms are separate BatchNormalization nodes with random statistics, as torchvision's
export leaves them before ONNX Runtime's own folding.
"""

import argparse
import json
import os
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def weight(self, base, shape, scale):
        name = self.name(base)
        data = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(data, name))
        return name

    def conv(self, x, c_in, c_out, k, stride=1, groups=1, bias=False):
        fan_in = (c_in // groups) * k * k
        w = self.weight("conv.w", (c_out, c_in // groups, k, k), (2.0 / fan_in) ** 0.5)
        inputs = [x, w]
        if bias:
            inputs.append(self.weight("conv.b", (c_out,), 0.1))
        y = self.name("conv")
        pad = k // 2
        self.nodes.append(
            helper.make_node(
                "Conv",
                inputs,
                [y],
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[pad, pad, pad, pad],
                group=groups,
            )
        )
        return y

    def bn(self, x, c):
        scale = self.name("bn.scale")
        bias = self.name("bn.bias")
        mean = self.name("bn.mean")
        var = self.name("bn.var")
        r = self.rng
        for name, data in [
            (scale, r.uniform(0.5, 1.5, c)),
            (bias, r.standard_normal(c) * 0.1),
            (mean, r.standard_normal(c) * 0.1),
            (var, r.uniform(0.5, 1.5, c)),
        ]:
            self.inits.append(numpy_helper.from_array(data.astype(np.float32), name))
        y = self.name("bn")
        self.nodes.append(
            helper.make_node(
                "BatchNormalization", [x, scale, bias, mean, var], [y], epsilon=1e-5
            )
        )
        return y

    def op(self, op, inputs, **attrs):
        y = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [y], **attrs))
        return y

    def relu6(self, x):
        lo = self.name("clip.min")
        hi = self.name("clip.max")
        self.inits.append(numpy_helper.from_array(np.array(0.0, np.float32), lo))
        self.inits.append(numpy_helper.from_array(np.array(6.0, np.float32), hi))
        return self.op("Clip", [x, lo, hi])

    def head(self, x, c, classes):
        p = self.op("GlobalAveragePool", [x])
        f = self.op("Flatten", [p], axis=1)
        w = self.weight("fc.w", (classes, c), (1.0 / c) ** 0.5)
        b = self.weight("fc.b", (classes,), 0.1)
        y = "logits"
        self.nodes.append(helper.make_node("Gemm", [f, w, b], [y], transB=1))
        return y

    def model(self, name, size, classes):
        x = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])
        y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])
        graph = helper.make_graph(self.nodes, name, [x], [y], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def resnet_tiny():
    b = Builder(18)
    x = b.conv("image", 3, 8, 7, stride=2)
    x = b.op("Relu", [b.bn(x, 8)])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = 8
    for stage, width in enumerate([8, 16, 32, 64]):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            h = b.op("Relu", [b.bn(b.conv(x, c, width, 3, stride), width)])
            h = b.bn(b.conv(h, width, width, 3), width)
            short = x
            if stride != 1 or c != width:
                short = b.bn(b.conv(x, c, width, 1, stride), width)
            x = b.op("Relu", [b.op("Add", [h, short])])
            c = width
    b.head(x, c, 10)
    return b.model("resnet_tiny", 64, 10)


def mobilenetv2_tiny():
    b = Builder(2)
    x = b.relu6(b.bn(b.conv("image", 3, 8, 3, stride=2), 8))
    c = 8
    # (expansion, width, repeats, stride), MobileNetV2's table cut down.
    for t, width, n, s in [(1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2), (6, 24, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c * t
            h = x
            if t != 1:
                h = b.relu6(b.bn(b.conv(h, c, hidden, 1), hidden))
            h = b.relu6(b.bn(b.conv(h, hidden, hidden, 3, stride, groups=hidden), hidden))
            h = b.bn(b.conv(h, hidden, width, 1), width)
            if stride == 1 and c == width:
                h = b.op("Add", [x, h])
            x = h
            c = width
    x = b.relu6(b.bn(b.conv(x, c, 64, 1), 64))
    b.head(x, 64, 10)
    return b.model("mobilenetv2_tiny", 64, 10)


def main():
    import onnxruntime as ort

    p = argparse.ArgumentParser()
    p.add_argument("out")
    args = p.parse_args()
    for name, build in [("resnet_tiny", resnet_tiny), ("mobilenetv2_tiny", mobilenetv2_tiny)]:
        m = build()
        d = os.path.join(args.out, name)
        os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
        os.makedirs(os.path.join(d, "expected"), exist_ok=True)
        onnx.save(m, os.path.join(d, "model.onnx"))
        image = np.random.default_rng(7).standard_normal((1, 3, 64, 64)).astype(np.float32)
        np.save(os.path.join(d, "inputs", "image.npy"), image)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        (logits,) = sess.run(None, {"image": image})
        np.save(os.path.join(d, "expected", "logits.npy"), logits)
        t0 = time.perf_counter()
        for _ in range(20):
            sess.run(None, {"image": image})
        run_ms = (time.perf_counter() - t0) / 20 * 1e3
        ref = {
            "model": name,
            "exporter": "onnx.helper (scripts/export-conv-models.py)",
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
            "params": int(sum(np.prod(i.dims) for i in m.graph.initializer)),
            "bytes": os.path.getsize(os.path.join(d, "model.onnx")),
            "outputs": [{"output": "logits", "shape": list(logits.shape)}],
            "ort_ms": {"machine": f"{os.cpu_count()} CPUs", "run_1t": run_ms},
        }
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f, indent=2)
            f.write("\n")
        print(name, ref["params"], "params", ref["bytes"], "bytes", f"{run_ms:.3f} ms (ORT, 1 thread)")


if __name__ == "__main__":
    main()
