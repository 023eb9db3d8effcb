//! Joint forward + backward graphs (`ferrite_passes::autodiff`) on every target: the
//! CPU backend (fused and unfused, 1 and 3 threads) and the simulator agree with the
//! reference interpreter on the gradients of an MLP classifier and of a transformer
//! block, and SGD driven by the compiled joint graph follows the interpreter's loss
//! curve, and `TrainStep` trains an MLP classifier and a tiny GPT-2-style language model
//! (`examples/training/`) on every target, and a DLRM-style model whose tables are
//! trained from row-sparse `embedding_bag` gradients. `ferrite grad` prints a joint graph that `ferrite run` takes.

mod common;
use common::{ferrite, stdout};
use ferrite::ir::{parse, Graph};
use ferrite::passes::autodiff::grad;
use ferrite::{compile_ir, Compiled, Options, Target, Tensor, TensorType};

const MLP: &str = include_str!("../examples/training/mlp_classifier.fg");
const TINY_LM: &str = include_str!("../examples/training/tiny_lm.fg");
const DLRM: &str = include_str!("../examples/training/dlrm.fg");

const BLOCK: &str = "graph block_loss(x: f32[2, 6, 16], wq: f32[16, 16], wk: f32[16, 16], wv: f32[16, 16], g1: f32[16], b1: f32[16], w1: f32[16, 32], w2: f32[32, 16]) -> f32[] {
  n = layer_norm(x, g1, b1)
  q = matmul(n, wq)
  k = matmul(n, wk)
  v = matmul(n, wv)
  s = mul(matmul(q, transpose(k, dim0=1, dim1=2)), 0.25)
  p = softmax(s, axis=-1)
  a = add(x, matmul(p, v))
  f = add(a, matmul(silu(matmul(rms_norm(a, g1), w1)), w2))
  loss = mean(mul(f, f))
  return loss
}
";

fn joint(src: &str, wrt: &[&str]) -> (Graph, Graph) {
    let g = parse("t.fg", src).unwrap();
    let ids: Vec<_> = wrt.iter().map(|n| g.find(n).unwrap()).collect();
    let j = grad(&g, 0, &ids).unwrap();
    (g, j)
}

/// Random inputs, scaled to 0.5, with class labels in range for `t`.
fn inputs(g: &Graph, classes: usize) -> Vec<Tensor> {
    g.params
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let ty = g.ty(p);
            if ty.dtype.is_int() {
                let v: Vec<i64> = (0..ty.numel())
                    .map(|k| ((k * 7 + 3) % classes) as i64)
                    .collect();
                Tensor::from_vec(&ty.shape, v).unwrap()
            } else {
                let r = Tensor::random(ty, 11 + i as u64).unwrap().to_f64_vec();
                let v: Vec<f64> = r.iter().map(|x| x * 0.5).collect();
                Tensor::from_f64(ty, &v).unwrap()
            }
        })
        .collect()
}

fn configs() -> Vec<(&'static str, Options)> {
    vec![
        ("cpu", Options::default().target(Target::Cpu).threads(1)),
        (
            "cpu, 3 threads",
            Options::default().target(Target::Cpu).threads(3),
        ),
        (
            "cpu, unfused",
            Options::default()
                .target(Target::Cpu)
                .fuse(false)
                .threads(1),
        ),
        ("sim", Options::default().target(Target::Sim)),
        (
            "sim, unfused",
            Options::default().target(Target::Sim).fuse(false),
        ),
    ]
}

fn check_targets(src: &str, wrt: &[&str], classes: usize) {
    let (g, j) = joint(src, wrt);
    let xs = inputs(&g, classes);
    let want = compile_ir(&j, &Options::default().target(Target::Interp))
        .unwrap()
        .run(&xs)
        .unwrap();
    assert_eq!(want.len(), 1 + wrt.len());
    // The gradients are not trivially zero.
    for (k, w) in want[1..].iter().enumerate() {
        assert!(
            w.to_f64_vec().iter().any(|v| v.abs() > 1e-6),
            "gradient of {} is zero",
            wrt[k]
        );
    }
    for (label, opts) in configs() {
        let got = compile_ir(&j, &opts)
            .unwrap_or_else(|e| panic!("{label}: {e}"))
            .run(&xs)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            if let Err(m) = a.check_close(b, 1e-3, 1e-5) {
                panic!("{label}: output {k}: {m}");
            }
        }
    }
}

