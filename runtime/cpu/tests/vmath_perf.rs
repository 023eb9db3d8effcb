//! Per-element cost of transcendental-heavy kernels, printed rather than asserted
//! (wall-clock numbers depend on the machine and its load): run with
//! `cargo test -p ferrite-cpu --release --test vmath_perf -- --nocapture`.
//!
//! Every case is a graph over 1M `f32` compiled through the real pipeline on one thread;
//! the figures are the minimum and the median kernel time of several profiled runs divided
//! by the element count (the minimum is the robust one on a shared machine). A
//! memory-bound kernel (`x * 1.5`) measured in the same run is the yardstick: on a noisy
//! machine the ratios to it are more telling than absolute times.
//! The cases separate the costs that meet in a fused chain: each transcendental alone,
//! pairs of them, the `pointwise_chain` example fused and unfused, and the sum of the
//! unfused parts, which a fused kernel should beat.
//!
//! Every compiled case is also checked against the reference interpreter, so a faster
//! but wrong variant cannot go unnoticed here.

mod support;
use support::*;

use ferrite_cpu::{CpuOptions, CpuProgram};
use ferrite_ir::Tensor;
use std::time::Duration;

const RUNS: usize = 21;
const ELEMENTS: f64 = (1024 * 1024) as f64;

/// Summed kernel time of one profiled run.
fn kernel_time(c: &CpuProgram, inputs: &[Tensor]) -> Duration {
    let (_, timings) = c.run_profiled(inputs).unwrap();
    timings.iter().map(|t| t.duration).sum()
}

/// Compiles `body` (statements over `x`, `y`: `f32[1024, 1024]`, result `out`), checking
/// the result against the interpreter.
fn compile_case(name: &str, body: &str, fuse: bool) -> (CpuProgram, Vec<Tensor>) {
    let src = format!(
        "graph {name}(x: f32[1024, 1024], y: f32[1024, 1024], bias: f32[1024]) -> f32[1024, 1024] {{\n{body}\n  return out\n}}\n"
    );
    let g = graph(&src);
    let inputs = random_inputs(&g);
    let p = schedule(&g, fuse);
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(1)).unwrap();
    let want = ferrite_ir::interpret(&g, &inputs).unwrap();
    let got = c.run(&inputs).unwrap();
    got[0].check_close(&want[0], 1e-4, 1e-5).unwrap();
    (c, inputs)
}

/// Minimum and median nanoseconds per element of each program, runs interleaved (the
/// minimum is the robust figure on a shared machine: interference only adds time).
fn ns_per_element(progs: &[(CpuProgram, Vec<Tensor>)]) -> Vec<(f64, f64)> {
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); progs.len()];
    for (c, inputs) in progs {
        c.run(inputs).unwrap();
    }
    for _ in 0..RUNS {
        for (k, (c, inputs)) in progs.iter().enumerate() {
            times[k].push(kernel_time(c, inputs));
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort();
            let ns = |d: Duration| d.as_secs_f64() * 1e9 / ELEMENTS;
            (ns(t[0]), ns(t[t.len() / 2]))
        })
        .collect()
}

const CHAIN: &str = "  a = add(x, bias)
  t = tanh(mul(a, 0.5))
  dt = sub(1.0, mul(t, t))
  g = mul(add(t, dt), y)
  m = maximum(abs(g), 1e-3)
  l = log(m)
  out = minimum(mul(sign(g), exp(mul(l, 0.5))), 2.0)";

#[test]
fn transcendental_kernels_per_element() {
    let cases: &[(&str, &str, bool)] = &[
        ("copy", "  out = mul(x, 1.5)", true),
        ("exp", "  out = exp(x)", true),
        ("exp_wide", "  out = exp(mul(x, 40.0))", true),
        ("tanh", "  out = tanh(x)", true),
        ("log", "  out = log(abs(x))", true),
        ("sigmoid", "  out = sigmoid(x)", true),
        ("erf", "  out = erf(x)", true),
        ("sin", "  out = sin(x)", true),
        ("maximum", "  out = maximum(x, y)", true),
        ("exp_log", "  out = exp(log(abs(x)))", true),
        ("tanh_exp", "  out = exp(tanh(x))", true),
        ("tanh_log_exp", "  out = exp(log(abs(tanh(x))))", true),
        ("chain_fused", CHAIN, true),
        ("chain_unfused", CHAIN, false),
    ];
    println!("case            min ns/el  median ns/el  min x copy");
    let mut copy = f64::NAN;
    for &(name, body, fuse) in cases {
        let prog = compile_case(name, body, fuse);
        let (min, median) = ns_per_element(std::slice::from_ref(&prog))[0];
        if name == "copy" {
            copy = min;
        }
        println!("{name:14} {min:10.3} {median:13.3} {:11.2}", min / copy);
    }
}
