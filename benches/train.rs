//! Training-step benches (criterion; `cargo bench --bench train`), on the workloads of
//! `examples/training/` with Adam, on the CPU target:
//!
//! - `train_compile/<model>`: building the step graph (autodiff + optimizer) and compiling
//!   it, the whole first-call cost (torch.compile's cold first call of a training step is
//!   seconds to minutes);
//! - `train_step/<model>/<threads>t`: one warm step (forward, backward, update) at 1 thread
//!   and at all threads;
//! - `dlrm_step/<threads>t`: one warm step of the DLRM-style model of
//!   `examples/training/dlrm.fg` at a realistic size (8 tables of 100k x 64 rows, batch
//!   512, bags of 1 to 40 lookups), its tables trained by sparse row-wise Adagrad from
//!   row-sparse `embedding_bag` gradients, its MLPs by Adam; `train_compile/dlrm` builds
//!   and compiles that step (the tables' initial values copied in included).
//!
//! `scripts/bench-train-torch.py` times the same steps in PyTorch (eager, Inductor,
//! `backend="ferrite"`).

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

/// The DLRM-style model's source (as `examples/training/dlrm.fg`, sized): `features`
/// tables of `rows x d`, `n` lookups per feature in `batch` bags.
fn dlrm_source(features: usize, batch: usize, n: usize, rows: usize, d: usize) -> String {
    let mut params = format!(
        "dense: f32[{batch}, 13], y: i64[{batch}, 1], w0: f32[13, 64], c0: f32[64], w1: f32[64, {d}], c1: f32[{d}]"
    );
    let mut body =
        "  z0 = relu(add(matmul(relu(add(matmul(dense, w0), c0)), w1), c1))\n".to_string();
    let mut parts = vec!["unsqueeze(z0, axis=1)".to_string()];
    for f in 0..features {
        params += &format!(", t{f}: f32[{rows}, {d}], idx{f}: i64[{n}], offs{f}: i64[{batch}]");
        body += &format!("  e{f} = embedding_bag(t{f}, idx{f}, offs{f}, mode=\"sum\")\n");
        parts.push(format!("unsqueeze(e{f}, axis=1)"));
    }
    let k = features + 1;
    let tri: Vec<String> = (0..k)
        .flat_map(|i| (0..i).map(move |j| (i * k + j).to_string()))
        .collect();
    let pairs = tri.len();
    body += &format!(
        "  t = concat({}, axis=1)\n  z = reshape(matmul(t, transpose(t, dim0=1, dim1=2)), shape=[{batch}, {}])\n  inter = index_select(z, constant(values=[{}], dtype=i64, shape=[{pairs}]), axis=1)\n  top = relu(add(matmul(concat(z0, inter, axis=1), u0), v0))\n  logit = add(matmul(top, u1), v1)\n  yf = cast(y, to=f32)\n  sp = add(maximum(logit, 0.0), log(add(exp(neg(abs(logit))), 1.0)))\n  loss = mean(sub(sp, mul(yf, logit)))\n",
        parts.join(", "),
        k * k,
        tri.join(", ")
    );
    params += &format!(
        ", u0: f32[{}, 64], v0: f32[64], u1: f32[64, 1], v1: f32[1]",
        d + pairs
    );
    format!("graph dlrm({params}) -> f32[] {{\n{body}  return loss\n}}\n")
}

fn dlrm(c: &mut Criterion) {
    let (features, batch, rows, d) = (8, 512, 100_000, 64);
    // Bag lengths 1 to 40, the same for every feature.
    let lengths: Vec<usize> = (0..batch).map(|b| 1 + (b * 17 + 5) % 40).collect();
    let n: usize = lengths.iter().sum();
    let g = parse("dlrm", &dlrm_source(features, batch, n, rows, d)).unwrap();
    let (mut tables, mut mlps, mut data) = (vec![], vec![], vec![]);
    let (mut tinit, mut minit) = (vec![], vec![]);
    for (i, &p) in g.params.iter().enumerate() {
        let name = g.node(p).name.clone().unwrap();
        let ty = g.ty(p);
        let t = if name.starts_with("idx") {
            let v: Vec<i64> = (0..n).map(|k| ((k * 7919 + i) % rows) as i64).collect();
            Tensor::from_vec(&ty.shape, v).unwrap()
        } else if name.starts_with("offs") {
            let mut at = 0i64;
            let v: Vec<i64> = lengths
                .iter()
                .map(|&l| {
                    let s = at;
                    at += l as i64;
                    s
                })
                .collect();
            Tensor::from_vec(&ty.shape, v).unwrap()
        } else if name == "y" {
            Tensor::from_vec(&ty.shape, (0..batch).map(|b| (b % 2) as i64).collect()).unwrap()
        } else {
            let r = Tensor::random(ty, 7 + i as u64).unwrap().to_f64_vec();
            let v: Vec<f64> = r.iter().map(|x| x * 0.05).collect();
            Tensor::from_f64(ty, &v).unwrap()
        };
        match name.as_str() {
            s if s.starts_with('t') && s[1..].parse::<usize>().is_ok() => {
                tables.push(name);
                tinit.push(t);
            }
            "dense" | "y" => data.push(t),
            s if s.starts_with("idx") || s.starts_with("offs") => data.push(t),
            _ => {
                mlps.push(name);
                minit.push(t);
            }
        }
    }
    // The tables' initial values first, then the MLPs', as the groups list them.
    let init: Vec<Tensor> = tinit.into_iter().chain(minit).collect();
    let tnames: Vec<&str> = tables.iter().map(String::as_str).collect();
    let mnames: Vec<&str> = mlps.iter().map(String::as_str).collect();
    let row_wise = Optimizer::Adagrad {
        lr: 0.01,
        lr_decay: 0.0,
        weight_decay: 0.0,
        eps: 1e-8,
        row_wise: true,
    };
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let groups = [
        (&tnames[..], row_wise.clone()),
        (&mnames[..], Optimizer::adam(1e-3)),
    ];
    let mut compile = c.benchmark_group("train_compile");
    compile.sample_size(10);
    compile.bench_function("dlrm", |b| {
        b.iter(|| {
            TrainStep::with_sparse(
                black_box(&g),
                0,
                &groups,
                &tnames,
                init.clone(),
                &Options::default().target(Target::Cpu).threads(all),
            )
            .unwrap()
        })
    });
    compile.finish();
    let mut threads = vec![1, all];
    threads.dedup();
    for t in threads {
        let mut ts = TrainStep::with_sparse(
            &g,
            0,
            &[
                (&tnames, row_wise.clone()),
                (&mnames, Optimizer::adam(1e-3)),
            ],
            &tnames,
            init.clone(),
            &Options::default().target(Target::Cpu).threads(t),
        )
        .unwrap();
        c.bench_function(&format!("dlrm_step/{t}t"), |b| {
            b.iter(|| ts.step(black_box(&data)).unwrap())
        });
    }
}

criterion_group!(benches, train, dlrm);
criterion_main!(benches);
