//! Generated kernels call the wide (AVX2, AVX-512) routines on blocks of fused loops
//! (`plan/wide.rs`): the results are the bits of the `f32x4` code at every width this
//! CPU has, with one thread and with several (ranges split across the pool), on rows
//! with and without tails, and agree with the interpreter.

mod support;
use support::*;

use ferrite_cpu::plan::Run;
use ferrite_cpu::{plan_program, CodegenOptions, CpuOptions, CpuProgram, Isa};
use ferrite_ir::loops::Program;
use ferrite_ir::Tensor;

/// The wide widths this CPU supports.
fn widths() -> Vec<Isa> {
    [Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|isa| isa.supported())
        .collect()
}

/// Routine calls in the plan of `p` at width `isa`.
fn wide_calls(p: &Program, isa: Option<Isa>) -> usize {
    let codegen = CodegenOptions {
        wide: isa,
        ..CodegenOptions::default()
    };
    let plan = plan_program(p, &codegen, true).unwrap_or_else(|e| panic!("plan: {e}"));
    plan.kernels
        .iter()
        .map(|k| match &k.run {
            Run::Generated(s) => s.wide.iter().flatten().count(),
            _ => 0,
        })
        .sum()
}

fn run(p: &Program, inputs: &[Tensor], wide: Option<Isa>, threads: usize) -> Vec<Tensor> {
    let mut opts = CpuOptions::with_threads(threads);
    opts.codegen.wide = wide;
    let c = CpuProgram::compile(p, &opts).unwrap_or_else(|e| panic!("compile: {e}"));
    c.run(inputs).unwrap_or_else(|e| panic!("run: {e}"))
}

/// The bits of each value, every NaN as one (payloads are not specified: LLVM may swap
/// the operands of an add, which picks the other NaN).
fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64()
        .into_iter()
        .map(|v| {
            if v.is_nan() {
                f64::NAN.to_bits()
            } else {
                v.to_bits()
            }
        })
        .collect()
}

/// `src` compiled with wide calls at every width gives the bits of the `f32x4` code, at
/// one and two threads, close to the interpreter; the plan makes at least `min_calls`
/// routine calls.
fn check(src: &str, min_calls: usize) {
    let g = graph(src);
    let inputs = random_inputs(&g);
    check_with(src, &inputs, min_calls, true);
}

/// [`check`] on `inputs`; `close` also compares the `f32x4` code with the interpreter
/// (rows of NaNs and infinities are compared only between widths).
fn check_with(src: &str, inputs: &[Tensor], min_calls: usize, close: bool) {
    let g = graph(src);
    let p = schedule(&g, true);
    let narrow = run(&p, inputs, None, 1);
    if close {
        let want = ferrite_ir::interpret(&g, inputs).unwrap_or_else(|e| panic!("interpret: {e}"));
        for (x, w) in narrow.iter().zip(&want) {
            let (rtol, atol) = tolerance(w.ty.dtype);
            x.check_close(w, rtol, atol)
                .unwrap_or_else(|e| panic!("{}: f32x4 code vs interpreter: {e}", g.name));
        }
    }
    assert_eq!(wide_calls(&p, None), 0);
    assert_eq!(wide_calls(&p, Some(Isa::Sse)), 0);
    for isa in widths() {
        let calls = wide_calls(&p, Some(isa));
        assert!(
            calls >= min_calls,
            "{}: {calls} routine calls at {isa:?}, expected at least {min_calls}",
            g.name
        );
        for threads in [1, 2, 3] {
            let got = run(&p, inputs, Some(isa), threads);
            for (k, (x, n)) in got.iter().zip(&narrow).enumerate() {
                let first = bits(x).iter().zip(bits(n)).position(|(a, b)| *a != b);
                assert!(
                    first.is_none(),
                    "{} {:?} ({isa:?}, {threads} threads): output {k} differs from the f32x4 code at {first:?}: {} vs {}",
                    g.name,
                    inputs[0].ty.shape,
                    x.to_f64()[first.unwrap_or(0)],
                    n.to_f64()[first.unwrap_or(0)]
                );
            }
        }
    }
}

