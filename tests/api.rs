//! The library API: the builder and its operators, a method for every op (checked as
//! text against the `.fg` form it must record), numbers computed by hand on every
//! target, typed errors at build and run time, options, and thread safety.

// The op cases pass shapes in every form `Dims` accepts, borrowed arrays included.
#![allow(clippy::needless_borrows_for_generic_args)]

use ferrite::{
    compile, compile_ir, concat, where_, DType, Error, Graph, Options, Target, Tensor, TensorType,
    Var,
};
use std::path::Path;

/// The inputs every op case may use.
struct Inputs {
    g: Graph,
    x: Var,
    y: Var,
    v: Var,
    b: Var,
    idx: Var,
    m: Var,
    gi: Var,
    n: Var,
}

const PARAMS: &str = "x: f32[2, 3], y: f32[2, 3], v: f32[3], b: f32[3], idx: i64[2], m: bool[2, 3], gi: i64[2, 3], n: i32[2, 3]";

fn inputs() -> Inputs {
    let g = Graph::new("case");
    Inputs {
        x: g.input("x", ferrite::f32(&[2, 3])),
        y: g.input("y", ferrite::f32(&[2, 3])),
        v: g.input("v", ferrite::f32(&[3])),
        b: g.input("b", ferrite::f32(&[3])),
        idx: g.input("idx", ferrite::i64(&[2])),
        m: g.input("m", ferrite::bool(&[2, 3])),
        gi: g.input("gi", ferrite::i64(&[2, 3])),
        n: g.input("n", ferrite::i32(&[2, 3])),
        g,
    }
}

