//! Shared helpers of the CPU backend tests: the real pipeline and the comparison with
//! the reference interpreter.
#![allow(dead_code)]

use ferrite_cpu::{CpuOptions, CpuProgram};
use ferrite_ir::loops::Program;
use ferrite_ir::{DType, Graph, Tensor};

/// `decompose`, then the scheduler, fused or not (`--no-fuse`).
pub fn schedule(g: &Graph, fuse: bool) -> Program {
    let d = ferrite_passes::decompose::decompose(g).unwrap_or_else(|e| panic!("decompose: {e}"));
    let opts = if fuse {
        ferrite_passes::schedule::ScheduleOptions::default()
    } else {
        ferrite_passes::schedule::ScheduleOptions::unfused()
    };
    ferrite_passes::schedule::schedule(&d, &opts)
        .unwrap_or_else(|e| panic!("schedule: {e}"))
        .program
}

/// Comparison tolerance `(rtol, atol)` for outputs of `dtype`.
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (2e-3, 2e-3),
        DType::Bf16 => (1.6e-2, 1.6e-2),
        _ => (1e-4, 1e-5),
    }
}

/// The largest finite magnitude in `t`.
pub fn max_abs(t: &Tensor) -> f64 {
    t.to_f64()
        .into_iter()
        .filter(|x| x.is_finite())
        .fold(0.0, |m, x| m.max(x.abs()))
}

/// Parses a graph written inline.
pub fn graph(src: &str) -> Graph {
    ferrite_ir::parse("test.fg", src).unwrap_or_else(|d| panic!("{d}\n{src}"))
}

/// Parameter `i` random with seed `i` (what `ferrite run --seed 0` uses).
pub fn random_inputs(g: &Graph) -> Vec<Tensor> {
    g.param_types()
        .iter()
        .enumerate()
        .map(|(i, ty)| Tensor::random(ty, i as u64))
        .collect()
}

/// The option sets every graph is run with: threads 1 and 2; GEMM kernels as extern
/// calls and as generated loops; SIMD on and off.
pub const OPTION_SETS: [(usize, bool, bool); 4] = [
    (1, true, true),
    (2, true, true),
    (1, false, true),
    (2, false, false),
];

/// Compiles `g` through the pipeline, fused and unfused, under every option set, and
/// compares every output with the interpreter.
pub fn check_graph(g: &Graph, inputs: &[Tensor]) {
    let want =
        ferrite_ir::interpret(g, inputs).unwrap_or_else(|e| panic!("{}: interpret: {e}", g.name));
    let has_matmul = g
        .nodes
        .iter()
        .any(|n| matches!(n.op, ferrite_ir::Op::MatMul));
    for fuse in [true, false] {
        let p = schedule(g, fuse);
        for (threads, use_gemm, vectorize) in OPTION_SETS {
            let mut opts = CpuOptions::with_threads(threads);
            opts.use_gemm = use_gemm;
            opts.codegen.vectorize = vectorize;
            let what = format!(
                "{} (fuse {fuse}, threads {threads}, gemm {use_gemm}, simd {vectorize})",
                g.name
            );
            let c = CpuProgram::compile(&p, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = c.run(inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(got.len(), want.len());
            for (k, (x, w)) in got.iter().zip(&want).enumerate() {
                let (rtol, mut atol) = tolerance(w.ty.dtype);
                if has_matmul {
                    // Contractions sum many rounded terms (f32 accumulation in the GEMM and
                    // in vector lanes, vector-math ulps upstream), so their error scales
                    // with the magnitude of the terms, not of the (possibly cancelling) sum.
                    atol += 2e-4 * max_abs(w);
                }
                x.check_close(w, rtol, atol)
                    .unwrap_or_else(|e| panic!("{what} output {k}: {e}\n{}", c.report()));
            }
        }
    }
}

#[allow(unused_imports)]
pub use ferrite_testkit::{example_graph as example, example_names};