#[test]
fn sigmoid_chains_with_and_without_tails() {
    for (n, calls) in [
        (64, 3),
        (100, 3),
        (1000, 3),
        (1024, 3),
        (3000, 3),
        (4096, 3),
        (5000, 3),
        (12289, 0),
    ] {
        let src = format!(
            "graph chain(x: f32[{n}]) -> f32[{n}] {{
               s = sigmoid(x)
               t = mul(x, s)
               u = sigmoid(mul(t, 1.5))
               y = add(u, tanh(x))
               return y
             }}"
        );
        // 12289 is prime: no block divides it, so it keeps the f32x4 code.
        check(&src, calls);
    }
}

#[test]
fn nested_transcendentals_in_rows() {
    check(
        "graph nest(x: f32[33, 1000]) -> f32[33, 1000] {
           y = sigmoid(sigmoid(sigmoid(x)))
           return y
         }",
        3,
    );
    check(
        "graph logs(x: f32[8, 2048]) -> f32[8, 2048] {
           y = log(add(exp(x), 1.0))
           return y
         }",
        2,
    );
}

#[test]
fn short_rows_keep_the_narrow_code() {
    check(
        "graph short(x: f32[512, 16]) -> f32[512, 16] {
           y = sigmoid(x)
           return y
         }",
        0,
    );
}

#[test]
fn softmax_family() {
    for (r, c) in [
        (7, 1001),
        (64, 1024),
        (5, 4096),
        (3, 4097),
        (16, 64),
        (9, 63),
    ] {
        let src = format!(
            "graph sm(x: f32[{r}, {c}]) -> f32[{r}, {c}], f32[{r}, {c}] {{
               p = softmax(x, axis=-1)
               l = log_softmax(x, axis=-1)
               return p, l
             }}"
        );
        check(&src, if (32..=4096).contains(&c) { 1 } else { 0 });
    }
}

/// Row max, min and sum, and the softmax rows, run as row calls (`plan/rows.rs`) keep the
/// bits of the `f32x4` loops on rows that test the order: NaNs (the JIT keeps a lane's
/// last), equal zeros of both signs (it keeps the first), infinities, values whose `f32`
/// partial sums round, and lengths with every kind of tail.
#[test]
fn row_calls_keep_the_bits_on_special_rows() {
    let rows = 12;
    for c in [33, 64, 100, 1001, 1024, 4099] {
        let ty = format!("f32[{rows}, {c}]");
        let softmax = format!(
            "graph sm(x: {ty}) -> {ty}, {ty} {{
               p = softmax(x, axis=-1)
               l = log_softmax(x, axis=-1)
               return p, l
             }}"
        );
        // The softmax's max, exp-sum and scaled row (for rows too long to keep the exps,
        // the sum of exps and the scaled exps).
        // Together with a log-softmax, longer rows end in one stage writing both: 2.
        let sm_calls = if c <= 4096 { 3 } else { 2 };
        let mut graphs = vec![(softmax, sm_calls)];
        graphs.push((
            format!(
                "graph sm_only(x: {ty}) -> {ty} {{
                   y = softmax(x, axis=-1)
                   return y
                 }}"
            ),
            3,
        ));
        // A log-softmax alone: max, the sum of exps (stored nowhere when the row is too
        // long to split) and the offset row.
        graphs.push((
            format!(
                "graph ls(x: {ty}) -> {ty} {{
                   y = log_softmax(x, axis=-1)
                   return y
                 }}"
            ),
            3,
        ));
        // A softmax written out: the last pass divides by the sum, with no select.
        graphs.push((
            format!(
                "graph manual(x: {ty}) -> {ty} {{
                   e = exp(sub(x, max(x, axes=[1], keepdim=true)))
                   y = div(e, sum(e, axes=[1], keepdim=true))
                   return y
                 }}"
            ),
            3,
        ));
        for op in ["max", "min", "sum"] {
            graphs.push((
                format!(
                    "graph {op}_rows(x: {ty}) -> f32[{rows}] {{
                       y = {op}(x, axes=[1])
                       return y
                     }}"
                ),
                1,
            ));
        }
        for (src, calls) in &graphs {
            special_rows(src, rows, c, *calls);
        }
    }
}