type Case = (&'static str, fn(&Inputs) -> Var);

/// Each method or operator, and the op it must record, as `.fg` text.
const OPS: &[Case] = &[
    ("neg(x)", |t| t.x.neg()),
    ("neg(x)", |t| -&t.x),
    ("abs(x)", |t| t.x.abs()),
    ("exp(x)", |t| t.x.exp()),
    ("log(x)", |t| t.x.log()),
    ("sqrt(x)", |t| t.x.sqrt()),
    ("rsqrt(x)", |t| t.x.rsqrt()),
    ("reciprocal(x)", |t| t.x.reciprocal()),
    ("sin(x)", |t| t.x.sin()),
    ("cos(x)", |t| t.x.cos()),
    ("tanh(x)", |t| t.x.tanh()),
    ("sigmoid(x)", |t| t.x.sigmoid()),
    ("relu(x)", |t| t.x.relu()),
    ("gelu(x)", |t| t.x.gelu()),
    ("gelu(x, approximate=\"tanh\")", |t| t.x.gelu_tanh()),
    ("silu(x)", |t| t.x.silu()),
    ("erf(x)", |t| t.x.erf()),
    ("floor(x)", |t| t.x.floor()),
    ("ceil(x)", |t| t.x.ceil()),
    ("sign(x)", |t| t.x.sign()),
    ("not(m)", |t| t.m.logical_not()),
    ("add(x, y)", |t| &t.x + &t.y),
    ("add(x, y)", |t| t.x.add(&t.y)),
    ("sub(x, y)", |t| t.x.clone() - t.y.clone()),
    ("mul(x, y)", |t| &t.x * t.y.clone()),
    ("div(x, y)", |t| t.x.clone() / &t.y),
    ("pow(x, y)", |t| t.x.pow(&t.y)),
    ("floor_divide(x, y)", |t| t.x.floor_divide(&t.y)),
    ("trunc_divide(x, y)", |t| t.x.trunc_divide(&t.y)),
    ("remainder(x, y)", |t| t.x.remainder(&t.y)),
    ("fmod(x, y)", |t| t.x.fmod(&t.y)),
    ("maximum(x, y)", |t| t.x.maximum(&t.y)),
    ("minimum(x, v)", |t| t.x.minimum(&t.v)),
    ("eq(x, y)", |t| t.x.eq(&t.y)),
    ("ne(x, y)", |t| t.x.ne(&t.y)),
    ("lt(x, y)", |t| t.x.lt(&t.y)),
    ("le(x, y)", |t| t.x.le(&t.y)),
    ("gt(x, 0.0)", |t| t.x.gt(0.0)),
    ("ge(x, 1)", |t| t.x.ge(1)),
    ("and(m, gt(x, y))", |t| t.m.logical_and(t.x.gt(&t.y))),
    ("or(m, true)", |t| t.m.logical_or(true)),
    // Scalars on either side, of each Rust type.
    ("add(x, 2.0)", |t| &t.x + 2.0f32),
    ("add(2.0, x)", |t| 2.0f64 + &t.x),
    ("sub(x, 1)", |t| &t.x - 1i32),
    ("sub(1, x)", |t| 1i64 - t.x.clone()),
    ("mul(x, 0.5)", |t| t.x.clone() * 0.5),
    ("mul(3, x)", |t| 3 * &t.x),
    ("div(x, 4)", |t| &t.x / 4i64),
    ("div(1.0, x)", |t| 1.0 / t.x.clone()),
    ("relu(sub(1.0, x))", |t| (1.0 - &t.x).relu()),
    ("relu(mul(2, x))", |t| (2 * &t.x).relu()),
    ("div(x, 0.5)", |t| &t.x / f64::from(0.5f32)),
    ("pow(x, 2)", |t| t.x.pow(2)),
    ("add(add(x, 1.0), y)", |t| {
        let mut a = t.x.clone();
        a += 1.0;
        a + &t.y
    }),
    ("div(mul(sub(x, y), 2), y)", |t| {
        let mut a = t.x.clone();
        a -= &t.y;
        a *= 2;
        a /= t.y.clone();
        a
    }),
    ("where(m, x, 0.0)", |t| t.m.where_(&t.x, 0.0)),
    ("where(m, 1, n)", |t| where_(&t.m, 1, &t.n)),
    ("cast(x, to=f16)", |t| t.x.cast(DType::F16)),
    ("sum(x, axes=[1])", |t| t.x.sum([1], false)),
    ("sum(x, axes=[0, -1], keepdim=true)", |t| {
        t.x.sum(&[0, -1], true)
    }),
    ("sum(x)", |t| t.x.sum_all()),
    ("mean(x, axes=[-1])", |t| t.x.mean(vec![-1], false)),
    ("mean(x)", |t| t.x.mean_all()),
    ("max(x, axes=[0], keepdim=true)", |t| t.x.max([0], true)),
    ("max(x)", |t| t.x.max_all()),
    ("min(x, axes=[1])", |t| t.x.min([1], false)),
    ("min(x)", |t| t.x.min_all()),
    ("prod(n, axes=[0])", |t| t.n.prod([0usize], false)),
    ("prod(x)", |t| t.x.prod_all()),
    ("argmax(x, axis=1)", |t| t.x.argmax(1, false)),
    ("argmin(x, axis=0, keepdim=true)", |t| t.x.argmin(0, true)),
    ("argmax(x)", |t| t.x.argmax_all()),
    ("argmin(x)", |t| t.x.argmin_all()),
    ("softmax(x)", |t| t.x.softmax(-1)),
    ("softmax(x, axis=0)", |t| t.x.softmax(0)),
    ("log_softmax(x)", |t| t.x.log_softmax(-1)),
    ("layer_norm(x, v, b)", |t| t.x.layer_norm(&t.v, &t.b, 1e-5)),
    ("layer_norm(x, v, b, eps=0.001)", |t| {
        t.x.layer_norm(&t.v, &t.b, 1e-3)
    }),
    ("rms_norm(x, v)", |t| t.x.rms_norm(&t.v, 1e-6)),
    ("matmul(x, transpose(y, dim0=0, dim1=1))", |t| {
        t.x.matmul(&t.y.transpose(0, 1))
    }),
    ("matmul(x, v)", |t| t.x.matmul(&t.v)),
    ("reshape(x, shape=[3, -1])", |t| t.x.reshape([3, -1])),
    ("reshape(x, shape=[6])", |t| {
        t.x.reshape(vec![t.x.size(0) * t.x.size(1)])
    }),
    ("permute(x, dims=[1, 0])", |t| t.x.permute([1, 0])),
    ("expand(v, shape=[4, 3])", |t| t.v.expand([4, 3])),
    ("squeeze(unsqueeze(x, axis=0), axes=[0])", |t| {
        t.x.unsqueeze(0).squeeze([0])
    }),
    ("squeeze(unsqueeze(x, axis=-1))", |t| {
        t.x.unsqueeze(-1).squeeze_all()
    }),
    ("slice(x, axis=1, start=1)", |t| t.x.slice(1, 1..)),
    ("slice(x, axis=1, end=2)", |t| t.x.slice(1, ..2)),
    ("slice(x, axis=-1, start=-2, end=3)", |t| {
        t.x.slice(-1, -2..=2)
    }),
    ("slice(x, axis=0)", |t| t.x.slice(0, ..=-1)),
    ("slice(x, axis=0)", |t| t.x.slice(0, ..)),
    ("slice(x, axis=1, step=2)", |t| {
        t.x.slice_step(1, 0usize.., 2)
    }),
    ("concat(x, y, x, axis=0)", |t| {
        concat(&[&t.x, &t.y, &t.x], 0)
    }),
    ("pad(x, pads=[0, 1, 2, 0], value=1.5)", |t| {
        t.x.pad([0, 1, 2, 0], 1.5)
    }),
    ("pad(x, pads=[1, 1, 0, -1])", |t| {
        t.x.pad([1, 1, 0, -1], 0.0)
    }),
    ("index_select(x, idx, axis=0)", |t| {
        t.x.index_select(0, &t.idx)
    }),
    ("gather(x, gi, axis=1)", |t| t.x.gather(1, &t.gi)),
    ("index_add(x, idx, y, axis=0)", |t| {
        t.x.index_add(0, &t.idx, &t.y)
    }),
    ("embedding_bag(x, idx, idx)", |t| {
        t.x.embedding_bag(&t.idx, &t.idx, ferrite::BagMode::Sum, None, false, None)
    }),
    (
        "embedding_bag(x, idx, idx, mode=\"mean\", include_last_offset=true, padding_idx=-1)",
        |t| {
            t.x.embedding_bag(&t.idx, &t.idx, ferrite::BagMode::Mean, None, true, Some(-1))
        },
    ),
    ("full(shape=[2], value=3.0)", |t| {
        t.g.full([2], 3.0, DType::F32)
    }),
    ("full(shape=[2, 3], value=0.0, dtype=i32)", |t| {
        t.g.zeros([2, 3], DType::I32)
    }),
    ("full(shape=[2, 3], value=1.0)", |t| t.x.ones_like()),
    ("full(shape=[2, 3], value=0.0, dtype=i32)", |t| {
        t.n.zeros_like()
    }),
    ("full(shape=[2, 3], value=7.0, dtype=i32)", |t| {
        t.n.full_like(7.0)
    }),
    ("arange(end=5.0)", |t| t.g.arange(0.0, 5.0, 1.0, DType::I64)),
    ("arange(start=1.0, end=4.0, step=0.5, dtype=f32)", |t| {
        t.g.arange(1.0, 4.0, 0.5, DType::F32)
    }),
    ("add(x, 2.0)", |t| &t.x + t.g.scalar(2.0)),
];

#[test]
fn every_method_records_its_op() {
    for (text, build) in OPS {
        let t = inputs();
        let out = build(&t);
        t.g.output(&out);
        let built = t.g.to_ir().unwrap_or_else(|e| panic!("{text}: {e}"));
        let source = format!("graph case({PARAMS}) {{\n  return {text}\n}}\n");
        let want = ferrite::parse("case.fg", &source).unwrap_or_else(|d| panic!("{d}"));
        assert_eq!(
            ferrite::print(&built),
            ferrite::print(&want),
            "the method for `{text}` recorded something else"
        );
        assert_eq!(
            built.ty(built.outputs[0]),
            want.ty(want.outputs[0]),
            "{text}"
        );
    }
}

#[test]
fn scalars_take_the_dtype_of_the_tensor_beside_them() {
    let t = inputs();
    let cases: Vec<(Var, DType)> = vec![
        (&t.n * 0.5, DType::F32), // float literal, int tensor: f32
        (&t.n + 1, DType::I32),   // int literal adopts i32
        (&t.n / 2, DType::F32),   // true division
        (2.5 - &t.n, DType::F32), // on the left too
        (&t.x.cast(DType::F16) * 2.0, DType::F16),
        (&t.x.cast(DType::Bf16) + 1i64, DType::Bf16),
        (t.m.where_(1, 2), DType::I64), // two int literals, no tensor beside: i64
        (t.m.where_(&t.n, 0.5), DType::F32),
        (t.x.gt(1).logical_and(true), DType::Bool),
    ];
    for (i, (tensor, want)) in cases.iter().enumerate() {
        assert_eq!(tensor.dtype(), *want, "case {i}");
        assert_eq!(tensor.shape(), vec![2, 3], "case {i}");
    }
}

fn f32s(shape: &[usize], values: &[f32]) -> Tensor {
    Tensor::from_slice(shape, values).unwrap()
}

/// Runs a graph on every target that runs in this build and checks that they agree
/// with `want` within `tol`.
#[track_caller]
fn check_on_every_target(g: &Graph, inputs: &[&Tensor], want: &[Tensor], tol: f64) {
    for target in Target::ALL {
        let exe = compile(g, &Options::default().target(target))
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        let got = exe.run(inputs).unwrap_or_else(|e| panic!("{target}: {e}"));
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            a.check_close(b, tol, tol)
                .unwrap_or_else(|e| panic!("{target}: output {i}: {e}"));
        }
    }
}

