//! End-to-end benches of the `ferrite` crate (criterion; `cargo bench --bench compile_and_run`).
//!
//! - `compile/<stage>`: each compiler stage on the transformer block example (parse,
//!   decompose, optimize, schedule, CPU codegen), and the whole pipeline;
//! - `compile_decoder_12/{cpu_codegen,end_to_end}`: a 12-layer GPT-2-small-shaped decoder
//!   (`ferrite_testkit::decoder_source`), codegen alone and the whole pipeline;
//! - `pointwise_chain_4m/{fused,unfused}`: the pointwise chain at 2048 x 2048 (4M elements)
//!   on the CPU target, one kernel against one kernel per op; criterion's throughput is the
//!   bytes the fused kernel must move (two inputs read, one output written);
//! - `mlp/{ferrite,raw_gemm}`: the MLP example against the bare `gemm` calls of its two
//!   matmuls, so the epilogue and executor overhead show as a ratio.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferrite::ir::{parse, Graph, Tensor};
use ferrite_cpu::gemm::gemm;
use ferrite_cpu::{
    CpuOptions, CpuProgram, GemmShape, MatLayout, MatMut, MatRef, Parallelism, Scale,
};
use ferrite_passes::decompose::decompose;
use ferrite_passes::optimize::{optimize, OptimizeConfig};
use ferrite_passes::pipeline::{lower_graph, PipelineOptions};
use ferrite_passes::schedule::{schedule, ScheduleOptions};
use std::hint::black_box;

fn random_inputs(g: &Graph) -> Vec<Tensor> {
    g.params
        .iter()
        .enumerate()
        .map(|(i, &p)| Tensor::random(g.ty(p), i as u64))
        .collect()
}

fn compile_stages(c: &mut Criterion) {
    let (path, src) = ferrite_testkit::example_source("transformer_block");
    let g = parse(&path, &src).unwrap();
    let d = decompose(&g).unwrap();
    let (o, _) = optimize(&d, &OptimizeConfig::default()).unwrap();
    let s = schedule(&o, &ScheduleOptions::default()).unwrap();
    let mut group = c.benchmark_group("compile");
    group.bench_function("parse", |b| {
        b.iter(|| parse(&path, black_box(&src)).unwrap())
    });
    group.bench_function("decompose", |b| {
        b.iter(|| decompose(black_box(&g)).unwrap())
    });
    group.bench_function("optimize", |b| {
        b.iter(|| optimize(black_box(&d), &OptimizeConfig::default()).unwrap())
    });
    group.bench_function("schedule", |b| {
        b.iter(|| schedule(black_box(&o), &ScheduleOptions::default()).unwrap())
    });
    group.bench_function("cpu_codegen", |b| {
        b.iter(|| CpuProgram::compile(black_box(&s.program), &CpuOptions::default()).unwrap())
    });
    group.bench_function("end_to_end", |b| {
        b.iter(|| {
            let g = parse(&path, black_box(&src)).unwrap();
            let l = lower_graph(&g, &PipelineOptions::default()).unwrap();
            CpuProgram::compile(&l.scheduled.program, &CpuOptions::default()).unwrap()
        })
    });
    group.finish();
}

/// The whole pipeline on a 12-layer GPT-2-small-shaped decoder (sequence 128, width 768,
/// 12 heads): parse, decompose, optimize, schedule and CPU codegen. Every layer's kernels are
/// alike, so codegen compiles one layer's functions; the others reuse them. The process-wide
/// sharing of functions between live programs is kept out of the measurement by dropping
/// each program before the next compile.
fn compile_decoder(c: &mut Criterion) {
    let src = ferrite_testkit::decoder_source(12, 128, 768, 12);
    let path = "decoder_12.fg".to_string();
    let g = parse(&path, &src).unwrap();
    let l = lower_graph(&g, &PipelineOptions::default()).unwrap();
    let mut group = c.benchmark_group("compile_decoder_12");
    group.sample_size(10);
    group.bench_function("cpu_codegen", |b| {
        b.iter(|| {
            CpuProgram::compile(black_box(&l.scheduled.program), &CpuOptions::default()).unwrap()
        })
    });
    group.bench_function("end_to_end", |b| {
        b.iter(|| {
            let g = parse(&path, black_box(&src)).unwrap();
            let l = lower_graph(&g, &PipelineOptions::default()).unwrap();
            CpuProgram::compile(&l.scheduled.program, &CpuOptions::default()).unwrap()
        })
    });
    group.finish();
}

fn pointwise_chain(c: &mut Criterion) {
    let (path, src) = ferrite_testkit::example_source("pointwise_chain");
    let src = src
        .replace("1024, 1024", "2048, 2048")
        .replace("[1024]", "[2048]");
    let g = parse(&path, &src).unwrap();
    let inputs = random_inputs(&g);
    let bytes = 3 * 2048 * 2048 * 4;
    let mut group = c.benchmark_group("pointwise_chain_4m");
    group.throughput(Throughput::Bytes(bytes));
    for (name, fuse) in [("fused", true), ("unfused", false)] {
        let mut opts = PipelineOptions::default();
        opts.schedule.fuse = fuse;
        let l = lower_graph(&g, &opts).unwrap();
        let cpu = CpuProgram::compile(&l.scheduled.program, &CpuOptions::default()).unwrap();
        group.bench_function(name, |b| b.iter(|| cpu.run(black_box(&inputs)).unwrap()));
    }
    group.finish();
}

fn mlp_vs_raw_gemm(c: &mut Criterion) {
    let (path, src) = ferrite_testkit::example_source("mlp");
    let g = parse(&path, &src).unwrap();
    let inputs = random_inputs(&g);
    let l = lower_graph(&g, &PipelineOptions::default()).unwrap();
    // One thread on both sides, so the ratio is the executor's and epilogue's overhead.
    let cpu = CpuProgram::compile(&l.scheduled.program, &CpuOptions::with_threads(1)).unwrap();
    let mut group = c.benchmark_group("mlp");
    group.bench_function("ferrite", |b| {
        b.iter(|| cpu.run(black_box(&inputs)).unwrap())
    });

    // The same two products through the extern GEMM alone: x[64,784] @ w1[784,256], then
    // h[64,256] @ w2[256,10].
    let f = |t: &Tensor| {
        t.to_f64()
            .into_iter()
            .map(|v| v as f32)
            .collect::<Vec<f32>>()
    };
    let (x, w1, w2) = (f(&inputs[0]), f(&inputs[1]), f(&inputs[3]));
    let mut h = vec![0f32; 64 * 256];
    let mut y = vec![0f32; 64 * 10];
    group.bench_function("raw_gemm", |b| {
        b.iter(|| {
            let mm = |a: &[f32], bm: &[f32], out: &mut [f32], m: usize, k: usize, n: usize| {
                gemm(
                    GemmShape { batch: 1, m, n, k },
                    MatRef::new(a, MatLayout::row_major(m, k)),
                    MatRef::new(bm, MatLayout::row_major(k, n)),
                    MatMut::new(out, MatLayout::row_major(m, n)),
                    Scale {
                        alpha: 1.0,
                        beta: 0.0,
                    },
                    Parallelism::None,
                )
                .unwrap()
            };
            mm(&x, &w1, &mut h, 64, 784, 256);
            mm(&h, &w2, &mut y, 64, 256, 10);
            black_box(&y);
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    compile_stages,
    compile_decoder,
    pointwise_chain,
    mlp_vs_raw_gemm
);
criterion_main!(benches);