/// [`check_with`] on random rows, then on rows of special values.
fn special_rows(src: &str, rows: usize, c: usize, calls: usize) {
    {
        let g = graph(src);
        let random = random_inputs(&g);
        // Ordinary values: close to the interpreter too.
        check_with(src, &random, calls, true);
        let mut x = random[0]
            .to_f64()
            .into_iter()
            .map(|v| v as f32)
            .collect::<Vec<f32>>();
        let quiet = f32::from_bits(0x7fc0_0001);
        let other = f32::from_bits(0xffc0_0123);
        for r in 0..rows {
            let row = &mut x[r * c..(r + 1) * c];
            match r {
                // Zeros of both signs tie for the max (and the min of a row of zeros).
                0 => row
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = if i % 3 == 0 { -0.0 } else { -(*v).abs() - 1.0 }),
                1 => row.iter_mut().enumerate().for_each(|(i, v)| {
                    *v = if i % 5 == 2 {
                        0.0
                    } else if i % 5 == 4 {
                        -0.0
                    } else {
                        -(*v).abs()
                    }
                }),
                2 => row
                    .iter_mut()
                    .for_each(|v| *v = if v.is_sign_negative() { -0.0 } else { 0.0 }),
                // NaNs of two payloads in the vector part and the tail.
                3 => {
                    row[c / 2] = quiet;
                    row[c - 1] = other;
                    row[1] = other;
                }
                4 => row[c - 1] = f32::NAN,
                // Infinities.
                5 => row[c / 3] = f32::INFINITY,
                6 => row.iter_mut().for_each(|v| *v = f32::NEG_INFINITY),
                7 => {
                    row[0] = f32::NEG_INFINITY;
                    row[c - 2] = f32::INFINITY;
                }
                // Sums that round: large and small values mixed.
                8 => row
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v *= if i % 7 == 0 { 3.0e7 } else { 1.0e-3 }),
                9 => row.iter_mut().for_each(|v| *v *= 1.0e38),
                // Every lane meets one zero first and the other later: the max keeps
                // -0 and the min +0, where a max instruction would keep the later one.
                10 => row
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = if i < 16 { -0.0 } else { 0.0 }),
                11 => row
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = if i < 16 { 0.0 } else { -0.0 }),
                _ => {}
            }
        }
        // The first input's rows special, the others (weights, a residual) as drawn.
        let mut inputs = random.clone();
        inputs[0] = Tensor::from_f32(&[rows, c], x).expect("a tensor");
        check_with(src, &inputs, calls, false);
    }
}

#[test]
fn gelu_and_layer_norm() {
    check(
        "graph g(x: f32[64, 1000], w: f32[1000], b: f32[1000]) -> f32[64, 1000], f32[64, 1000] {
           y = gelu(x)
           z = gelu(layer_norm(x, w, b), approximate=\"tanh\")
           return y, z
         }",
        2,
    );
}

/// A GEMM epilogue that updates the product in place (`gelu(a @ b + bias)`): the stage
/// that stores the `erf` argument writes the product back unchanged, so the plan stays
/// valid loop IR (a product read without being written back would not be).
#[test]
fn gemm_epilogue_in_place() {
    // The matmul's f32 accumulation order differs between the GEMM and the interpreter,
    // hence the interpreter check inside `check` uses the default tolerances on a small k.
    check(
        "graph mlp(a: f32[32, 8], b: f32[8, 1024], c: f32[1024]) -> f32[32, 1024] {
           y = gelu(add(matmul(a, b), c))
           return y
         }",
        1,
    );
}