#[test]
fn operators_compute_hand_checked_values() {
    let g = Graph::new("arith");
    let x = g.input("x", ferrite::f32(&[2, 3]));
    let n = g.input("n", ferrite::i32(&[2, 3]));
    g.output(&(2.0 - &x));
    g.output(&(&x * 3));
    g.output(&(1.0 / &x));
    g.output(&-(&x + 1.0));
    g.output(&(&n / 2));
    g.output(&(&n * 2 + 1));
    g.output(&x.gt(0.0).where_(&x, -1.0));
    let x_val = f32s(&[2, 3], &[1.0, -2.0, 4.0, -4.0, 5.0, -0.5]);
    let n_val = Tensor::from_vec(&[2, 3], vec![1i32, 2, 3, -4, 5, 6]).unwrap();
    let want = vec![
        f32s(&[2, 3], &[1.0, 4.0, -2.0, 6.0, -3.0, 2.5]),
        f32s(&[2, 3], &[3.0, -6.0, 12.0, -12.0, 15.0, -1.5]),
        f32s(&[2, 3], &[1.0, -0.5, 0.25, -0.25, 0.2, -2.0]),
        f32s(&[2, 3], &[-2.0, 1.0, -5.0, 3.0, -6.0, -0.5]),
        f32s(&[2, 3], &[0.5, 1.0, 1.5, -2.0, 2.5, 3.0]),
        Tensor::from_vec(&[2, 3], vec![3i32, 5, 7, -7, 11, 13]).unwrap(),
        f32s(&[2, 3], &[1.0, -1.0, 4.0, -1.0, 5.0, -1.0]),
    ];
    check_on_every_target(&g, &[&x_val, &n_val], &want, 1e-6);
}

#[test]
fn bitwise_operators_compute_hand_checked_values() {
    let g = Graph::new("bits");
    let n = g.input("n", ferrite::i32(&[4]));
    let k = g.input("k", ferrite::i32(&[4]));
    g.output(&(&n & 6));
    g.output(&(&n | &k));
    g.output(&(&n ^ -1));
    g.output(&!&n);
    g.output(&(&n << &k));
    g.output(&(&n >> &k));
    g.output(&(1 << &k));
    g.output(&n.gt(0).bitwise_xor(&k.gt(1)));
    let n_val = Tensor::from_vec(&[4], vec![5i32, -8, 3, i32::MIN]).unwrap();
    let k_val = Tensor::from_vec(&[4], vec![1i32, 2, 32, -1]).unwrap();
    let i = |v: Vec<i32>| Tensor::from_vec(&[4], v).unwrap();
    let want = vec![
        i(vec![4, 0, 2, 0]),
        i(vec![5, -6, 35, -1]),
        i(vec![-6, 7, -4, i32::MAX]),
        i(vec![-6, 7, -4, i32::MAX]),
        // A shift by the width (32) or a negative amount gives 0 to the left and the
        // sign fill to the right.
        i(vec![10, -32, 0, 0]),
        i(vec![2, -2, 0, -1]),
        i(vec![2, 4, 0, 0]),
        Tensor::from_vec(&[4], vec![true, true, false, false]).unwrap(),
    ];
    check_on_every_target(&g, &[&n_val, &k_val], &want, 0.0);
}

