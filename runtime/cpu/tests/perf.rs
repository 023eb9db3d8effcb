//! Performance figures of generated code, printed rather than asserted (wall-clock
//! numbers depend on the machine and its load): run with `--nocapture` to see them.
//!
//! - a 4M-element pointwise chain (the `pointwise_chain` example at 2048 x 2048), fused
//!   into one kernel vs one kernel per op, as time and achieved bandwidth;
//! - a memory-bound fused kernel (`x * a + y`) against the machine's copy bandwidth
//!   measured in the same run (`copy_from_slice`, i.e. `memcpy`).
//!
//! Bandwidth counts the bytes each kernel must move (the loop IR's static estimate:
//! every input read once, every output written once).

mod support;
use support::*;

use ferrite_cpu::{CpuOptions, CpuProgram};
use ferrite_ir::Tensor;
use std::time::{Duration, Instant};

const RUNS: usize = 5;

/// The best kernel time (sum over kernels, from profiled runs) and the best whole-run
/// time (which includes allocating the outputs).
fn measure(c: &CpuProgram, inputs: &[Tensor]) -> (Duration, Duration) {
    c.run(inputs).unwrap();
    let mut best_kernels = Duration::MAX;
    let mut best_run = Duration::MAX;
    for _ in 0..RUNS {
        let (_, timings) = c.run_profiled(inputs).unwrap();
        best_kernels = best_kernels.min(timings.iter().map(|t| t.duration).sum());
        let t = Instant::now();
        c.run(inputs).unwrap();
        best_run = best_run.min(t.elapsed());
    }
    (best_kernels, best_run)
}

fn gbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

/// Copy bandwidth: bytes read plus bytes written per second, best of several copies.
fn copy_bandwidth(elements: usize) -> f64 {
    let src: Vec<f32> = (0..elements).map(|i| i as f32).collect();
    let mut dst = vec![0f32; elements];
    dst.copy_from_slice(&src);
    let mut best = Duration::MAX;
    for _ in 0..RUNS {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        best = best.min(t.elapsed());
        std::hint::black_box(&mut dst);
    }
    gbps(2 * 4 * elements, best)
}

/// The same chain without `tanh`, `log` and `exp`: memory-bound when unfused.
const ALGEBRAIC_CHAIN: &str = "graph algebraic_chain(x: f32[2048, 2048], y: f32[2048, 2048], bias: f32[2048]) -> f32[2048, 2048] {
  a = add(x, bias)
  t = mul(a, 0.5)
  dt = sub(1.0, mul(t, t))
  g = mul(add(t, dt), y)
  m = maximum(abs(g), 1e-3)
  out = minimum(mul(sign(g), m), 2.0)
  return out
}
";

#[test]
fn pointwise_chain_fused_vs_unfused() {
    let src = ferrite_testkit::example_source("pointwise_chain")
        .1
        .replace("1024", "2048");
    let copy = copy_bandwidth(4 << 20);
    println!("copy bandwidth (16 MiB memcpy): {copy:.1} GB/s");
    compare_fusion(&graph(&src));
    compare_fusion(&graph(ALGEBRAIC_CHAIN));
}

fn compare_fusion(g: &ferrite_ir::Graph) {
    let inputs = random_inputs(g);
    let want = ferrite_ir::interpret(g, &inputs).unwrap();
    for threads in [1, 2] {
        let mut kernel_times = Vec::new();
        for fuse in [true, false] {
            let p = schedule(g, fuse);
            let c = CpuProgram::compile(&p, &CpuOptions::with_threads(threads)).unwrap();
            let got = c.run(&inputs).unwrap();
            got[0].check_close(&want[0], 1e-4, 1e-5).unwrap();
            let (kernels, run) = measure(&c, &inputs);
            let bytes = p.bytes_moved();
            println!(
                "{} 4M, {threads} thread(s), {}: {} kernels, {:.2} ms in kernels ({:.1} GB/s of {:.0} MB moved), {:.2} ms per run",
                g.name,
                if fuse { "fused" } else { "unfused" },
                p.kernels.len(),
                kernels.as_secs_f64() * 1e3,
                gbps(bytes, kernels),
                bytes as f64 / 1e6,
                run.as_secs_f64() * 1e3,
            );
            kernel_times.push(kernels);
        }
        println!(
            "  fused vs unfused: {:.2}x",
            kernel_times[1].as_secs_f64() / kernel_times[0].as_secs_f64()
        );
    }
}

#[test]
fn memory_bound_kernel_against_copy_bandwidth() {
    let g = graph("graph axpy(x: f32[4194304], y: f32[4194304]) -> f32[4194304] {\n  z = add(mul(x, 1.5), y)\n  return z\n}\n");
    let inputs = random_inputs(&g);
    let p = schedule(&g, true);
    assert_eq!(p.kernels.len(), 1);
    let copy = copy_bandwidth(4 << 20);
    let want = ferrite_ir::interpret(&g, &inputs).unwrap();
    for threads in [1, 2] {
        let c = CpuProgram::compile(&p, &CpuOptions::with_threads(threads)).unwrap();
        assert_eq!(c.run(&inputs).unwrap(), want);
        let (kernels, _) = measure(&c, &inputs);
        let bw = gbps(p.bytes_moved(), kernels);
        println!(
            "x*a+y over 4M f32, {threads} thread(s): {:.2} ms, {bw:.1} GB/s = {:.0}% of copy bandwidth ({copy:.1} GB/s)",
            kernels.as_secs_f64() * 1e3,
            100.0 * bw / copy
        );
    }
}

#[test]
fn compile_time_of_the_transformer_block() {
    let g = example("transformer_block");
    for fuse in [true, false] {
        let p = schedule(&g, fuse);
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            let c = CpuProgram::compile(&p, &CpuOptions::with_threads(1)).unwrap();
            best = best.min(t.elapsed());
            drop(c);
        }
        println!(
            "transformer block, {}: {} kernels compiled in {:.1} ms",
            if fuse { "fused" } else { "unfused" },
            p.kernels.len(),
            best.as_secs_f64() * 1e3
        );
    }
}
