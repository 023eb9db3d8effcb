//! `index_add` and `embedding_bag` on every target against the reference interpreter
//! (and the interpreter against hand-computed values), their located run-time errors,
//! their gradients against finite differences, row-sparse table gradients against the
//! dense ones, and the sparse optimizer updates against the dense updates.

use ferrite::ir::{parse, Graph};
use ferrite::passes::autodiff::{grad, grad_sparse, Gradient};
use ferrite::passes::train::{train_step_groups, train_step_sparse, Optimizer};
use ferrite::{compile_ir, Options, Target, Tensor};

fn targets() -> Vec<(&'static str, Options)> {
    vec![
        ("loops", Options::default().target(Target::Loops)),
        ("cpu", Options::default().target(Target::Cpu).threads(1)),
        (
            "cpu, 3 threads",
            Options::default().target(Target::Cpu).threads(3),
        ),
        (
            "cpu, unfused",
            Options::default().target(Target::Cpu).fuse(false),
        ),
        ("sim", Options::default().target(Target::Sim)),
        (
            "sim, unfused",
            Options::default().target(Target::Sim).fuse(false),
        ),
    ]
}

fn run(g: &Graph, opts: &Options, xs: &[Tensor]) -> ferrite::Result<Vec<Tensor>> {
    compile_ir(g, opts)?.run(xs)
}

fn interp(g: &Graph, xs: &[Tensor]) -> Vec<Tensor> {
    run(g, &Options::default().target(Target::Interp), xs).unwrap()
}

fn f32s(shape: &[usize], seed: u64) -> Tensor {
    let ty = ferrite::TensorType::new(ferrite::DType::F32, shape.to_vec()).unwrap();
    Tensor::random(&ty, seed).unwrap()
}

fn i64s(v: &[i64]) -> Tensor {
    Tensor::from_vec(&[v.len()], v.to_vec()).unwrap()
}

/// Every target gives the interpreter's bits (`exact`) or its values within `tol`.
fn agree(g: &Graph, xs: &[Tensor], exact: bool, tol: f64) {
    let want = interp(g, xs);
    for (label, opts) in targets() {
        let got = run(g, &opts, xs).unwrap_or_else(|e| panic!("{label}: {e}"));
        for (a, b) in got.iter().zip(&want) {
            let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
            for (k, (x, y)) in a.iter().zip(&b).enumerate() {
                let ok = if exact {
                    x.to_bits() == y.to_bits()
                } else {
                    (x - y).abs() <= tol * y.abs().max(1.0)
                };
                assert!(ok, "{label}: element {k}: {x}, interpreter {y}");
            }
        }
    }
}

const INDEX_ADD: &str = "graph ia(base: f32[5, 3], idx: i64[7], src: f32[7, 3]) -> f32[5, 3] {
  y = index_add(base, idx, src, axis=0)
  return y
}
";

#[test]
fn index_add_accumulates_duplicates_in_index_order_on_every_target() {
    let g = parse("ia.fg", INDEX_ADD).unwrap();
    let base = Tensor::from_vec(&[5, 3], (0..15).map(|v| v as f32).collect()).unwrap();
    let src = Tensor::from_vec(&[7, 3], (0..21).map(|v| 100.0 * v as f32).collect()).unwrap();
    let idx = i64s(&[4, 0, 4, 2, 0, 4, 1]);
    let out = interp(&g, &[base.clone(), idx.clone(), src.clone()]);
    // Row 4 gets source rows 0, 2 and 5; row 3 nothing.
    let y = out[0].to_f64_vec();
    assert_eq!(
        &y[12..15],
        &[12.0 + 700.0 * 3.0 - 0.0, 13.0 + 2400.0, 14.0 + 2700.0][..]
    );
    assert_eq!(&y[9..12], &[9.0, 10.0, 11.0][..]);
    // Rounding in f32 at every addition, in index order: 1 + 2^-24 + 2^-24 stays 1.
    let tiny = Tensor::from_vec(&[7, 3], vec![2f32.powi(-24); 21]).unwrap();
    let ones = Tensor::from_vec(&[5, 3], vec![1f32; 15]).unwrap();
    let y = interp(&g, &[ones.clone(), idx.clone(), tiny.clone()])[0].to_f64_vec();
    assert_eq!(y[12], 1.0);
    agree(&g, &[base, idx.clone(), src], true, 0.0);
    agree(&g, &[ones, idx, tiny], true, 0.0);
    // A middle axis, fused with an elementwise producer and consumer.
    let g = parse(
        "ia1.fg",
        "graph ia1(base: f32[4, 5, 3], idx: i32[7], src: f32[4, 7, 3]) -> f32[4, 5, 3] {
  y = relu(index_add(neg(base), idx, mul(src, src), axis=1))
  return y
}
",
    )
    .unwrap();
    let idx = Tensor::from_vec(&[7], vec![3i32, 3, 0, 4, 3, 1, 0]).unwrap();
    agree(
        &g,
        &[f32s(&[4, 5, 3], 1), idx, f32s(&[4, 7, 3], 2)],
        true,
        0.0,
    );
}

