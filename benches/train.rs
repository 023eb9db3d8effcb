//! Training-step benches (criterion; `cargo bench --bench train`), on the workloads of
//! `examples/training/` with Adam, on the CPU target:
//!
//! - `train_compile/<model>`: building the step graph (autodiff + optimizer) and compiling
//!   it, the whole first-call cost (torch.compile's cold first call of a training step is
//!   seconds to minutes);
//! - `train_step/<model>/<threads>t`: one warm step (forward, backward, update) at 1 thread
//!   and at all threads.

use criterion::{criterion_group, criterion_main, Criterion};
use ferrite::ir::{parse, Graph};
use ferrite::{Optimizer, Options, Target, Tensor, TrainStep};
use std::hint::black_box;

const MODELS: [(&str, &str, usize); 2] = [
    (
        "mlp_classifier",
        include_str!("../examples/training/mlp_classifier.fg"),
        5,
    ),
    (
        "tiny_lm",
        include_str!("../examples/training/tiny_lm.fg"),
        16,
    ),
];

/// The trained parameters (every float one), their initial values, and the data.
fn setup(g: &Graph, classes: usize) -> (Vec<String>, Vec<Tensor>, Vec<Tensor>) {
    let (mut names, mut init, mut data) = (Vec::new(), Vec::new(), Vec::new());
    for (i, &p) in g.params.iter().enumerate() {
        let ty = g.ty(p);
        if ty.dtype.is_float() {
            let r = Tensor::random(ty, 11 + i as u64).unwrap().to_f64_vec();
            let v: Vec<f64> = r.iter().map(|x| x * 0.5).collect();
            names.push(g.node(p).name.clone().unwrap());
            init.push(Tensor::from_f64(ty, &v).unwrap());
        } else {
            let v: Vec<i64> = (0..ty.numel())
                .map(|k| ((k * 7 + 3) % classes) as i64)
                .collect();
            data.push(Tensor::from_vec(&ty.shape, v).unwrap());
        }
    }
    (names, init, data)
}

fn train(c: &mut Criterion) {
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (name, src, classes) in MODELS {
        let g = parse(name, src).unwrap();
        let (names, init, data) = setup(&g, classes);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let opt = Optimizer::adam(1e-3);
        c.bench_function(&format!("train_compile/{name}"), |b| {
            b.iter(|| {
                TrainStep::new(
                    black_box(&g),
                    0,
                    &names,
                    init.clone(),
                    &opt,
                    &Options::default().target(Target::Cpu),
                )
                .unwrap()
            })
        });
        let mut threads = vec![1, all];
        threads.dedup();
        for t in threads {
            let mut ts = TrainStep::new(
                &g,
                0,
                &names,
                init.clone(),
                &opt,
                &Options::default().target(Target::Cpu).threads(t),
            )
            .unwrap();
            c.bench_function(&format!("train_step/{name}/{t}t"), |b| {
                b.iter(|| ts.step(black_box(&data)).unwrap())
            });
        }
    }
}

criterion_group!(benches, train);
criterion_main!(benches);
