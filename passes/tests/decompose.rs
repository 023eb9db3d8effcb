//! Tests of the `decompose` pass.
//!
//! Every test builds a graph with the `ferrite_ir` API, decomposes it, and checks that
//! (1) only primitive ops remain and every binary op / `where` has operands of one
//! dtype, (2) the verifier accepts the result and the signature (parameter types,
//! output types and names) is unchanged, and (3) the reference interpreter gives the
//! same outputs for the original and the decomposed graph, on random inputs and on
//! edge inputs (huge magnitudes, infinities, NaN, constant rows). Several tests also
//! compare the decomposed graph with values computed here in f64 by an independent,
//! hand-written formula, so a shared mistake in the interpreter's composite ops and
//! the decomposition would still be caught.

use ferrite_ir::{
    interpret, verify, BinaryOp, DType, Graph, Op, ReduceOp, Scalar, Tensor, TensorType, UnaryOp,
    ValueId,
};
use ferrite_passes::decompose::decompose;

// ---------------------------------------------------------------------------------
// Helpers

fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.to_vec()).unwrap()
}

fn param(g: &mut Graph, name: &str, dtype: DType, shape: &[usize]) -> ValueId {
    g.add_param(name, ty(dtype, shape)).unwrap()
}

fn add(g: &mut Graph, op: Op, inputs: &[ValueId]) -> ValueId {
    g.add(op, inputs, None).unwrap()
}

fn named(g: &mut Graph, name: &str, op: Op, inputs: &[ValueId]) -> ValueId {
    g.add(op, inputs, Some(name.to_string())).unwrap()
}

fn lit(g: &mut Graph, v: f64, dtype: DType) -> ValueId {
    let value = if dtype.is_float() {
        Scalar::Float(v)
    } else {
        Scalar::Int(v as i64)
    };
    g.add_literal(value, dtype).unwrap()
}

fn un(u: UnaryOp) -> Op {
    Op::Unary(u)
}

fn bin(b: BinaryOp) -> Op {
    Op::Binary(b)
}

fn reduce(op: ReduceOp, axes: Option<&[i64]>, keepdim: bool) -> Op {
    Op::Reduce {
        op,
        axes: axes.map(|a| a.to_vec()),
        keepdim,
    }
}

/// A tensor of `ty` from f64 values (rounded to the dtype).
fn tensor(ty: &TensorType, values: &[f64]) -> Tensor {
    Tensor::from_f64(ty, values)
}

/// Random inputs for every parameter, floats scaled from [-1, 1) to [-scale, scale).
fn random_inputs(g: &Graph, seed: u64, scale: f64) -> Vec<Tensor> {
    g.param_types()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let r = Tensor::random(t, seed.wrapping_mul(1000).wrapping_add(i as u64));
            if t.dtype.is_float() {
                let v: Vec<f64> = r.to_f64().iter().map(|x| x * scale).collect();
                tensor(t, &v)
            } else {
                r
            }
        })
        .collect()
}

/// Asserts the structural postconditions of `decompose` on `d`, decomposed from `g`.
fn assert_decomposed(g: &Graph, d: &Graph) {
    verify(d).unwrap_or_else(|e| panic!("decomposed graph does not verify: {e}"));
    for (i, n) in d.nodes.iter().enumerate() {
        assert!(
            n.op.is_primitive(),
            "%{i} ({}) is not primitive",
            n.op.name()
        );
        let same_dtype = |a: ValueId, b: ValueId| d.ty(a).dtype == d.ty(b).dtype;
        match n.op {
            Op::Binary(_) => assert!(
                same_dtype(n.inputs[0], n.inputs[1]),
                "%{i} ({}) mixes {} and {}",
                n.op.name(),
                d.ty(n.inputs[0]),
                d.ty(n.inputs[1])
            ),
            Op::Where => assert!(same_dtype(n.inputs[1], n.inputs[2]), "%{i} where mixes"),
            _ => {}
        }
    }
    assert_eq!(d.name, g.name);
    assert_eq!(d.param_types(), g.param_types());
    for (&a, &b) in g.params.iter().zip(&d.params) {
        assert_eq!(g.node(a).name, d.node(b).name, "parameter names");
    }
    assert_eq!(d.outputs.len(), g.outputs.len());
    for i in 0..g.outputs.len() {
        assert_eq!(d.ty(d.outputs[i]), g.ty(g.outputs[i]), "output {i} type");
        assert_eq!(d.output_name(i), g.output_name(i), "output {i} name");
    }
    assert_eq!(d.declared_outputs, g.declared_outputs);
}

/// Decomposes `g`, checks its structure, and compares the interpreter's outputs of `g`
/// and of the decomposition on every input set. Returns the decomposition.
fn check_equivalent(g: &Graph, input_sets: &[Vec<Tensor>], rtol: f64, atol: f64) -> Graph {
    verify(g).unwrap();
    let d = decompose(g).unwrap_or_else(|e| panic!("decompose failed: {e}"));
    assert_decomposed(g, &d);
    for (k, inputs) in input_sets.iter().enumerate() {
        let want = interpret(g, inputs).unwrap_or_else(|e| panic!("original: {e}"));
        let got = interpret(&d, inputs).unwrap_or_else(|e| panic!("decomposed: {e}"));
        assert_eq!(want.len(), got.len());
        for (i, (w, o)) in want.iter().zip(&got).enumerate() {
            o.check_close(w, rtol, atol).unwrap_or_else(|e| {
                panic!(
                    "input set {k}, output {i} (`{}`): {e}\n  original:   {:?}\n  decomposed: {:?}",
                    g.output_name(i),
                    w.to_f64(),
                    o.to_f64()
                )
            });
        }
    }
    d
}

/// `t`'s values times `k`, as f64.
fn scaled(t: &Tensor, k: f64) -> Vec<f64> {
    t.to_f64().iter().map(|v| v * k).collect()
}

/// `seeds` random input sets scaled to [-scale, scale).
fn random_sets(g: &Graph, seeds: u64, scale: f64) -> Vec<Vec<Tensor>> {
    (0..seeds).map(|s| random_inputs(g, s, scale)).collect()
}

/// Runs the decomposed graph and returns output `i` as f64.
fn run_decomposed(g: &Graph, inputs: &[Tensor], i: usize) -> Vec<f64> {
    let d = decompose(g).unwrap();
    interpret(&d, inputs).unwrap()[i].to_f64()
}

/// Asserts `got` matches `want` elementwise (NaN matches NaN, infinities exactly).
fn assert_values(got: &[f64], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (i, (&a, &e)) in got.iter().zip(want).enumerate() {
        let ok = (a.is_nan() && e.is_nan()) || a == e || (a - e).abs() <= atol + rtol * e.abs();
        assert!(
            ok,
            "element {i}: got {a}, want {e}\n  got:  {got:?}\n  want: {want:?}"
        );
    }
}

fn count_ops(d: &Graph, pred: impl Fn(&Op) -> bool) -> usize {
    d.nodes.iter().filter(|n| pred(&n.op)).count()
}

