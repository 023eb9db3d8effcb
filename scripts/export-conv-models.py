#!/usr/bin/env python3
"""Build the tiny random-init convolutional models under examples/onnx/ and their ONNX Runtime
references, without torch: the graphs are written with onnx.helper, the weights drawn with
numpy from a fixed seed.

    python3 -m venv venv && venv/bin/pip install onnx onnxruntime numpy
    venv/bin/python scripts/export-conv-models.py examples/onnx
    venv/bin/python scripts/export-conv-models.py --full examples/onnx

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

The full-size models, torchvision's layer tables at 224x224 (1000 classes):

- resnet18: ResNet-18 (widths 64, 128, 256, 512; 11.7M parameters);
- mobilenetv2: MobileNetV2 1.0 (the inverted-residual table of the paper, last width 1280;
  3.5M parameters).

Their 47 MB and 14 MB of weights are not committed: DIR/NAME/model.onnx keeps them as ONNX
external data in DIR/NAME/weights.bin (git-ignored), every float drawn by `draw` below, a
splitmix64 of its index in the file, so that a test rebuilds the file bit for bit from the
committed DIR/NAME/weights.txt (one line `start count a b` per tensor: elements `start ..
start + count` are `f32(a + b * u)`, `u` uniform in [-1, 1)). The input image is the same
draw of the indices from `IMAGE_START`, a = 0, b = 1. Each is also written at a smaller
resolution (DIR/NAME/model_SIZE.onnx, expected/logits_SIZE.npy): the same weights, only the
input's shape differs, for the targets too slow for 224x224 in a debug build.
"""

import argparse
import json
import os
import time

import numpy as np
import onnx
from onnx import TensorProto, external_data_helper, helper, numpy_helper

OPSET = 17

# The first index of the input image's draws (past any model's weights).
IMAGE_START = 1 << 40


def draw(start, count, a, b):
    """f32(a + b * u) for the indices start .. start + count, u uniform in [-1, 1) from the
    top 24 bits of splitmix64(index): exact in f64, so one rounding to f32."""
    with np.errstate(over="ignore"):
        z = (np.arange(count, dtype=np.uint64) + np.uint64(start) + np.uint64(1)) * np.uint64(
            0x9E3779B97F4A7C15
        )
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float64) * 2.0**-23 - 1.0
    return (a + b * u).astype(np.float32)


