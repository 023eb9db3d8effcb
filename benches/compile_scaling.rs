//! Compile time against graph size (criterion; `cargo bench --bench compile_scaling`):
//! relu chains of 1k, 10k and 100k ops through each compiler stage, fused and unfused,
//! so near-linear scaling (reliability findings F12, F13) shows as time per op staying
//! flat. `scaling/<stage>/<n>` with criterion's throughput in ops.
//!
//! - `parse`, `lower` (decompose, optimize, schedule), `cpu_codegen` (plan, Cranelift,
//!   finalize) on the fused schedule;
//! - `lower_unfused`: the `--no-fuse` schedule (its CPU code, one function per op, is
//!   bounded by `ferrite_cpu::MAX_GENERATED_KERNELS`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferrite::ir::parse;
use ferrite_cpu::{CpuOptions, CpuProgram};
use ferrite_passes::pipeline::{lower_graph, PipelineOptions};
use ferrite_passes::schedule::ScheduleOptions;
use std::hint::black_box;
use std::time::Duration;

fn relu_chain(n: usize) -> String {
    let mut s = String::from("graph chain(x: f32[8, 8]) {\n");
    for i in 0..n {
        let prev = if i == 0 {
            "x".to_string()
        } else {
            format!("a{}", i - 1)
        };
        s += &format!("  a{i} = relu({prev})\n");
    }
    s + &format!("  return a{}\n}}\n", n - 1)
}

fn scaling(c: &mut Criterion) {
    let mut group = c.benchmark_group("scaling");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(2));
    let unfused = PipelineOptions {
        schedule: ScheduleOptions::unfused(),
        ..PipelineOptions::default()
    };
    for n in [1_000, 10_000, 100_000] {
        let src = relu_chain(n);
        let g = parse("chain.fg", &src).unwrap();
        let lowered = lower_graph(&g, &PipelineOptions::default()).unwrap();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("parse", n), &src, |b, src| {
            b.iter(|| parse("chain.fg", black_box(src)).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("lower", n), &g, |b, g| {
            b.iter(|| lower_graph(black_box(g), &PipelineOptions::default()).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("lower_unfused", n), &g, |b, g| {
            b.iter(|| lower_graph(black_box(g), &unfused).unwrap())
        });
        group.bench_with_input(
            BenchmarkId::new("cpu_codegen", n),
            &lowered.scheduled.program,
            |b, p| b.iter(|| CpuProgram::compile(black_box(p), &CpuOptions::default()).unwrap()),
        );
    }
    group.finish();
}

criterion_group!(benches, scaling);
criterion_main!(benches);