#[test]
fn an_index_out_of_range_stops_the_run_on_every_target() {
    let g = parse("ia.fg", INDEX_ADD).unwrap();
    for bad in [5i64, -1] {
        let xs = [
            f32s(&[5, 3], 1),
            i64s(&[0, 1, bad, 2, 0, 0, 0]),
            f32s(&[7, 3], 2),
        ];
        let e = run(&g, &Options::default().target(Target::Interp), &xs)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("out of range"), "{e}");
        for (label, opts) in targets() {
            let e = run(&g, &opts, &xs)
                .err()
                .unwrap_or_else(|| panic!("{label}: no error"));
            assert!(!e.is_internal(), "{label}: {e}");
            let e = e.to_string();
            assert!(e.contains("index"), "{label}: {e}");
        }
    }
}

fn bag_graph(mode: &str, weights: bool, extra: &str, n: usize, offs: usize) -> Graph {
    let w = if weights {
        format!(", w: f32[{n}]")
    } else {
        String::new()
    };
    let wa = if weights { ", w" } else { "" };
    let bags = if extra.contains("include_last_offset=true") {
        offs - 1
    } else {
        offs
    };
    let src = format!(
        "graph bag(t: f32[6, 4], i: i64[{n}], o: i64[{offs}]{w}) -> f32[{bags}, 4] {{\n  y = embedding_bag(t, i, o{wa}, mode=\"{mode}\"{extra})\n  return y\n}}\n"
    );
    parse("bag.fg", &src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

#[test]
fn embedding_bag_follows_pytorch_by_hand_on_the_interpreter() {
    // Rows r have value 10 r + c in column c.
    let t = Tensor::from_vec(
        &[6, 4],
        (0..24).map(|k| (10 * (k / 4) + k % 4) as f32).collect(),
    )
    .unwrap();
    let i = i64s(&[1, 2, 4, 5, 0, 2]);
    let o = i64s(&[0, 2, 2, 5]);
    let bags = |mode: &str, extra: &str| {
        interp(
            &bag_graph(mode, false, extra, 6, 4),
            &[t.clone(), i.clone(), o.clone()],
        )[0]
        .to_f64_vec()
    };
    // Bags: [1, 2], [], [4, 5, 0], [2].
    let sum = bags("sum", "");
    assert_eq!(&sum[0..4], &[30.0, 32.0, 34.0, 36.0][..]);
    assert_eq!(&sum[4..8], &[0.0; 4][..]);
    assert_eq!(&sum[8..12], &[90.0, 93.0, 96.0, 99.0][..]);
    let mean = bags("mean", "");
    assert_eq!(&mean[8..12], &[30.0, 31.0, 32.0, 33.0][..]);
    assert_eq!(&mean[4..8], &[0.0; 4][..]);
    let max = bags("max", "");
    assert_eq!(&max[8..12], &[50.0, 51.0, 52.0, 53.0][..]);
    // padding_idx leaves row 2 out, also from mean's count.
    let pad = bags("mean", ", padding_idx=2");
    assert_eq!(&pad[0..4], &[10.0, 11.0, 12.0, 13.0][..]);
    assert_eq!(&pad[12..16], &[0.0; 4][..]);
    // Weights.
    let w = Tensor::from_vec(&[6], vec![1.0f32, 2.0, 0.5, 0.0, 1.0, -1.0]).unwrap();
    let g = bag_graph("sum", true, "", 6, 4);
    let y = interp(&g, &[t.clone(), i.clone(), o.clone(), w])[0].to_f64_vec();
    assert_eq!(&y[0..4], &[50.0, 53.0, 56.0, 59.0][..]);
    assert_eq!(&y[12..16], &[-20.0, -21.0, -22.0, -23.0][..]);
    // include_last_offset: the last offset is the end.
    let g = bag_graph("sum", false, ", include_last_offset=true", 6, 4);
    let end = i64s(&[0, 2, 2, 6]);
    let y = interp(&g, &[t.clone(), i.clone(), end])[0].to_f64_vec();
    assert_eq!(y.len(), 12);
    assert_eq!(&y[8..12], &[110.0, 114.0, 118.0, 122.0][..]);
}

#[test]
fn embedding_bag_agrees_with_the_interpreter_on_every_target() {
    let i = i64s(&[1, 2, 4, 5, 0, 2, 2, 3, 5]);
    let o = i64s(&[0, 2, 2, 5, 8]);
    for (mode, weights, extra) in [
        ("sum", false, ""),
        ("sum", true, ""),
        ("mean", false, ""),
        ("mean", false, ", padding_idx=-4"),
        ("sum", true, ", padding_idx=5"),
    ] {
        let g = bag_graph(mode, weights, extra, 9, 5);
        let mut xs = vec![f32s(&[6, 4], 3), i.clone(), o.clone()];
        if weights {
            xs.push(f32s(&[9], 4));
        }
        agree(&g, &xs, false, 1e-6);
    }
    let g = bag_graph("sum", false, ", include_last_offset=true", 9, 5);
    agree(
        &g,
        &[f32s(&[6, 4], 3), i.clone(), i64s(&[0, 2, 2, 5, 9])],
        false,
        1e-6,
    );
}

#[test]
fn offsets_pytorch_rejects_stop_the_run() {
    let g = bag_graph("sum", false, "", 6, 4);
    let t = f32s(&[6, 4], 3);
    let i = i64s(&[1, 2, 4, 5, 0, 2]);
    for bad in [[1i64, 2, 2, 5], [0, 3, 2, 5], [0, 2, 2, 7]] {
        let xs = [t.clone(), i.clone(), i64s(&bad)];
        let e = run(&g, &Options::default().target(Target::Interp), &xs)
            .err()
            .unwrap();
        assert!(e.to_string().contains("embedding_bag"), "{e}");
        for (label, opts) in targets() {
            let e = run(&g, &opts, &xs)
                .err()
                .unwrap_or_else(|| panic!("{label}: {bad:?}"));
            assert!(!e.is_internal(), "{label}: {e}");
        }
    }
    let g = bag_graph("sum", false, ", include_last_offset=true", 6, 4);
    let xs = [t.clone(), i.clone(), i64s(&[0, 2, 2, 5])];
    assert!(run(&g, &Options::default().target(Target::Interp), &xs).is_err());
    assert!(run(&g, &Options::default().target(Target::Cpu), &xs).is_err());
    // Max mode checks its offsets too.
    let g = bag_graph("max", false, "", 6, 4);
    for (label, opts) in targets() {
        let e = run(&g, &opts, &[t.clone(), i.clone(), i64s(&[1, 2, 2, 5])])
            .err()
            .unwrap_or_else(|| panic!("{label}: no error"));
        assert!(!e.is_internal(), "{label}: {e}");
    }
}

#[test]
fn embedding_bag_max_mode_runs_on_every_target() {
    let i = i64s(&[1, 2, 4, 5, 0, 2, 2, 3, 5]);
    let o = i64s(&[0, 2, 2, 5, 8]);
    for extra in ["", ", padding_idx=2", ", padding_idx=-1"] {
        let g = bag_graph("max", false, extra, 9, 5);
        agree(&g, &[f32s(&[6, 4], 3), i.clone(), o.clone()], true, 0.0);
    }
    // A bag of padding rows only is empty: 0, as in PyTorch.
    let g = bag_graph("max", false, ", padding_idx=2", 9, 5);
    let t = Tensor::from_vec(&[6, 4], (0..24).map(|k| -(k as f32) - 1.0).collect()).unwrap();
    let only_pad = i64s(&[2, 2, 4, 5, 0, 2, 2, 3, 5]);
    let y = interp(&g, &[t.clone(), only_pad.clone(), o.clone()])[0].to_f64_vec();
    assert_eq!(&y[0..4], &[0.0; 4][..]);
    // Negative rows: the maximum, not 0, in a bag with rows.
    assert_eq!(&y[8..12], &[-1.0, -2.0, -3.0, -4.0][..]);
    agree(&g, &[t, only_pad, o.clone()], true, 0.0);
    let g = bag_graph("max", false, ", include_last_offset=true", 9, 5);
    agree(
        &g,
        &[f32s(&[6, 4], 3), i.clone(), i64s(&[0, 2, 2, 5, 9])],
        true,
        0.0,
    );
}

fn index_reduce_graph(dtype: &str, reduce: &str, include_self: bool) -> Graph {
    let src = format!(
        "graph ir(base: {dtype}[5, 3], idx: i64[7], src: {dtype}[7, 3]) -> {dtype}[5, 3] {{\n  y = index_reduce(base, idx, src, axis=0, reduce=\"{reduce}\", include_self={include_self})\n  return y\n}}\n"
    );
    parse("ir.fg", &src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

#[test]
fn index_reduce_follows_pytorch_by_hand_and_agrees_on_every_target() {
    let base = Tensor::from_vec(&[5, 3], (0..15).map(|v| v as f32).collect()).unwrap();
    let src = Tensor::from_vec(
        &[7, 3],
        (0..21).map(|v| ((v * 7) % 11) as f32 - 5.0).collect(),
    )
    .unwrap();
    let idx = i64s(&[4, 0, 4, 2, 0, 4, 1]);
    let by_hand = |reduce: &str, include_self: bool| -> Vec<f64> {
        let (b, s) = (base.to_f64_vec(), src.to_f64_vec());
        let mut out = b.clone();
        let ix = [4usize, 0, 4, 2, 0, 4, 1];
        for r in 0..5 {
            let picked: Vec<usize> = (0..7).filter(|&j| ix[j] == r).collect();
            if picked.is_empty() {
                continue;
            }
            for c in 0..3 {
                let mut vals: Vec<f64> = picked.iter().map(|&j| s[j * 3 + c]).collect();
                if include_self {
                    vals.insert(0, b[r * 3 + c]);
                }
                out[r * 3 + c] = match reduce {
                    "prod" => vals.iter().product(),
                    "mean" => vals.iter().sum::<f64>() / vals.len() as f64,
                    "amax" => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    _ => vals.iter().cloned().fold(f64::INFINITY, f64::min),
                };
            }
        }
        out
    };
    for reduce in ["prod", "mean", "amax", "amin"] {
        for include_self in [true, false] {
            let g = index_reduce_graph("f32", reduce, include_self);
            let xs = [base.clone(), idx.clone(), src.clone()];
            let y = interp(&g, &xs)[0].to_f64_vec();
            let want = by_hand(reduce, include_self);
            for (k, (a, b)) in y.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                    "{reduce} include_self={include_self} element {k}: {a} against {b}"
                );
            }
            agree(&g, &xs, true, 0.0);
        }
    }
    // Integers: mean rounds down (PyTorch's floor division), extremes are identities.
    let ibase = Tensor::from_vec(&[5, 3], (0..15i32).map(|v| v - 7).collect()).unwrap();
    let isrc = Tensor::from_vec(
        &[7, 3],
        (0..21).map(|v| (v * 5) % 9 - 4).collect::<Vec<i32>>(),
    )
    .unwrap();
    for reduce in ["prod", "mean", "amax", "amin"] {
        for include_self in [true, false] {
            let g = index_reduce_graph("i32", reduce, include_self);
            agree(&g, &[ibase.clone(), idx.clone(), isrc.clone()], true, 0.0);
        }
    }
    let g = index_reduce_graph("i32", "mean", true);
    let y = interp(&g, &[ibase.clone(), idx.clone(), isrc.clone()])[0].to_f64_vec();
    // Row 1: base -4 and source row 6's first element 54 % 9 - 4 = -4: mean -4; row 2
    // column 0: base -1 and source row 3's 45 % 9 - 4 = -4: floor(-5 / 2) = -3.
    assert_eq!(y[3], -4.0);
    assert_eq!(y[6], -3.0);
    // NaN wins a maximum and a minimum, as `maximum`/`minimum` say.
    let mut s = src.to_f64_vec();
    s[0] = f64::NAN;
    let nan_src = Tensor::from_f64(src.ty(), &s).unwrap();
    for reduce in ["amax", "amin"] {
        let g = index_reduce_graph("f32", reduce, true);
        let xs = [base.clone(), idx.clone(), nan_src.clone()];
        assert!(interp(&g, &xs)[0].to_f64_vec()[12].is_nan());
        agree(&g, &xs, true, 0.0);
    }
    // An index out of range is a located run-time error, never a wild write.
    let g = index_reduce_graph("f32", "amax", false);
    let xs = [base.clone(), i64s(&[4, 0, 5, 2, 0, 4, 1]), src.clone()];
    for (label, opts) in targets() {
        let e = run(&g, &opts, &xs)
            .err()
            .unwrap_or_else(|| panic!("{label}: no error"));
        assert!(
            !e.is_internal() && e.to_string().contains("index"),
            "{label}: {e}"
        );
    }
}

#[test]
fn index_reduce_gradients_split_ties_as_pytorch_does() {
    // loss = sum(index_reduce(base, idx, src) * weights), f64.
    for (reduce, include_self) in [
        ("amax", true),
        ("amin", false),
        ("amax", false),
        ("mean", true),
    ] {
        let src = format!(
            "graph l(base: f64[4, 2], src: f64[5, 2], w: f64[4, 2]) -> f64[] {{\n  y = index_reduce(base, constant(values=[3, 0, 3, 1, 0], dtype=i64, shape=[5]), src, axis=0, reduce=\"{reduce}\", include_self={include_self})\n  l = sum(mul(y, w))\n  return l\n}}\n"
        );
        let g = parse("l.fg", &src).unwrap();
        let wrt: Vec<_> = g.params[..2].to_vec();
        let joint = grad(&g, 0, &wrt).unwrap();
        let f64s = |shape: &[usize], seed: u64| {
            let ty = ferrite::TensorType::new(ferrite::DType::F64, shape.to_vec()).unwrap();
            Tensor::random(&ty, seed).unwrap()
        };
        // Distinct values: a finite difference sees the same winner on both sides.
        let xs = [f64s(&[4, 2], 1), f64s(&[5, 2], 2), f64s(&[4, 2], 3)];
        let got = interp(&joint, &xs);
        for which in 0..2 {
            let fd = finite_difference(&g, &xs, which);
            let an = got[1 + which].to_f64_vec();
            for (k, (a, b)) in an.iter().zip(&fd).enumerate() {
                assert!(
                    (a - b).abs() < 1e-6,
                    "{reduce} include_self={include_self} operand {which} element {k}: {a} against {b}"
                );
            }
        }
        agree(&joint, &xs, false, 1e-12);
    }
    // A tie between the base and two sources: each gets a third (PyTorch's rule).
    let g = parse(
        "t.fg",
        "graph t(base: f64[1, 1], src: f64[2, 1]) -> f64[] {
  y = index_reduce(base, constant(values=[0, 0], dtype=i64, shape=[2]), src, axis=0, reduce=\"amax\")
  l = sum(y)
  return l
}
",
    )
    .unwrap();
    let joint = grad(&g, 0, &g.params.clone()).unwrap();
    let one = |n: usize| Tensor::from_vec(&[n, 1], vec![2.0f64; n]).unwrap();
    let got = interp(&joint, &[one(1), one(2)]);
    assert_eq!(got[1].to_f64_vec(), vec![1.0 / 3.0]);
    assert_eq!(got[2].to_f64_vec(), vec![1.0 / 3.0; 2]);
    // prod has no rule, and says so.
    let src = "graph p(base: f32[5, 3], idx: i64[7], src: f32[7, 3]) -> f32[] {\n  l = sum(index_reduce(base, idx, src, axis=0, reduce=\"prod\"))\n  return l\n}\n";
    let g = parse("p.fg", src).unwrap();
    let e = grad(&g, 0, &[g.params[0]]).err().unwrap().to_string();
    assert!(e.contains("prod"), "{e}");
}

/// `d loss / d x` by central differences in f64 on the interpreter.
fn finite_difference(g: &Graph, xs: &[Tensor], which: usize) -> Vec<f64> {
    let loss = |xs: &[Tensor]| interp(g, xs)[0].to_f64_vec()[0];
    let x = xs[which].to_f64_vec();
    let h = 1e-6;
    (0..x.len())
        .map(|k| {
            let at = |d: f64| {
                let mut v = x.clone();
                v[k] += d;
                let mut ys = xs.to_vec();
                ys[which] = Tensor::from_f64(xs[which].ty(), &v).unwrap();
                loss(&ys)
            };
            (at(h) - at(-h)) / (2.0 * h)
        })
        .collect()
}

fn f64_bag_loss(mode: &str, weights: bool, extra: &str) -> String {
    let w = if weights { ", w: f64[9]" } else { "" };
    let wa = if weights { ", w" } else { "" };
    format!(
        "graph bag(t: f64[6, 4], i: i64[9], o: i64[4]{w}, c: f64[4, 4]) -> f64[] {{\n  y = embedding_bag(t, i, o{wa}, mode=\"{mode}\"{extra})\n  loss = sum(mul(mul(y, y), c))\n  return loss\n}}\n"
    )
}

#[test]
fn embedding_bag_gradients_match_finite_differences_and_sparse_rows_sum_to_the_dense_gradient() {
    let i = i64s(&[1, 2, 4, 5, 0, 2, 2, 3, 5]);
    let o = i64s(&[0, 2, 2, 5]);
    let f64s = |shape: &[usize], seed: u64| {
        let ty = ferrite::TensorType::new(ferrite::DType::F64, shape.to_vec()).unwrap();
        Tensor::random(&ty, seed).unwrap()
    };
    for (mode, weights, extra) in [
        ("sum", false, ""),
        ("sum", true, ", padding_idx=2"),
        ("mean", false, ""),
        ("mean", false, ", padding_idx=5"),
        ("max", false, ""),
        ("max", false, ", padding_idx=2"),
    ] {
        let src = f64_bag_loss(mode, weights, extra);
        let g = parse("bag.fg", &src).unwrap();
        let mut xs = vec![f64s(&[6, 4], 5), i.clone(), o.clone()];
        if weights {
            xs.push(f64s(&[9], 6));
        }
        xs.push(f64s(&[4, 4], 7));
        let mut wrt = vec![g.params[0]];
        if weights {
            wrt.push(g.params[3]);
        }
        let j = grad(&g, 0, &wrt).unwrap();
        let out = interp(&j, &xs);
        let fd = finite_difference(&g, &xs, 0);
        for (k, (a, b)) in out[1].to_f64_vec().iter().zip(&fd).enumerate() {
            assert!(
                (a - b).abs() < 1e-6 * b.abs().max(1.0),
                "{mode}{extra}: table {k}: {a} vs {b}"
            );
        }
        if weights {
            let fd = finite_difference(&g, &xs, 3);
            for (k, (a, b)) in out[2].to_f64_vec().iter().zip(&fd).enumerate() {
                assert!(
                    (a - b).abs() < 1e-6 * b.abs().max(1.0),
                    "weight {k}: {a} vs {b}"
                );
            }
        }
        if mode == "max" {
            // The backward's scatter-min and scatter-max compile on every target.
            agree(&j, &xs, false, 1e-12);
        }
        // The row-sparse form: (indices, rows), which index_add back to the dense gradient.
        let (js, forms) = grad_sparse(&g, 0, &wrt, &[g.params[0]]).unwrap();
        assert!(matches!(forms[0], Gradient::RowSparse { .. }));
        let so = interp(&js, &xs);
        let (idx, rows) = (so[1].to_f64_vec(), so[2].to_f64_vec());
        assert_eq!(so[2].ty().shape, vec![9, 4]);
        let mut dense = [0.0; 24];
        for (j, &r) in idx.iter().enumerate() {
            for c in 0..4 {
                dense[r as usize * 4 + c] += rows[j * 4 + c];
            }
        }
        for (a, b) in dense.iter().zip(out[1].to_f64_vec()) {
            assert!(
                (a - b).abs() < 1e-12 * b.abs().max(1.0),
                "{mode}: {a} vs {b}"
            );
        }
    }
    // A table read otherwise has no row-sparse gradient.
    let g = parse(
        "bag.fg",
        "graph bag(t: f32[6, 4], i: i64[3], o: i64[2]) -> f32[] {
  loss = add(sum(embedding_bag(t, i, o)), sum(t))
  return loss
}
",
    )
    .unwrap();
    let e = grad_sparse(&g, 0, &[g.params[0]], &[g.params[0]])
        .err()
        .unwrap();
    assert!(e.to_string().contains("row-sparse"), "{e}");
}

/// A loss over two bags of one table, with every row or only some touched.
fn sparse_loss(n: usize) -> Graph {
    parse(
        "s.fg",
        &format!(
            "graph s(t: f32[6, 4], i: i64[{n}], o: i64[3], c: f32[3, 4]) -> f32[] {{
  y = embedding_bag(t, i, o, mode=\"mean\")
  loss = sum(mul(mul(y, y), c))
  return loss
}}
"
        ),
    )
    .unwrap()
}