/// The passes of layer and RMS norms run as chain row calls (`plan/rows.rs`): every pass of
/// a row, with a residual add in front and two outputs, on rows with every kind of tail,
/// keeps the bits of the `f32x4` loops, on random rows and on rows of special values.
#[test]
fn norm_rows_are_chain_calls() {
    let rows = 12;
    // Rows under `MIN_CHAIN_ROW` (64) keep the loops; the others have tails of every kind.
    for c in [64, 257, 271, 300, 1024, 4099] {
        let ty = format!("f32[{rows}, {c}]");
        let v = format!("f32[{c}]");
        let graphs = [
            // Shifted mean, sum of squares, normalized row times w plus b: three calls.
            (
                format!(
                    "graph ln(x: {ty}, w: {v}, b: {v}) -> {ty} {{
                       y = layer_norm(x, w, b, eps=1e-5)
                       return y
                     }}"
                ),
                3,
            ),
            // A residual add feeding the norm, its sum stored too (a transformer's
            // `x + attn`, then the norm): every pass reads two rows.
            (
                format!(
                    "graph res_ln(x: {ty}, r: {ty}, w: {v}, b: {v}) -> {ty}, {ty} {{
                       h = add(x, r)
                       y = layer_norm(h, w, b, eps=1e-5)
                       return h, y
                     }}"
                ),
                3,
            ),
            // RMS norm: the mean of squares, then x * rsqrt(ms + eps) * w.
            (
                format!(
                    "graph rms(x: {ty}, w: {v}) -> {ty} {{
                       ms = mean(mul(x, x), axes=[1], keepdim=true)
                       y = mul(mul(x, rsqrt(add(ms, 1e-6))), w)
                       return y
                     }}"
                ),
                2,
            ),
            // Divisions and reversed operands: (1 - x) / s and s / (x + 2).
            (
                format!(
                    "graph divs(x: {ty}) -> {ty}, {ty} {{
                       s = sum(x, axes=[1], keepdim=true)
                       a = div(sub(1.0, x), s)
                       b = div(s, add(x, 2.0))
                       return a, b
                     }}"
                ),
                1,
            ),
        ];
        for (src, calls) in &graphs {
            let calls = if c >= 256 { *calls } else { 0 };
            special_rows(src, rows, c, calls);
        }
    }
}

/// Pointwise kernels whose row is a chain (`maximum`/`minimum` with constants, a ReLU, a
/// per-row bias) run as chain calls, one per segment of a row, and keep the bits of the
/// `f32x4` loops on NaNs, zeros of both signs and infinities; so do GEMM epilogues
/// updating the product in place (bias, residual, ReLU) that run on each block the GEMM
/// computes.
#[test]
fn pointwise_chains_and_epilogues() {
    let rows = 12;
    for c in [256, 300, 1024, 4099] {
        let ty = format!("f32[{rows}, {c}]");
        let graphs = [
            format!(
                "graph relu6(x: {ty}) -> {ty} {{
                   y = minimum(maximum(x, 0.0), 6.0)
                   return y
                 }}"
            ),
            format!(
                "graph clamp(x: {ty}, b: f32[{rows}, 1]) -> {ty} {{
                   y = minimum(maximum(add(x, b), -1.5), 2.5)
                   return y
                 }}"
            ),
            format!(
                "graph scaled(x: {ty}, b: f32[{rows}, 1]) -> {ty} {{
                   y = maximum(mul(sub(x, b), 3.0), 0.0)
                   return y
                 }}"
            ),
        ];
        for src in &graphs {
            special_rows(src, rows, c, 1);
        }
        check(
            &format!(
                "graph epi(a: f32[64, 32], w: f32[32, {c}], b: f32[{c}], r: f32[64, {c}]) -> f32[64, {c}] {{
                   y = maximum(add(add(matmul(a, w), b), r), 0.0)
                   return y
                 }}"
            ),
            1,
        );
    }
}