/// f64 softmax (or log-softmax) of each row of `rows` (last axis), computed the
/// textbook way with the maximum subtracted.
fn softmax_rows(values: &[f64], n: usize, log: bool) -> Vec<f64> {
    let mut out = Vec::with_capacity(values.len());
    for row in values.chunks(n) {
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|x| (x - m).exp()).sum();
        for x in row {
            out.push(if log {
                (x - m) - s.ln()
            } else {
                (x - m).exp() / s
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------
// Elementwise composites

#[test]
fn relu_keeps_int_dtypes_int() {
    let mut g = Graph::new("relu");
    let x = param(&mut g, "x", DType::F32, &[2, 5]);
    let i = param(&mut g, "i", DType::I32, &[7]);
    let j = param(&mut g, "j", DType::I64, &[3]);
    let h = param(&mut g, "h", DType::F16, &[4]);
    let a = named(&mut g, "a", un(UnaryOp::Relu), &[x]);
    let b = named(&mut g, "b", un(UnaryOp::Relu), &[i]);
    let c = named(&mut g, "c", un(UnaryOp::Relu), &[j]);
    let e = named(&mut g, "e", un(UnaryOp::Relu), &[h]);
    g.outputs = vec![a, b, c, e];

    let edge = vec![
        tensor(
            &ty(DType::F32, &[2, 5]),
            &[
                -1.0,
                0.0,
                2.5,
                -0.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                1e30,
                -1e30,
                1e-40,
            ],
        ),
        tensor(
            &ty(DType::I32, &[7]),
            &[-5.0, -1.0, 0.0, 1.0, 7.0, -2147483648.0, 2147483647.0],
        ),
        Tensor::from_i64(&ty(DType::I64, &[3]), &[i64::MIN, -3, i64::MAX]),
        tensor(&ty(DType::F16, &[4]), &[-65504.0, 65504.0, -0.5, 0.5]),
    ];
    let mut sets = random_sets(&g, 4, 3.0);
    sets.push(edge.clone());
    let d = check_equivalent(&g, &sets, 0.0, 0.0);

    // relu is `maximum(x, 0)` with the literal in x's dtype: no cast, int stays int.
    assert_eq!(count_ops(&d, |op| matches!(op, Op::Cast { .. })), 0);
    assert_eq!(count_ops(&d, |op| *op == bin(BinaryOp::Maximum)), 4);
    for &o in &d.outputs {
        let n = d.node(o);
        assert_eq!(n.op, bin(BinaryOp::Maximum));
        let zero = d.node(n.inputs[1]);
        assert!(matches!(zero.op, Op::Literal { .. }));
        assert_eq!(zero.ty.dtype, n.ty.dtype);
    }
    let out = interpret(&d, &edge).unwrap();
    assert_values(
        &out[1].to_f64(),
        &[0.0, 0.0, 0.0, 1.0, 7.0, 0.0, 2147483647.0],
        0.0,
        0.0,
    );
    assert_eq!(out[2].to_i64(), vec![0, 0, i64::MAX]);
    assert_values(
        &out[0].to_f64()[..6],
        &[0.0, 0.0, 2.5, 0.0, f64::INFINITY, 0.0],
        0.0,
        0.0,
    );
    assert!(
        out[0].to_f64()[6].is_nan(),
        "relu(NaN) is NaN, as in PyTorch"
    );
}

fn sigmoid_like_graph(dtype: DType, shape: &[usize]) -> Graph {
    let mut g = Graph::new("sigmoids");
    let x = param(&mut g, "x", dtype, shape);
    let s = named(&mut g, "sig", un(UnaryOp::Sigmoid), &[x]);
    let si = named(&mut g, "silu", un(UnaryOp::Silu), &[x]);
    let ge = named(&mut g, "gelu", un(UnaryOp::Gelu), &[x]);
    let gt = named(&mut g, "gelu_tanh", un(UnaryOp::GeluTanh), &[x]);
    g.outputs = vec![s, si, ge, gt];
    g
}

/// Edge values where sigmoid-like functions saturate or lose precision.
const SIGMOID_EDGES: [f64; 16] = [
    0.0, -0.0, 1.0, -1.0, 20.0, -20.0, 88.0, -88.0, 100.0, -100.0, 1000.0, -1000.0, 1e30, -1e30,
    5.5, -5.5,
];

#[test]
fn sigmoid_silu_gelu_f32() {
    let g = sigmoid_like_graph(DType::F32, &[16]);
    let edge = vec![tensor(&ty(DType::F32, &[16]), &SIGMOID_EDGES)];
    let mut sets = random_sets(&g, 6, 6.0);
    sets.push(edge.clone());
    let d = check_equivalent(&g, &sets, 2e-5, 1e-6);

    // Independent check against f64 formulas (erf is checked at points with known values).
    let sig: Vec<f64> = SIGMOID_EDGES
        .iter()
        .map(|&x| 1.0 / (1.0 + (-x).exp()))
        .collect();
    let out = interpret(&d, &edge).unwrap();
    // sigmoid(-100) = 3.7e-44 is an f32 subnormal: compare it with an absolute tolerance.
    assert_values(&out[0].to_f64(), &sig, 1e-6, 1e-44);
    let silu: Vec<f64> = SIGMOID_EDGES.iter().zip(&sig).map(|(x, s)| x * s).collect();
    assert_values(&out[1].to_f64(), &silu, 1e-6, 1e-40);
    let gelu_tanh: Vec<f64> = SIGMOID_EDGES
        .iter()
        .map(|&x| {
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + inner.tanh())
        })
        .collect();
    assert_values(&out[3].to_f64(), &gelu_tanh, 1e-5, 1e-6);
    // gelu(x) = x * Phi(x): Phi(0) = 0.5, Phi(1) = 0.8413447460685429, Phi(5.5) = 1 - 1.899e-8.
    let gelu = out[2].to_f64();
    assert_values(
        &gelu[..4],
        &[0.0, 0.0, 0.8413447460685429, -0.15865525393145707],
        1e-6,
        1e-7,
    );
    assert_values(&gelu[14..], &[5.5, -5.5 * 1.8989562465887e-8], 1e-6, 1e-6);
    assert_values(&[gelu[10], gelu[12]], &[1000.0, 1e30], 1e-6, 0.0);
}

#[test]
fn gelu_keeps_its_tail_and_counts_a_subnormal_erfc_as_zero() {
    // gelu(-8) = -8 * Phi(-8) = -4.9e-15 (1 + erf cancels to 0 there); gelu(-12.5) =
    // -1.1e-34 is kept; at -13.5 erfc(9.55) = 1.5e-41 is subnormal, so gelu is -0 in f32
    // (f64 keeps its -3.9e-40).
    let mut g = Graph::new("gelu_tail");
    let x = param(&mut g, "x", DType::F32, &[3]);
    let y = named(&mut g, "y", un(UnaryOp::Gelu), &[x]);
    g.outputs = vec![y];
    let inputs = vec![tensor(&ty(DType::F32, &[3]), &[-8.0, -12.5, -13.5])];
    let out = interpret(&decompose(&g).unwrap(), &inputs).unwrap()[0].to_f64();
    let want = |x: f64| 0.5 * x * ferrite_ir::interp::erfc(-x / 2f64.sqrt());
    assert_values(&out[..2], &[want(-8.0), want(-12.5)], 1e-5, 0.0);
    assert!(out[2] == 0.0 && out[2].is_sign_negative(), "{out:?}");
    let mut g = Graph::new("gelu_tail64");
    let x = param(&mut g, "x", DType::F64, &[1]);
    let y = named(&mut g, "y", un(UnaryOp::Gelu), &[x]);
    g.outputs = vec![y];
    let inputs = vec![tensor(&ty(DType::F64, &[1]), &[-13.5])];
    let out = interpret(&decompose(&g).unwrap(), &inputs).unwrap()[0].to_f64();
    assert_values(&out, &[want(-13.5)], 1e-12, 0.0);
}

#[test]
fn sigmoid_saturates_without_overflow_or_nan() {
    // exp(-x) overflows f32 for x < -88.7; the decomposition must still give 0 and 1
    // at the infinities and NaN only for NaN.
    let mut g = Graph::new("sig_edges");
    let x = param(&mut g, "x", DType::F32, &[5]);
    let s = named(&mut g, "s", un(UnaryOp::Sigmoid), &[x]);
    g.outputs = vec![s];
    let edge = vec![tensor(
        &ty(DType::F32, &[5]),
        &[f64::NEG_INFINITY, f64::INFINITY, f64::NAN, -95.0, 95.0],
    )];
    check_equivalent(&g, std::slice::from_ref(&edge), 1e-6, 1e-44);
    let got = run_decomposed(&g, &edge, 0);
    assert_eq!(got[0], 0.0);
    assert_eq!(got[1], 1.0);
    assert!(got[2].is_nan());
    // sigmoid(-95) = 5.5e-42, an f32 subnormal: the naive 1 / (1 + exp(95)) gives 0.
    assert!(
        got[3] > 5.0e-42 && got[3] < 6.0e-42,
        "sigmoid(-95) = {}",
        got[3]
    );
    assert_eq!(got[4], 1.0);
}

#[test]
fn sigmoid_like_ops_in_half_precision_compute_in_f32() {
    for dtype in [DType::F16, DType::Bf16] {
        let g = sigmoid_like_graph(dtype, &[16]);
        let mut sets = random_sets(&g, 4, 6.0);
        sets.push(vec![tensor(&ty(dtype, &[16]), &SIGMOID_EDGES)]);
        // One rounding to the half type at the end: within one half-precision ulp.
        let rtol = if dtype == DType::F16 { 2e-3 } else { 1.6e-2 };
        let d = check_equivalent(&g, &sets, rtol, 1e-6);
        // Every input is cast up once (shared by the four ops) and every result down once.
        let casts_up = count_ops(&d, |op| *op == Op::Cast { to: DType::F32 });
        let casts_down = count_ops(&d, |op| *op == Op::Cast { to: dtype });
        assert_eq!((casts_up, casts_down), (1, 4), "{dtype}");
        for &o in &d.outputs {
            assert_eq!(d.node(o).op, Op::Cast { to: dtype });
        }
    }
}

#[test]
fn transcendental_ops_of_ints_are_cast_to_f32_first() {
    let mut g = Graph::new("int_math");
    let i = param(&mut g, "i", DType::I32, &[6]);
    let j = param(&mut g, "j", DType::I64, &[6]);
    let b = param(&mut g, "b", DType::Bool, &[6]);
    let mut outs = vec![];
    for (k, (u, x)) in [
        (UnaryOp::Exp, i),
        (UnaryOp::Sqrt, j),
        (UnaryOp::Log, i),
        (UnaryOp::Reciprocal, j),
        (UnaryOp::Tanh, b),
        (UnaryOp::Sigmoid, i),
        (UnaryOp::Silu, j),
        (UnaryOp::Gelu, i),
        (UnaryOp::GeluTanh, j),
        (UnaryOp::Erf, b),
        (UnaryOp::Sin, i),
    ]
    .into_iter()
    .enumerate()
    {
        outs.push(named(&mut g, &format!("o{k}"), un(u), &[x]));
    }
    // Non-transcendental ops of ints stay int.
    outs.push(named(&mut g, "neg", un(UnaryOp::Neg), &[i]));
    outs.push(named(&mut g, "abs", un(UnaryOp::Abs), &[j]));
    g.outputs = outs;
    let int_edge = [-7.0, -1.0, 0.0, 1.0, 2.0, 30.0];
    let edge = vec![
        tensor(&ty(DType::I32, &[6]), &int_edge),
        tensor(&ty(DType::I64, &[6]), &int_edge),
        tensor(&ty(DType::Bool, &[6]), &[0.0, 1.0, 1.0, 0.0, 1.0, 0.0]),
    ];
    let mut sets = random_sets(&g, 4, 1.0);
    sets.push(edge.clone());
    let d = check_equivalent(&g, &sets, 2e-6, 1e-6);

    // One cast per int parameter (shared), and every transcendental op sees f32.
    assert_eq!(count_ops(&d, |op| *op == Op::Cast { to: DType::F32 }), 3);
    for n in &d.nodes {
        if let Op::Unary(u) = n.op {
            if u.is_transcendental() {
                assert_eq!(d.ty(n.inputs[0]).dtype, DType::F32, "{}", u.name());
            }
        }
    }
    let out = interpret(&d, &edge).unwrap();
    let want: Vec<f64> = int_edge.iter().map(|&v: &f64| v.exp()).collect();
    assert_values(&out[0].to_f64(), &want, 1e-6, 0.0);
    assert_eq!(out[0].ty.dtype, DType::F32);
    assert_eq!(out[11].ty.dtype, DType::I32);
    assert_eq!(out[11].to_i64(), vec![7, 1, 0, -1, -2, -30]);
}

// ---------------------------------------------------------------------------------
// Reductions

#[test]
fn mean_over_axes_with_keepdim_and_negative_axes() {
    let mut g = Graph::new("means");
    let x = param(&mut g, "x", DType::F32, &[3, 4, 5]);
    let cases: [(Option<&[i64]>, bool); 7] = [
        (None, false),
        (None, true),
        (Some(&[-1]), false),
        (Some(&[-1]), true),
        (Some(&[0, -1]), true),
        (Some(&[2, 0]), false),
        (Some(&[]), false),
    ];
    let mut outs = vec![];
    for (k, (axes, keepdim)) in cases.iter().enumerate() {
        outs.push(named(
            &mut g,
            &format!("m{k}"),
            reduce(ReduceOp::Mean, *axes, *keepdim),
            &[x],
        ));
    }
    g.outputs = outs;
    let mut sets = random_sets(&g, 4, 10.0);
    let big: Vec<f64> = (0..60).map(|i| 1e30 * (i as f64 - 30.0)).collect();
    sets.push(vec![tensor(&ty(DType::F32, &[3, 4, 5]), &big)]);
    let d = check_equivalent(&g, &sets, 1e-5, 1e-6);

    // Independent check: mean over the last axis of 0..60 is the middle of each row.
    let iota: Vec<f64> = (0..60).map(|i| i as f64).collect();
    let inputs = vec![tensor(&ty(DType::F32, &[3, 4, 5]), &iota)];
    let out = interpret(&d, &inputs).unwrap();
    assert_values(&out[0].to_f64(), &[29.5], 0.0, 0.0);
    assert_eq!(out[1].ty.shape, vec![1, 1, 1]);
    let rows: Vec<f64> = (0..12).map(|r| 5.0 * r as f64 + 2.0).collect();
    assert_values(&out[2].to_f64(), &rows, 0.0, 0.0);
    assert_eq!(out[3].ty.shape, vec![3, 4, 1]);
    // axes [0, -1]: mean over i and k of 20 i + 5 j + k = 20 + 5 j + 2.
    assert_values(&out[4].to_f64(), &[22.0, 27.0, 32.0, 37.0], 0.0, 0.0);
    assert_eq!(out[4].ty.shape, vec![1, 4, 1]);
    assert_eq!(out[5].ty.shape, vec![4]);
    // No axes listed: nothing is reduced, the mean of one element is itself.
    assert_values(&out[6].to_f64(), &iota, 0.0, 0.0);
}

#[test]
fn mean_of_empty_axis_is_nan_and_of_scalar_is_itself() {
    let mut g = Graph::new("empty_mean");
    let x = param(&mut g, "x", DType::F32, &[0, 3]);
    let s = param(&mut g, "s", DType::F32, &[]);
    let a = named(&mut g, "a", reduce(ReduceOp::Mean, Some(&[0]), false), &[x]);
    let b = named(&mut g, "b", reduce(ReduceOp::Mean, Some(&[1]), true), &[x]);
    let c = named(&mut g, "c", reduce(ReduceOp::Mean, None, false), &[s]);
    g.outputs = vec![a, b, c];
    let inputs = vec![
        tensor(&ty(DType::F32, &[0, 3]), &[]),
        tensor(&ty(DType::F32, &[]), &[-2.5]),
    ];
    let d = check_equivalent(&g, std::slice::from_ref(&inputs), 0.0, 0.0);
    let out = interpret(&d, &inputs).unwrap();
    assert_eq!(out[0].ty.shape, vec![3]);
    assert!(
        out[0].to_f64().iter().all(|v| v.is_nan()),
        "mean over nothing is NaN"
    );
    assert_eq!(out[1].ty.shape, vec![0, 1]);
    assert_values(&out[2].to_f64(), &[-2.5], 0.0, 0.0);
}

#[test]
fn half_precision_mean_accumulates_in_f32() {
    for dtype in [DType::F16, DType::Bf16] {
        let mut g = Graph::new("half_mean");
        let x = param(&mut g, "x", dtype, &[4, 3000]);
        let m = named(
            &mut g,
            "m",
            reduce(ReduceOp::Mean, Some(&[-1]), false),
            &[x],
        );
        g.outputs = vec![m];
        let rtol = if dtype == DType::F16 { 1e-3 } else { 8e-3 };
        let mut sets = random_sets(&g, 3, 1.0);
        // A row of 3000 ones: a half-precision running sum would stall at 2048 (f16) or
        // 256 (bf16), so the result shows whether the sum ran in f32.
        sets.push(vec![tensor(&ty(dtype, &[4, 3000]), &vec![1.0; 12000])]);
        let d = check_equivalent(&g, &sets, rtol, 1e-3);
        for n in &d.nodes {
            if let Op::Reduce { .. } = n.op {
                assert_eq!(d.ty(n.inputs[0]).dtype, DType::F32);
            }
        }
        let out = interpret(&d, sets.last().unwrap()).unwrap();
        assert_values(&out[0].to_f64(), &[1.0; 4], 0.0, 0.0);
    }
}

// ---------------------------------------------------------------------------------
// Softmax and log-softmax

fn softmax_graph(dtype: DType, shape: &[usize], axis: i64) -> Graph {
    let mut g = Graph::new("softmaxes");
    let x = param(&mut g, "x", dtype, shape);
    let s = named(&mut g, "s", Op::Softmax { axis }, &[x]);
    let l = named(&mut g, "l", Op::LogSoftmax { axis }, &[x]);
    g.outputs = vec![s, l];
    g
}

#[test]
fn softmax_along_every_axis_f32() {
    let shape = [3, 4, 5];
    for axis in [-3, -2, -1, 0, 1, 2] {
        let g = softmax_graph(DType::F32, &shape, axis);
        let mut sets = random_sets(&g, 3, 5.0);
        sets.extend(random_sets(&g, 2, 1000.0));
        let d = check_equivalent(&g, &sets, 1e-5, 1e-6);
        // The reductions run along the requested axis with keepdim.
        for n in &d.nodes {
            if let Op::Reduce { axes, keepdim, .. } = &n.op {
                assert_eq!(axes.as_deref(), Some(&[axis][..]));
                assert!(keepdim);
            }
        }
        assert_eq!(
            count_ops(&d, |op| matches!(
                op,
                Op::Reduce {
                    op: ReduceOp::Max,
                    ..
                }
            )),
            2
        );
    }
}

#[test]
fn softmax_edge_rows() {
    let inf = f64::INFINITY;
    // Rows of 4: huge equal values, huge spread, -inf entries, all equal, one large.
    let rows: Vec<f64> = vec![
        1000.0, 1000.0, 1000.0, 1000.0, //
        1000.0, -1000.0, 0.0, 999.0, //
        -inf, 0.0, -inf, 1.0, //
        -1000.0, -1000.0, -1000.0, -999.0, //
        3.0, 3.0, 3.0, 3.0, //
        -inf, -inf, -inf, 5.0, //
        88.0, 89.0, 90.0, 1e30, //
        -1e30, 0.0, 1e-30, -0.0, //
    ];
    let g = softmax_graph(DType::F32, &[8, 4], -1);
    let inputs = vec![tensor(&ty(DType::F32, &[8, 4]), &rows)];
    let d = check_equivalent(&g, std::slice::from_ref(&inputs), 1e-5, 1e-6);
    let out = interpret(&d, &inputs).unwrap();
    let soft = out[0].to_f64();
    let logs = out[1].to_f64();
    assert!(soft.iter().all(|v| v.is_finite()), "no overflow: {soft:?}");
    assert!(logs.iter().all(|v| !v.is_nan()), "no NaN: {logs:?}");
    assert_values(&soft, &softmax_rows(&rows, 4, false), 1e-6, 1e-7);
    assert_values(&logs, &softmax_rows(&rows, 4, true), 1e-6, 1e-5);
    // Hand values: equal rows are uniform; log_softmax of a -inf entry is -inf.
    assert_values(&soft[..4], &[0.25; 4], 0.0, 0.0);
    assert_values(&logs[..4], &[-(4f64.ln()); 4], 1e-7, 0.0);
    assert_eq!(logs[8], f64::NEG_INFINITY);
    // Row [1000, -1000, 0, 999]: log-sum-exp of the shifted row is ln(1 + e^-1) (the
    // other terms are below f64's resolution).
    let lse = (-1.0f64).exp().ln_1p();
    assert_values(
        &logs[4..8],
        &[-lse, -2000.0 - lse, -1000.0 - lse, -1.0 - lse],
        1e-6,
        1e-5,
    );
}

#[test]
fn softmax_of_an_all_minus_inf_row_matches_the_interpreter() {
    // max is -inf, so x - max is NaN: PyTorch gives NaN for such a row, and so must the
    // decomposition (whatever the interpreter's composite gives is checked too).
    let g = softmax_graph(DType::F32, &[2, 3], -1);
    let inf = f64::INFINITY;
    let inputs = vec![tensor(
        &ty(DType::F32, &[2, 3]),
        &[-inf, -inf, -inf, 0.0, 1.0, 2.0],
    )];
    let d = check_equivalent(&g, std::slice::from_ref(&inputs), 1e-6, 1e-7);
    let out = interpret(&d, &inputs).unwrap();
    assert!(out[0].to_f64()[..3].iter().all(|v| v.is_nan()));
    assert!(out[1].to_f64()[..3].iter().all(|v| v.is_nan()));
    assert!(out[0].to_f64()[3..].iter().all(|v| v.is_finite()));
}

#[test]
fn softmax_divides_a_subnormal_exponential_as_zero() {
    // exp(-90) = 8.2e-40 is subnormal in f32: its probability is 0 (a quotient below
    // 2^-126; dividing it would cost x86 an assist), exp(-80) = 1.8e-35 is kept; in f64
    // nothing is flushed. The decomposition and the interpreter's composite agree.
    let g = softmax_graph(DType::F32, &[1, 3], -1);
    let inputs = vec![tensor(&ty(DType::F32, &[1, 3]), &[0.0, -90.0, -80.0])];
    let d = check_equivalent(&g, std::slice::from_ref(&inputs), 0.0, 0.0);
    let out = interpret(&d, &inputs).unwrap();
    let p = out[0].to_f64();
    assert_eq!(p[1], 0.0);
    assert!(p[2] > 1e-35 && p[2] < 2e-35, "{p:?}");
    let g = softmax_graph(DType::F64, &[1, 3], -1);
    let inputs = vec![tensor(&ty(DType::F64, &[1, 3]), &[0.0, -90.0, -800.0])];
    let out = interpret(&decompose(&g).unwrap(), &inputs).unwrap();
    let p = out[0].to_f64();
    assert!(p[1] > 8e-40 && p[2] == 0.0, "{p:?}");
}

#[test]
fn softmax_in_half_precision_computes_in_f32() {
    for dtype in [DType::F16, DType::Bf16] {
        for axis in [-1, 0] {
            let g = softmax_graph(dtype, &[6, 32], axis);
            let mut sets = random_sets(&g, 3, 8.0);
            // f16 overflows at 65504: exp(12) already exceeds it, so these rows only work
            // because the maximum is subtracted first.
            sets.extend(random_sets(&g, 2, 60000.0));
            let rtol = if dtype == DType::F16 { 2e-3 } else { 1.6e-2 };
            let d = check_equivalent(&g, &sets, rtol, 1e-4);
            for n in &d.nodes {
                match n.op {
                    // The comparison that keeps subnormal exponentials out of the
                    // division (a bool of f32 operands).
                    Op::Binary(BinaryOp::Lt) => {
                        assert_eq!(d.node(n.inputs[0]).ty.dtype, DType::F32, "lt runs in f32")
                    }
                    Op::Reduce { .. } | Op::Unary(_) | Op::Binary(_) => {
                        assert_eq!(n.ty.dtype, DType::F32, "{} runs in f32", n.op.name())
                    }
                    _ => {}
                }
            }
            for &o in &d.outputs {
                assert_eq!(d.node(o).op, Op::Cast { to: dtype });
            }
        }
    }
}

#[test]
fn softmax_of_empty_and_scalar_tensors() {
    for shape in [vec![0usize, 5], vec![3, 0]] {
        let g = softmax_graph(DType::F32, &shape, -1);
        let inputs = vec![tensor(&ty(DType::F32, &shape), &[])];
        let d = decompose(&g).unwrap();
        assert_decomposed(&g, &d);
        let out = interpret(&d, &inputs).unwrap();
        assert_eq!(out[0].ty.shape, shape);
        assert!(out[0].is_empty());
    }
    let g = softmax_graph(DType::F32, &[], 0);
    let inputs = vec![tensor(&ty(DType::F32, &[]), &[123.0])];
    let d = check_equivalent(&g, std::slice::from_ref(&inputs), 0.0, 0.0);
    let out = interpret(&d, &inputs).unwrap();
    assert_values(&out[0].to_f64(), &[1.0], 0.0, 0.0);
    assert_values(&out[1].to_f64(), &[0.0], 0.0, 0.0);
}

// ---------------------------------------------------------------------------------
// Normalizations

fn norm_graph(dtype: DType, shape: &[usize], eps: f64) -> Graph {
    let n = *shape.last().unwrap();
    let mut g = Graph::new("norms");
    let x = param(&mut g, "x", dtype, shape);
    let w = param(&mut g, "w", dtype, &[n]);
    let b = param(&mut g, "b", dtype, &[n]);
    let ln = named(&mut g, "ln", Op::LayerNorm { eps }, &[x, w, b]);
    let rms = named(&mut g, "rms", Op::RmsNorm { eps }, &[x, w]);
    g.outputs = vec![ln, rms];
    g
}

/// f64 layer norm (or RMS norm) over the last axis.
fn norm_rows(x: &[f64], w: &[f64], b: &[f64], eps: f64, centered: bool) -> Vec<f64> {
    let n = w.len();
    let mut out = Vec::new();
    for row in x.chunks(n) {
        let mean = if centered {
            row.iter().sum::<f64>() / n as f64
        } else {
            0.0
        };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for (k, v) in row.iter().enumerate() {
            let y = (v - mean) * inv * w[k];
            out.push(if centered { y + b[k] } else { y });
        }
    }
    out
}

#[test]
fn layer_norm_and_rms_norm_f32() {
    let g = norm_graph(DType::F32, &[2, 3, 16], 1e-5);
    let mut sets = random_sets(&g, 4, 3.0);
    // Constant rows, rows far from zero, and ordinary rows.
    let mut x: Vec<f64> = Vec::new();
    for r in 0..6 {
        for k in 0..16 {
            x.push(match r {
                0 => 100.0 + (k as f64) * 0.25,
                1 => 7.0,
                2 => -1e6 + (k % 2) as f64,
                _ => ((r * 16 + k) as f64).sin(),
            });
        }
    }
    let w: Vec<f64> = (0..16).map(|k| 0.5 + k as f64 / 16.0).collect();
    let b: Vec<f64> = (0..16).map(|k| k as f64 / 10.0 - 0.7).collect();
    let edge = vec![
        tensor(&ty(DType::F32, &[2, 3, 16]), &x),
        tensor(&ty(DType::F32, &[16]), &w),
        tensor(&ty(DType::F32, &[16]), &b),
    ];
    sets.push(edge.clone());
    let d = check_equivalent(&g, &sets, 1e-5, 1e-5);

    let xr: Vec<f64> = edge[0].to_f64();
    let out = interpret(&d, &edge).unwrap();
    let want = norm_rows(&xr, &w, &b, 1e-5, true);
    assert_values(&out[0].to_f64(), &want, 1e-5, 1e-5);
    let want = norm_rows(&xr, &w, &b, 1e-5, false);
    assert_values(&out[1].to_f64(), &want, 1e-5, 1e-6);
    // A constant row normalizes to 0, leaving the bias.
    assert_values(&out[0].to_f64()[16..32], &edge[2].to_f64(), 0.0, 1e-6);
    // Biased variance: the row [-1e6, -1e6 + 1, ...] has variance 1/4.
    let rows: Vec<f64> = out[0].to_f64()[32..48].to_vec();
    let want: Vec<f64> = (0..16)
        .map(|k| {
            (if k % 2 == 0 { -1.0 } else { 1.0 }) / (0.25f64 + 1e-5).sqrt() * 0.5 * w[k] + b[k]
        })
        .collect();
    assert_values(&rows, &want, 1e-5, 1e-5);
}

#[test]
fn layer_norm_of_a_row_with_a_large_offset_is_as_accurate_as_f32_allows() {
    // x = 1e4 + 0.01 k: the mean, held in f32, can be off by up to half an f32 ulp at
    // 1e4 (2^-11) plus the rounding of the f32 sum (2^-7 / 2 / 16); every centered
    // value inherits that error, which the division by the row's standard deviation
    // (0.046) magnifies. PyTorch's f32 kernel keeps its mean in f32 too and has the
    // same bound; the interpreter (f64) does not, so the tolerance is derived here.
    let g = norm_graph(DType::F32, &[16], 1e-5);
    let x: Vec<f64> = (0..16).map(|k| 1e4 + k as f64 * 0.01).collect();
    let inputs = vec![
        tensor(&ty(DType::F32, &[16]), &x),
        tensor(&ty(DType::F32, &[16]), &[1.0; 16]),
        tensor(&ty(DType::F32, &[16]), &[0.0; 16]),
    ];
    let xr = inputs[0].to_f64();
    let mean = xr.iter().sum::<f64>() / 16.0;
    let std = (xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 16.0).sqrt();
    let mean_error = 2f64.powi(-11) + 2f64.powi(-7) / 2.0 / 16.0;
    let bound = mean_error / std * 1.01;
    check_equivalent(&g, std::slice::from_ref(&inputs), 1e-5, bound);
    // rms_norm does not center, so it is accurate to a few ulps.
    let out = run_decomposed(&g, &inputs, 1);
    assert_values(
        &out,
        &norm_rows(&xr, &[1.0; 16], &[0.0; 16], 1e-5, false),
        1e-6,
        0.0,
    );
}

#[test]
fn norms_in_half_precision_compute_in_f32() {
    for dtype in [DType::F16, DType::Bf16] {
        let g = norm_graph(dtype, &[4, 64], 1e-6);
        let mut sets = random_sets(&g, 3, 2.0);
        // In f16, x*x overflows for |x| > 256: the f32 computation keeps rms_norm finite.
        let mut big = random_inputs(&g, 7, 1.0);
        big[0] = tensor(&ty(dtype, &[4, 64]), &scaled(&big[0], 6.0e4));
        sets.push(big);
        let rtol = if dtype == DType::F16 { 2e-3 } else { 1.6e-2 };
        let d = check_equivalent(&g, &sets, rtol, 2e-2);
        for n in &d.nodes {
            if matches!(n.op, Op::Reduce { .. } | Op::Binary(_) | Op::Unary(_)) {
                assert_eq!(n.ty.dtype, DType::F32, "{} runs in f32", n.op.name());
            }
        }
        let out = interpret(&d, sets.last().unwrap()).unwrap();
        assert!(out[1].to_f64().iter().all(|v| v.is_finite()));
    }
}

#[test]
fn norms_of_empty_tensors() {
    let g = norm_graph(DType::F32, &[0, 8], 1e-5);
    let d = decompose(&g).unwrap();
    assert_decomposed(&g, &d);
    let inputs = random_inputs(&g, 1, 1.0);
    let out = interpret(&d, &inputs).unwrap();
    assert_eq!(out[0].ty.shape, vec![0, 8]);
    assert!(out[0].is_empty() && out[1].is_empty());
}

// ---------------------------------------------------------------------------------
// Movement

#[test]
fn transpose_squeeze_unsqueeze_become_permute_and_reshape() {
    let mut g = Graph::new("movement");
    let x = param(&mut g, "x", DType::F32, &[2, 1, 3, 1]);
    let s = param(&mut g, "s", DType::I32, &[]);
    let t = named(&mut g, "t", Op::Transpose { dim0: 0, dim1: -2 }, &[x]);
    let t0 = named(&mut g, "t0", Op::Transpose { dim0: -1, dim1: 0 }, &[s]);
    let q = named(&mut g, "q", Op::Squeeze { axes: None }, &[x]);
    let q1 = named(
        &mut g,
        "q1",
        Op::Squeeze {
            axes: Some(vec![-1]),
        },
        &[x],
    );
    let u = named(&mut g, "u", Op::Unsqueeze { axis: -1 }, &[x]);
    let u0 = named(&mut g, "u0", Op::Unsqueeze { axis: 0 }, &[s]);
    g.outputs = vec![t, t0, q, q1, u, u0];
    let sets = random_sets(&g, 3, 1.0);
    let d = check_equivalent(&g, &sets, 0.0, 0.0);
    let ops: Vec<&Op> = d.outputs.iter().map(|&o| &d.node(o).op).collect();
    assert_eq!(
        *ops[0],
        Op::Permute {
            dims: vec![2, 1, 0, 3]
        }
    );
    assert_eq!(*ops[1], Op::Permute { dims: vec![] });
    assert_eq!(*ops[2], Op::Reshape { shape: vec![2, 3] });
    assert_eq!(
        *ops[3],
        Op::Reshape {
            shape: vec![2, 1, 3]
        }
    );
    assert_eq!(
        *ops[4],
        Op::Reshape {
            shape: vec![2, 1, 3, 1, 1]
        }
    );
    assert_eq!(*ops[5], Op::Reshape { shape: vec![1] });
}

// ---------------------------------------------------------------------------------
// Dtypes made explicit

#[test]
fn mixed_dtype_binary_ops_and_where_get_explicit_casts() {
    let mut g = Graph::new("mixed");
    let h = param(&mut g, "h", DType::F16, &[2, 3]);
    let f = param(&mut g, "f", DType::F32, &[3]);
    let i = param(&mut g, "i", DType::I32, &[2, 3]);
    let j = param(&mut g, "j", DType::I64, &[3]);
    let c = param(&mut g, "c", DType::Bool, &[2, 3]);
    let bf = param(&mut g, "bf", DType::Bf16, &[3]);
    let half = lit(&mut g, 0.5, DType::F32); // `mul(i, 0.5)`: a float literal beside ints is f32
    let two = lit(&mut g, 2.0, DType::I32);
    let outs = vec![
        named(&mut g, "hf", bin(BinaryOp::Add), &[h, f]),
        named(&mut g, "ih", bin(BinaryOp::Mul), &[i, half]),
        named(&mut g, "ij", bin(BinaryOp::Sub), &[i, j]),
        named(&mut g, "div_int", bin(BinaryOp::Div), &[i, j]),
        named(&mut g, "div_lit", bin(BinaryOp::Div), &[i, two]),
        named(&mut g, "lt", bin(BinaryOp::Lt), &[h, f]),
        named(&mut g, "eq", bin(BinaryOp::Eq), &[i, h]),
        named(&mut g, "and", bin(BinaryOp::And), &[c, f]),
        named(&mut g, "hbf", bin(BinaryOp::Maximum), &[h, bf]),
        named(&mut g, "pow", bin(BinaryOp::Pow), &[i, half]),
        named(&mut g, "bool_mul", bin(BinaryOp::Mul), &[c, c]),
        named(&mut g, "w", Op::Where, &[c, i, f]),
        named(&mut g, "w_lit", Op::Where, &[c, two, h]),
    ];
    g.outputs = outs;
    let mut sets = random_sets(&g, 4, 4.0);
    // Values where f16 rounding matters for comparisons: 2049 is not an f16.
    let mut edge = random_inputs(&g, 9, 1.0);
    edge[2] = tensor(
        &ty(DType::I32, &[2, 3]),
        &[2049.0, 2048.0, -3.0, 0.0, 7.0, 1.0],
    );
    edge[0] = tensor(
        &ty(DType::F16, &[2, 3]),
        &[2048.0, 2048.0, -3.0, 0.5, 7.0, 1.0],
    );
    sets.push(edge.clone());
    let d = check_equivalent(&g, &sets, 1e-3, 1e-6);

    // Literals are folded to the needed dtype, never cast at run time.
    for n in &d.nodes {
        if let Op::Cast { .. } = n.op {
            assert!(
                !matches!(d.node(n.inputs[0]).op, Op::Literal { .. }),
                "a literal is cast"
            );
        }
    }
    // Integer division is float division of f32 operands.
    let div = d.node(d.outputs[3]);
    assert_eq!(div.op, bin(BinaryOp::Div));
    assert_eq!(d.ty(div.inputs[0]).dtype, DType::F32);
    let div_lit = d.node(d.outputs[4]);
    assert!(matches!(d.node(div_lit.inputs[1]).op, Op::Literal { .. }));
    assert_eq!(d.ty(div_lit.inputs[1]).dtype, DType::F32);
    // Each parameter is cast at most once per target dtype.
    let mut seen = std::collections::HashSet::new();
    for n in &d.nodes {
        if let Op::Cast { to } = n.op {
            assert!(seen.insert((n.inputs[0], to)), "duplicate cast");
        }
    }
    // Hand values: 2049 as f16 is 2048 (PyTorch compares in the promoted dtype).
    let out = interpret(&d, &edge).unwrap();
    assert_eq!(out[6].to_i64(), vec![1, 1, 1, 0, 1, 1]);
    assert_values(
        &out[4].to_f64(),
        &[1024.5, 1024.0, -1.5, 0.0, 3.5, 0.5],
        0.0,
        0.0,
    );
}

#[test]
fn literal_casts_keep_the_value_the_literal_had() {
    // A literal typed f16 used beside an f32 tensor: its value is the f16 rounding of
    // 0.1, which the folded f32 literal must keep.
    let mut g = Graph::new("lits");
    let f = param(&mut g, "f", DType::F32, &[2]);
    let tenth = g.add_literal(Scalar::Float(0.1), DType::F16).unwrap();
    let big = g
        .add_literal(Scalar::Int(3_000_000_000), DType::I64)
        .unwrap();
    let i = param(&mut g, "i", DType::I32, &[2]);
    let a = named(&mut g, "a", bin(BinaryOp::Add), &[f, tenth]);
    let b = named(&mut g, "b", bin(BinaryOp::Add), &[i, big]);
    g.outputs = vec![a, b];
    let inputs = vec![
        tensor(&ty(DType::F32, &[2]), &[0.0, 1.0]),
        tensor(&ty(DType::I32, &[2]), &[1.0, -1.0]),
    ];
    let d = check_equivalent(&g, std::slice::from_ref(&inputs), 0.0, 0.0);
    let out = interpret(&d, &inputs).unwrap();
    let tenth_f16 = tensor(&ty(DType::F16, &[]), &[0.1]).to_f64()[0];
    assert_ne!(tenth_f16, 0.1f32 as f64);
    assert_eq!(out[0].to_f64()[0], tenth_f16 as f32 as f64);
    assert_eq!(out[1].to_i64(), vec![3_000_000_001, 2_999_999_999]);
    assert_eq!(count_ops(&d, |op| matches!(op, Op::Cast { .. })), 1);
}

// ---------------------------------------------------------------------------------
// Whole graphs

/// A one-head transformer block: layer_norm → q/k/v projections → scaled dot-product
/// attention (softmax) → output projection + residual → layer_norm → MLP with GELU.
fn transformer_block(dtype: DType, tanh_gelu: bool) -> Graph {
    let (s, e, h) = (8usize, 16usize, 32usize);
    let mut g = Graph::new("block");
    let x = param(&mut g, "x", dtype, &[2, s, e]);
    let ln1_w = param(&mut g, "ln1_w", dtype, &[e]);
    let ln1_b = param(&mut g, "ln1_b", dtype, &[e]);
    let wq = param(&mut g, "wq", dtype, &[e, e]);
    let wk = param(&mut g, "wk", dtype, &[e, e]);
    let wv = param(&mut g, "wv", dtype, &[e, e]);
    let wo = param(&mut g, "wo", dtype, &[e, e]);
    let ln2_w = param(&mut g, "ln2_w", dtype, &[e]);
    let w1 = param(&mut g, "w1", dtype, &[e, h]);
    let w2 = param(&mut g, "w2", dtype, &[h, e]);
    let n1 = named(
        &mut g,
        "n1",
        Op::LayerNorm { eps: 1e-5 },
        &[x, ln1_w, ln1_b],
    );
    let q = add(&mut g, Op::MatMul, &[n1, wq]);
    let k = add(&mut g, Op::MatMul, &[n1, wk]);
    let v = add(&mut g, Op::MatMul, &[n1, wv]);
    let kt = add(&mut g, Op::Transpose { dim0: -1, dim1: -2 }, &[k]);
    let scores = add(&mut g, Op::MatMul, &[q, kt]);
    let scale = lit(&mut g, 1.0 / (e as f64).sqrt(), dtype);
    let scaled = add(&mut g, bin(BinaryOp::Mul), &[scores, scale]);
    let probs = named(&mut g, "probs", Op::Softmax { axis: -1 }, &[scaled]);
    let ctx = add(&mut g, Op::MatMul, &[probs, v]);
    let attn = add(&mut g, Op::MatMul, &[ctx, wo]);
    let r1 = named(&mut g, "r1", bin(BinaryOp::Add), &[x, attn]);
    let n2 = add(&mut g, Op::RmsNorm { eps: 1e-6 }, &[r1, ln2_w]);
    let up = add(&mut g, Op::MatMul, &[n2, w1]);
    let gelu = if tanh_gelu {
        UnaryOp::GeluTanh
    } else {
        UnaryOp::Gelu
    };
    let act = add(&mut g, un(gelu), &[up]);
    let down = add(&mut g, Op::MatMul, &[act, w2]);
    let y = named(&mut g, "y", bin(BinaryOp::Add), &[r1, down]);
    let pooled = named(
        &mut g,
        "pooled",
        reduce(ReduceOp::Mean, Some(&[1]), false),
        &[y],
    );
    g.outputs = vec![y, pooled, probs];
    g.declared_outputs = Some(g.outputs.iter().map(|&o| g.ty(o).clone()).collect());
    g
}

#[test]
fn transformer_block_f32() {
    for tanh_gelu in [false, true] {
        let g = transformer_block(DType::F32, tanh_gelu);
        let sets = random_sets(&g, 3, 1.0);
        let d = check_equivalent(&g, &sets, 1e-4, 1e-5);
        assert_eq!(count_ops(&d, |op| *op == Op::MatMul), 8);
        assert_eq!(
            count_ops(&d, |op| matches!(op, Op::Cast { .. })),
            0,
            "an all-f32 graph needs no casts"
        );
        // Output and named intermediate names survive on the nodes producing them.
        for name in ["n1", "probs", "r1", "y", "pooled"] {
            let v = d.find(name).unwrap_or_else(|| panic!("`{name}` lost"));
            assert_eq!(d.ty(v), g.ty(g.find(name).unwrap()));
        }
        assert_eq!(
            d.outputs,
            vec![
                d.find("y").unwrap(),
                d.find("pooled").unwrap(),
                d.find("probs").unwrap()
            ]
        );
    }
}

#[test]
fn transformer_block_f16() {
    let g = transformer_block(DType::F16, false);
    let sets = random_sets(&g, 2, 1.0);
    // f16 matmuls and residual adds round to f16 in both graphs; the composites differ
    // only by where the f16 roundings happen.
    check_equivalent(&g, &sets, 1e-2, 1e-2);
}

#[test]
fn decompose_is_idempotent() {
    let graphs = [
        transformer_block(DType::F32, true),
        transformer_block(DType::Bf16, false),
        softmax_graph(DType::F16, &[3, 5], 0),
        norm_graph(DType::F32, &[0, 4], 1e-5),
        sigmoid_like_graph(DType::F16, &[4]),
    ];
    for g in &graphs {
        let once = decompose(g).unwrap();
        let twice = decompose(&once).unwrap();
        assert_eq!(once, twice, "decomposing `{}` twice changed it", g.name);
    }
}

#[test]
fn primitive_graphs_are_unchanged() {
    let mut g = Graph::new("prim");
    let x = param(&mut g, "x", DType::F32, &[4, 6]);
    let w = param(&mut g, "w", DType::F32, &[6, 3]);
    let idx = param(&mut g, "idx", DType::I64, &[2]);
    let m = add(&mut g, Op::MatMul, &[x, w]);
    let zero = lit(&mut g, 0.0, DType::F32);
    let r = add(&mut g, bin(BinaryOp::Maximum), &[m, zero]);
    let s = add(&mut g, reduce(ReduceOp::Sum, Some(&[-1]), true), &[r]);
    let e = add(&mut g, un(UnaryOp::Exp), &[s]);
    let p = add(&mut g, Op::Permute { dims: vec![1, 0] }, &[e]);
    let sel = add(&mut g, Op::IndexSelect { axis: 0 }, &[r, idx]);
    let c = add(&mut g, Op::Cast { to: DType::F16 }, &[sel]);
    let am = named(
        &mut g,
        "am",
        Op::ArgReduce {
            op: ferrite_ir::ArgReduceOp::ArgMax,
            axis: Some(-1),
            keepdim: false,
        },
        &[x],
    );
    g.outputs = vec![p, c, am];
    let d = decompose(&g).unwrap();
    assert_eq!(d, g);
}

#[test]
fn dead_nodes_are_dropped_and_params_kept() {
    let mut g = Graph::new("dead");
    let x = param(&mut g, "x", DType::F32, &[3]);
    let unused = param(&mut g, "unused", DType::F16, &[2]);
    let dead = named(&mut g, "dead", Op::Softmax { axis: 0 }, &[x]);
    let _ = (unused, dead);
    let y = named(&mut g, "y", un(UnaryOp::Sigmoid), &[x]);
    g.outputs = vec![y, y, x];
    let d = check_equivalent(&g, &random_sets(&g, 2, 3.0), 1e-6, 1e-7);
    assert!(d.find("dead").is_none());
    assert_eq!(count_ops(&d, |op| matches!(op, Op::Reduce { .. })), 0);
    assert_eq!(d.params.len(), 2);
    assert_eq!(d.outputs[0], d.outputs[1]);
    assert_eq!(d.output_name(2), "x");
}

#[test]
fn invalid_graphs_are_errors_not_panics() {
    // A node whose recorded type disagrees with inference.
    let mut g = Graph::new("bad");
    let x = param(&mut g, "x", DType::F32, &[3]);
    let y = add(&mut g, Op::Softmax { axis: 0 }, &[x]);
    g.outputs = vec![y];
    g.nodes[1].ty = ty(DType::F32, &[4]);
    let err = decompose(&g).unwrap_err();
    assert!(err.to_string().contains("decompose"), "{err}");
    assert!(!err.is_internal(), "{err:?}");
    // An operand defined after its use.
    let mut g2 = Graph::new("bad2");
    let x = param(&mut g2, "x", DType::F32, &[3]);
    let y = add(&mut g2, un(UnaryOp::Relu), &[x]);
    g2.nodes[y.index()].inputs = vec![ValueId(5)];
    g2.outputs = vec![y];
    assert!(decompose(&g2).is_err());
    // No outputs.
    let mut g3 = Graph::new("bad3");
    param(&mut g3, "x", DType::F32, &[3]);
    assert!(decompose(&g3).is_err());
}

/// The accumulation policy: the interpreter evaluates the composites built on
/// reductions as exactly the primitives `decompose` makes of them, each rounded to
/// its dtype, so the two agree bit for bit (NaN equal to NaN), on random rows and on
/// rows whose intermediates overflow f32 (reliability finding F14).
#[test]
fn reducing_composites_evaluate_exactly_as_their_decomposition() {
    let calls = [
        "mean(x, axes=[1])",
        "mean(x, axes=[0, 1], keepdim=true)",
        "softmax(x, axis=1)",
        "log_softmax(x, axis=0)",
        "layer_norm(x, w, b)",
        "rms_norm(x, w, eps=0.0)",
    ];
    for dtype in [DType::F32, DType::F16, DType::Bf16] {
        for call in calls {
            let src = format!(
                "graph g(x: {dtype}[3, 8], w: {dtype}[8], b: {dtype}[8]) {{\n  y = {call}\n  \
                 return y\n}}\n"
            );
            let g = ferrite_ir::parse("policy.fg", &src).unwrap_or_else(|e| panic!("{e}"));
            let mut sets = random_sets(&g, 3, 3.0);
            // The F14 rows: squares that overflow f32, a sum past f32's range, a
            // product that overflows before a zero; then the same near f16's range.
            let big = match dtype {
                DType::F32 => [1e20, 3e38, 3.4e38],
                _ => [1e3, 6e4, 6.5e4],
            };
            let mut x = vec![big[0]; 8];
            x.extend([big[1], big[1], 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
            x.extend([2.0, big[2], 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
            let tys = g.param_types();
            sets.push(vec![
                tensor(&tys[0], &x),
                tensor(&tys[1], &[1.0; 8]),
                tensor(&tys[2], &[0.0; 8]),
            ]);
            check_equivalent(&g, &sets, 0.0, 0.0);
        }
    }
}

/// Folding `cast` of an integer literal to a half dtype that it overflows gives the
/// infinity the cast computes, not a literal that does not fit its dtype (which
/// `Graph::add_literal` refuses, as the parser does).
#[test]
fn a_folded_cast_of_a_large_integer_to_f16_is_infinite() {
    let mut g = Graph::new("g");
    let x = param(&mut g, "x", DType::F16, &[2]);
    let big = g.add_literal(Scalar::Int(-100_000), DType::I64).unwrap();
    let c = add(&mut g, Op::Cast { to: DType::F16 }, &[big]);
    let y = add(&mut g, bin(BinaryOp::Add), &[x, c]);
    g.outputs = vec![y];
    let d = decompose(&g).unwrap();
    verify(&d).unwrap();
    let input = tensor(&ty(DType::F16, &[2]), &[1.0, 2.0]);
    let out = interpret(&d, std::slice::from_ref(&input)).unwrap();
    assert_eq!(out[0].to_f64(), vec![f64::NEG_INFINITY; 2]);
    assert_eq!(out, interpret(&g, &[input]).unwrap());
}
