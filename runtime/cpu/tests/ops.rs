//! Every op kind, small graphs, every dtype that the op accepts: compiled through the
//! real pipeline (fused and unfused) and compared with the reference interpreter.
//!
//! Shapes are chosen so inner loops have a vector body, a one-vector step and a scalar
//! tail (37 = 2*16 + 4 + 1), and so outer domains split unevenly across two threads.

mod support;
use support::*;

fn run(src: &str) {
    let g = graph(src);
    check_graph(&g, &random_inputs(&g));
}

fn unary_graph(op: &str, dtype: &str) -> String {
    format!("graph u(x: {dtype}[3, 37]) -> {dtype}[3, 37] {{\n  y = {op}\n  return y\n}}\n")
}

#[test]
fn float_unary_ops() {
    let ops = [
        "neg(x)",
        "abs(x)",
        "exp(x)",
        "log(x)",
        "sqrt(x)",
        "rsqrt(x)",
        "reciprocal(x)",
        "sin(x)",
        "cos(x)",
        "tanh(x)",
        "sigmoid(x)",
        "relu(x)",
        "gelu(x)",
        "gelu(x, approximate=\"tanh\")",
        "silu(x)",
        "erf(x)",
        "floor(mul(x, 4.0))",
        "ceil(mul(x, 4.0))",
        "sign(x)",
    ];
    for dtype in ["f32", "f16", "bf16"] {
        for op in ops {
            run(&unary_graph(op, dtype));
        }
    }
    // Beyond the vector math's accurate trig range: the cold exact path.
    run(&unary_graph("sin(mul(x, 1e6))", "f32"));
    run(&unary_graph("cos(mul(x, 3e5))", "f32"));
}

#[test]
fn not_and_integer_unary_ops() {
    for dtype in ["f32", "i32", "i64", "bool"] {
        run(&format!(
            "graph u(x: {dtype}[3, 37]) -> bool[3, 37] {{\n  y = not(x)\n  return y\n}}\n"
        ));
    }
    for dtype in ["i32", "i64"] {
        for op in [
            "neg(x)",
            "abs(x)",
            "relu(sub(x, 5))",
            "sign(sub(x, 5))",
            "floor(x)",
            "ceil(x)",
        ] {
            run(&unary_graph(op, dtype));
        }
    }
}

#[test]
fn binary_ops_with_broadcasting() {
    let arith = ["add", "sub", "mul", "maximum", "minimum"];
    let compare = ["eq", "ne", "lt", "le", "gt", "ge"];
    for dtype in ["f32", "f16", "bf16", "i32", "i64"] {
        let float = dtype.starts_with('f') || dtype == "bf16";
        let mut ops: Vec<&str> = arith.to_vec();
        if float {
            ops.extend(["div", "pow"]);
        } else {
            ops.push("pow");
        }
        for op in ops {
            // pow of negative floats to non-integer powers is NaN on both sides.
            run(&format!(
                "graph b(x: {dtype}[3, 37], y: {dtype}[37]) -> {dtype}[3, 37] {{\n  z = {op}(x, y)\n  return z\n}}\n"
            ));
        }
        for op in compare.iter().chain(["and", "or"].iter()) {
            run(&format!(
                "graph b(x: {dtype}[3, 37], y: {dtype}[3, 1]) -> bool[3, 37] {{\n  z = {op}(x, y)\n  return z\n}}\n"
            ));
        }
    }
    for op in [
        "and", "or", "eq", "ne", "maximum", "minimum", "mul", "lt", "ge",
    ] {
        run(&format!(
            "graph b(x: bool[3, 37], y: bool[37]) -> bool[3, 37] {{\n  z = {op}(x, y)\n  return z\n}}\n"
        ));
    }
    // Literals, and a scalar operand.
    run("graph b(x: f32[5, 37], s: f32[]) -> f32[5, 37] {\n  z = add(mul(x, 0.5), s)\n  return z\n}\n");
    run("graph b(x: i32[5, 37]) -> i32[5, 37] {\n  z = mul(add(x, 3), -2)\n  return z\n}\n");
}

#[test]
fn where_and_casts_between_all_dtypes() {
    let dtypes = ["f32", "f16", "bf16", "i32", "i64", "bool"];
    for from in dtypes {
        for to in dtypes {
            // Scale floats so casts to integers see values beyond [-1, 1).
            let x = if from.starts_with('f') || from == "bf16" {
                "mul(x, 37.5)".to_string()
            } else {
                "x".to_string()
            };
            run(&format!(
                "graph c(x: {from}[3, 37]) -> {to}[3, 37] {{\n  y = cast({x}, to={to})\n  return y\n}}\n"
            ));
        }
    }
    for dtype in dtypes {
        run(&format!(
            "graph w(c: bool[3, 37], a: {dtype}[3, 37], b: {dtype}[37]) -> {dtype}[3, 37] {{\n  y = where(c, a, b)\n  return y\n}}\n"
        ));
    }
    run("graph w(x: f32[4, 37]) -> f32[4, 37] {\n  y = where(gt(x, 0.0), x, mul(x, 0.01))\n  return y\n}\n");
}