#[test]
fn reductions_and_movement_compute_hand_checked_values() {
    let g = Graph::new("shapes");
    let x = g.input("x", ferrite::f32(&[2, 3]));
    let idx = g.input("idx", ferrite::i64(&[3]));
    g.output(&x.sum([1], false));
    g.output(&x.max_all());
    g.output(&x.argmax(1, false));
    g.output(&x.mean([0], true));
    g.output(&x.slice(1, 1..));
    g.output(&concat(&[&x, &x.neg()], 0).transpose(0, 1));
    g.output(&x.pad([0, 1, 1, 0], 9.0));
    g.output(&x.index_select(0, &idx));
    g.output(&x.reshape([3, 2]).permute([1, 0]));
    g.output(&(g.arange(0.0, 3.0, 1.0, DType::F32) + &x));
    let x_val = f32s(&[2, 3], &[1.0, -2.0, 3.0, -4.0, 5.0, -6.0]);
    let idx_val = Tensor::from_vec(&[3], vec![1i64, 0, 1]).unwrap();
    let want = vec![
        f32s(&[2], &[2.0, -5.0]),
        f32s(&[], &[5.0]),
        Tensor::from_vec(&[2], vec![2i64, 1]).unwrap(),
        f32s(&[1, 3], &[-1.5, 1.5, -1.5]),
        f32s(&[2, 2], &[-2.0, 3.0, 5.0, -6.0]),
        f32s(
            &[3, 4],
            &[
                1.0, -4.0, -1.0, 4.0, -2.0, 5.0, 2.0, -5.0, 3.0, -6.0, -3.0, 6.0,
            ],
        ),
        f32s(
            &[3, 4],
            &[
                9.0, 1.0, -2.0, 3.0, 9.0, -4.0, 5.0, -6.0, 9.0, 9.0, 9.0, 9.0,
            ],
        ),
        f32s(&[3, 3], &[-4.0, 5.0, -6.0, 1.0, -2.0, 3.0, -4.0, 5.0, -6.0]),
        f32s(&[2, 3], &[1.0, 3.0, 5.0, -2.0, -4.0, -6.0]),
        f32s(&[2, 3], &[1.0, -1.0, 5.0, -4.0, 6.0, -4.0]),
    ];
    check_on_every_target(&g, &[&x_val, &idx_val], &want, 1e-6);
}

#[test]
fn normalizations_match_independent_formulas() {
    let g = Graph::new("norms");
    let x = g.input("x", ferrite::f32(&[2, 4]));
    let w = g.input("w", ferrite::f32(&[4]));
    let b = g.input("b", ferrite::f32(&[4]));
    g.output(&x.softmax(-1));
    g.output(&x.layer_norm(&w, &b, 1e-5));
    g.output(&x.rms_norm(&w, 1e-6));
    let xs = [0.5, -1.0, 2.0, 0.0, 3.0, 1.0, -2.0, 0.25];
    let ws = [1.0, 2.0, 0.5, -1.0];
    let bs = [0.0, 0.1, -0.2, 0.3];
    let (mut soft, mut ln, mut rms) = (vec![], vec![], vec![]);
    for row in xs.chunks(4) {
        let max = row.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
        let s: f64 = e.iter().sum();
        soft.extend(e.iter().map(|v| v / s));
        let mean = row.iter().sum::<f64>() / 4.0;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 4.0;
        ln.extend((0..4).map(|i| (row[i] - mean) / (var + 1e-5).sqrt() * ws[i] + bs[i]));
        let ms = row.iter().map(|v| v * v).sum::<f64>() / 4.0;
        rms.extend((0..4).map(|i| row[i] / (ms + 1e-6).sqrt() * ws[i]));
    }
    let ty = ferrite::f32(&[2, 4]);
    let want = [&soft, &ln, &rms].map(|v| Tensor::from_f64(&ty, v).unwrap());
    let x_val = Tensor::from_f64(&ty, &xs).unwrap();
    let w_val = Tensor::from_f64(&ferrite::f32(&[4]), &ws).unwrap();
    let b_val = Tensor::from_f64(&ferrite::f32(&[4]), &bs).unwrap();
    check_on_every_target(&g, &[&x_val, &w_val, &b_val], &want, 1e-5);
}