#[test]
fn sparse_updates_give_the_dense_updates_numbers_and_leave_untouched_rows_alone() {
    let row_wise = Optimizer::Adagrad {
        lr: 0.1,
        lr_decay: 0.01,
        weight_decay: 0.0,
        eps: 1e-8,
        row_wise: true,
    };
    for (opt, slots) in [
        (Optimizer::sgd(0.3), 0),
        (row_wise, 1),
        (Optimizer::adagrad(0.2), 1),
    ] {
        // Duplicates within and across bags; rows 1 and 3 untouched in the second case.
        for (idx, offs) in [
            (vec![0i64, 1, 2, 2, 3, 4, 5, 0, 5], vec![0i64, 4, 4]),
            (vec![0, 2, 2, 4, 5, 0, 5], vec![0, 3, 5]),
        ] {
            let g = sparse_loss(idx.len());
            let t = g.params[0];
            let groups = [(vec![t], opt.clone())];
            let dense = train_step_groups(&g, 0, &groups).unwrap();
            let sparse = train_step_sparse(&g, 0, &groups, &[t]).unwrap();
            // No dense gradient: nothing table-sized but the table, its state and their
            // new values.
            for n in &sparse.nodes {
                if n.ty.shape == vec![6, 4] && !matches!(n.op, ferrite::Op::Param { .. }) {
                    assert!(
                        matches!(n.op, ferrite::Op::IndexAdd { .. })
                            && sparse.params.contains(&n.inputs[0]),
                        "a table-sized {} in the sparse step",
                        n.op.name()
                    );
                }
            }
            let mut xs = vec![f32s(&[6, 4], 9), i64s(&idx), i64s(&offs), f32s(&[3, 4], 10)];
            let state_ty = opt.slot_type(
                0,
                &ferrite::TensorType::new(ferrite::DType::F32, vec![6, 4]).unwrap(),
            );
            for _ in 0..slots {
                xs.push(Tensor::zeros(&state_ty).unwrap());
            }
            xs.push(Tensor::zeros(&ferrite::TensorType::scalar(ferrite::DType::F64)).unwrap());
            // Three steps, each from the last one's results.
            let (mut xd, mut xsp) = (xs.clone(), xs.clone());
            for _ in 0..3 {
                let a = interp(&dense, &xd);
                let b = interp(&sparse, &xsp);
                for (k, (p, q)) in a.iter().zip(&b).enumerate() {
                    let (p, q) = (p.to_f64_vec(), q.to_f64_vec());
                    for (e, (x, y)) in p.iter().zip(&q).enumerate() {
                        assert_eq!(
                            x.to_bits(),
                            y.to_bits(),
                            "{opt:?}: output {k}, element {e}: {x} vs {y}"
                        );
                    }
                }
                for (k, v) in a.into_iter().enumerate().skip(1) {
                    let at = if k == 1 { 0 } else { 3 + k - 1 };
                    xd[at] = v;
                }
                for (k, v) in b.into_iter().enumerate().skip(1) {
                    let at = if k == 1 { 0 } else { 3 + k - 1 };
                    xsp[at] = v;
                }
            }
            // Untouched rows kept their bits.
            let before = xs[0].to_f64_vec();
            let after = xsp[0].to_f64_vec();
            for r in 0..6 {
                let touched = idx.contains(&(r as i64));
                let same =
                    (0..4).all(|c| before[r * 4 + c].to_bits() == after[r * 4 + c].to_bits());
                assert_eq!(same, !touched, "row {r}");
            }
            // And the compiled sparse step computes the same as the interpreter's.
            for (label, o) in [
                ("cpu", Options::default().target(Target::Cpu)),
                ("sim", Options::default().target(Target::Sim)),
            ] {
                let got = run(&sparse, &o, &xs).unwrap();
                let want = interp(&sparse, &xs);
                for (p, q) in got.iter().zip(&want) {
                    for (x, y) in p.to_f64_vec().iter().zip(q.to_f64_vec()) {
                        assert!(
                            (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                            "{label}: {x} vs {y}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn donated_tables_are_updated_in_place_with_the_same_numbers() {
    let opt = Optimizer::Adagrad {
        lr: 0.1,
        lr_decay: 0.0,
        weight_decay: 0.0,
        eps: 1e-8,
        row_wise: true,
    };
    let idx = vec![0i64, 1, 2, 2, 3, 4, 5, 0, 5];
    let g = sparse_loss(idx.len());
    let t = g.params[0];
    let sparse = train_step_sparse(&g, 0, &[(vec![t], opt.clone())], &[t]).unwrap();
    // Inputs: t, i, o, c, t.sum, step; outputs: loss, new t, new t.sum, step + 1.
    let pairs = vec![(0, 1), (4, 2), (2, 0)];
    let state_ty = opt.slot_type(
        0,
        &ferrite::TensorType::new(ferrite::DType::F32, vec![6, 4]).unwrap(),
    );
    let xs = vec![
        f32s(&[6, 4], 9),
        i64s(&idx),
        i64s(&[0, 4, 4]),
        f32s(&[3, 4], 10),
        Tensor::from_f64(&state_ty, &[0.5; 6]).unwrap(),
        Tensor::zeros(&ferrite::TensorType::scalar(ferrite::DType::F64)).unwrap(),
    ];
    let want = interp(&sparse, &xs);
    for target in [Target::Cpu, Target::Loops] {
        let exe = compile_ir(
            &sparse,
            &Options::default().target(target).donate(pairs.clone()),
        )
        .unwrap();
        // Both updates are `index_add`s of the old value: donated. The third pair is
        // refused (an i64 input and the f32 loss), and nothing else changes.
        let donated: Vec<(usize, usize)> =
            exe.donated().iter().map(|d| (d.input, d.output)).collect();
        assert_eq!(donated, vec![(0, 1), (4, 2)], "{target:?}");
        let text = exe.program().unwrap().to_string();
        assert!(text.contains("output 1 in place of input 0"), "{text}");
        // The loop-IR text reads back with its donations.
        let back = ferrite::ir::loops::parse_program("step.loops", &text).unwrap();
        assert_eq!(back.donated, exe.program().unwrap().donated);
        // Plain runs copy the donated inputs in first: the same numbers.
        let same = |got: &[Tensor], how: &str| {
            for (k, (p, q)) in got.iter().zip(&want).enumerate() {
                for (x, y) in p.to_f64_vec().iter().zip(q.to_f64_vec()) {
                    assert!(
                        (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                        "{target:?} {how}: output {k}: {x} vs {y}"
                    );
                }
            }
        };
        same(&exe.run(&xs).unwrap(), "run");
        let mut outs = exe.new_outputs();
        exe.run_into(&xs, &mut outs).unwrap();
        same(&outs, "run_into");
        // A donated run: the outputs hold the inputs' values, the inputs' slots garbage.
        let mut outs = exe.new_outputs();
        let mut ins = xs.clone();
        for d in exe.donated() {
            outs[d.output] = xs[d.input].clone();
            ins[d.input] = Tensor::from_f64(
                xs[d.input].ty(),
                &vec![f64::NAN; 24][..xs[d.input].ty().numel()],
            )
            .unwrap();
        }
        exe.run_into_donated(&ins, &mut outs).unwrap();
        same(&outs, "run_into_donated");
    }
    // An output that is not an update of its input's copy is not donated.
    let g1 = parse(
        "m.fg",
        "graph m(t: f32[6, 4]) -> f32[6, 4] {\n  y = mul(t, 2.0)\n  return y\n}\n",
    )
    .unwrap();
    let exe = compile_ir(
        &g1,
        &Options::default().target(Target::Cpu).donate(vec![(0, 0)]),
    )
    .unwrap();
    assert!(exe.donated().is_empty());
    // A table read again after its update is not donated: the reader would see the new rows.
    let g2 = parse(
        "r.fg",
        "graph r(t: f32[6, 4], i: i64[3], s: f32[3, 4]) -> f32[6, 4], f32[] {
  u = index_add(t, i, s, axis=0)
  l = sum(mul(index_select(t, i, axis=0), index_select(u, i, axis=0)))
  return u, l
}
",
    )
    .unwrap();
    let exe = compile_ir(
        &g2,
        &Options::default().target(Target::Cpu).donate(vec![(0, 0)]),
    )
    .unwrap();
    let xs = [f32s(&[6, 4], 1), i64s(&[1, 1, 4]), f32s(&[3, 4], 2)];
    let want = interp(&g2, &xs);
    let got = exe.run(&xs).unwrap();
    for (p, q) in got.iter().zip(&want) {
        for (x, y) in p.to_f64_vec().iter().zip(q.to_f64_vec()) {
            assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{x} vs {y}");
        }
    }
    if !exe.donated().is_empty() {
        // Donated only if every read of the old table comes before the update.
        let mut outs = exe.new_outputs();
        outs[0] = xs[0].clone();
        exe.run_into_donated(&xs, &mut outs).unwrap();
        for (p, q) in outs.iter().zip(&want) {
            for (x, y) in p.to_f64_vec().iter().zip(q.to_f64_vec()) {
                assert!(
                    (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                    "donated: {x} vs {y}"
                );
            }
        }
    }
}