#[test]
fn mlp_classifier_gradients_agree_on_every_target() {
    check_targets(MLP, &["w1", "b1", "w2", "x"], 5);
}

#[test]
fn transformer_block_gradients_agree_on_every_target() {
    check_targets(BLOCK, &["wq", "wk", "wv", "g1", "b1", "w1", "w2", "x"], 1);
}

/// Plain SGD with the compiled joint graph: `steps` updates from the same start.
fn sgd(exe: &Compiled, mut xs: Vec<Tensor>, trained: &[usize], lr: f64, steps: usize) -> Vec<f64> {
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        let out = exe.run(&xs).unwrap();
        losses.push(out[0].to_f64_vec()[0]);
        for (k, &pi) in trained.iter().enumerate() {
            let ty: TensorType = xs[pi].ty().clone();
            let w = xs[pi].to_f64_vec();
            let d = out[1 + k].to_f64_vec();
            let v: Vec<f64> = w.iter().zip(&d).map(|(w, d)| w - lr * d).collect();
            xs[pi] = Tensor::from_f64(&ty, &v).unwrap();
        }
    }
    losses
}

#[test]
fn sgd_on_the_compiled_joint_graph_follows_the_interpreter() {
    let (g, j) = joint(MLP, &["w1", "b1", "w2"]);
    let xs = inputs(&g, 5);
    let trained = [1, 2, 3];
    let reference = sgd(
        &compile_ir(&j, &Options::default().target(Target::Interp)).unwrap(),
        xs.clone(),
        &trained,
        0.5,
        30,
    );
    assert!(
        reference[29] < 0.5 * reference[0],
        "the loss falls: {reference:?}"
    );
    for (label, opts) in [
        ("cpu", Options::default().target(Target::Cpu).threads(2)),
        ("sim", Options::default().target(Target::Sim)),
    ] {
        let got = sgd(
            &compile_ir(&j, &opts).unwrap(),
            xs.clone(),
            &trained,
            0.5,
            30,
        );
        for (step, (a, b)) in got.iter().zip(&reference).enumerate() {
            assert!(
                (a - b).abs() <= 1e-3 * b.abs().max(1e-3),
                "{label}: step {step}: loss {a}, interpreter {b}"
            );
        }
    }
}