#[test]
fn a_failed_op_poisons_its_results_and_the_first_error_is_reported() {
    let g = Graph::new("bad");
    let a = g.input("a", ferrite::f32(&[2, 3]));
    let b = g.input("b", ferrite::f32(&[4, 5]));
    let c = a.matmul(&b); // line of the first error
    let line = line!() - 1;
    assert!(!c.is_valid());
    assert_eq!(c.shape(), Vec::<usize>::new());
    assert_eq!(c.size(0), 1);
    // Everything downstream is poisoned, without replacing the first error.
    let d = (c.relu() + &a).softmax(-1) * 2.0;
    assert!(!d.is_valid());
    let _ = a.reshape([7]); // a second, unrelated error
    g.output(&d);
    let err = g.check().unwrap_err();
    let Error::Build {
        op,
        operands,
        message,
        location,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(op, "matmul");
    assert_eq!(operands, &[ferrite::f32(&[2, 3]), ferrite::f32(&[4, 5])]);
    assert!(message.contains("inner dimensions differ"), "{message}");
    assert!(
        location.ends_with(&format!("api.rs:{line}:15")),
        "{location} should point at the matmul call"
    );
    assert_eq!(
        err.to_string(),
        format!("{location}: matmul(f32[2, 3], f32[4, 5]): {message}")
    );
    // compile reports the same error; nothing panicked.
    assert_eq!(compile(&g, &Options::default()).unwrap_err(), err);
    assert!(matches!(c.ty(), Err(e) if e == err));
}

#[test]
fn build_errors_name_the_op_and_the_shapes() {
    #[track_caller]
    fn first_error(f: impl FnOnce(&Graph, &Var)) -> String {
        let g = Graph::new("e");
        let x = g.input("x", ferrite::f32(&[2, 3]));
        f(&g, &x);
        g.check().unwrap_err().to_string()
    }
    let cases: Vec<(String, &str)> = vec![
        (
            first_error(|_, x| drop(x + x.reshape([3, 2]))),
            "add(f32[2, 3], f32[3, 2]): shapes [2, 3] and [3, 2] do not broadcast",
        ),
        (
            first_error(|_, x| drop(x.reshape([4, -1]))),
            "reshape(f32[2, 3]): cannot infer the -1 extent",
        ),
        (
            first_error(|_, x| drop(x.softmax(2))),
            "softmax(f32[2, 3]): axis 2 is out of range",
        ),
        (
            first_error(|_, x| drop(x.permute([0, 0]))),
            "permute(f32[2, 3]): axis 0 appears twice",
        ),
        (
            first_error(|_, x| drop(x.where_(1.0, 2.0))),
            "where(f32[2, 3], f32[], f32[]): the condition must be bool",
        ),
        (
            first_error(|_, x| {
                let _ = x.size(5);
            }),
            "size(f32[2, 3]): axis 5 is out of range",
        ),
        (
            first_error(|_, x| drop(x.slice_step(0, .., 0))),
            "slice(f32[2, 3]): step must be at least 1",
        ),
        (
            first_error(|_, x| drop(x.index_select(0, x))),
            "index_select(f32[2, 3], f32[2, 3]): the index must be i32 or i64",
        ),
        (
            first_error(|_, x| drop(x.layer_norm(x, x, 1e-5))),
            "layer_norm(f32[2, 3], f32[2, 3], f32[2, 3]): weight must have shape [3]",
        ),
        (
            first_error(|g, _| drop(g.full([-1], 0.0, DType::F32))),
            "full(): extent -1 is negative",
        ),
        (
            first_error(|g, _| drop(g.full([2], 0.5, DType::I32))),
            "full(): value 0.5 is not representable in i32",
        ),
        (
            first_error(|g, _| drop(g.arange(0.0, 1.0, 0.0, DType::F32))),
            "arange(): start, end and step must be finite",
        ),
        (
            first_error(|g, _| drop(g.input("x", ferrite::f32(&[1])))),
            "input(f32[1]): `x` is already defined",
        ),
        (
            first_error(|g, _| drop(g.input("no name", ferrite::f32(&[1])))),
            "`no name` is not a valid name",
        ),
        (
            first_error(|g, _| drop(g.input("big", ferrite::f32(&[1 << 20, 1 << 20])))),
            "more than 2147483648 elements",
        ),
        (
            first_error(|g, x| g.output(&concat(&[], 0).add(x))),
            "concat(): needs at least one operand",
        ),
        // A literal that does not fit the dtype it takes is the parser's error too
        // (tests/errors/literal_overflows_f16.fg), not an infinity or a wrap.
        (
            first_error(|g, _| drop(g.input("h", ferrite::f16(&[2])) * 3e38)),
            "mul(): literal `3e38` does not fit in f16",
        ),
        (
            first_error(|g, _| drop(g.input("i", ferrite::i32(&[2])) + (1i64 << 31))),
            "add(): literal `2147483648` does not fit in i32",
        ),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "`{got}` should contain `{want}`");
        assert!(
            got.starts_with("tests/api.rs:") || got.starts_with("tests"),
            "{got}"
        );
    }
}

#[test]
fn tensors_of_different_graphs_do_not_mix() {
    let g1 = Graph::new("one");
    let g2 = Graph::new("two");
    let a = g1.input("a", ferrite::f32(&[2]));
    let b = g2.input("b", ferrite::f32(&[2]));
    let c = &a + &b;
    assert!(!c.is_valid());
    assert!(matches!(g1.check(), Err(Error::ForeignVar { ref op, .. }) if op == "add"));
    assert!(g2.check().is_ok());
    // Outputting another graph's value is an error too.
    g2.output(&a);
    assert!(matches!(g2.check(), Err(Error::ForeignVar { ref op, .. }) if op == "output"));
}

#[test]
fn a_graph_without_outputs_does_not_compile() {
    let g = Graph::new("empty");
    let _ = g.input("x", ferrite::f32(&[2]));
    assert_eq!(
        compile(&g, &Options::default()).unwrap_err(),
        Error::NoOutputs {
            graph: "empty".into()
        }
    );
}

fn scale_graph() -> Graph {
    let g = Graph::new("scale");
    let x = g.input("x", ferrite::f32(&[2, 2]));
    let s = g.input("s", ferrite::f32(&[2]));
    g.output(&(&x * &s));
    g
}

#[test]
fn wrong_inputs_are_typed_errors_on_every_target() {
    let g = scale_graph();
    let x = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let s = f32s(&[2], &[10.0, 100.0]);
    let wrong_shape = f32s(&[2, 3], &[0.0; 6]);
    let wrong_dtype = Tensor::from_vec(&[2, 2], vec![1i64, 2, 3, 4]).unwrap();
    for target in Target::ALL {
        let exe = compile(&g, &Options::default().target(target)).unwrap();
        assert_eq!(
            exe.run(&[&x]).unwrap_err(),
            Error::InputCount {
                expected: 2,
                got: 1
            }
        );
        assert_eq!(
            exe.run(&[&x, &s, &s]).unwrap_err(),
            Error::InputCount {
                expected: 2,
                got: 3
            }
        );
        let err = exe.run(&[&wrong_shape, &s]).unwrap_err();
        assert_eq!(
            err,
            Error::InputShape {
                index: 0,
                name: "x".into(),
                expected: vec![2, 2],
                got: vec![2, 3]
            }
        );
        assert_eq!(
            err.to_string(),
            "input 0 (`x`) has shape [2, 3] but the parameter is [2, 2]"
        );
        assert_eq!(
            exe.run(&[&wrong_dtype, &s]).unwrap_err(),
            Error::InputDType {
                index: 0,
                name: "x".into(),
                expected: DType::F32,
                got: DType::I64
            }
        );
        // Owned tensors work as well as references.
        let out = exe.run(&[x.clone(), s.clone()]).unwrap();
        assert_eq!(out[0], f32s(&[2, 2], &[10.0, 200.0, 30.0, 400.0]));
    }
}

