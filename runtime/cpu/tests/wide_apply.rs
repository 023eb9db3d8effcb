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

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64().into_iter().map(f64::to_bits).collect()
}

/// `src` compiled with wide calls at every width gives the bits of the `f32x4` code, at
/// one and two threads, close to the interpreter; the plan makes at least `min_calls`
/// routine calls.
fn check(src: &str, min_calls: usize) {
    let g = graph(src);
    let inputs = random_inputs(&g);
    let p = schedule(&g, true);
    let want = ferrite_ir::interpret(&g, &inputs).unwrap_or_else(|e| panic!("interpret: {e}"));
    let narrow = run(&p, &inputs, None, 1);
    for (x, w) in narrow.iter().zip(&want) {
        let (rtol, atol) = tolerance(w.ty.dtype);
        x.check_close(w, rtol, atol)
            .unwrap_or_else(|e| panic!("{}: f32x4 code vs interpreter: {e}", g.name));
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
            let got = run(&p, &inputs, Some(isa), threads);
            for (k, (x, n)) in got.iter().zip(&narrow).enumerate() {
                assert!(
                    bits(x) == bits(n),
                    "{} ({isa:?}, {threads} threads): output {k} differs from the f32x4 code",
                    g.name
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
