//! The dtypes beyond `f32 f16 bf16 i32 i64 bool` (`f64`, `i8 i16 u8 u16 u32 u64`) and the
//! integer divisions on the CPU: every elementwise op, casts between every pair of dtypes,
//! reductions and contractions, compiled fused and unfused at 1 and 3 threads, compared
//! with the reference interpreter bit for bit (the extern `f64` GEMM, which sums in its own
//! order, within a relative `1e-12`).

mod support;
use ferrite_cpu::{CpuOptions, CpuProgram};
use ferrite_ir::{DType, Graph, Tensor};
use support::{graph, random_inputs, schedule};

const NEW: [&str; 7] = ["f64", "i8", "i16", "u8", "u16", "u32", "u64"];
const ALL: [&str; 13] = [
    "f32", "f16", "bf16", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool",
];

/// Runs `g` on `inputs` fused and unfused at 1 and 3 threads (with and without the
/// extern GEMM) and compares with the interpreter: exactly, or within `1e-12` relative to
/// the output's largest magnitude for products through the extern GEMM.
fn check_exact(g: &Graph, inputs: &[Tensor]) {
    check_within(g, inputs, 0.0)
}

/// [`check_exact`], with float outputs allowed `rtol` relative error (`f64` composites:
/// their decomposition rounds at other points than the interpreter's formula).
fn check_within(g: &Graph, inputs: &[Tensor], rtol: f64) {
    let want =
        ferrite_ir::interpret(g, inputs).unwrap_or_else(|e| panic!("{}: interpret: {e}", g.name));
    for fuse in [true, false] {
        let p = schedule(g, fuse);
        for (threads, use_gemm) in [(1, true), (3, true), (1, false), (3, false)] {
            let mut opts = CpuOptions::with_threads(threads);
            opts.use_gemm = use_gemm;
            let what = format!(
                "{} (fuse {fuse}, threads {threads}, gemm {use_gemm})",
                g.name
            );
            let c = CpuProgram::compile(&p, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = c.run(inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            for (k, (x, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(x.ty, w.ty, "{what} output {k}");
                let gemm = use_gemm
                    && g.nodes
                        .iter()
                        .any(|n| matches!(n.op, ferrite_ir::Op::MatMul));
                if gemm && w.ty.dtype.is_float() {
                    let m = support::max_abs(w);
                    x.check_close(w, 0.0, 1e-12 * m.max(1.0))
                        .unwrap_or_else(|e| panic!("{what} output {k}: {e}"));
                    continue;
                }
                if rtol > 0.0 && w.ty.dtype.is_float() {
                    x.check_close(w, rtol, 0.0)
                        .unwrap_or_else(|e| panic!("{what} output {k}: {e}"));
                    continue;
                }
                let same = match w.ty.dtype.is_float() {
                    true => x
                        .to_f64()
                        .iter()
                        .zip(w.to_f64())
                        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())),
                    false => x.to_i128() == w.to_i128(),
                };
                assert!(
                    same,
                    "{what} output {k}:\n got {x:?}\nwant {w:?}\n{}",
                    c.report()
                );
            }
        }
    }
}

fn run(src: &str) {
    let g = graph(src);
    check_exact(&g, &random_inputs(&g));
}

fn parses(src: &str) -> bool {
    ferrite_ir::parse("t.fg", src).is_ok()
}

#[test]
fn unary_ops_on_every_new_dtype() {
    let ops = [
        "neg",
        "abs",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "reciprocal",
        "sin",
        "cos",
        "tanh",
        "sigmoid",
        "relu",
        "gelu",
        "silu",
        "erf",
        "erfc",
        "floor",
        "ceil",
        "sign",
        "not",
    ];
    for d in NEW {
        for op in ops {
            let src = format!("graph u(x: {d}[3, 37]) {{\n  y = {op}(x)\n  return y\n}}\n");
            if parses(&src) {
                let g = graph(&src);
                // f64 composites run as their decomposition, a few ulp off the formula;
                // transcendentals of integers are f32 vector math, a few f32 ulp off.
                let composite = matches!(op, "sigmoid" | "gelu" | "silu");
                let transcendental = matches!(
                    op,
                    "exp"
                        | "log"
                        | "sin"
                        | "cos"
                        | "tanh"
                        | "sigmoid"
                        | "gelu"
                        | "silu"
                        | "erf"
                        | "erfc"
                        | "rsqrt"
                );
                let rtol = match d {
                    "f64" if composite => 1e-14,
                    "f64" => 0.0,
                    _ if transcendental => 2e-6,
                    _ => 0.0,
                };
                check_within(&g, &random_inputs(&g), rtol);
            }
        }
    }
}

#[test]
fn binary_ops_on_every_new_dtype_with_broadcasting() {
    let ops = [
        "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
        "ge", "and", "or",
    ];
    for d in NEW {
        for op in ops {
            if op == "pow" && d != "f64" {
                continue; // integer pow: below, with non-negative exponents
            }
            let src = format!(
                "graph b(x: {d}[3, 37], y: {d}[37]) {{\n  z = {op}(x, y)\n  w = {op}(x, 3)\n  return z, w\n}}\n"
            );
            if parses(&src) {
                run(&src);
            }
        }
        if d != "f64" {
            run(&format!(
                "graph p(x: {d}[3, 37], y: {d}[37]) {{\n  e = minimum(abs(y), 5)\n  z = pow(x, e)\n  return z\n}}\n"
            ));
        }
    }
    // Mixed dtypes promote.
    for (a, b) in [
        ("u8", "i8"),
        ("u32", "i64"),
        ("u64", "f64"),
        ("i16", "f32"),
        ("u16", "f16"),
    ] {
        run(&format!(
            "graph m(x: {a}[3, 37], y: {b}[37]) {{\n  z = add(x, y)\n  c = lt(x, y)\n  m = maximum(x, y)\n  return z, c, m\n}}\n"
        ));
    }
}

#[test]
fn unsigned_values_above_the_signed_range_compare_and_convert_as_unsigned() {
    // u8 200 and u64 2^63 + 5 would be negative as signed values.
    for (d, big) in [
        ("u8", 200u64),
        ("u16", 60000),
        ("u32", 4_000_000_000),
        ("u64", (1 << 63) + 5),
    ] {
        let g = graph(&format!(
            "graph u(x: {d}[4], y: {d}[4]) {{\n  lt_ = lt(x, y)\n  mx = maximum(x, y)\n  mn = minimum(x, y)\n  \
             f = cast(x, to=f32)\n  h = cast(x, to=f64)\n  b = cast(x, to=bf16)\n  s = sum(x)\n  m = max(x)\n  \
             a = argmax(x)\n  r = relu(x)\n  ab = abs(x)\n  sg = sign(x)\n  return lt_, mx, mn, f, h, b, s, m, a, r, ab, sg\n}}\n"
        ));
        let ty = ferrite_ir::TensorType::new(g.param_types()[0].dtype, vec![4]).unwrap();
        let x = Tensor::from_i128(&ty, &[big as i128, 1, 0, 7]);
        let y = Tensor::from_i128(&ty, &[1, big as i128, 3, 7]);
        check_exact(&g, &[x, y]);
    }
}

#[test]
fn casts_between_every_pair_of_dtypes() {
    for from in ALL {
        let body: String = ALL
            .iter()
            .map(|to| format!("  y_{to} = cast(x, to={to})\n"))
            .collect();
        let names: Vec<String> = ALL.iter().map(|to| format!("y_{to}")).collect();
        // Scaled so floats reach past every integer range and below 1.
        let src = format!(
            "graph c(x: {from}[3, 37]) {{\n{body}  return {}\n}}\n",
            names.join(", ")
        );
        run(&src);
    }
    // Floats beyond the ranges saturate, NaN is 0, wide integers round once.
    let g = graph(
        "graph s(x: f64[8], i: i64[4], u: u64[4]) {\n  a = cast(x, to=i8)\n  b = cast(x, to=u16)\n  \
         c = cast(x, to=u64)\n  d = cast(x, to=i64)\n  e = cast(i, to=bf16)\n  f = cast(u, to=bf16)\n  \
         g = cast(u, to=f32)\n  h = cast(i, to=f16)\n  k = cast(x, to=f16)\n  return a, b, c, d, e, f, g, h, k\n}\n",
    );
    let t = |d: DType, n: usize| ferrite_ir::TensorType::new(d, vec![n]).unwrap();
    let x = Tensor::from_f64(
        &t(DType::F64, 8),
        &[
            f64::NAN,
            1e30,
            -1e30,
            -1.5,
            255.9,
            65504.5,
            2f64.powi(64),
            1e-300,
        ],
    );
    // 2^60 + 2^52 + 1 is just above a tie of bf16: one rounding gives 2^60 + 2^53.
    let i = Tensor::from_i128(
        &t(DType::I64, 4),
        &[
            (1 << 60) + (1 << 52) + 1,
            -(1 << 60) - (1 << 52) - 1,
            i64::MAX as i128,
            65519,
        ],
    );
    let u = Tensor::from_i128(
        &t(DType::U64, 4),
        &[
            u64::MAX as i128,
            (1 << 63) + (1 << 39) + 1,
            (1 << 60) + (1 << 52) + 1,
            3,
        ],
    );
    check_exact(&g, &[x, i, u]);
}

#[test]
fn reductions_of_every_new_dtype() {
    for d in NEW {
        for op in ["sum", "prod", "max", "min"] {
            for axes in ["", ", axes=[0]", ", axes=[1]"] {
                run(&format!(
                    "graph r(x: {d}[5, 37]) {{\n  y = {op}(x{axes})\n  return y\n}}\n"
                ));
            }
        }
        for op in ["argmax", "argmin"] {
            run(&format!(
                "graph a(x: {d}[5, 37]) {{\n  y = {op}(x, axis=1)\n  z = {op}(x)\n  return y, z\n}}\n"
            ));
        }
    }
    run("graph m(x: f64[5, 37]) {\n  y = mean(x, axes=[1])\n  s = softmax(x)\n  l = log_softmax(x, axis=0)\n  return y, s, l\n}\n");
}

#[test]
fn matmuls_of_every_new_dtype() {
    for d in NEW {
        run(&format!(
            "graph mm(a: {d}[2, 9, 33], b: {d}[33, 17]) {{\n  y = matmul(a, b)\n  return y\n}}\n"
        ));
    }
    // Large enough for the extern GEMM's blocks.
    run("graph big(a: f64[64, 96], b: f64[96, 80]) {\n  y = matmul(a, b)\n  z = relu(y)\n  return z\n}\n");
}

#[test]
fn integer_divisions_round_as_the_interpreter_on_every_dtype() {
    for d in ALL {
        if d == "bool" {
            continue;
        }
        for op in ["floor_divide", "trunc_divide", "remainder", "fmod"] {
            // Zero divisors are errors; moved to 3 (negative divisors stay).
            let src = format!(
                "graph d(x: {d}[3, 37], y: {d}[37]) {{\n  v = where(eq(y, 0), 3, y)\n  z = {op}(x, v)\n  \
                 w = {op}(x, 3)\n  k = {op}(7, v)\n  return z, w, k\n}}\n"
            );
            run(&src);
        }
    }
    // The extremes: MIN / -1 wraps, mixed signs round each way.
    for d in ["i8", "i16", "i32", "i64"] {
        let g = graph(&format!(
            "graph e(x: {d}[6], y: {d}[6]) {{\n  a = floor_divide(x, y)\n  b = trunc_divide(x, y)\n  \
             c = remainder(x, y)\n  f = fmod(x, y)\n  return a, b, c, f\n}}\n"
        ));
        let ty = g.param_types()[0].clone();
        let (lo, hi) = ty.dtype.int_range().unwrap();
        let x = Tensor::from_i128(&ty, &[lo, lo, hi, -7, 7, -7]);
        let y = Tensor::from_i128(&ty, &[-1, 1, -1, 2, -2, -2]);
        check_exact(&g, &[x, y]);
    }
}

#[test]
fn integer_division_by_zero_is_a_run_time_error_naming_the_op() {
    for d in ["i8", "u16", "i32", "i64", "u64"] {
        for op in ["floor_divide", "trunc_divide", "remainder", "fmod"] {
            let g = graph(&format!(
                "graph z(x: {d}[5], y: {d}[5]) {{\n  q = {op}(x, y)\n  return q\n}}\n"
            ));
            let ty = g.param_types()[0].clone();
            let x = Tensor::from_i128(&ty, &[1, 2, 3, 4, 5]);
            let y = Tensor::from_i128(&ty, &[1, 1, 0, 1, 1]);
            for fuse in [true, false] {
                let c =
                    CpuProgram::compile(&schedule(&g, fuse), &CpuOptions::with_threads(1)).unwrap();
                let e = c.run(&[x.clone(), y.clone()]).expect_err(op);
                assert!(!e.is_internal(), "{e}");
                let m = e.to_string();
                assert!(m.contains("division by zero") && m.contains(op), "{m}");
            }
        }
    }
}

#[test]
fn f64_products_take_the_extern_gemm_and_integer_ones_loops() {
    for (d, gemm) in [("f64", true), ("i32", false), ("u8", false)] {
        let g = graph(&format!(
            "graph mm(a: {d}[64, 96], b: {d}[96, 80]) {{\n  y = matmul(a, b)\n  return y\n}}\n"
        ));
        let c = CpuProgram::compile(&schedule(&g, true), &CpuOptions::with_threads(1)).unwrap();
        assert_eq!(
            c.report().contains("extern gemm"),
            gemm,
            "{d}:\n{}",
            c.report()
        );
    }
}
