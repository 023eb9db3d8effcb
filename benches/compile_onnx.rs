//! Compile time of the committed ONNX models (criterion; `cargo bench --bench
//! compile_onnx`): `model.onnx` to machine code, the figure issue 14 sets against ONNX
//! Runtime's session creation, stage by stage for each model of `examples/onnx/`
//! (gpt2, bert, llama; the convolutional ones are in `benches/conv.rs`):
//!
//! - `compile_onnx/import/<model>`: read the file and import it (`ferrite::onnx::load`);
//! - `compile_onnx/lower/<model>`: decompose, optimize, schedule (fusion and loop IR);
//! - `compile_onnx/cpu_codegen/<model>`: plan and Cranelift on the fused schedule;
//! - `compile_onnx/total/<model>`: all of it, `ferrite::compile_ir` for the CPU target
//!   from the file.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ferrite::{Options, Target};
use ferrite_cpu::{CpuOptions, CpuProgram};
use ferrite_passes::pipeline::{lower_graph, PipelineOptions};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn model_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/onnx")
        .join(name)
        .join("model.onnx")
}

fn compile_onnx(c: &mut Criterion) {
    let mut group = c.benchmark_group("compile_onnx");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let cpu = Options::default().target(Target::Cpu);
    for name in ["gpt2", "bert", "llama"] {
        let path = model_path(name);
        let model = ferrite::onnx::load(&path).unwrap();
        let lowered = lower_graph(&model.graph, &PipelineOptions::default()).unwrap();
        group.bench_with_input(BenchmarkId::new("import", name), &path, |b, p| {
            b.iter(|| ferrite::onnx::load(black_box(p)).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("lower", name), &model.graph, |b, g| {
            b.iter(|| lower_graph(black_box(g), &PipelineOptions::default()).unwrap())
        });
        group.bench_with_input(
            BenchmarkId::new("cpu_codegen", name),
            &lowered.scheduled.program,
            |b, p| b.iter(|| CpuProgram::compile(black_box(p), &CpuOptions::default()).unwrap()),
        );
        group.bench_with_input(BenchmarkId::new("total", name), &path, |b, p| {
            b.iter(|| {
                let model = ferrite::onnx::load(black_box(p)).unwrap();
                ferrite::compile_ir(&model.graph, &cpu).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, compile_onnx);
criterion_main!(benches);
