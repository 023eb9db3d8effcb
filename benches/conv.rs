//! Convolutional benches (criterion; `cargo bench --bench conv`), on the CPU target at 1
//! thread, compiled once outside the timed loop:
//!
//! - `conv/resnet_tiny` and `conv/mobilenetv2_tiny`: the committed ONNX models of
//!   `examples/onnx/` (`scripts/export-conv-models.py`), end to end;
//! - `conv/conv3x3_64` and `conv/depthwise3x3_*`: a single 3x3 conv (64 -> 64 channels,
//!   56x56, the shape of ResNet-18's first stage) with its bias and ReLU epilogue, and
//!   MobileNetV2's depthwise 3x3 convs with bias and ReLU6 (144 channels of 56x56 at
//!   stride 1 and 2, 960 channels of 7x7); criterion's throughput is their multiply-adds.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferrite::{compile, Graph, Options, Target, Tensor};
use std::hint::black_box;
use std::path::Path;

fn cpu() -> Options {
    Options::default().target(Target::Cpu).threads(1)
}

fn random(shape: &[usize], seed: u64) -> Tensor {
    let t = ferrite::ir::Tensor::random(&ferrite::f32(shape), seed);
    Tensor::from_f64(&ferrite::f32(shape), &t.to_f64()).unwrap()
}

fn models(c: &mut Criterion) {
    let mut group = c.benchmark_group("conv");
    for name in ["resnet_tiny", "mobilenetv2_tiny"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/onnx")
            .join(name);
        let model = ferrite::onnx::load(dir.join("model.onnx")).unwrap();
        let image = ferrite::files::read_npy(dir.join("inputs/image.npy"), 1 << 30).unwrap();
        let exe = ferrite::compile_ir(&model.graph, &cpu()).unwrap();
        group.bench_function(name, |b| b.iter(|| exe.run(black_box(&[&image])).unwrap()));
    }
    group.finish();
}

fn single_convs(c: &mut Criterion) {
    let mut group = c.benchmark_group("conv");
    let g = Graph::new("conv3x3");
    let x = g.input("x", ferrite::f32(&[1, 64, 56, 56]));
    let w = g.input("w", ferrite::f32(&[64, 64, 3, 3]));
    let b = g.input("b", ferrite::f32(&[64]));
    g.output(&x.conv2d(&w, Some(&b), [1, 1], [1, 1], [1, 1], 1).relu());
    let exe = compile(&g, &cpu()).unwrap();
    let ins = [
        random(&[1, 64, 56, 56], 0),
        random(&[64, 64, 3, 3], 1),
        random(&[64], 2),
    ];
    group.throughput(Throughput::Elements(64 * 64 * 9 * 56 * 56));
    group.bench_function("conv3x3_64", |bch| {
        bch.iter(|| exe.run(black_box(&[&ins[0], &ins[1], &ins[2]])).unwrap())
    });

    // MobileNetV2's depthwise layers (with their bias and ReLU6): 56x56 at stride 1 and
    // 2, and the 7x7 planes of its last stage. Outputs are bound once (`run_into`), so the
    // time is the kernels', not a fresh output's page faults.
    for (name, c, hw, stride) in [
        ("depthwise3x3_144x56", 144usize, 56usize, 1usize),
        ("depthwise3x3_144x56_s2", 144, 56, 2),
        ("depthwise3x3_960x7", 960, 7, 1),
    ] {
        let g = Graph::new("depthwise");
        let x = g.input("x", ferrite::f32(&[1, c, hw, hw]));
        let w = g.input("w", ferrite::f32(&[c, 1, 3, 3]));
        let b = g.input("b", ferrite::f32(&[c]));
        let s = stride as i64;
        g.output(
            &x.conv2d(&w, Some(&b), [s, s], [1, 1], [1, 1], c as i64)
                .relu6(),
        );
        let exe = compile(&g, &cpu()).unwrap();
        let ins = [
            random(&[1, c, hw, hw], 3),
            random(&[c, 1, 3, 3], 4),
            random(&[c], 5),
        ];
        let mut outs = exe.run(&[&ins[0], &ins[1], &ins[2]]).unwrap();
        let o = hw.div_ceil(stride);
        group.throughput(Throughput::Elements((c * 9 * o * o) as u64));
        group.bench_function(name, |bch| {
            bch.iter(|| {
                exe.run_into(black_box(&[&ins[0], &ins[1], &ins[2]]), &mut outs)
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, models, single_convs);
criterion_main!(benches);