/// `ferrite grad` on the MLP classifier written to a folder of its own (named after
/// `folder` and this process), with `args` after the file; the folder and the output.
fn grad_mlp(folder: &str, args: &[&str]) -> (std::path::PathBuf, std::process::Output) {
    let dir = std::env::temp_dir().join(format!("{folder}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("mlp.fg");
    std::fs::write(&src, MLP).unwrap();
    let mut all = vec!["grad", src.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = ferrite(&all);
    (dir, out)
}

#[test]
fn grad_command_prints_a_joint_graph_that_runs() {
    let (dir, out) = grad_mlp("ferrite-grad-cli", &["--wrt", "w1,b1", "--wrt", "w2"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        common::stderr(&out).contains("saved for backward: "),
        "{}",
        common::stderr(&out)
    );
    assert!(
        text.contains("grad_w1") && text.contains("return loss, grad_w1, grad_b1, grad_w2"),
        "{text}"
    );
    let jf = dir.join("joint.fg");
    std::fs::write(&jf, &text).unwrap();
    let check = ferrite(&["check", jf.to_str().unwrap()]);
    assert!(check.status.success(), "{check:?}");
    // Unknown names and a non-scalar loss are user errors (exit 1) that say so.
    let src = dir.join("mlp.fg");
    let bad = ferrite(&["grad", src.to_str().unwrap(), "--wrt", "nope"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no value named `nope`"));
    let bad = ferrite(&["grad", src.to_str().unwrap(), "--wrt", "t"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("only float values have gradients"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// PyTorch's update rules written out on the host, in f32 as torch computes them for
/// f32 parameters (bias corrections in f64, as Python floats).
struct HostOpt {
    opt: ferrite::Optimizer,
    state: Vec<Vec<Vec<f32>>>,
    /// Each parameter's last extent (the row of row-wise Adagrad).
    widths: Vec<usize>,
    t: u64,
}

impl HostOpt {
    fn update(&mut self, params: &mut [Vec<f32>], grads: &[Vec<f32>]) {
        self.t += 1;
        let t = self.t as f64;
        for (k, (p, g)) in params.iter_mut().zip(grads).enumerate() {
            match self.opt {
                ferrite::Optimizer::Sgd {
                    lr,
                    momentum,
                    dampening,
                    weight_decay,
                    nesterov,
                } => {
                    let mut d: Vec<f32> = g
                        .iter()
                        .zip(p.iter())
                        .map(|(g, p)| g + p * weight_decay as f32)
                        .collect();
                    if momentum != 0.0 {
                        let buf = &mut self.state[k][0];
                        for (b, d) in buf.iter_mut().zip(&d) {
                            *b = if self.t == 1 {
                                *d
                            } else {
                                *b * momentum as f32 + d * (1.0 - dampening) as f32
                            };
                        }
                        if nesterov {
                            for (d, b) in d.iter_mut().zip(buf.iter()) {
                                *d += b * momentum as f32;
                            }
                        } else {
                            d = buf.clone();
                        }
                    }
                    for (p, d) in p.iter_mut().zip(&d) {
                        *p -= d * lr as f32;
                    }
                }
                ferrite::Optimizer::Adagrad {
                    lr,
                    lr_decay,
                    weight_decay,
                    eps,
                    row_wise,
                } => {
                    let clr = (lr / (1.0 + (t - 1.0) * lr_decay)) as f32;
                    let d: Vec<f32> = g
                        .iter()
                        .zip(p.iter())
                        .map(|(g, p)| g + p * weight_decay as f32)
                        .collect();
                    let sum = &mut self.state[k][0];
                    let width = if row_wise { self.widths[k] } else { 1 };
                    for (r, s) in sum.iter_mut().enumerate() {
                        let row = &d[r * width..(r + 1) * width];
                        let sq: f32 = if row_wise {
                            // The mean, accumulated as the reduction does (in f64).
                            (row.iter().map(|&x| (x * x) as f64).sum::<f64>() / width as f64) as f32
                        } else {
                            row[0] * row[0]
                        };
                        *s += sq;
                        let den = s.sqrt() + eps as f32;
                        for (i, &x) in row.iter().enumerate() {
                            p[r * width + i] -= x / den * clr;
                        }
                    }
                }
                ferrite::Optimizer::Adam {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                    decoupled,
                } => {
                    let (m, rest) = self.state[k].split_at_mut(1);
                    let (m, v) = (&mut m[0], &mut rest[0]);
                    let step_size = (lr / (1.0 - beta1.powf(t))) as f32;
                    let bc2 = ((1.0 - beta2.powf(t)).sqrt()) as f32;
                    for i in 0..p.len() {
                        let mut d = g[i];
                        if decoupled {
                            p[i] *= (1.0 - lr * weight_decay) as f32;
                        } else {
                            d += p[i] * weight_decay as f32;
                        }
                        m[i] += (d - m[i]) * (1.0 - beta1) as f32;
                        v[i] = v[i] * beta2 as f32 + d * d * (1.0 - beta2) as f32;
                        let den = v[i].sqrt() / bc2 + eps as f32;
                        p[i] -= m[i] / den * step_size;
                    }
                }
                ferrite::Optimizer::Shampoo { .. } => {
                    unreachable!("Shampoo is checked by its own test")
                }
            }
        }
    }
}

#[test]
fn optimizer_updates_in_the_step_graph_follow_pytorchs_rules() {
    use ferrite::Optimizer;
    let (g, j) = joint(MLP, &["w1", "b1", "w2"]);
    let grad_exe = compile_ir(&j, &Options::default().target(Target::Interp)).unwrap();
    let xs = inputs(&g, 5);
    let trained = [1usize, 2, 3];
    for opt in [
        Optimizer::sgd(0.3),
        Optimizer::Sgd {
            lr: 0.1,
            momentum: 0.9,
            dampening: 0.0,
            weight_decay: 0.01,
            nesterov: true,
        },
        Optimizer::Sgd {
            lr: 0.1,
            momentum: 0.8,
            dampening: 0.3,
            weight_decay: 0.0,
            nesterov: false,
        },
        Optimizer::adam(0.01),
        Optimizer::Adam {
            lr: 0.02,
            beta1: 0.8,
            beta2: 0.99,
            eps: 1e-6,
            weight_decay: 0.05,
            decoupled: false,
        },
        Optimizer::adamw(0.01),
        Optimizer::adagrad(0.1),
        Optimizer::Adagrad {
            lr: 0.05,
            lr_decay: 0.1,
            weight_decay: 0.02,
            eps: 1e-10,
            row_wise: false,
        },
        Optimizer::Adagrad {
            lr: 0.1,
            lr_decay: 0.0,
            weight_decay: 0.0,
            eps: 1e-8,
            row_wise: true,
        },
    ] {
        let names = ["w1", "b1", "w2"];
        let init: Vec<Tensor> = trained.iter().map(|&i| xs[i].clone()).collect();
        let data: Vec<Tensor> = [0usize, 4].iter().map(|&i| xs[i].clone()).collect();
        let mut ts = ferrite::TrainStep::new(
            &g,
            0,
            &names,
            init.clone(),
            &opt,
            &Options::default().target(Target::Interp),
        )
        .unwrap();
        let mut host = HostOpt {
            opt: opt.clone(),
            state: init
                .iter()
                .map(|t| {
                    let n = opt.slot_type(0, t.ty()).numel();
                    vec![vec![0.0f32; n]; opt.slots().len()]
                })
                .collect(),
            widths: init.iter().map(|t| *t.shape().last().unwrap()).collect(),
            t: 0,
        };
        let mut hp: Vec<Vec<f32>> = init.iter().map(|t| t.to_vec::<f32>().unwrap()).collect();
        for step in 0..8 {
            let loss = ts.step(&data).unwrap();
            // The host's gradients at its own parameters.
            let mut full = xs.clone();
            for (k, &i) in trained.iter().enumerate() {
                full[i] = Tensor::from_vec(xs[i].shape(), hp[k].clone()).unwrap();
            }
            let out = grad_exe.run(&full).unwrap();
            let host_loss = out[0].to_f64_vec()[0];
            assert!(
                (loss - host_loss).abs() <= 1e-5 * host_loss.abs().max(1.0),
                "{opt:?}: step {step}: loss {loss} vs {host_loss}"
            );
            let grads: Vec<Vec<f32>> = out[1..]
                .iter()
                .map(|t| t.to_vec::<f32>().unwrap())
                .collect();
            host.update(&mut hp, &grads);
            for (k, p) in ts.params().iter().enumerate() {
                let p = p.to_vec::<f32>().unwrap();
                for (a, b) in p.iter().zip(&hp[k]) {
                    assert!(
                        (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                        "{opt:?}: step {step}: {} differs: {a} vs {b}",
                        names[k]
                    );
                }
            }
        }
        assert_eq!(ts.steps(), 8);
    }
}

/// Trains every float parameter of `src` with Adam for 100 steps on each target from the
/// same start and data; the loss must fall below `below` times its start and every
/// target's curve must follow the interpreter's. `name` names the model's dump folder
/// (`dump_for_torch`).
fn trains_on_every_target(name: &str, src: &str, classes: usize, below: f64) {
    let adam = ferrite::Optimizer::adam(0.01);
    trains_on_every_target_with(Some(name), src, classes, &adam, 100, below);
}

/// [`trains_on_every_target`] with `opt` for `steps` steps; dumped for PyTorch when named.
fn trains_on_every_target_with(
    name: Option<&str>,
    src: &str,
    classes: usize,
    opt: &ferrite::Optimizer,
    steps: usize,
    below: f64,
) {
    let g = parse("t.fg", src).unwrap();
    let xs = inputs(&g, classes);
    let (trained, data): (Vec<usize>, Vec<usize>) =
        (0..g.params.len()).partition(|&i| g.ty(g.params[i]).dtype.is_float());
    let names: Vec<&str> = trained
        .iter()
        .map(|&i| g.node(g.params[i]).name.as_deref().unwrap())
        .collect();
    let init: Vec<Tensor> = trained.iter().map(|&i| xs[i].clone()).collect();
    let data: Vec<Tensor> = data.iter().map(|&i| xs[i].clone()).collect();
    let curve = |opts: Options| {
        let mut ts = ferrite::TrainStep::new(&g, 0, &names, init.clone(), opt, &opts).unwrap();
        (0..steps)
            .map(|_| ts.step(&data).unwrap())
            .collect::<Vec<f64>>()
    };
    let reference = curve(Options::default().target(Target::Interp));
    assert!(reference[steps - 1] < below * reference[0], "{reference:?}");
    for (label, opts) in [
        ("cpu", Options::default().target(Target::Cpu).threads(2)),
        (
            "cpu, unfused",
            Options::default().target(Target::Cpu).fuse(false),
        ),
        ("sim", Options::default().target(Target::Sim)),
    ] {
        let got = curve(opts);
        for (step, (a, b)) in got.iter().zip(&reference).enumerate() {
            assert!(
                (a - b).abs() <= 1e-3 * b.abs().max(1e-2),
                "{label}: step {step}: loss {a}, interpreter {b}"
            );
        }
    }
    if let Some(name) = name {
        dump_for_torch(name, &g, &names, &init, &data, &reference);
    }
}

/// For scripts/train-torch.py: with `FERRITE_TRAIN_DUMP=DIR`, writes the model's initial
/// weights (by parameter name), its data (the other parameters, by name) and the
/// interpreter's per-step losses (`losses.npy`, which every target follows) into
/// `DIR/name/` as `.npy` files.
fn dump_for_torch(
    name: &str,
    g: &Graph,
    trained: &[&str],
    init: &[Tensor],
    data: &[Tensor],
    losses: &[f64],
) {
    let Some(dir) = std::env::var_os("FERRITE_TRAIN_DUMP") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let save = |name: &str, t: &Tensor| {
        let bytes = ferrite::ir::npy::encode(&t.clone().into_ir());
        std::fs::write(dir.join(format!("{name}.npy")), bytes).unwrap();
    };
    for (name, t) in trained.iter().zip(init) {
        save(name, t);
    }
    let data_names = g
        .params
        .iter()
        .map(|&p| g.node(p).name.clone().unwrap())
        .filter(|n| !trained.contains(&n.as_str()));
    for (name, t) in data_names.zip(data) {
        save(&name, t);
    }
    save(
        "losses",
        &Tensor::from_vec(&[losses.len()], losses.to_vec()).unwrap(),
    );
}

#[test]
fn an_mlp_classifier_trains_on_every_target() {
    trains_on_every_target("mlp_classifier", MLP, 5, 0.2);
}

/// Shampoo, a matrix-heavy optimizer (its inverse fourth roots are chains of matmuls;
/// `passes/tests/shampoo.rs` checks them against a host reference), trains the MLP
/// classifier on every target, with blocks of 16 (w1 is two blocks of 12 x 16).
#[test]
fn shampoo_trains_an_mlp_classifier_on_every_target() {
    let opt = ferrite::Optimizer::Shampoo {
        lr: 0.05,
        eps: 1e-4,
        block_size: 16,
        iterations: 20,
    };
    trains_on_every_target_with(None, MLP, 5, &opt, 20, 0.7);
}

#[test]
fn a_tiny_language_model_trains_on_every_target() {
    trains_on_every_target("tiny_lm", TINY_LM, 16, 0.5);
}

#[test]
fn train_step_refuses_what_it_cannot_train() {
    let g = parse("t.fg", MLP).unwrap();
    let xs = inputs(&g, 5);
    let opts = Options::default().target(Target::Interp);
    let adam = ferrite::Optimizer::adam(0.01);
    let e = ferrite::TrainStep::new(&g, 0, &["h"], vec![xs[1].clone()], &adam, &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("`h` is a value, not a parameter"), "{e}");
    let e = ferrite::TrainStep::new(&g, 0, &["w1"], vec![xs[2].clone()], &adam, &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("initial value of `w1`"), "{e}");
    let bad = ferrite::Optimizer::Adam {
        lr: 0.1,
        beta1: 1.5,
        beta2: 0.9,
        eps: 1e-8,
        weight_decay: 0.0,
        decoupled: false,
    };
    let e = ferrite::TrainStep::new(&g, 0, &["w1"], vec![xs[1].clone()], &bad, &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("beta1"), "{e}");
}

/// The DLRM-style model of `examples/training/dlrm.fg` (8 sparse features through
/// sum-mode `embedding_bag`s of variable lengths), its data and initial weights: the
/// graph, the trained parameters' names and initial values (in parameter order), and the
/// data tensors (the untrained parameters, in order).
fn dlrm() -> (Graph, Vec<String>, Vec<Tensor>, Vec<Tensor>) {
    let g = parse("dlrm.fg", DLRM).unwrap();
    let (rows, n) = (20usize, 10usize);
    let mut names = Vec::new();
    let mut init = Vec::new();
    let mut data = Vec::new();
    for (i, &p) in g.params.iter().enumerate() {
        let name = g.node(p).name.clone().unwrap();
        let ty = g.ty(p).clone();
        if ty.dtype.is_float() && name != "dense" {
            let r = Tensor::random(&ty, 100 + i as u64).unwrap().to_f64_vec();
            let v: Vec<f64> = r.iter().map(|x| x * 0.3).collect();
            init.push(Tensor::from_f64(&ty, &v).unwrap());
            names.push(name);
            continue;
        }
        // Data: dense features, labels in {0, 1}, indices below `rows` (repeats
        // included), and offsets of bags of lengths that vary by feature (empty bags
        // included).
        let t = match name.as_str() {
            "dense" => Tensor::random(&ty, 7).unwrap(),
            "y" => Tensor::from_vec(&ty.shape, vec![1i64, 0, 0, 1]).unwrap(),
            s if s.starts_with("idx") => {
                let f: usize = s[3..].parse().unwrap();
                let v: Vec<i64> = (0..n).map(|k| ((k * 7 + f * 3) % rows) as i64).collect();
                Tensor::from_vec(&ty.shape, v).unwrap()
            }
            s if s.starts_with("offs") => {
                let f: usize = s[4..].parse().unwrap();
                let starts = [[0i64, 3, 4, 8], [0, 1, 1, 6], [0, 5, 7, 9], [0, 2, 4, 6]];
                Tensor::from_vec(&ty.shape, starts[f % 4].to_vec()).unwrap()
            }
            other => panic!("unexpected parameter {other}"),
        };
        data.push(t);
    }
    (g, names, init, data)
}

#[test]
fn a_dlrm_style_model_on_embedding_bags_trains_its_tables_sparsely_on_every_target() {
    let (g, names, init, data) = dlrm();
    let (features, rows, d) = (8, 20, 8);
    assert_eq!(names.len(), 4 + features + 4);
    // As DLRM trains: the tables with row-wise Adagrad from row-sparse gradients, the
    // MLPs with Adam.
    let is_table = |n: &str| n.starts_with('t') && n[1..].parse::<usize>().is_ok();
    let (tables, mlps): (Vec<usize>, Vec<usize>) =
        (0..names.len()).partition(|&k| is_table(&names[k]));
    let tnames: Vec<&str> = tables.iter().map(|&k| names[k].as_str()).collect();
    let mnames: Vec<&str> = mlps.iter().map(|&k| names[k].as_str()).collect();
    assert_eq!(tnames.len(), features);
    let init: Vec<Tensor> = tables
        .iter()
        .chain(&mlps)
        .map(|&k| init[k].clone())
        .collect();
    let row_wise = ferrite::Optimizer::Adagrad {
        lr: 0.1,
        lr_decay: 0.0,
        weight_decay: 0.0,
        eps: 1e-8,
        row_wise: true,
    };
    let adam = ferrite::Optimizer::adam(0.01);

    // Row-sparse end to end: in the step graph, nothing has a table's size but the
    // tables, their new values (an index_add into the table) and nothing else; the
    // row-wise state is a column.
    let id = |n: &str| g.find(n).unwrap();
    let tids: Vec<_> = tnames.iter().map(|n| id(n)).collect();
    let mids: Vec<_> = mnames.iter().map(|n| id(n)).collect();
    let step = ferrite::passes::train::train_step_sparse(
        &g,
        0,
        &[(tids.clone(), row_wise.clone()), (mids, adam.clone())],
        &tids,
    )
    .unwrap();
    let mut updates = 0;
    for n in &step.nodes {
        if n.ty.shape != [rows, d] || matches!(n.op, ferrite::Op::Param { .. }) {
            continue;
        }
        assert!(
            matches!(n.op, ferrite::Op::IndexAdd { .. }) && tids.contains(&n.inputs[0]),
            "a table-sized {} ({}) in the step graph",
            n.op.name(),
            n.ty
        );
        updates += 1;
    }
    assert_eq!(updates, features);
    let dense = ferrite::passes::train::train_step_groups(
        &g,
        0,
        &[(tids.clone(), row_wise.clone()), (vec![], adam.clone())],
    )
    .unwrap();
    assert!(
        dense
            .nodes
            .iter()
            .filter(|n| n.ty.shape == vec![rows, d])
            .count()
            > step
                .nodes
                .iter()
                .filter(|n| n.ty.shape == vec![rows, d])
                .count(),
        "the dense step makes dense table gradients"
    );

    let curve = |opts: Options| {
        let mut ts = ferrite::TrainStep::with_sparse(
            &g,
            0,
            &[(&tnames, row_wise.clone()), (&mnames, adam.clone())],
            &tnames,
            init.clone(),
            &opts,
        )
        .unwrap();
        let state = ts.compiled().input_types();
        assert!(state.iter().any(|t| t.shape == vec![rows, 1]), "{state:?}");
        (0..100)
            .map(|_| ts.step(&data).unwrap())
            .collect::<Vec<f64>>()
    };
    let reference = curve(Options::default().target(Target::Interp));
    assert!(reference[99] < 0.2 * reference[0], "{reference:?}");
    for (label, opts) in [
        ("cpu", Options::default().target(Target::Cpu).threads(2)),
        ("sim", Options::default().target(Target::Sim)),
    ] {
        let got = curve(opts);
        for (step, (a, b)) in got.iter().zip(&reference).enumerate() {
            assert!(
                (a - b).abs() <= 1e-3 * b.abs().max(1e-2),
                "{label}: step {step}: loss {a}, interpreter {b}"
            );
        }
    }
    let trained: Vec<&str> = tnames.iter().chain(&mnames).copied().collect();
    dump_for_torch("dlrm", &g, &trained, &init, &data, &reference);
}

#[test]
fn the_report_names_what_backward_reads_from_forward() {
    let (g, j) = joint(MLP, &["w1", "b1", "w2"]);
    let saved = ferrite::passes::autodiff::saved_for_backward(&g, &j);
    let names: Vec<Option<&str>> = saved
        .activations
        .iter()
        .map(|&v| j.node(v).name.as_deref())
        .collect();
    // gelu's derivative reads its input, the w2 gradient reads h, log_softmax's reads lp.
    assert!(names.contains(&Some("h")), "{names:?}");
    assert!(names.contains(&Some("lp")), "{names:?}");
    let bytes: usize = saved
        .activations
        .iter()
        .map(|&v| j.ty(v).size_bytes())
        .sum();
    assert_eq!(saved.activation_bytes, bytes);
    assert!(saved.inputs.contains(&g.find("x").unwrap()));
    assert!(saved.inputs.contains(&g.find("w2").unwrap()));
}

/// Forward then backward, each compiled on its own (`ferrite::Partitioned`), give the
/// joint graph's outputs: exactly on the interpreter, on the CPU what the compiled joint
/// graph gives, bit for bit where `cpu_exact` (the optimizer
/// may rewrite the joint graph across its forward and backward halves, which the split
/// graphs cannot share: the tiny LM's layer norms differ in the last bits) and always
/// within the targets' tolerance of the interpreter.
fn check_partition_on_targets(src: &str, wrt: &[&str], xs: &[Tensor], cpu_exact: bool) {
    let (_, j) = joint(src, wrt);
    let interp = Options::default().target(Target::Interp);
    let want = compile_ir(&j, &interp).unwrap().run(xs).unwrap();
    for (label, opts) in [
        ("interp", interp),
        ("cpu", Options::default().target(Target::Cpu).threads(1)),
        ("sim", Options::default().target(Target::Sim)),
    ] {
        let p = ferrite::Partitioned::new(&j, 1, &opts).unwrap();
        let r = &p.partition().report;
        assert!(r.min_cut_bytes() <= r.naive_bytes());
        let got = p.run(xs).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(got.len(), want.len());
        let joint_here = compile_ir(&j, &opts).unwrap().run(xs).unwrap();
        for (k, ((a, b), c)) in got.iter().zip(&want).zip(&joint_here).enumerate() {
            if label == "interp" {
                assert_eq!(a, b, "{label}: output {k}");
            } else if label == "cpu" && cpu_exact {
                assert_eq!(a, c, "{label}: output {k} against the compiled joint graph");
            }
            if let Err(m) = a.check_close(b, 1e-3, 1e-5) {
                panic!("{label}: output {k}: {m}");
            }
            if let Err(m) = a.check_close(c, 1e-4, 1e-6) {
                panic!("{label}: output {k} against the compiled joint graph: {m}");
            }
        }
    }
}

#[test]
fn partitioned_training_examples_compose_to_the_joint_graph_on_every_target() {
    let g = parse("t.fg", MLP).unwrap();
    check_partition_on_targets(MLP, &["w1", "b1", "w2"], &inputs(&g, 5), true);
    let g = parse("t.fg", TINY_LM).unwrap();
    check_partition_on_targets(
        TINY_LM,
        &[
            "wte", "wpe", "g1", "b1", "wqkv", "wo", "g2", "b2", "wfc", "wpr", "gf", "bf",
        ],
        &inputs(&g, 16),
        false,
    );
    // The DLRM's data (indices, offsets, labels) and weights, in parameter order.
    let (g, names, init, data) = dlrm();
    let (mut init, mut data) = (init.into_iter(), data.into_iter());
    let xs: Vec<Tensor> = g
        .params
        .iter()
        .map(
            |&p| match names.contains(g.node(p).name.as_ref().unwrap()) {
                true => init.next().unwrap(),
                false => data.next().unwrap(),
            },
        )
        .collect();
    let wrt: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    check_partition_on_targets(DLRM, &wrt, &xs, true);
}

#[test]
fn grad_partition_prints_the_report_and_both_graphs() {
    let (dir, out) = grad_mlp(
        "ferrite-partition-cli",
        &["--wrt", "w1,b1,w2", "--partition"],
    );
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    // The golden text of tests/filetests/partition/mlp_classifier.fg, after its separator.
    let golden = include_str!("filetests/partition/mlp_classifier.fg");
    let expected = golden.split("=== expected ===\n").nth(1).unwrap();
    assert_eq!(text, expected);
    // Each graph is `.fg` that `check` takes.
    let (fwd, bwd) = text.split_once("\n\ngraph mlp_loss_backward").unwrap();
    for (name, body) in [
        ("f.fg", fwd.to_string()),
        ("b.fg", format!("graph mlp_loss_backward{bwd}")),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        let check = ferrite(&["check", path.to_str().unwrap()]);
        assert!(check.status.success(), "{check:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