class Builder:
    def __init__(self, seed, external=False):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = 0
        # External mode: weights are `draw`s, laid end to end in weights.bin.
        self.external = external
        self.regions = []
        self.next = 0

    def tensor(self, name, shape, a, b, sample):
        """An initializer: `sample()` from the numpy generator, or in external mode `a + b *
        u` drawn at the next free indices."""
        if not self.external:
            data = sample().astype(np.float32)
        else:
            count = int(np.prod(shape))
            data = draw(self.next, count, a, b).reshape(shape)
            self.regions.append((name, self.next, count, a, b))
            self.next += count
        self.inits.append(numpy_helper.from_array(data, name))

    def name(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def weight(self, base, shape, scale):
        """Normal with deviation `scale`, or in external mode uniform with the same one."""
        name = self.name(base)
        self.tensor(name, shape, 0.0, scale * 3.0**0.5, lambda: self.rng.standard_normal(shape) * scale)
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
        for name, a, b, sample in [
            (scale, 1.0, 0.5, lambda: r.uniform(0.5, 1.5, c)),
            (bias, 0.0, 0.1, lambda: r.standard_normal(c) * 0.1),
            (mean, 0.0, 0.1, lambda: r.standard_normal(c) * 0.1),
            (var, 1.0, 0.5, lambda: r.uniform(0.5, 1.5, c)),
        ]:
            self.tensor(name, (c,), a, b, sample)
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
        inits = self.inits
        if self.external:
            # The drawn tensors as references into weights.bin (4 bytes per index).
            where = {r[0]: r for r in self.regions}
            inits = []
            for t in self.inits:
                if t.name in where:
                    _, start, count, _, _ = where[t.name]
                    e = onnx.TensorProto()
                    e.CopyFrom(t)
                    external_data_helper.set_external_data(
                        e, "weights.bin", offset=4 * start, length=4 * count
                    )
                    e.ClearField("raw_data")
                    e.data_location = onnx.TensorProto.EXTERNAL
                    t = e
                inits.append(t)
        graph = helper.make_graph(self.nodes, name, [x], [y], inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        if not self.external:
            onnx.checker.check_model(m)
        return m

    def write_weights(self, d):
        """weights.bin (the drawn floats end to end) and weights.txt (how to redraw them)."""
        with open(os.path.join(d, "weights.bin"), "wb") as f:
            for _, start, count, a, b in self.regions:
                f.write(draw(start, count, a, b).tobytes())
        with open(os.path.join(d, "weights.txt"), "w") as f:
            f.write("# start count a b: elements start..start+count of weights.bin are f32(a + b * u)\n")
            for _, start, count, a, b in self.regions:
                f.write(f"{start} {count} {a!r} {b!r}\n")


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


def resnet18():
    """torchvision's resnet18: BasicBlocks [2, 2, 2, 2], widths 64..512."""
    b = Builder(0, external=True)
    x = b.conv("image", 3, 64, 7, stride=2)
    x = b.op("Relu", [b.bn(x, 64)])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = 64
    for stage, width in enumerate([64, 128, 256, 512]):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            h = b.op("Relu", [b.bn(b.conv(x, c, width, 3, stride), width)])
            h = b.bn(b.conv(h, width, width, 3), width)
            short = x
            if stride != 1 or c != width:
                short = b.bn(b.conv(x, c, width, 1, stride), width)
            x = b.op("Relu", [b.op("Add", [h, short])])
            c = width
    b.head(x, c, 1000)
    return b


def mobilenetv2():
    """torchvision's mobilenet_v2 (width 1.0): the paper's inverted-residual table."""
    b = Builder(0, external=True)
    x = b.relu6(b.bn(b.conv("image", 3, 32, 3, stride=2), 32))
    c = 32
    table = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1)]
    table += [(6, 160, 3, 2), (6, 320, 1, 1)]
    for t, width, n, s in table:
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
    x = b.relu6(b.bn(b.conv(x, c, 1280, 1), 1280))
    b.head(x, 1280, 1000)
    return b


def ort_session(path_or_bytes):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(path_or_bytes, opts, providers=["CPUExecutionProvider"])


def time_ms(sess, feeds, runs):
    sess.run(None, feeds)
    t0 = time.perf_counter()
    for _ in range(runs):
        sess.run(None, feeds)
    return (time.perf_counter() - t0) / runs * 1e3


def export_full(out, name, build, sizes):
    """NAME at 224x224 (model.onnx) and at each of `sizes` (model_SIZE.onnx), with one
    weights.bin, and ONNX Runtime's logits for the drawn image at each size."""
    import onnxruntime as ort

    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "expected"), exist_ok=True)
    b = build()
    b.write_weights(d)
    ref = {
        "model": name,
        "exporter": "onnx.helper (scripts/export-conv-models.py), weights drawn by splitmix64",
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "params": int(sum(r[2] for r in b.regions)),
        "sizes": {},
    }
    for size in [224] + sizes:
        m = b.model(name, size, 1000)
        file = "model.onnx" if size == 224 else f"model_{size}.onnx"
        onnx.save(m, os.path.join(d, file))
        onnx.checker.check_model(os.path.join(d, file))
        image = draw(IMAGE_START, 3 * size * size, 0.0, 1.0).reshape(1, 3, size, size)
        sess = ort_session(os.path.join(d, file))
        (logits,) = sess.run(None, {"image": image})
        suffix = "" if size == 224 else f"_{size}"
        np.save(os.path.join(d, "expected", f"logits{suffix}.npy"), logits)
        run_ms = time_ms(sess, {"image": image}, 10 if size == 224 else 20)
        ref["sizes"][str(size)] = {
            "model": file,
            "ort_ms": {"machine": f"{os.cpu_count()} CPUs", "run_1t": run_ms},
        }
        print(name, size, ref["params"], "params", f"{run_ms:.3f} ms (ORT, 1 thread)")
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=2)
        f.write("\n")


def main():
    import onnxruntime as ort

    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--full", action="store_true", help="resnet18 and mobilenetv2 instead")
    args = p.parse_args()
    if args.full:
        export_full(args.out, "resnet18", resnet18, [64])
        export_full(args.out, "mobilenetv2", mobilenetv2, [64])
        return
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