#[test]
fn reductions() {
    for dtype in ["f32", "f16", "i32", "i64"] {
        for op in ["sum", "max", "min", "prod"] {
            // As in PyTorch, integer sums and products are i64.
            let odt = if dtype.starts_with('i') && matches!(op, "sum" | "prod") {
                "i64"
            } else {
                dtype
            };
            for (axes, out) in [("[1]", "[4]"), ("[0]", "[37]"), ("[0, 1]", "[]")] {
                run(&format!(
                    "graph r(x: {dtype}[4, 37]) -> {odt}{out} {{\n  y = {op}(x, axes={axes})\n  return y\n}}\n"
                ));
            }
            run(&format!(
                "graph r(x: {dtype}[3, 5, 37]) -> {odt}[3, 1, 37] {{\n  y = {op}(x, axes=[1], keepdim=true)\n  return y\n}}\n"
            ));
        }
        for op in ["argmax", "argmin"] {
            for (axis, out) in [("1", "[4]"), ("0", "[37]")] {
                run(&format!(
                    "graph r(x: {dtype}[4, 37]) -> i64{out} {{\n  y = {op}(x, axis={axis})\n  return y\n}}\n"
                ));
            }
        }
    }
    for op in ["max", "min"] {
        run(&format!(
            "graph r(x: bool[4, 37]) -> bool[4] {{\n  y = {op}(x, axes=[1])\n  return y\n}}\n"
        ));
    }
    run("graph r(x: f32[6, 37]) -> f32[6] {\n  y = mean(x, axes=[1])\n  return y\n}\n");
    run("graph r(x: f32[6, 37]) -> i64[] {\n  y = argmax(x)\n  return y\n}\n");
    // A reduction over a strided (column) axis and over two axes at once.
    run("graph r(x: f32[37, 20]) -> f32[20] {\n  y = sum(x, axes=[0])\n  return y\n}\n");
    run("graph r(x: f32[3, 9, 37]) -> f32[9] {\n  y = max(x, axes=[0, 2])\n  return y\n}\n");
}

#[test]
fn normalizations() {
    for dtype in ["f32", "f16"] {
        run(&format!(
            "graph n(x: {dtype}[5, 37]) -> {dtype}[5, 37] {{\n  y = softmax(x, axis=-1)\n  return y\n}}\n"
        ));
        run(&format!(
            "graph n(x: {dtype}[5, 37]) -> {dtype}[5, 37] {{\n  y = log_softmax(x, axis=0)\n  return y\n}}\n"
        ));
    }
    run("graph n(x: f32[5, 37], w: f32[37], b: f32[37]) -> f32[5, 37] {\n  y = layer_norm(x, w, b, eps=1e-5)\n  return y\n}\n");
    run("graph n(x: f32[5, 37], w: f32[37]) -> f32[5, 37] {\n  y = rms_norm(x, w, eps=1e-6)\n  return y\n}\n");
}

#[test]
fn matmuls() {
    let cases = [
        ("f32[5, 7]", "f32[7, 3]", "f32[5, 3]"),
        ("f32[2, 5, 7]", "f32[7, 3]", "f32[2, 5, 3]"),
        ("f32[2, 1, 5, 7]", "f32[3, 7, 4]", "f32[2, 3, 5, 4]"),
        ("f32[7]", "f32[7, 3]", "f32[3]"),
        ("f32[5, 7]", "f32[7]", "f32[5]"),
        ("f32[7]", "f32[7]", "f32[]"),
        ("f16[6, 9]", "f16[9, 5]", "f16[6, 5]"),
        ("bf16[6, 9]", "bf16[9, 5]", "bf16[6, 5]"),
        ("i32[6, 9]", "i32[9, 5]", "i32[6, 5]"),
        ("f32[1, 33]", "f32[33, 40]", "f32[1, 40]"),
    ];
    for (a, b, out) in cases {
        run(&format!(
            "graph m(a: {a}, b: {b}) -> {out} {{\n  y = matmul(a, b)\n  return y\n}}\n"
        ));
    }
    // Transposed operands (strides, no copy) and fused epilogues.
    run("graph m(a: f32[7, 5], b: f32[3, 7]) -> f32[5, 3] {\n  y = matmul(transpose(a, dim0=0, dim1=1), transpose(b, dim0=0, dim1=1))\n  return y\n}\n");
    run("graph m(a: f32[8, 16], w: f32[16, 12], bias: f32[12], r: f32[8, 12]) -> f32[8, 12] {\n  y = add(relu(add(matmul(a, w), bias)), r)\n  return y\n}\n");
    run("graph m(a: f32[2, 8, 16], w: f32[2, 16, 12]) -> f32[2, 12, 8] {\n  y = transpose(mul(matmul(a, w), 2.0), dim0=1, dim1=2)\n  return y\n}\n");
}