#[test]
fn run_time_failures_are_errors() {
    let g = Graph::new("lookup");
    let table = g.input("table", ferrite::f32(&[3, 2]));
    let ids = g.input("ids", ferrite::i64(&[2]));
    g.output(&table.index_select(0, &ids));
    let t = f32s(&[3, 2], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let ok = Tensor::from_vec(&[2], vec![2i64, 0]).unwrap();
    let bad = Tensor::from_vec(&[2], vec![2i64, 3]).unwrap();
    for target in Target::ALL {
        let exe = compile(&g, &Options::default().target(target)).unwrap();
        let out = exe.run(&[&t, &ok]).unwrap();
        assert_eq!(out[0], f32s(&[2, 2], &[4.0, 5.0, 0.0, 1.0]), "{target}");
        let err = exe.run(&[&t, &bad]).unwrap_err();
        assert!(matches!(err, Error::Run { .. }), "{target}: {err:?}");
    }
}

/// `exp(x * 2) + 1` summed over the rows of a 64x64 `x`: four primitive ops, nothing
/// for the optimizer to remove, one kernel fused.
fn chain_graph() -> Graph {
    let g = Graph::new("chain");
    let x = g.input("x", ferrite::f32(&[64, 64]));
    g.output(&((&x * 2.0).exp() + 1.0).sum([1], false));
    g
}

#[test]
fn options_select_fusion_threads_and_dumps() {
    let g = chain_graph();
    let x_val = Tensor::random(&ferrite::f32(&[64, 64]), 3).unwrap();
    let fused = compile(&g, &Options::default()).unwrap();
    let unfused = compile(
        &g,
        &Options::default().fuse(false).optimize(false).threads(1),
    )
    .unwrap();
    let (kf, ku) = (
        fused.kernel_count().unwrap(),
        unfused.kernel_count().unwrap(),
    );
    assert_eq!(kf, 1, "a pointwise chain into a reduction is one kernel");
    assert_eq!(ku, 4, "one kernel per primitive op");
    let (a, b) = (
        fused.run(&[&x_val]).unwrap(),
        unfused.run(&[&x_val]).unwrap(),
    );
    a[0].check_close(&b[0], 1e-5, 1e-5).unwrap();
    assert_eq!(fused.target(), Target::Cpu);
    assert_eq!(fused.input_types(), vec![ferrite::f32(&[64, 64])]);
    assert_eq!(fused.output_types(), vec![ferrite::f32(&[64])]);
    let names: Vec<&str> = fused.stage_times().iter().map(|s| s.0).collect();
    assert_eq!(
        names,
        [
            "decompose",
            "optimize",
            "schedule",
            "memory plan",
            "cpu codegen"
        ]
    );

    let dir = std::env::temp_dir().join(format!("ferrite-api-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dumped = compile(&g, &Options::default().dump(&dir)).unwrap();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "00-parsed.fg",
            "01-decomposed.fg",
            "02-optimized.fg",
            "03-kernels.loop",
            "04-memory.txt",
            "05-cpu-plan.loop",
            "06-cpu.clif",
            "graph.dot"
        ]
    );
    // `dump_files` lists them in the order written, which is also their sorted order.
    let listed: Vec<_> = files.iter().map(|f| dir.join(f)).collect();
    assert_eq!(dumped.dump_files(), &listed[..]);
    let graph_text = std::fs::read_to_string(dir.join("00-parsed.fg")).unwrap();
    assert_eq!(
        ferrite::print(&ferrite::parse("g.fg", &graph_text).unwrap()),
        graph_text
    );
    // The CPU stage has the kernel's loop IR and its Cranelift IR.
    let cpu_text = std::fs::read_to_string(dir.join("06-cpu.clif")).unwrap();
    let kernel = &fused.program().unwrap().kernels[0].name;
    assert!(cpu_text.contains(&format!("==== {kernel}")), "{cpu_text}");
    assert!(cpu_text.contains("-- clif"), "{cpu_text}");
    std::fs::remove_dir_all(&dir).unwrap();

    // A dump directory that cannot be created is an I/O error naming it.
    let file = std::env::temp_dir().join(format!("ferrite-api-file-{}", std::process::id()));
    std::fs::write(&file, "not a directory").unwrap();
    let err = compile(
        &g,
        &Options::default()
            .target(Target::Interp)
            .dump(file.join("sub")),
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::Io { ref path, .. } if path.starts_with(&file)),
        "{err:?}"
    );
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn compiled_reports_its_pipeline_code_and_runs() {
    let g = chain_graph();
    let x_val = Tensor::random(&ferrite::f32(&[64, 64]), 5).unwrap();
    let expected = compile(&g, &Options::default().target(Target::Interp))
        .unwrap()
        .run(&[&x_val])
        .unwrap();

    let fused = compile(&g, &Options::default().threads(2)).unwrap();
    assert_eq!(fused.decomposed_graph().unwrap().op_count(), 4);
    assert_eq!(fused.optimized_graph().unwrap().op_count(), 4);
    assert!(fused.optimize_report().unwrap().iterations >= 1);
    // One fused kernel keeps nothing in memory between kernels.
    assert_eq!(fused.schedule().unwrap().memory.peak_bytes(), 0);
    assert_eq!(fused.options().threads, Some(2));

    // The unfused baseline: one kernel per primitive op of the same optimized graph;
    // at most two 64x64 f32 intermediates are alive at once (a kernel's input and
    // output), so the peak is 2 * 16 KiB.
    let unfused = fused.unfused().unwrap();
    assert_eq!(unfused.kernel_count(), Some(4));
    assert_eq!(
        unfused.schedule().unwrap().memory.peak_bytes(),
        2 * 64 * 64 * 4
    );
    assert_eq!(unfused.optimized_graph(), fused.optimized_graph());
    let names: Vec<&str> = unfused.stage_times().iter().map(|s| s.0).collect();
    assert_eq!(names, ["schedule", "cpu codegen"]);
    unfused.run(&[&x_val]).unwrap()[0]
        .check_close(&expected[0], 1e-5, 1e-5)
        .unwrap();
    assert!(!unfused.options().fuse);

    // `execute` runs on the same tensors as `run`, checked the same way.
    let xs = std::slice::from_ref(&x_val);
    let done = fused.execute(xs).unwrap();
    assert!(done.device_report().is_none());
    let out = done.into_outputs().remove(0);
    out.check_close(&expected[0], 1e-5, 1e-5).unwrap();
    let wrong = Tensor::random(&ferrite::f32(&[64, 65]), 5).unwrap();
    assert!(matches!(
        fused.execute(&[wrong]).unwrap_err(),
        Error::InputShape { index: 0, .. }
    ));

    // The CPU's code text names each kernel; Cranelift IR only when dumping.
    let kernel = fused.program().unwrap().kernels[0].name.clone();
    let text = fused.code_text().unwrap();
    assert!(text.contains(&format!("==== {kernel}")), "{text}");
    assert!(!text.contains("-- clif"), "{text}");

    // Profiling measures every kernel of each schedule.
    let profile = fused.profile(xs, 2).unwrap();
    assert!(profile.fused);
    assert_eq!(profile.kernels.len(), 1);
    let mut done = Vec::new();
    let profile = unfused
        .profile_with_progress(xs, 2, &mut |n| done.push(n))
        .unwrap();
    assert_eq!(done, [1, 2]);
    assert!(!profile.fused);
    assert_eq!(profile.kernels.len(), 4);
    assert_eq!(profile.peak_intermediate_bytes, 2 * 64 * 64 * 4);

    // On the simulator a run reports one launch per kernel, and the code is tile text.
    let sim = compile(&g, &Options::default().target(Target::Sim)).unwrap();
    let done = sim.execute(xs).unwrap();
    let report = done.device_report().unwrap();
    assert_eq!(report.launches.len(), sim.kernel_count().unwrap());
    assert!(report.cycles() > 0);
    done.outputs()[0]
        .check_close(&expected[0], 1e-4, 1e-4)
        .unwrap();
    let kernel = &sim.program().unwrap().kernels[0].name;
    assert!(sim
        .code_text()
        .unwrap()
        .contains(&format!("kernel {kernel}(")));
    let sim_profile = sim.profile(xs, 1).unwrap();
    assert_eq!(sim_profile.total_cycles, Some(report.cycles()));

    // The interpreter runs no pipeline: nothing to report, unfuse or profile.
    let interp = compile(&g, &Options::default().target(Target::Interp)).unwrap();
    assert!(interp.schedule().is_none() && interp.optimize_report().is_none());
    assert!(interp.code_text().is_none() && interp.stage_times().is_empty());
    // Asking for them is the user's mistake, not a compiler bug.
    let err = interp.unfused().unwrap_err();
    assert!(
        matches!(
            err,
            Error::WrongTarget {
                target: Target::Interp,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_internal());
    let err = interp.profile(xs, 1).unwrap_err();
    assert!(matches!(err, Error::WrongTarget { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "profiling needs the cpu or sim target; this program is compiled for interp"
    );
    // The loop-IR evaluator has a schedule but no generated code.
    let loops = compile(&g, &Options::default().target(Target::Loops)).unwrap();
    assert_eq!(loops.kernel_count(), Some(1));
    assert!(loops.code_text().is_none());
    let names: Vec<&str> = loops.stage_times().iter().map(|s| s.0).collect();
    assert_eq!(names, ["decompose", "optimize", "schedule", "memory plan"]);
}

#[test]
fn targets_parse_and_the_simulator_dumps_its_tile_kernels() {
    for t in Target::ALL {
        assert_eq!(t.name().parse::<Target>().unwrap(), t);
    }
    assert!("gpu".parse::<Target>().is_err());
    assert_eq!(Options::default().target, Target::Cpu);

    let dir = std::env::temp_dir().join(format!("ferrite-api-sim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let exe = compile(
        &scale_graph(),
        &Options::default().target(Target::Sim).dump(&dir),
    )
    .unwrap();
    assert_eq!(exe.target(), Target::Sim);
    let names: Vec<&str> = exe.stage_times().iter().map(|s| s.0).collect();
    assert_eq!(
        names,
        [
            "decompose",
            "optimize",
            "schedule",
            "memory plan",
            "tile lowering"
        ]
    );
    let tiles = std::fs::read_to_string(dir.join("05-kernels.tile")).unwrap();
    let kernel = &exe.program().unwrap().kernels[0].name;
    assert!(tiles.contains(&format!("kernel {kernel}(")), "{tiles}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn compile_ir_takes_parsed_graphs_and_checks_them() {
    let g = ferrite::parse(
        "t.fg",
        "graph t(x: f32[3]) {\n  return mul(relu(x), 2.0)\n}\n",
    )
    .unwrap();
    let exe = compile_ir(&g, &Options::default()).unwrap();
    let out = exe.run(&[&f32s(&[3], &[-1.0, 0.5, 2.0])]).unwrap();
    assert_eq!(out[0], f32s(&[3], &[0.0, 1.0, 4.0]));
    let mut broken = g.clone();
    broken.outputs.clear();
    assert!(matches!(
        compile_ir(&broken, &Options::default()),
        Err(Error::InvalidGraph { .. })
    ));
}

/// Every `examples/*.fg` graph compiles for the CPU and the simulator and agrees with
/// the interpreter. (The loop-IR evaluator is left out here: it takes seconds per
/// matmul-heavy example; the small graphs above run on it.)
#[test]
fn every_example_graph_agrees_with_the_interpreter() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "fg"))
        .collect();
    files.sort();
    assert!(files.len() >= 8);
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let g = ferrite::parse(&name, &std::fs::read_to_string(&path).unwrap()).unwrap();
        let inputs: Vec<Tensor> = g
            .param_types()
            .iter()
            .enumerate()
            .map(|(i, ty)| Tensor::random(ty, i as u64).unwrap())
            .collect();
        let want = compile_ir(&g, &Options::default().target(Target::Interp))
            .unwrap()
            .run(&inputs)
            .unwrap();
        for target in [Target::Cpu, Target::Sim] {
            let got = compile_ir(&g, &Options::default().target(target))
                .unwrap_or_else(|e| panic!("{name} on {target}: {e}"))
                .run(&inputs)
                .unwrap_or_else(|e| panic!("{name} on {target}: {e}"));
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                // f32 arithmetic against the interpreter's f64, on unscaled random
                // weights: errors are relative to the output's magnitude.
                let scale = b.to_f64_vec().iter().fold(1.0f64, |m, v| m.max(v.abs()));
                a.check_close(b, 1e-4, 1e-4 * scale)
                    .unwrap_or_else(|e| panic!("{name} on {target}, output {i}: {e}"));
            }
        }
    }
}

#[test]
fn compiled_programs_run_from_many_threads_at_once() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ferrite::Compiled>();
    assert_send_sync::<Graph>();
    assert_send_sync::<Var>();
    assert_send_sync::<Tensor>();
    assert_send_sync::<Error>();

    let g = Graph::new("mlp");
    let x = g.input("x", ferrite::f32(&[32, 128]));
    let w = g.input("w", ferrite::f32(&[128, 64]));
    g.output(&(x.matmul(&w).gelu() * 0.5).softmax(-1));
    let exe = compile(&g, &Options::default().threads(2)).unwrap();
    let w_val = Tensor::random(&ferrite::f32(&[128, 64]), 99).unwrap();
    let xs: Vec<Tensor> = (0..8)
        .map(|i| Tensor::random(&ferrite::f32(&[32, 128]), i).unwrap())
        .collect();
    let serial: Vec<Tensor> = xs
        .iter()
        .map(|x| exe.run(&[x, &w_val]).unwrap().remove(0))
        .collect();
    let parallel: Vec<Vec<Tensor>> = std::thread::scope(|s| {
        let handles: Vec<_> = xs
            .iter()
            .map(|x| {
                let (exe, w_val) = (&exe, &w_val);
                s.spawn(move || {
                    (0..5)
                        .map(|_| exe.run(&[x, w_val]).unwrap().remove(0))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, runs) in parallel.iter().enumerate() {
        for r in runs {
            assert_eq!(r, &serial[i], "thread {i} got a different result");
        }
    }
}

#[test]
fn arrays_convert_from_and_to_vecs_slices_and_npy() {
    let a = Tensor::from_vec(&[2, 3], vec![1i32, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(a.shape(), &[2, 3]);
    assert_eq!(a.dtype(), DType::I32);
    assert_eq!((a.rank(), a.len(), a.is_empty()), (2, 6, false));
    assert_eq!(a.as_slice::<i32>(), Some(&[1, 2, 3, 4, 5, 6][..]));
    assert_eq!(a.as_slice::<f32>(), None);
    assert!(matches!(a.to_vec::<i64>(), Err(Error::Data { .. })));
    assert_eq!(a.to_f64_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let r = a.clone().reshape(&[3, 2]).unwrap();
    assert_eq!(r.shape(), &[3, 2]);
    assert!(a.clone().reshape(&[4]).is_err());
    assert_eq!(r.into_vec::<i32>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(a.to_string(), "i32[2, 3] [1, 2, 3, 4, 5, 6]");

    assert!(matches!(
        Tensor::from_vec(&[2, 2], vec![1.0f32; 3]),
        Err(Error::Data { .. })
    ));
    assert!(Tensor::full(&[usize::MAX, 2], 0u8 != 0).is_err());
    assert_eq!(Tensor::scalar(2.5f32).shape(), &[] as &[usize]);
    let h = Tensor::full(&[2], ferrite::half::f16::from_f32(1.5)).unwrap();
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(h.to_f64_vec(), vec![1.5, 1.5]);
    let b = Tensor::from_slice(&[3], &[true, false, true]).unwrap();
    assert_eq!(b.to_string(), "bool[3] [true, false, true]");
    let z = Tensor::zeros(&ferrite::f32(&[20])).unwrap();
    assert_eq!(z.to_string(), "f32[20] [0, 0, 0, 0, .., 0, 0, 0, 0]");

    // .npy bytes and files.
    for arr in [a.clone(), b.clone(), h.clone(), Tensor::scalar(7i64)] {
        assert_eq!(Tensor::from_npy(&arr.to_npy()).unwrap(), arr);
    }
    assert!(matches!(
        Tensor::from_npy(b"not npy"),
        Err(Error::Npy { .. })
    ));
    let path = std::env::temp_dir().join(format!("ferrite-api-{}.npy", std::process::id()));
    a.write_npy(&path).unwrap();
    assert_eq!(Tensor::read_npy(&path).unwrap(), a);
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(Tensor::read_npy(&path), Err(Error::Io { .. })));

    // The IR tensor converts both ways; a malformed one is refused.
    let t: ferrite::ir::Tensor = a.clone().into();
    assert_eq!(Tensor::try_from(t.clone()).unwrap(), a);
    let mut broken = t;
    broken.ty.shape = vec![7];
    assert!(matches!(Tensor::try_from(broken), Err(Error::Data { .. })));
    let ty = TensorType {
        dtype: DType::F32,
        shape: vec![2],
    };
    assert!(Tensor::from_f64(&ty, &[1.0]).is_err());
    assert_eq!(
        Tensor::from_f64(&ty, &[1.0, 2.0])
            .unwrap()
            .as_slice::<f32>(),
        Some(&[1.0f32, 2.0][..])
    );
}