#[test]
fn movement_ops() {
    let cases = [
        "graph v(x: f32[4, 6, 5]) -> f32[6, 20] {\n  y = reshape(permute(x, dims=[1, 0, 2]), shape=[6, -1])\n  return y\n}\n",
        "graph v(x: f32[4, 37]) -> f32[37, 4] {\n  y = transpose(x, dim0=0, dim1=1)\n  return y\n}\n",
        "graph v(x: f32[37]) -> f32[3, 37] {\n  y = expand(x, shape=[3, 37])\n  return y\n}\n",
        "graph v(x: f32[1, 37, 1]) -> f32[37] {\n  y = squeeze(x, axes=[0, 2])\n  return y\n}\n",
        "graph v(x: f32[37]) -> f32[37, 1] {\n  y = unsqueeze(x, axis=1)\n  return y\n}\n",
        "graph v(x: f32[4, 40]) -> f32[4, 15] {\n  y = slice(x, axis=1, start=3, end=33, step=2)\n  return y\n}\n",
        "graph v(x: f32[4, 37]) -> f32[2, 37] {\n  y = slice(x, axis=0, start=-3, end=-1)\n  return y\n}\n",
        "graph v(a: f32[3, 37], b: f32[2, 37]) -> f32[5, 37] {\n  y = concat(a, b, axis=0)\n  return y\n}\n",
        "graph v(a: f32[3, 20], b: f32[3, 17], c: f32[3, 3]) -> f32[3, 40] {\n  y = concat(a, b, c, axis=1)\n  return y\n}\n",
        "graph v(x: f32[3, 37]) -> f32[6, 42] {\n  y = pad(x, pads=[1, 2, 3, 2], value=-1.5)\n  return y\n}\n",
        "graph v(x: i64[3, 37]) -> i64[3, 40] {\n  y = pad(x, pads=[0, 0, 2, 1])\n  return y\n}\n",
        "graph v(x: f16[3, 37]) -> f16[37, 3] {\n  y = permute(x, dims=[1, 0])\n  return y\n}\n",
        "graph v(x: bool[3, 37], y: bool[2, 37]) -> bool[5, 37] {\n  z = concat(x, y, axis=0)\n  return z\n}\n",
        "graph v(x: f32[2, 3, 37]) -> f32[2, 3, 37] {\n  y = add(reshape(reshape(x, shape=[6, 37]), shape=[2, 3, 37]), exp(x))\n  return y\n}\n",
    ];
    for src in cases {
        run(src);
    }
}

#[test]
fn indexing_and_creation_ops() {
    let cases = [
        "graph i(x: f32[12, 37], ids: i64[9]) -> f32[9, 37] {\n  y = index_select(x, ids, axis=0)\n  return y\n}\n",
        "graph i(x: f32[5, 12], ids: i32[7]) -> f32[5, 7] {\n  y = index_select(x, ids, axis=1)\n  return y\n}\n",
        "graph i(x: f32[12, 37], ids: i64[12, 37]) -> f32[12, 37] {\n  y = gather(x, ids, axis=0)\n  return y\n}\n",
        "graph i(x: i64[4, 12], ids: i64[4, 5]) -> i64[4, 5] {\n  y = gather(x, ids, axis=1)\n  return y\n}\n",
        "graph i(x: f32[12, 37], ids: i64[9]) -> f32[9, 39] {\n  y = pad(index_select(x, ids, axis=0), pads=[0, 0, 1, 1])\n  return y\n}\n",
        "graph c() -> f32[3, 37] {\n  y = full(shape=[3, 37], value=2.5)\n  return y\n}\n",
        "graph c() -> i64[37] {\n  y = arange(start=-5, end=69, step=2)\n  return y\n}\n",
        "graph c() -> f32[37] {\n  y = arange(start=0, end=37, dtype=f32)\n  return y\n}\n",
        "graph c(x: f32[37]) -> f32[37] {\n  y = mul(x, cast(arange(start=0, end=37), to=f32))\n  return y\n}\n",
        "graph c(x: f32[37, 37]) -> f32[37, 37] {\n  p = arange(start=0, end=37)\n  y = where(le(reshape(p, shape=[1, 37]), reshape(p, shape=[37, 1])), x, -1e9)\n  return y\n}\n",
    ];
    for src in cases {
        run(src);
    }
}

#[test]
fn outputs_that_are_inputs_views_or_repeated() {
    run("graph o(x: f32[3, 37]) -> f32[3, 37], f32[37, 3], f32[3, 37] {\n  t = transpose(x, dim0=0, dim1=1)\n  return x, t, x\n}\n");
    run("graph o(x: f32[3, 37]) -> f32[3, 37], f32[3] {\n  e = exp(x)\n  s = sum(e, axes=[1])\n  return e, s\n}\n");
}

#[test]
fn empty_tensors() {
    run("graph e(x: f32[0, 37]) -> f32[0, 37] {\n  y = exp(x)\n  return y\n}\n");
    run("graph e(x: f32[3, 0]) -> f32[3] {\n  y = sum(x, axes=[1])\n  return y\n}\n");
    run("graph e(a: f32[3, 0], b: f32[0, 4]) -> f32[3, 4] {\n  y = matmul(a, b)\n  return y\n}\n");
}
