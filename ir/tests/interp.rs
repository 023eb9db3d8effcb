//! Tests of the reference interpreter against values computed by hand (or by an
//! independent, obviously correct computation written out in the test).

use ferrite_ir::interp::{erf, eval_node};
use ferrite_ir::{
    interpret, ArgReduceOp, BinaryOp, DType, Data, Error, Graph, Op, ReduceOp, Scalar, Tensor,
    TensorType, UnaryOp, ValueId,
};
use std::f64::consts::{E, LN_2, PI};
use DType::{Bf16, Bool, F16, F32, I32, I64};

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.to_vec()).unwrap()
}

/// A tensor of `dtype` from f64 values (rounded to the dtype).
fn t(dtype: DType, shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_f64(&ty(dtype, shape), v)
}

fn f32s(shape: &[usize], v: &[f64]) -> Tensor {
    t(F32, shape, v)
}

fn ints(dtype: DType, shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_i64(&ty(dtype, shape), v)
}

fn bools(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor {
        ty: ty(Bool, shape),
        data: Data::Bool(v.to_vec()),
    }
}

/// Builds a graph applying `op` to one parameter per input and interprets it.
fn run(op: Op, inputs: &[&Tensor]) -> ferrite_ir::Result<Tensor> {
    let mut g = Graph::new("t");
    let params: Vec<ValueId> = inputs
        .iter()
        .enumerate()
        .map(|(i, x)| g.add_param(format!("x{i}"), x.ty.clone()).unwrap())
        .collect();
    let y = g.add(op, &params, Some("y".into()))?;
    g.outputs.push(y);
    let owned: Vec<Tensor> = inputs.iter().map(|&x| x.clone()).collect();
    let mut out = interpret(&g, &owned)?;
    assert_eq!(out.len(), 1);
    assert_eq!(
        &out[0].ty,
        g.ty(y),
        "result type differs from the inferred type"
    );
    Ok(out.remove(0))
}

fn ok(op: Op, inputs: &[&Tensor]) -> Tensor {
    run(op.clone(), inputs).unwrap_or_else(|e| panic!("{op:?} failed: {e}"))
}

/// The message of the error that running `op` on `inputs` raises, which must be
/// the data's fault ([`Error::Eval`]).
fn err(op: Op, inputs: &[&Tensor]) -> String {
    match run(op.clone(), inputs) {
        Ok(r) => panic!("{op:?} should fail but gave {r:?}"),
        Err(e @ Error::Eval(_)) => e.to_string(),
        Err(e) => panic!("{op:?} should fail on its data, not with {e:?}"),
    }
}

/// The message of the typing error that building `op` raises: a value no backend can
/// represent is rejected before anything runs (reliability finding F01).
fn type_err(op: Op, inputs: &[&Tensor]) -> String {
    match run(op.clone(), inputs) {
        Ok(r) => panic!("{op:?} should be rejected but gave {r:?}"),
        Err(e @ Error::Type(_)) => e.to_string(),
        Err(e) => panic!("{op:?} should be a typing error, not {e:?}"),
    }
}

/// Asserts `got` is exactly `expected` (NaN equals NaN): type and every element.
fn exact(got: &Tensor, expected: &Tensor) {
    if let Err(e) = got.check_close(expected, 0.0, 0.0) {
        panic!("{e}\n got: {got:?}\nwant: {expected:?}");
    }
    // check_close compares through f64; integers must also match bit for bit.
    if !expected.ty.dtype.is_float() {
        assert_eq!(got.data, expected.data);
    }
}

/// Asserts `got` has type `expected.ty` and is within relative error `rtol`.
fn close(got: &Tensor, expected: &Tensor, rtol: f64) {
    if let Err(e) = got.check_close(expected, rtol, 1e-12) {
        panic!("{e}\n got: {got:?}\nwant: {expected:?}");
    }
}

fn unary(u: UnaryOp) -> Op {
    Op::Unary(u)
}

fn binary(b: BinaryOp) -> Op {
    Op::Binary(b)
}

fn reduce(op: ReduceOp, axes: Option<&[i64]>, keepdim: bool) -> Op {
    Op::Reduce {
        op,
        axes: axes.map(|a| a.to_vec()),
        keepdim,
    }
}

// ---------------------------------------------------------------- unary

#[test]
fn unary_float_ops_match_hand_values() {
    use UnaryOp::*;
    let cases: &[(UnaryOp, &[f64], &[f64])] = &[
        (Neg, &[1.5, -0.0, -2.0], &[-1.5, 0.0, 2.0]),
        (Abs, &[-1.5, 2.0, -0.0], &[1.5, 2.0, 0.0]),
        (Exp, &[0.0, 1.0, -INF, LN_2], &[1.0, E, 0.0, 2.0]),
        (Log, &[1.0, E, 0.0, -1.0], &[0.0, 1.0, -INF, NAN]),
        (Sqrt, &[4.0, 2.25, 0.0, -1.0], &[2.0, 1.5, 0.0, NAN]),
        (Rsqrt, &[4.0, 0.25, 0.0], &[0.5, 2.0, INF]),
        (Reciprocal, &[4.0, -0.5, 0.0], &[0.25, -2.0, INF]),
        (Sin, &[0.0, PI / 2.0, PI / 6.0], &[0.0, 1.0, 0.5]),
        (Cos, &[0.0, PI / 3.0, PI], &[1.0, 0.5, -1.0]),
        // tanh(ln 2) = (4 - 1) / (4 + 1).
        (Tanh, &[0.0, LN_2, -INF, INF], &[0.0, 0.6, -1.0, 1.0]),
        // sigmoid(ln 3) = 1 / (1 + 1/3).
        (
            Sigmoid,
            &[0.0, 3f64.ln(), -INF, INF],
            &[0.5, 0.75, 0.0, 1.0],
        ),
        (
            Relu,
            &[-1.0, 0.0, 2.0, NAN, -INF],
            &[0.0, 0.0, 2.0, NAN, 0.0],
        ),
        // gelu(x) = x * Phi(x); Phi(1) = 0.8413447460685429.
        (
            Gelu,
            &[0.0, 1.0, -1.0],
            &[0.0, 0.8413447460685429, -0.15865525393145707],
        ),
        (
            GeluTanh,
            &[0.0, 1.0, -1.0, 2.0],
            &[
                0.0,
                0.8411919906082768,
                -0.15880800939172324,
                1.954597694087775,
            ],
        ),
        (
            Silu,
            &[0.0, 1.0, -1.0],
            &[0.0, 0.7310585786300049, -0.2689414213699951],
        ),
        (
            Erf,
            &[0.0, 0.5, -1.0, 2.0],
            &[
                0.0,
                0.5204998778130465,
                -0.8427007929497149,
                0.9953222650189527,
            ],
        ),
        (Floor, &[-1.5, 1.5, -0.0, 2.0], &[-2.0, 1.0, 0.0, 2.0]),
        (Ceil, &[-1.5, 1.5, 2.0], &[-1.0, 2.0, 2.0]),
        (
            Sign,
            &[-3.0, 0.0, -0.0, 2.5, NAN, -INF],
            &[-1.0, 0.0, 0.0, 1.0, NAN, -1.0],
        ),
    ];
    for &(u, x, want) in cases {
        let n = x.len();
        let got = ok(unary(u), &[&f32s(&[n], x)]);
        // One f32 rounding of the exact value, plus the f32 rounding of the input.
        close(&got, &f32s(&[n], want), 1e-6);
    }
}

#[test]
fn unary_keeps_half_precision_dtypes() {
    // e rounds to 2.71875 in f16 (spacing 2^-9 near 2.7) and to 2.71875 in bf16 too.
    let got = ok(unary(UnaryOp::Exp), &[&t(F16, &[2], &[1.0, 0.0])]);
    exact(&got, &t(F16, &[2], &[2.71875, 1.0]));
    let got = ok(unary(UnaryOp::Exp), &[&t(Bf16, &[1], &[1.0])]);
    exact(&got, &t(Bf16, &[1], &[2.71875]));
    let got = ok(unary(UnaryOp::Neg), &[&t(Bf16, &[1], &[3.0])]);
    exact(&got, &t(Bf16, &[1], &[-3.0]));
}

#[test]
fn unary_integer_ops_wrap_and_transcendentals_become_f32() {
    let x = ints(I32, &[4], &[i32::MIN as i64, -3, 0, 5]);
    let cases: &[(UnaryOp, [i64; 4])] = &[
        // -i32::MIN and |i32::MIN| wrap to i32::MIN, as in PyTorch.
        (UnaryOp::Neg, [i32::MIN as i64, 3, 0, -5]),
        (UnaryOp::Abs, [i32::MIN as i64, 3, 0, 5]),
        (UnaryOp::Relu, [0, 0, 0, 5]),
        (UnaryOp::Sign, [-1, -1, 0, 1]),
        (UnaryOp::Floor, [i32::MIN as i64, -3, 0, 5]),
        (UnaryOp::Ceil, [i32::MIN as i64, -3, 0, 5]),
    ];
    for (u, want) in cases {
        exact(&ok(unary(*u), &[&x]), &ints(I32, &[4], want));
    }
    let got = ok(unary(UnaryOp::Exp), &[&ints(I32, &[2], &[0, 1])]);
    close(&got, &f32s(&[2], &[1.0, E]), 1e-7);
    let got = ok(unary(UnaryOp::Sqrt), &[&ints(I64, &[2], &[4, 9])]);
    exact(&got, &f32s(&[2], &[2.0, 3.0]));
    let got = ok(unary(UnaryOp::Sigmoid), &[&bools(&[2], &[true, false])]);
    close(&got, &f32s(&[2], &[0.7310585786300049, 0.5]), 1e-7);
    // Rounding a bool is the identity.
    let b = bools(&[2], &[true, false]);
    exact(&ok(unary(UnaryOp::Floor), &[&b]), &b);
}

#[test]
fn not_treats_nonzero_as_true() {
    let got = ok(unary(UnaryOp::Not), &[&f32s(&[4], &[0.0, -0.0, NAN, 2.0])]);
    exact(&got, &bools(&[4], &[true, true, false, false]));
    let got = ok(unary(UnaryOp::Not), &[&ints(I64, &[2], &[0, -7])]);
    exact(&got, &bools(&[2], &[true, false]));
    let got = ok(unary(UnaryOp::Not), &[&bools(&[2], &[true, false])]);
    exact(&got, &bools(&[2], &[false, true]));
}

// ---------------------------------------------------------------- binary

#[test]
fn binary_ops_broadcast() {
    let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32s(&[3], &[10.0, 20.0, 30.0]);
    let got = ok(binary(BinaryOp::Add), &[&a, &b]);
    exact(&got, &f32s(&[2, 3], &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0]));
    let got = ok(binary(BinaryOp::Sub), &[&b, &a]);
    exact(&got, &f32s(&[2, 3], &[9.0, 18.0, 27.0, 6.0, 15.0, 24.0]));
    // A column times a row is an outer product.
    let col = f32s(&[2, 1], &[1.0, 2.0]);
    let row = f32s(&[1, 3], &[1.0, 2.0, 3.0]);
    let got = ok(binary(BinaryOp::Mul), &[&col, &row]);
    exact(&got, &f32s(&[2, 3], &[1.0, 2.0, 3.0, 2.0, 4.0, 6.0]));
    // Rank-0 against rank-2, and broadcasting on a middle axis.
    let s = f32s(&[], &[0.5]);
    let m = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let got = ok(binary(BinaryOp::Div), &[&m, &s]);
    exact(&got, &f32s(&[2, 2], &[2.0, 4.0, 6.0, 8.0]));
    let x = f32s(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let y = f32s(&[3, 1], &[0.0, 10.0, 20.0]);
    let got = ok(binary(BinaryOp::Add), &[&x, &y]);
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..3 {
            for k in 0..2 {
                want.push((1 + 2 * i + k) as f64 + 10.0 * j as f64);
            }
        }
    }
    exact(&got, &f32s(&[2, 3, 2], &want));
}

#[test]
fn mixed_dtypes_promote_before_computing() {
    // f16 + f32 -> f32, computed from the exact f16 value of 0.1.
    let h = t(F16, &[2], &[1.5, 0.1]);
    let f = f32s(&[2], &[1e-4, 0.1]);
    let got = ok(binary(BinaryOp::Add), &[&h, &f]);
    let h01 = half::f16::from_f64(0.1).to_f64();
    assert_eq!(h01, 0.0999755859375);
    let want = [1.5 + 1e-4f32 as f64, h01 + 0.1f32 as f64];
    exact(&got, &f32s(&[2], &want));
    // f16 + bf16 meet at f32.
    let got = ok(
        binary(BinaryOp::Add),
        &[&t(F16, &[1], &[1.0]), &t(Bf16, &[1], &[0.5])],
    );
    exact(&got, &f32s(&[1], &[1.5]));
    // i32 + i64 -> i64 without wrapping at the i32 range.
    let got = ok(
        binary(BinaryOp::Add),
        &[&ints(I32, &[1], &[i32::MAX as i64]), &ints(I64, &[1], &[1])],
    );
    exact(&got, &ints(I64, &[1], &[i32::MAX as i64 + 1]));
    // i32 * f16 -> f16; bool + i32 -> i32.
    let got = ok(
        binary(BinaryOp::Mul),
        &[&ints(I32, &[1], &[3]), &t(F16, &[1], &[0.5])],
    );
    exact(&got, &t(F16, &[1], &[1.5]));
    let got = ok(
        binary(BinaryOp::Add),
        &[&bools(&[2], &[true, false]), &ints(I32, &[2], &[10, 10])],
    );
    exact(&got, &ints(I32, &[2], &[11, 10]));
    // Comparisons compare in the common dtype: 16777217 becomes 16777216 in f32.
    let got = ok(
        binary(BinaryOp::Eq),
        &[
            &ints(I64, &[1], &[16_777_217]),
            &f32s(&[1], &[16_777_216.0]),
        ],
    );
    exact(&got, &bools(&[1], &[true]));
}

#[test]
fn literals_take_their_dtype() {
    // y = x * 0.5 + 2 on an i32 tensor: the float literal makes it f32, as in PyTorch.
    let mut g = Graph::new("lit");
    let x = g.add_param("x", ty(I32, &[3])).unwrap();
    let half = g.add_literal(Scalar::Float(0.5), F32).unwrap();
    let m = g.add(binary(BinaryOp::Mul), &[x, half], None).unwrap();
    let two = g.add_literal(Scalar::Int(2), F32).unwrap();
    let y = g
        .add(binary(BinaryOp::Add), &[m, two], Some("y".into()))
        .unwrap();
    let k = g.add_literal(Scalar::Int(3), I32).unwrap();
    let z = g
        .add(binary(BinaryOp::Mul), &[x, k], Some("z".into()))
        .unwrap();
    g.outputs = vec![y, z, y];
    let out = interpret(&g, &[ints(I32, &[3], &[1, 2, -4])]).unwrap();
    exact(&out[0], &f32s(&[3], &[2.5, 3.0, 0.0]));
    exact(&out[1], &ints(I32, &[3], &[3, 6, -12]));
    exact(&out[2], &out[0]);
}

#[test]
fn integer_division_is_true_division() {
    let a = ints(I32, &[5], &[7, -7, 1, 0, 1]);
    let b = ints(I32, &[5], &[2, 2, 0, 0, 3]);
    let got = ok(binary(BinaryOp::Div), &[&a, &b]);
    exact(&got, &f32s(&[5], &[3.5, -3.5, INF, NAN, 1.0 / 3.0]));
    let got = ok(
        binary(BinaryOp::Div),
        &[&ints(I64, &[1], &[1]), &bools(&[1], &[true])],
    );
    exact(&got, &f32s(&[1], &[1.0]));
}

#[test]
fn pow_for_floats_and_integers() {
    let got = ok(
        binary(BinaryOp::Pow),
        &[
            &f32s(&[4], &[2.0, 4.0, -8.0, 0.0]),
            &f32s(&[4], &[3.0, 0.5, 0.5, -1.0]),
        ],
    );
    exact(&got, &f32s(&[4], &[8.0, 2.0, NAN, INF]));
    let got = ok(
        binary(BinaryOp::Pow),
        &[&ints(I32, &[3], &[3, -2, 5]), &ints(I32, &[3], &[4, 3, 0])],
    );
    exact(&got, &ints(I32, &[3], &[81, -8, 1]));
    // 3^20 = 3486784401 and 3^21 = 10460353203 wrap modulo 2^32 into i32.
    let got = ok(
        binary(BinaryOp::Pow),
        &[&ints(I32, &[2], &[3, 3]), &ints(I32, &[2], &[20, 21])],
    );
    exact(
        &got,
        &ints(
            I32,
            &[2],
            &[3486784401 - (1 << 32), 10460353203 - 2 * (1 << 32)],
        ),
    );
    let e = err(
        binary(BinaryOp::Pow),
        &[&ints(I64, &[2], &[2, 2]), &ints(I64, &[2], &[1, -1])],
    );
    assert!(e.contains("negative integer powers"), "{e}");
    // An int base with a float exponent computes in float.
    let got = ok(
        binary(BinaryOp::Pow),
        &[&ints(I64, &[1], &[4]), &f32s(&[1], &[-0.5])],
    );
    exact(&got, &f32s(&[1], &[0.5]));
}

#[test]
fn maximum_and_minimum_propagate_nan() {
    let a = f32s(&[4], &[1.0, NAN, 3.0, -INF]);
    let b = f32s(&[4], &[2.0, 0.0, NAN, -1.0]);
    let got = ok(binary(BinaryOp::Maximum), &[&a, &b]);
    exact(&got, &f32s(&[4], &[2.0, NAN, NAN, -1.0]));
    let got = ok(binary(BinaryOp::Minimum), &[&a, &b]);
    exact(&got, &f32s(&[4], &[1.0, NAN, NAN, -INF]));
    let got = ok(
        binary(BinaryOp::Maximum),
        &[&ints(I64, &[2], &[i64::MIN, 5]), &ints(I64, &[2], &[-1, 4])],
    );
    exact(&got, &ints(I64, &[2], &[-1, 5]));
}

#[test]
fn comparisons_follow_ieee() {
    let a = f32s(&[3], &[1.0, NAN, 3.0]);
    let b = f32s(&[3], &[1.0, NAN, 2.0]);
    let cases = [
        (BinaryOp::Eq, [true, false, false]),
        (BinaryOp::Ne, [false, true, true]),
        (BinaryOp::Lt, [false, false, false]),
        (BinaryOp::Le, [true, false, false]),
        (BinaryOp::Gt, [false, false, true]),
        (BinaryOp::Ge, [true, false, true]),
    ];
    for (op, want) in cases {
        exact(&ok(binary(op), &[&a, &b]), &bools(&[3], &want));
    }
    // Integers compare exactly, even where f64 could not tell them apart.
    let big = ints(I64, &[1], &[(1 << 60) + 1]);
    let got = ok(binary(BinaryOp::Gt), &[&big, &ints(I64, &[1], &[1 << 60])]);
    exact(&got, &bools(&[1], &[true]));
    let got = ok(
        binary(BinaryOp::Lt),
        &[&bools(&[2], &[false, true]), &bools(&[2], &[true, true])],
    );
    exact(&got, &bools(&[2], &[true, false]));
}

#[test]
fn logical_ops_read_truth_values() {
    let a = f32s(&[4], &[0.0, 2.0, NAN, 0.0]);
    let b = ints(I32, &[4], &[1, 0, 5, 0]);
    let got = ok(binary(BinaryOp::And), &[&a, &b]);
    exact(&got, &bools(&[4], &[false, false, true, false]));
    let got = ok(binary(BinaryOp::Or), &[&a, &b]);
    exact(&got, &bools(&[4], &[true, true, true, false]));
}

#[test]
fn integer_arithmetic_wraps_in_the_result_dtype() {
    let got = ok(
        binary(BinaryOp::Add),
        &[&ints(I32, &[1], &[i32::MAX as i64]), &ints(I32, &[1], &[1])],
    );
    exact(&got, &ints(I32, &[1], &[i32::MIN as i64]));
    let got = ok(
        binary(BinaryOp::Mul),
        &[&ints(I32, &[1], &[65536]), &ints(I32, &[1], &[65537])],
    );
    // 65536 * 65537 = 2^32 + 65536, which is 65536 modulo 2^32.
    exact(&got, &ints(I32, &[1], &[65536]));
    let got = ok(
        binary(BinaryOp::Sub),
        &[&ints(I64, &[1], &[i64::MIN]), &ints(I64, &[1], &[1])],
    );
    exact(&got, &ints(I64, &[1], &[i64::MAX]));
}

#[test]
fn bool_arithmetic_is_logic() {
    let a = bools(&[4], &[true, true, false, false]);
    let b = bools(&[4], &[true, false, true, false]);
    let and = bools(&[4], &[true, false, false, false]);
    exact(&ok(binary(BinaryOp::Mul), &[&a, &b]), &and);
    exact(&ok(binary(BinaryOp::Minimum), &[&a, &b]), &and);
    exact(
        &ok(binary(BinaryOp::Maximum), &[&a, &b]),
        &bools(&[4], &[true, true, true, false]),
    );
}

#[test]
fn where_broadcasts_and_promotes() {
    let cond = bools(&[2, 1], &[true, false]);
    let a = f32s(&[3], &[1.0, 2.0, 3.0]);
    let b = ints(I32, &[], &[-1]);
    let got = ok(Op::Where, &[&cond, &a, &b]);
    exact(&got, &f32s(&[2, 3], &[1.0, 2.0, 3.0, -1.0, -1.0, -1.0]));
    // i64 values pass through bit for bit.
    let big = (1i64 << 62) + 1;
    let got = ok(
        Op::Where,
        &[
            &bools(&[2], &[false, true]),
            &ints(I64, &[1], &[big]),
            &ints(I64, &[2], &[7, 8]),
        ],
    );
    exact(&got, &ints(I64, &[2], &[7, big]));
}

// ---------------------------------------------------------------- cast

fn cast(to: DType) -> Op {
    Op::Cast { to }
}

#[test]
fn cast_float_to_int_truncates_and_saturates() {
    let x = f32s(&[7], &[1.9, -1.9, NAN, INF, -INF, 3e9, 0.0]);
    let got = ok(cast(I32), &[&x]);
    let want = [
        1,
        -1,
        0,
        i32::MAX as i64,
        i32::MIN as i64,
        i32::MAX as i64,
        0,
    ];
    exact(&got, &ints(I32, &[7], &want));
    let got = ok(cast(I64), &[&x]);
    let want = [1, -1, 0, i64::MAX, i64::MIN, 3_000_000_000, 0];
    exact(&got, &ints(I64, &[7], &want));
    let got = ok(cast(Bool), &[&x]);
    exact(
        &got,
        &bools(&[7], &[true, true, true, true, true, true, false]),
    );
}

#[test]
fn cast_rounds_to_nearest_even() {
    // f16 has 10 fraction bits: 1 + 2^-11 ties to 1, 1 + 3 * 2^-11 ties up to 1 + 2^-9;
    // 65520 is halfway between 65504 and 2^16, so it overflows to infinity.
    let x = f32s(
        &[4],
        &[
            1.0 + 2f64.powi(-11),
            1.0 + 3.0 * 2f64.powi(-11),
            65519.0,
            65520.0,
        ],
    );
    let got = ok(cast(F16), &[&x]);
    let want = [1.0, 1.0 + 2f64.powi(-9), 65504.0, INF];
    exact(&got, &t(F16, &[4], &want));
    // Just above a tie, the bits that decide the rounding are far below the kept ones.
    let above = [
        1.0 + 2f64.powi(-11) + 2f64.powi(-23),
        -(1.0 + 2f64.powi(-8) + 2f64.powi(-23)),
    ];
    let got = ok(cast(F16), &[&f32s(&[1], &above[..1])]);
    exact(&got, &t(F16, &[1], &[1.0 + 2f64.powi(-10)]));
    assert_eq!(
        got.data,
        Data::F16(vec![half::f16::from_f32(above[0] as f32)])
    );
    let got = ok(cast(Bf16), &[&f32s(&[1], &above[1..])]);
    exact(&got, &t(Bf16, &[1], &[-(1.0 + 2f64.powi(-7))]));
    assert_eq!(
        got.data,
        Data::Bf16(vec![half::bf16::from_f32(above[1] as f32)])
    );
    // i64 -> f32 must round the integer itself, not its f64 approximation:
    // 2^60 + 2^36 + 1 is just above a tie, so it rounds up to 2^60 + 2^37.
    let v = (1i64 << 60) + (1 << 36) + 1;
    let got = ok(cast(F32), &[&ints(I64, &[1], &[v])]);
    assert_eq!(got.data, Data::F32(vec![v as f32]));
    assert_eq!(v as f32 as f64, 2f64.powi(60) + 2f64.powi(37));
    // The same for bf16 (8 significant bits): 2^60 + 2^52 + 1 rounds to 2^60 + 2^53.
    let v = (1i64 << 60) + (1 << 52) + 1;
    let got = ok(cast(Bf16), &[&ints(I64, &[1], &[v])]);
    exact(&got, &t(Bf16, &[1], &[2f64.powi(60) + 2f64.powi(53)]));
}

#[test]
fn cast_between_integers_wraps() {
    let got = ok(
        cast(I32),
        &[&ints(I64, &[3], &[(1 << 32) + 5, 1 << 31, -1])],
    );
    exact(&got, &ints(I32, &[3], &[5, i32::MIN as i64, -1]));
    let got = ok(cast(F32), &[&bools(&[2], &[true, false])]);
    exact(&got, &f32s(&[2], &[1.0, 0.0]));
    let got = ok(cast(Bool), &[&ints(I32, &[3], &[0, -3, 2])]);
    exact(&got, &bools(&[3], &[false, true, true]));
    let got = ok(cast(F32), &[&t(F16, &[1], &[0.1])]);
    exact(&got, &f32s(&[1], &[0.0999755859375]));
    let got = ok(cast(I64), &[&bools(&[2], &[true, false])]);
    exact(&got, &ints(I64, &[2], &[1, 0]));
}

// ---------------------------------------------------------------- reductions

fn x23() -> Tensor {
    f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

#[test]
fn reductions_over_axes() {
    let x = x23();
    let cases: &[(Op, &[usize], &[f64])] = &[
        (
            reduce(ReduceOp::Sum, Some(&[0]), false),
            &[3],
            &[5.0, 7.0, 9.0],
        ),
        (
            reduce(ReduceOp::Sum, Some(&[-1]), false),
            &[2],
            &[6.0, 15.0],
        ),
        (
            reduce(ReduceOp::Sum, Some(&[-1]), true),
            &[2, 1],
            &[6.0, 15.0],
        ),
        (reduce(ReduceOp::Sum, None, false), &[], &[21.0]),
        (reduce(ReduceOp::Sum, Some(&[1, 0]), true), &[1, 1], &[21.0]),
        (reduce(ReduceOp::Mean, Some(&[1]), false), &[2], &[2.0, 5.0]),
        (reduce(ReduceOp::Mean, None, false), &[], &[3.5]),
        (reduce(ReduceOp::Prod, None, false), &[], &[720.0]),
        (
            reduce(ReduceOp::Prod, Some(&[0]), true),
            &[1, 3],
            &[4.0, 10.0, 18.0],
        ),
        (
            reduce(ReduceOp::Max, Some(&[0]), false),
            &[3],
            &[4.0, 5.0, 6.0],
        ),
        (reduce(ReduceOp::Min, Some(&[1]), false), &[2], &[1.0, 4.0]),
    ];
    for (op, shape, want) in cases {
        exact(&ok(op.clone(), &[&x]), &f32s(shape, want));
    }
}

#[test]
fn reduction_over_several_axes_of_a_3d_tensor() {
    let v: Vec<f64> = (0..24).map(|i| i as f64).collect();
    let x = f32s(&[2, 3, 4], &v);
    let got = ok(reduce(ReduceOp::Sum, Some(&[0, 2]), false), &[&x]);
    let want: Vec<f64> = (0..3)
        .map(|j| {
            let mut s = 0.0;
            for i in 0..2 {
                for k in 0..4 {
                    s += (12 * i + 4 * j + k) as f64;
                }
            }
            s
        })
        .collect();
    exact(&got, &f32s(&[3], &want));
    let got = ok(reduce(ReduceOp::Max, Some(&[-1, 0]), true), &[&x]);
    exact(&got, &f32s(&[1, 3, 1], &[15.0, 19.0, 23.0]));
}

#[test]
fn integer_and_bool_reductions() {
    let x = ints(I32, &[2, 2], &[i32::MAX as i64, i32::MAX as i64, 1, 2]);
    // Sums and products of integers are i64, so they do not wrap at the i32 range.
    let got = ok(reduce(ReduceOp::Sum, None, false), &[&x]);
    exact(&got, &ints(I64, &[], &[2 * i32::MAX as i64 + 3]));
    let got = ok(reduce(ReduceOp::Prod, Some(&[1]), false), &[&x]);
    exact(
        &got,
        &ints(I64, &[2], &[(i32::MAX as i64) * (i32::MAX as i64), 2]),
    );
    // Max and min keep the dtype.
    let got = ok(reduce(ReduceOp::Min, Some(&[0]), false), &[&x]);
    exact(&got, &ints(I32, &[2], &[1, 2]));
    let b = bools(&[3], &[true, true, false]);
    exact(
        &ok(reduce(ReduceOp::Sum, None, false), &[&b]),
        &ints(I64, &[], &[2]),
    );
    exact(
        &ok(reduce(ReduceOp::Max, None, false), &[&b]),
        &bools(&[], &[true]),
    );
    exact(
        &ok(reduce(ReduceOp::Min, None, false), &[&b]),
        &bools(&[], &[false]),
    );
}

#[test]
fn reductions_propagate_nan() {
    let x = f32s(&[2, 2], &[1.0, NAN, -INF, -INF]);
    for op in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum] {
        let got = ok(reduce(op, Some(&[1]), false), &[&x]);
        let want = [NAN, -INF];
        exact(&got, &f32s(&[2], &want));
    }
}

#[test]
fn empty_reductions_use_identities() {
    let x = f32s(&[0, 3], &[]);
    let cases: &[(ReduceOp, f64)] = &[
        (ReduceOp::Sum, 0.0),
        (ReduceOp::Prod, 1.0),
        (ReduceOp::Mean, NAN),
    ];
    for &(op, want) in cases {
        let got = ok(reduce(op, Some(&[0]), false), &[&x]);
        exact(&got, &f32s(&[3], &[want; 3]));
    }
    let got = ok(reduce(ReduceOp::Sum, Some(&[1]), false), &[&x]);
    exact(&got, &f32s(&[0], &[]));
    let got = ok(reduce(ReduceOp::Sum, None, false), &[&ints(I32, &[0], &[])]);
    exact(&got, &ints(I64, &[], &[0]));
    // A scalar reduces to itself.
    let got = ok(reduce(ReduceOp::Sum, None, false), &[&f32s(&[], &[5.0])]);
    exact(&got, &f32s(&[], &[5.0]));
}

#[test]
fn half_precision_sums_accumulate_in_f64() {
    // In f16 arithmetic 2048 + 1 = 2048, so a running f16 sum of 3000 ones stalls at
    // 2048; accumulating in f64 and rounding once gives 3000 (even, so exact in f16).
    let x = t(F16, &[3000], &[1.0; 3000]);
    let got = ok(reduce(ReduceOp::Sum, None, false), &[&x]);
    exact(&got, &t(F16, &[], &[3000.0]));
    // 1 + 2^-11 + 2^-24 lies just above the f16 tie between 1 and 1 + 2^-10, so it rounds
    // up; rounding through f32 first would land on the tie and round down to 1.
    let x = t(F16, &[3], &[1.0, 2f64.powi(-11), 2f64.powi(-24)]);
    let got = ok(reduce(ReduceOp::Sum, None, false), &[&x]);
    exact(&got, &t(F16, &[], &[1.0 + 2f64.powi(-10)]));
    let x = t(Bf16, &[3], &[1.0, 2f64.powi(-8), 2f64.powi(-40)]);
    let got = ok(reduce(ReduceOp::Sum, None, false), &[&x]);
    exact(&got, &t(Bf16, &[], &[1.0 + 2f64.powi(-7)]));
}

fn arg(op: ArgReduceOp, axis: Option<i64>, keepdim: bool) -> Op {
    Op::ArgReduce { op, axis, keepdim }
}

#[test]
fn argmax_and_argmin_pick_the_first_extremum() {
    use ArgReduceOp::{ArgMax, ArgMin};
    let x = f32s(&[2, 3], &[1.0, 3.0, 3.0, 2.0, 0.0, 2.0]);
    let cases: &[(Op, &[usize], &[i64])] = &[
        (arg(ArgMax, Some(1), false), &[2], &[1, 0]),
        (arg(ArgMin, Some(1), false), &[2], &[0, 1]),
        (arg(ArgMax, Some(0), false), &[3], &[1, 0, 0]),
        (arg(ArgMin, Some(-2), false), &[3], &[0, 1, 1]),
        (arg(ArgMax, Some(-1), true), &[2, 1], &[1, 0]),
        (arg(ArgMax, None, false), &[], &[1]),
        (arg(ArgMin, None, true), &[1, 1], &[4]),
    ];
    for (op, shape, want) in cases {
        exact(&ok(op.clone(), &[&x]), &ints(I64, shape, want));
    }
    // NaN is the extremum for both, as PyTorch returns the index of the NaN.
    let n = f32s(&[4], &[1.0, NAN, 5.0, NAN]);
    exact(&ok(arg(ArgMax, None, false), &[&n]), &ints(I64, &[], &[1]));
    exact(
        &ok(arg(ArgMin, Some(0), false), &[&n]),
        &ints(I64, &[], &[1]),
    );
    // Integers compare exactly.
    let i = ints(I64, &[3], &[1 << 60, (1 << 60) + 1, -5]);
    exact(
        &ok(arg(ArgMax, Some(0), false), &[&i]),
        &ints(I64, &[], &[1]),
    );
    exact(
        &ok(arg(ArgMin, Some(0), false), &[&i]),
        &ints(I64, &[], &[2]),
    );
}

// ---------------------------------------------------------------- normalization

#[test]
fn softmax_and_log_softmax() {
    let ln3 = 3f64.ln();
    let x = f32s(&[2, 2], &[0.0, ln3, 1000.0, 1000.0]);
    let got = ok(Op::Softmax { axis: -1 }, &[&x]);
    close(&got, &f32s(&[2, 2], &[0.25, 0.75, 0.5, 0.5]), 1e-6);
    let got = ok(Op::LogSoftmax { axis: 1 }, &[&x]);
    let (a, b) = (0.25f64.ln(), 0.75f64.ln());
    close(&got, &f32s(&[2, 2], &[a, b, -LN_2, -LN_2]), 1e-6);
    // Along axis 0.
    let col = f32s(&[2, 1], &[ln3, 0.0]);
    let got = ok(Op::Softmax { axis: 0 }, &[&col]);
    close(&got, &f32s(&[2, 1], &[0.75, 0.25]), 1e-6);
    // -inf gets probability 0; a NaN poisons its slice only.
    let x = f32s(&[2, 2], &[-INF, 0.0, NAN, 1.0]);
    let got = ok(Op::Softmax { axis: -1 }, &[&x]);
    exact(&got, &f32s(&[2, 2], &[0.0, 1.0, NAN, NAN]));
    // A scalar's softmax is 1.
    exact(
        &ok(Op::Softmax { axis: 0 }, &[&f32s(&[], &[7.0])]),
        &f32s(&[], &[1.0]),
    );
}

#[test]
fn layer_norm_uses_biased_variance() {
    let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 4.0, 4.0]);
    let w = f32s(&[3], &[1.0, 2.0, 0.5]);
    let b = f32s(&[3], &[0.0, 1.0, -1.0]);
    let eps = 1e-5;
    let got = ok(Op::LayerNorm { eps }, &[&x, &w, &b]);
    // Row 0: mean 2, biased variance 2/3. Row 1 is constant: only the bias remains.
    let s = (2.0 / 3.0 + eps).sqrt();
    let want = [-1.0 / s, 1.0, 0.5 / s - 1.0, 0.0, 1.0, -1.0];
    close(&got, &f32s(&[2, 3], &want), 1e-6);
    let got = ok(
        Op::LayerNorm { eps: 0.0 },
        &[&x23(), &f32s(&[3], &[1.0; 3]), &f32s(&[3], &[0.0; 3])],
    );
    let r = 1.224744871391589;
    close(&got, &f32s(&[2, 3], &[-r, 0.0, r, -r, 0.0, r]), 1e-6);
}

#[test]
fn rms_norm_divides_by_root_mean_square() {
    // mean(3^2, 4^2) = 12.5.
    let x = f32s(&[2, 2], &[3.0, 4.0, 0.0, 0.0]);
    let w = f32s(&[2], &[1.0, 2.0]);
    let got = ok(Op::RmsNorm { eps: 0.0 }, &[&x, &w]);
    let want = [0.848528137423857, 2.0 * 1.131370849898476, NAN, NAN];
    close(&got, &f32s(&[2, 2], &want), 1e-6);
    let got = ok(Op::RmsNorm { eps: 1e-6 }, &[&x, &w]);
    let r = (12.5f64 + 1e-6).sqrt();
    close(&got, &f32s(&[2, 2], &[3.0 / r, 8.0 / r, 0.0, 0.0]), 1e-6);
}

// ---------------------------------------------------------------- matmul

#[test]
fn matmul_of_matrices_and_vectors() {
    let a = x23();
    let b = f32s(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    exact(
        &ok(Op::MatMul, &[&a, &b]),
        &f32s(&[2, 2], &[58.0, 64.0, 139.0, 154.0]),
    );
    let u = f32s(&[3], &[1.0, 2.0, 3.0]);
    let v = f32s(&[3], &[4.0, 5.0, 6.0]);
    exact(&ok(Op::MatMul, &[&u, &v]), &f32s(&[], &[32.0]));
    let row = f32s(&[2], &[1.0, 2.0]);
    exact(
        &ok(Op::MatMul, &[&row, &a]),
        &f32s(&[3], &[9.0, 12.0, 15.0]),
    );
    let col = f32s(&[3], &[1.0, 0.0, -1.0]);
    exact(&ok(Op::MatMul, &[&a, &col]), &f32s(&[2], &[-2.0, -2.0]));
    // An empty contraction is all zeros.
    let got = ok(Op::MatMul, &[&f32s(&[2, 0], &[]), &f32s(&[0, 3], &[])]);
    exact(&got, &f32s(&[2, 3], &[0.0; 6]));
}

#[test]
fn batched_matmul_broadcasts_batch_axes() {
    let av: Vec<f64> = (0..12).map(|i| i as f64 - 5.0).collect();
    let bv: Vec<f64> = (0..18).map(|i| (i * 7 % 11) as f64).collect();
    let a = f32s(&[2, 1, 2, 3], &av);
    let b = f32s(&[3, 3, 2], &bv);
    let got = ok(Op::MatMul, &[&a, &b]);
    // out[p, q, i, j] = Σ_k a[p, 0, i, k] * b[q, k, j]
    let mut want = Vec::new();
    for p in 0..2 {
        for q in 0..3 {
            for i in 0..2 {
                for j in 0..2 {
                    let s: f64 = (0..3)
                        .map(|k| av[p * 6 + i * 3 + k] * bv[q * 6 + k * 2 + j])
                        .sum();
                    want.push(s);
                }
            }
        }
    }
    exact(&got, &f32s(&[2, 3, 2, 2], &want));
    // A 1-D operand against a batch: [3] @ [2, 3, 2] -> [2, 2].
    let v = f32s(&[3], &[1.0, 1.0, 1.0]);
    let b = f32s(&[2, 3, 2], &bv[..12]);
    let got = ok(Op::MatMul, &[&v, &b]);
    let want: Vec<f64> = (0..2)
        .flat_map(|q| {
            let bv = &bv;
            (0..2).map(move |j| (0..3).map(|k| bv[q * 6 + k * 2 + j]).sum::<f64>())
        })
        .collect();
    exact(&got, &f32s(&[2, 2], &want));
}

#[test]
fn matmul_accumulates_wide() {
    // In f16, 2048 + 1 rounds back to 2048; accumulated in f64 the dot product is 2050.
    let a = t(F16, &[1, 3], &[2048.0, 1.0, 1.0]);
    let b = t(F16, &[3, 1], &[1.0, 1.0, 1.0]);
    exact(&ok(Op::MatMul, &[&a, &b]), &t(F16, &[1, 1], &[2050.0]));
    // i32 accumulates in i64 and wraps once: 65536 * 65536 + 65536 * 1 mod 2^32.
    let a = ints(I32, &[1, 2], &[65536, 65536]);
    let b = ints(I32, &[2, 1], &[65536, 1]);
    exact(&ok(Op::MatMul, &[&a, &b]), &ints(I32, &[1, 1], &[65536]));
    let a = ints(I64, &[2, 2], &[1, 2, 3, 4]);
    exact(
        &ok(Op::MatMul, &[&a, &a]),
        &ints(I64, &[2, 2], &[7, 10, 15, 22]),
    );
}

// ---------------------------------------------------------------- movement

#[test]
fn reshape_squeeze_unsqueeze_keep_the_elements() {
    let x = x23();
    let got = ok(Op::Reshape { shape: vec![3, -1] }, &[&x]);
    exact(&got, &f32s(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let y = f32s(&[1, 3, 1], &[1.0, 2.0, 3.0]);
    let got = ok(Op::Squeeze { axes: None }, &[&y]);
    exact(&got, &f32s(&[3], &[1.0, 2.0, 3.0]));
    let got = ok(
        Op::Squeeze {
            axes: Some(vec![-1]),
        },
        &[&y],
    );
    exact(&got, &f32s(&[1, 3], &[1.0, 2.0, 3.0]));
    let got = ok(Op::Unsqueeze { axis: -1 }, &[&f32s(&[3], &[1.0, 2.0, 3.0])]);
    exact(&got, &f32s(&[3, 1], &[1.0, 2.0, 3.0]));
}

#[test]
fn permute_and_transpose() {
    let v: Vec<f64> = (0..24).map(|i| i as f64).collect();
    let x = f32s(&[2, 3, 4], &v);
    let got = ok(
        Op::Permute {
            dims: vec![2, 0, -2],
        },
        &[&x],
    );
    // out[k, i, j] = x[i, j, k]
    let mut want = Vec::new();
    for k in 0..4 {
        for i in 0..2 {
            for j in 0..3 {
                want.push(v[i * 12 + j * 4 + k]);
            }
        }
    }
    exact(&got, &f32s(&[4, 2, 3], &want));
    let got = ok(Op::Transpose { dim0: -1, dim1: 0 }, &[&x23()]);
    exact(&got, &f32s(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
    // i64 values survive movement bit for bit.
    let big = ints(I64, &[2, 1], &[(1 << 62) + 1, -(1 << 62) - 3]);
    let got = ok(Op::Transpose { dim0: 0, dim1: 1 }, &[&big]);
    exact(&got, &ints(I64, &[1, 2], &[(1 << 62) + 1, -(1 << 62) - 3]));
}

#[test]
fn expand_repeats_extent_one_axes() {
    let x = f32s(&[3, 1], &[1.0, 2.0, 3.0]);
    let got = ok(
        Op::Expand {
            shape: vec![2, -1, 4],
        },
        &[&x],
    );
    let want: Vec<f64> = (0..24).map(|i| ((i / 4) % 3 + 1) as f64).collect();
    exact(&got, &f32s(&[2, 3, 4], &want));
    let got = ok(Op::Expand { shape: vec![2, 2] }, &[&bools(&[], &[true])]);
    exact(&got, &bools(&[2, 2], &[true; 4]));
}

fn slice(axis: i64, start: i64, end: i64, step: i64) -> Op {
    Op::Slice {
        axis,
        start,
        end,
        step,
    }
}

#[test]
fn slice_clamps_like_python() {
    let v: Vec<i64> = (0..10).collect();
    let x = ints(I64, &[10], &v);
    let cases: &[(Op, &[i64])] = &[
        (slice(0, -3, i64::MAX, 1), &[7, 8, 9]),
        (slice(0, 2, -2, 3), &[2, 5]),
        (slice(-1, 20, 30, 1), &[]),
        (slice(0, -100, 3, 1), &[0, 1, 2]),
        (slice(0, 1, i64::MAX, 4), &[1, 5, 9]),
        (slice(0, 5, 2, 1), &[]),
    ];
    for (op, want) in cases {
        exact(&ok(op.clone(), &[&x]), &ints(I64, &[want.len()], want));
    }
    let m: Vec<f64> = (0..10).map(|i| i as f64).collect();
    let got = ok(slice(1, 0, i64::MAX, 2), &[&f32s(&[2, 5], &m)]);
    exact(&got, &f32s(&[2, 3], &[0.0, 2.0, 4.0, 5.0, 7.0, 9.0]));
    let got = ok(slice(0, 1, 2, 1), &[&f32s(&[2, 5], &m)]);
    exact(&got, &f32s(&[1, 5], &m[5..]));
}

#[test]
fn concat_joins_along_an_axis() {
    let a = f32s(&[2, 1], &[1.0, 2.0]);
    let b = f32s(&[2, 2], &[3.0, 4.0, 5.0, 6.0]);
    let c = f32s(&[2, 0], &[]);
    let got = ok(Op::Concat { axis: 1 }, &[&a, &b, &c]);
    exact(&got, &f32s(&[2, 3], &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0]));
    let got = ok(Op::Concat { axis: -1 }, &[&b, &a]);
    exact(&got, &f32s(&[2, 3], &[3.0, 4.0, 1.0, 5.0, 6.0, 2.0]));
    let got = ok(Op::Concat { axis: 0 }, &[&b, &b]);
    exact(
        &got,
        &f32s(&[4, 2], &[3.0, 4.0, 5.0, 6.0, 3.0, 4.0, 5.0, 6.0]),
    );
    let got = ok(
        Op::Concat { axis: 0 },
        &[&ints(I32, &[1], &[7]), &ints(I32, &[2], &[8, 9])],
    );
    exact(&got, &ints(I32, &[3], &[7, 8, 9]));
}

#[test]
fn pad_fills_and_crops() {
    let x = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let got = ok(
        Op::Pad {
            pads: vec![1, 0, 0, 1],
            value: 9.0,
        },
        &[&x],
    );
    exact(
        &got,
        &f32s(&[3, 3], &[9.0, 9.0, 9.0, 1.0, 2.0, 9.0, 3.0, 4.0, 9.0]),
    );
    // Crop the first row; add a column before and drop the last one.
    let got = ok(
        Op::Pad {
            pads: vec![-1, 0, 1, -1],
            value: 0.0,
        },
        &[&x],
    );
    exact(&got, &f32s(&[1, 2], &[0.0, 3.0]));
    let got = ok(
        Op::Pad {
            pads: vec![2, 1],
            value: 7.0,
        },
        &[&ints(I32, &[1], &[5])],
    );
    exact(&got, &ints(I32, &[4], &[7, 7, 5, 7]));
    let e = type_err(
        Op::Pad {
            pads: vec![1, 0],
            value: 3e9,
        },
        &[&ints(I32, &[1], &[5])],
    );
    assert!(e.contains("3000000000") && e.contains("i32"), "{e}");
}

// ---------------------------------------------------------------- indexing

#[test]
fn index_select_picks_rows() {
    let x = f32s(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let got = ok(
        Op::IndexSelect { axis: 0 },
        &[&x, &ints(I32, &[3], &[2, 0, 2])],
    );
    exact(&got, &f32s(&[3, 2], &[5.0, 6.0, 1.0, 2.0, 5.0, 6.0]));
    let got = ok(Op::IndexSelect { axis: -1 }, &[&x, &ints(I64, &[1], &[1])]);
    exact(&got, &f32s(&[3, 1], &[2.0, 4.0, 6.0]));
    let got = ok(Op::IndexSelect { axis: 0 }, &[&x, &ints(I64, &[0], &[])]);
    exact(&got, &f32s(&[0, 2], &[]));
    let e = err(
        Op::IndexSelect { axis: 0 },
        &[&x, &ints(I64, &[2], &[0, -1])],
    );
    assert!(
        e.contains("index -1 out of range for axis of extent 3"),
        "{e}"
    );
    let e = err(Op::IndexSelect { axis: 0 }, &[&x, &ints(I32, &[1], &[3])]);
    assert!(e.contains("index 3 out of range"), "{e}");
}

#[test]
fn index_select_takes_an_index_of_any_rank() {
    // x[i, j] = 10 * i + j, shape [3, 4].
    let x = f32s(
        &[3, 4],
        &(0..12)
            .map(|k| (10 * (k / 4) + k % 4) as f64)
            .collect::<Vec<_>>(),
    );
    // A rank-0 index drops the axis: row 2, column 1.
    let got = ok(Op::IndexSelect { axis: 0 }, &[&x, &ints(I64, &[], &[2])]);
    exact(&got, &f32s(&[4], &[20.0, 21.0, 22.0, 23.0]));
    let got = ok(Op::IndexSelect { axis: 1 }, &[&x, &ints(I32, &[], &[1])]);
    exact(&got, &f32s(&[3], &[1.0, 11.0, 21.0]));
    // A [2, 2] index along axis 0 (an embedding lookup of [batch, seq] ids): [2, 2, 4].
    let got = ok(
        Op::IndexSelect { axis: 0 },
        &[&x, &ints(I64, &[2, 2], &[2, 0, 1, 1])],
    );
    #[rustfmt::skip]
    let want = [20.0, 21.0, 22.0, 23.0,  0.0, 1.0, 2.0, 3.0,
                10.0, 11.0, 12.0, 13.0,  10.0, 11.0, 12.0, 13.0];
    exact(&got, &f32s(&[2, 2, 4], &want));
    // Along the last axis the index's axes come last: [3, 1, 2].
    let got = ok(
        Op::IndexSelect { axis: -1 },
        &[&x, &ints(I32, &[1, 2], &[3, 0])],
    );
    exact(&got, &f32s(&[3, 1, 2], &[3.0, 0.0, 13.0, 10.0, 23.0, 20.0]));
    // Between axes, and a rank-3 index: x [2, 3, 2] along axis 1 with [1, 2, 1] -> [2, 1, 2, 1, 2].
    let y = f32s(&[2, 3, 2], &(0..12).map(|k| k as f64).collect::<Vec<_>>());
    let got = ok(
        Op::IndexSelect { axis: 1 },
        &[&y, &ints(I64, &[1, 2, 1], &[2, 0])],
    );
    exact(
        &got,
        &f32s(
            &[2, 1, 2, 1, 2],
            &[4.0, 5.0, 0.0, 1.0, 10.0, 11.0, 6.0, 7.0],
        ),
    );
    // Every index element is checked, even when the result is empty (as PyTorch does).
    let empty = f32s(&[0, 4], &[]);
    let e = err(
        Op::IndexSelect { axis: 1 },
        &[&empty, &ints(I64, &[2, 1], &[0, 9])],
    );
    assert!(
        e.contains("index 9 out of range for axis of extent 4"),
        "{e}"
    );
    // An empty axis: any index is out of range, an empty index is fine.
    let none = f32s(&[0], &[]);
    let e = err(
        Op::IndexSelect { axis: 0 },
        &[&none, &ints(I64, &[1, 1], &[0])],
    );
    assert!(
        e.contains("index 0 out of range for axis of extent 0"),
        "{e}"
    );
    let got = ok(
        Op::IndexSelect { axis: 0 },
        &[&none, &ints(I64, &[2, 0], &[])],
    );
    exact(&got, &f32s(&[2, 0], &[]));
    // Negative indices are out of range, at any rank.
    let e = err(Op::IndexSelect { axis: 0 }, &[&x, &ints(I32, &[], &[-1])]);
    assert!(e.contains("index -1 out of range"), "{e}");
}

#[test]
fn index_select_result_shapes_follow_numpy_take() {
    let shape = |x: &[usize], i: &[usize], axis| {
        ferrite_ir::infer::infer(&Op::IndexSelect { axis }, &[&ty(F32, x), &ty(I64, i)])
            .map(|t| t.shape)
    };
    assert_eq!(shape(&[5, 6, 7], &[], 1).unwrap(), vec![5, 7]);
    assert_eq!(shape(&[5, 6, 7], &[2, 3], 0).unwrap(), vec![2, 3, 6, 7]);
    assert_eq!(shape(&[5, 6, 7], &[2, 3], 1).unwrap(), vec![5, 2, 3, 7]);
    assert_eq!(
        shape(&[5, 6, 7], &[2, 3, 4], -1).unwrap(),
        vec![5, 6, 2, 3, 4]
    );
    assert!(shape(&[5], &[1], 1).is_err());
    assert!(shape(&[], &[1], 0).is_err());
    // The result's rank is bounded like every type's.
    assert!(shape(&[2; 9], &[1; 9], 0).is_err());
}

#[test]
fn gather_takes_along_an_axis_with_broadcasting() {
    let x = x23();
    let got = ok(Op::Gather { axis: 1 }, &[&x, &ints(I64, &[2, 1], &[2, 0])]);
    exact(&got, &f32s(&[2, 1], &[3.0, 4.0]));
    // The index broadcasts along axis 0: the same picks for every row.
    let got = ok(Op::Gather { axis: 1 }, &[&x, &ints(I32, &[1, 2], &[2, 0])]);
    exact(&got, &f32s(&[2, 2], &[3.0, 1.0, 6.0, 4.0]));
    // The input broadcasts along axis 0 against a taller index.
    let row = f32s(&[1, 3], &[10.0, 20.0, 30.0]);
    let got = ok(
        Op::Gather { axis: 1 },
        &[&row, &ints(I32, &[2, 2], &[0, 2, 1, 1])],
    );
    exact(&got, &f32s(&[2, 2], &[10.0, 30.0, 20.0, 20.0]));
    // Along axis 0.
    let got = ok(
        Op::Gather { axis: 0 },
        &[&x, &ints(I64, &[1, 3], &[1, 0, 1])],
    );
    exact(&got, &f32s(&[1, 3], &[4.0, 2.0, 6.0]));
    let e = err(Op::Gather { axis: 1 }, &[&x, &ints(I64, &[2, 1], &[0, 3])]);
    assert!(e.contains("index 3 out of range"), "{e}");
    let e = err(Op::Gather { axis: 1 }, &[&x, &ints(I64, &[2, 1], &[-1, 0])]);
    assert!(e.contains("index -1 out of range"), "{e}");
}

// ---------------------------------------------------------------- creation

#[test]
fn full_and_arange() {
    let full = |shape: &[usize], value: f64, dtype: DType| Op::Full {
        shape: shape.to_vec(),
        value,
        dtype,
    };
    exact(&ok(full(&[2, 2], 1.5, F32), &[]), &f32s(&[2, 2], &[1.5; 4]));
    exact(&ok(full(&[3], 7.0, I32), &[]), &ints(I32, &[3], &[7; 3]));
    exact(&ok(full(&[], 1.0, Bool), &[]), &bools(&[], &[true]));
    exact(&ok(full(&[0, 4], 1.0, F16), &[]), &t(F16, &[0, 4], &[]));
    let e = type_err(full(&[1], 3e9, I32), &[]);
    assert!(e.contains("overflow"), "{e}");
    let e = type_err(full(&[1], 1e6, F16), &[]);
    assert!(e.contains("overflow"), "{e}");
    exact(&ok(full(&[1], -INF, F16), &[]), &t(F16, &[1], &[-INF]));

    let arange = |start: f64, end: f64, step: f64, dtype: DType| Op::Arange {
        start,
        end,
        step,
        dtype,
    };
    exact(
        &ok(arange(0.0, 5.0, 1.0, I64), &[]),
        &ints(I64, &[5], &[0, 1, 2, 3, 4]),
    );
    exact(
        &ok(arange(1.0, 2.0, 0.25, F32), &[]),
        &f32s(&[4], &[1.0, 1.25, 1.5, 1.75]),
    );
    exact(
        &ok(arange(5.0, 0.0, -2.0, I32), &[]),
        &ints(I32, &[3], &[5, 3, 1]),
    );
    exact(&ok(arange(3.0, 1.0, 1.0, F32), &[]), &f32s(&[0], &[]));
    // 0.1 is inexact: element i is 0.1 * i rounded once, not an accumulated sum.
    let got = ok(arange(0.0, 1.0, 0.1, F32), &[]);
    let want: Vec<f64> = (0..10).map(|i| i as f64 * 0.1).collect();
    exact(&got, &f32s(&[10], &want));
    // Integer dtypes truncate start and step first, as PyTorch's CPU kernel does.
    exact(
        &ok(arange(0.0, 2.0, 0.5, I64), &[]),
        &ints(I64, &[4], &[0, 0, 0, 0]),
    );
}

// ---------------------------------------------------------------- the driver

fn two_param_graph() -> Graph {
    let mut g = Graph::new("g");
    let x = g.add_param("x", ty(F32, &[2, 3])).unwrap();
    let w = g.add_param("w", ty(F32, &[3])).unwrap();
    let h = g
        .add(binary(BinaryOp::Mul), &[x, w], Some("h".into()))
        .unwrap();
    let s = g
        .add(
            reduce(ReduceOp::Sum, Some(&[-1]), false),
            &[h],
            Some("s".into()),
        )
        .unwrap();
    let r = g.add(unary(UnaryOp::Relu), &[s], Some("r".into())).unwrap();
    g.outputs = vec![r, h];
    g
}

#[test]
fn interpret_evaluates_a_whole_graph() {
    let g = two_param_graph();
    let out = interpret(&g, &[x23(), f32s(&[3], &[1.0, -1.0, -1.0])]).unwrap();
    // h = x * w; s = [1 - 2 - 3, 4 - 5 - 6]; relu(s) = [0, 0].
    exact(&out[1], &f32s(&[2, 3], &[1.0, -2.0, -3.0, 4.0, -5.0, -6.0]));
    exact(&out[0], &f32s(&[2], &[0.0, 0.0]));
    let out = interpret(&g, &[x23(), f32s(&[3], &[1.0, 1.0, 0.0])]).unwrap();
    exact(&out[0], &f32s(&[2], &[3.0, 9.0]));
}

#[test]
fn interpret_rejects_bad_inputs() {
    let g = two_param_graph();
    // Inputs that do not fit the parameters are the caller's mistake.
    let input_error = |inputs: &[Tensor]| match interpret(&g, inputs) {
        Err(e @ Error::Input(_)) => e.to_string(),
        other => panic!("{other:?}"),
    };
    let e = input_error(&[x23()]);
    assert!(e.contains("takes 2 inputs, got 1"), "{e}");
    let e = input_error(&[x23(), f32s(&[2], &[1.0, 2.0])]);
    assert!(
        e.contains("`w`") && e.contains("f32[2]") && e.contains("f32[3]"),
        "{e}"
    );
    let e = input_error(&[x23(), t(F16, &[3], &[1.0; 3])]);
    assert!(e.contains("`w`") && e.contains("f16[3]"), "{e}");
    // A hand-built tensor whose storage disagrees with its type.
    let liar = Tensor {
        ty: ty(F32, &[3]),
        data: Data::F32(vec![1.0, 2.0]),
    };
    let e = input_error(&[x23(), liar]);
    assert!(e.contains("`w`") && e.contains("stores 2"), "{e}");
    let liar = Tensor {
        ty: ty(F32, &[3]),
        data: Data::I32(vec![1, 2, 3]),
    };
    let e = input_error(&[x23(), liar]);
    assert!(e.contains("i32 elements"), "{e}");
    // An unverifiable graph is an error, not a panic.
    let mut bad = two_param_graph();
    bad.nodes[2].inputs[0] = ValueId(40);
    let e = interpret(&bad, &[x23(), f32s(&[3], &[1.0; 3])]).unwrap_err();
    assert!(matches!(e, Error::InvalidGraph(_)), "{e:?}");
    assert!(!e.is_internal());
    // Errors raised while evaluating name the node.
    let mut g = Graph::new("idx");
    let x = g.add_param("x", ty(F32, &[3])).unwrap();
    let i = g.add_param("i", ty(I64, &[1])).unwrap();
    let y = g
        .add(Op::IndexSelect { axis: 0 }, &[x, i], Some("rows".into()))
        .unwrap();
    g.outputs = vec![y];
    let e = interpret(&g, &[f32s(&[3], &[1.0; 3]), ints(I64, &[1], &[5])]).unwrap_err();
    assert!(matches!(e, Error::Eval(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("`rows`") && e.contains("index 5"), "{e}");
}

#[test]
fn eval_node_evaluates_single_ops() {
    let got = eval_node(&binary(BinaryOp::Add), &[&x23(), &x23()], &ty(F32, &[2, 3])).unwrap();
    exact(&got, &f32s(&[2, 3], &[2.0, 4.0, 6.0, 8.0, 10.0, 12.0]));
    // Literals take the node's dtype; integer literals wrap into i32.
    let lit = |value| Op::Literal { value };
    let got = eval_node(&lit(Scalar::Int(5)), &[], &ty(F16, &[])).unwrap();
    exact(&got, &t(F16, &[], &[5.0]));
    let got = eval_node(&lit(Scalar::Int((1 << 32) + 1)), &[], &ty(I32, &[])).unwrap();
    exact(&got, &ints(I32, &[], &[1]));
    let got = eval_node(&lit(Scalar::Bool(true)), &[], &ty(F32, &[])).unwrap();
    exact(&got, &f32s(&[], &[1.0]));
    let got = eval_node(&lit(Scalar::Float(0.1)), &[], &ty(Bf16, &[])).unwrap();
    exact(&got, &t(Bf16, &[], &[0.1]));
    assert!(eval_node(&lit(Scalar::Float(0.5)), &[], &ty(I32, &[])).is_err());
    assert!(eval_node(&lit(Scalar::Int(1)), &[], &ty(I32, &[2])).is_err());
    // Params have no value of their own; a wrong result type is refused.
    assert!(eval_node(&Op::Param { index: 0 }, &[], &ty(F32, &[])).is_err());
    let e = eval_node(&unary(UnaryOp::Exp), &[&x23()], &ty(F32, &[3, 2])).unwrap_err();
    assert!(matches!(e, Error::Input(_)), "{e:?}");
    assert!(e.to_string().contains("f32[2, 3]"), "{e}");
    assert!(eval_node(&unary(UnaryOp::Exp), &[], &ty(F32, &[])).is_err());
    let b = bools(&[1], &[true]);
    assert!(eval_node(&binary(BinaryOp::Sub), &[&b, &b], &ty(Bool, &[1])).is_err());
}

// ---------------------------------------------------------------- erf

/// erf by the series `2/sqrt(pi) * exp(-x^2) * Σ 2^n x^(2n+1) / (1·3···(2n+1))`,
/// whose terms are all positive, so it loses no precision to cancellation.
fn erf_series(x: f64) -> f64 {
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    while term.abs() > 1e-18 * sum.abs() {
        n += 1.0;
        term *= 2.0 * x * x / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 / PI.sqrt() * (-x * x).exp() * sum
}

#[test]
fn erf_matches_known_values() {
    let known = [
        (0.5, 0.5204998778130465),
        (1.0, 0.8427007929497149),
        (2.0, 0.9953222650189527),
        (3.0, 0.9999779095030014),
        (0.1, 0.1124629160182849),
        (1e-10, 1.1283791670955126e-10),
        (1.1, 0.8802050695740817),
        (2.5, 0.999593047982555),
        (4.5, 0.9999999998033839),
    ];
    for (x, want) in known {
        for (x, want) in [(x, want), (-x, -want)] {
            let got = erf(x);
            assert!(
                (got - want).abs() <= 2.0 * f64::EPSILON * want.abs(),
                "erf({x}) = {got}, want {want}"
            );
        }
    }
    assert_eq!(erf(0.0), 0.0);
    assert_eq!(erf(INF), 1.0);
    assert_eq!(erf(-INF), -1.0);
    assert_eq!(erf(10.0), 1.0);
    assert!(erf(NAN).is_nan());
}

#[test]
fn erf_matches_an_independent_series() {
    let mut worst = 0.0f64;
    for i in -600..=600 {
        let x = i as f64 / 100.0;
        let (got, want) = (erf(x), erf_series(x));
        worst = worst.max((got - want).abs() / want.abs().max(1e-300));
    }
    assert!(worst < 1e-14, "worst relative error {worst:e}");
}

// ---------------------------------------------------------------- sweeps

#[test]
fn every_elementwise_op_on_every_dtype_has_its_inferred_type() {
    let dtypes = [F32, F16, Bf16, I32, I64, Bool];
    for (k, &d) in dtypes.iter().enumerate() {
        let x = Tensor::random(&ty(d, &[2, 3]), k as u64);
        for u in UnaryOp::ALL {
            // Every op the typing rules accept must evaluate; `ok` also asserts the
            // result type equals the inferred one.
            let mut g = Graph::new("p");
            let p = g.add_param("x", x.ty.clone()).unwrap();
            if g.add(unary(u), &[p], None).is_ok() {
                ok(unary(u), &[&x]);
            }
        }
        for &e in &dtypes {
            let y = Tensor::random(&ty(e, &[3]), 100 + k as u64);
            // The divisions by zero of integers are errors, tested on their own.
            let nonzero: Vec<f64> = y
                .to_f64()
                .into_iter()
                .map(|v| if v == 0.0 { 1.0 } else { v })
                .collect();
            let y_nonzero = Tensor::from_f64(&y.ty, &nonzero);
            for b in BinaryOp::ALL {
                let y = if b.is_integer_division() {
                    &y_nonzero
                } else {
                    &y
                };
                let mut g = Graph::new("p");
                let p = g.add_param("x", x.ty.clone()).unwrap();
                let q = g.add_param("y", y.ty.clone()).unwrap();
                if g.add(binary(b), &[p, q], None).is_ok() {
                    ok(binary(b), &[&x, y]);
                }
            }
            let got = ok(cast(e), &[&x]);
            assert_eq!(got.ty.dtype, e);
        }
    }
}

#[test]
fn integer_divisions_round_as_pytorch() {
    use BinaryOp::{FloorDivide, Fmod, Remainder, TruncDivide};
    let x = ints(I32, &[4], &[7, -7, 7, -7]);
    let y = ints(I32, &[4], &[2, 2, -2, -2]);
    let cases = [
        (FloorDivide, [3, -4, -4, 3]),
        (TruncDivide, [3, -3, -3, 3]),
        (Remainder, [1, 1, -1, -1]),
        (Fmod, [1, -1, 1, -1]),
    ];
    for (b, want) in cases {
        let got = ok(binary(b), &[&x, &y]);
        assert_eq!(got, ints(I32, &[4], &want), "{}", b.name());
    }
    // Unsigned and narrow dtypes keep their own range; i8 MIN / -1 wraps.
    let u = ints(DType::U8, &[2], &[250, 7]);
    let v = ints(DType::U8, &[2], &[7, 250]);
    assert_eq!(
        ok(binary(FloorDivide), &[&u, &v]),
        ints(DType::U8, &[2], &[35, 0])
    );
    assert_eq!(
        ok(binary(Remainder), &[&u, &v]),
        ints(DType::U8, &[2], &[5, 7])
    );
    let m = ints(DType::I8, &[1], &[-128]);
    let n = ints(DType::I8, &[1], &[-1]);
    assert_eq!(ok(binary(TruncDivide), &[&m, &n]), m);
    assert_eq!(ok(binary(Fmod), &[&m, &n]), ints(DType::I8, &[1], &[0]));
    // An integer and a float promote to the float.
    let f = f32s(&[1], &[-2.0]);
    let r = ok(binary(Remainder), &[&ints(I64, &[1], &[5]), &f]);
    assert_eq!(r, f32s(&[1], &[-1.0]));
}

#[test]
fn integer_division_by_zero_is_an_error_naming_the_op() {
    let x = ints(I64, &[2], &[1, 2]);
    let y = ints(I64, &[2], &[1, 0]);
    for b in [
        BinaryOp::FloorDivide,
        BinaryOp::TruncDivide,
        BinaryOp::Remainder,
        BinaryOp::Fmod,
    ] {
        let e = err(binary(b), &[&x, &y]);
        assert!(
            e.contains("division by zero") && e.contains(b.name()),
            "{e}"
        );
    }
    // Floats divide by zero as IEEE says.
    let f = f32s(&[2], &[1.0, -1.0]);
    let z = f32s(&[2], &[0.0, 0.0]);
    let q = ok(binary(BinaryOp::FloorDivide), &[&f, &z]).to_f64();
    assert_eq!(q, vec![INF, -INF]);
    assert!(ok(binary(BinaryOp::Fmod), &[&f, &z]).to_f64()[0].is_nan());
}

#[test]
fn divisions_of_bools_are_type_errors() {
    let b = bools(&[1], &[true]);
    let e = type_err(binary(BinaryOp::FloorDivide), &[&b, &b]);
    assert!(e.contains("floor_divide") && e.contains("bool"), "{e}");
}

#[test]
fn large_tensors_interpret() {
    // 2^21 elements through broadcasting, a transcendental and a reduction.
    let n = 1 << 21;
    let v: Vec<f64> = (0..n).map(|i| (i % 1000) as f64).collect();
    let x = f32s(&[n / 1024, 1024], &v);
    let mut g = Graph::new("big");
    let p = g.add_param("x", x.ty.clone()).unwrap();
    let one = g.add_literal(Scalar::Float(1.0), F32).unwrap();
    let a = g.add(binary(BinaryOp::Add), &[p, one], None).unwrap();
    let l = g.add(unary(UnaryOp::Log), &[a], None).unwrap();
    let e = g.add(unary(UnaryOp::Exp), &[l], None).unwrap();
    let s = g
        .add(reduce(ReduceOp::Sum, None, false), &[e], Some("s".into()))
        .unwrap();
    g.outputs = vec![s];
    let out = interpret(&g, &[x]).unwrap();
    let want: f64 = v.iter().map(|&x| x + 1.0).sum();
    close(&out[0], &f32s(&[], &[want]), 1e-5);
}

/// The narrow, unsigned and 64-bit dtypes: integer arithmetic wraps in the operands'
/// dtype, unsigned values compare and reduce as unsigned (u64 beyond i64::MAX
/// included), f64 computes without an f32 rounding, and casts saturate from floats.
#[test]
fn narrow_unsigned_and_f64_dtypes() {
    use DType::{F64, I16, I8, U16, U32, U64, U8};
    let u8s = |v: Vec<u8>| Tensor {
        ty: ty(U8, &[v.len()]),
        data: Data::U8(v),
    };
    let u64s = |v: Vec<u64>| Tensor {
        ty: ty(U64, &[v.len()]),
        data: Data::U64(v),
    };
    // u8 wraps: 250 + 10 = 4, 3 - 5 = 254, 16 * 17 = 16, -1 = 255.
    let a = u8s(vec![250, 3, 16, 1]);
    let b = u8s(vec![10, 5, 17, 0]);
    assert_eq!(
        ok(binary(BinaryOp::Add), &[&a, &b]).data,
        Data::U8(vec![4, 8, 33, 1])
    );
    assert_eq!(
        ok(binary(BinaryOp::Sub), &[&a, &b]).data,
        Data::U8(vec![240, 254, 255, 1])
    );
    assert_eq!(
        ok(binary(BinaryOp::Mul), &[&a, &b]).data,
        Data::U8(vec![196, 15, 16, 0])
    );
    assert_eq!(
        ok(unary(UnaryOp::Neg), &[&a]).data,
        Data::U8(vec![6, 253, 240, 255])
    );
    // Unsigned comparison and max: 250 > 10.
    assert_eq!(
        ok(binary(BinaryOp::Gt), &[&a, &b]).data,
        Data::Bool(vec![true, false, false, true])
    );
    assert_eq!(
        ok(binary(BinaryOp::Maximum), &[&a, &b]).data,
        Data::U8(vec![250, 5, 17, 1])
    );
    // u64 above i64::MAX stays unsigned: it is the larger, and sums wrap modulo 2^64.
    let big = u64s(vec![u64::MAX, 1 << 63]);
    let small = u64s(vec![1, 1 << 63]);
    assert_eq!(
        ok(binary(BinaryOp::Gt), &[&big, &small]).data,
        Data::Bool(vec![true, false])
    );
    assert_eq!(
        ok(binary(BinaryOp::Add), &[&big, &small]).data,
        Data::U64(vec![0, 0])
    );
    let max = ok(reduce(ReduceOp::Max, Some(&[0]), false), &[&big]);
    assert_eq!(max.data, Data::U64(vec![u64::MAX]));
    let to_f32 = ok(Op::Cast { to: F32 }, &[&big]);
    assert_eq!(
        to_f32.data,
        Data::F32(vec![18446744073709551616.0, 9223372036854775808.0])
    );
    // i8 wraps: -128 - 1 = 127, abs(-128) = -128.
    let i = Tensor::from_i64(&ty(I8, &[2]), &[-128, 100]);
    let one = Tensor::from_i64(&ty(I8, &[2]), &[1, 100]);
    assert_eq!(
        ok(binary(BinaryOp::Sub), &[&i, &one]).data,
        Data::I8(vec![127, 0])
    );
    assert_eq!(
        ok(unary(UnaryOp::Abs), &[&i]).data,
        Data::I8(vec![-128, 100])
    );
    // Mixed signedness promotes as PyTorch does: u8 + i8 is i16.
    let mixed = ok(binary(BinaryOp::Add), &[&u8s(vec![255, 0]), &i]);
    assert_eq!(mixed.data, Data::I16(vec![127, 100]));
    // f64: 0.1 + 0.2 is the f64 sum, not rounded through f32.
    let x = t(F64, &[1], &[0.1]);
    let y = t(F64, &[1], &[0.2]);
    assert_eq!(
        ok(binary(BinaryOp::Add), &[&x, &y]).data,
        Data::F64(vec![0.1 + 0.2])
    );
    assert_eq!(
        ok(unary(UnaryOp::Exp), &[&x]).data,
        Data::F64(vec![0.1f64.exp()])
    );
    // Float to integer truncates toward zero and saturates into the dtype's range
    // (NaN is 0), as the i32 and i64 casts do.
    let f = t(F64, &[5], &[-2.7, 300.0, -1.0, NAN, 1e30]);
    assert_eq!(
        ok(Op::Cast { to: U8 }, &[&f]).data,
        Data::U8(vec![0, 255, 0, 0, 255])
    );
    assert_eq!(
        ok(Op::Cast { to: I16 }, &[&f]).data,
        Data::I16(vec![-2, 300, -1, 0, 32767])
    );
    assert_eq!(
        ok(Op::Cast { to: U64 }, &[&f]).data,
        Data::U64(vec![0, 300, 0, 0, u64::MAX])
    );
    // Integer to integer wraps: 300 as u8 is 44; -1 as u32 is u32::MAX; as u16, 65535.
    let w = Tensor::from_i64(&ty(I32, &[2]), &[300, -1]);
    assert_eq!(ok(Op::Cast { to: U8 }, &[&w]).data, Data::U8(vec![44, 255]));
    assert_eq!(
        ok(Op::Cast { to: U32 }, &[&w]).data,
        Data::U32(vec![300, u32::MAX])
    );
    assert_eq!(
        ok(Op::Cast { to: U16 }, &[&w]).data,
        Data::U16(vec![300, 65535])
    );
}

/// The bitwise ops of every integer dtype against Rust's own operators on the native
/// type, with PyTorch's rule for shifts outside `[0, bits)` written out (0 to the left,
/// the sign fill to the right), over every pair of special values: 0, 1, -1, the
/// extremes, and the shift amounts 0, width - 1, width, width + 1 and negative ones.
#[test]
fn bitwise_ops_match_native_integers() {
    macro_rules! check {
        ($t:ty, $d:expr) => {{
            let bits = <$t>::BITS as i128;
            let mut vals: Vec<i128> = vec![
                0,
                1,
                2,
                5,
                bits - 1,
                bits,
                bits + 1,
                <$t>::MAX as i128,
                <$t>::MIN as i128,
                (<$t>::MAX / 3) as i128,
            ];
            if <$t>::MIN != 0 {
                vals.extend([-1, -2, -(bits - 1), -bits, <$t>::MIN as i128 + 1]);
            }
            let (mut xs, mut ys) = (Vec::new(), Vec::new());
            for &x in &vals {
                for &y in &vals {
                    xs.push(x);
                    ys.push(y);
                }
            }
            let n = xs.len();
            let x = Tensor::from_i128(&ty($d, &[n]), &xs);
            let y = Tensor::from_i128(&ty($d, &[n]), &ys);
            let native = |f: &dyn Fn($t, $t) -> $t| -> Tensor {
                let v: Vec<i128> = xs
                    .iter()
                    .zip(&ys)
                    .map(|(&a, &b)| f(a as $t, b as $t) as i128)
                    .collect();
                Tensor::from_i128(&ty($d, &[n]), &v)
            };
            let inside = |s: $t| (s as i128) >= 0 && (s as i128) < bits;
            let cases: [(BinaryOp, &dyn Fn($t, $t) -> $t); 5] = [
                (BinaryOp::BitwiseAnd, &|a, b| a & b),
                (BinaryOp::BitwiseOr, &|a, b| a | b),
                (BinaryOp::BitwiseXor, &|a, b| a ^ b),
                (BinaryOp::LeftShift, &|a, s| {
                    if inside(s) {
                        a << s
                    } else {
                        0
                    }
                }),
                (BinaryOp::RightShift, &|a, s| {
                    if inside(s) {
                        a >> s
                    } else if (a as i128) < 0 {
                        !0
                    } else {
                        0
                    }
                }),
            ];
            for (op, f) in cases {
                let got = ok(binary(op), &[&x, &y]);
                assert_eq!(got.data, native(f).data, "{} of {}", op.name(), $d);
            }
            let got = ok(unary(UnaryOp::BitwiseNot), &[&x]);
            assert_eq!(got.data, native(&|a, _| !a).data, "bitwise_not of {}", $d);
        }};
    }
    check!(i8, DType::I8);
    check!(u8, DType::U8);
    check!(i16, DType::I16);
    check!(u16, DType::U16);
    check!(i32, DType::I32);
    check!(u32, DType::U32);
    check!(i64, DType::I64);
    check!(u64, DType::U64);
}

#[test]
fn bitwise_ops_of_bools_are_logical_and_floats_are_refused() {
    let a = bools(&[4], &[false, false, true, true]);
    let b = bools(&[4], &[false, true, false, true]);
    exact(
        &ok(binary(BinaryOp::BitwiseAnd), &[&a, &b]),
        &bools(&[4], &[false, false, false, true]),
    );
    exact(
        &ok(binary(BinaryOp::BitwiseOr), &[&a, &b]),
        &bools(&[4], &[false, true, true, true]),
    );
    exact(
        &ok(binary(BinaryOp::BitwiseXor), &[&a, &b]),
        &bools(&[4], &[false, true, true, false]),
    );
    exact(
        &ok(unary(UnaryOp::BitwiseNot), &[&a]),
        &bools(&[4], &[true, true, false, false]),
    );
    // Promotion as for arithmetic: u8 with i8 is i16, bool with an integer the integer.
    let got = ok(
        binary(BinaryOp::BitwiseOr),
        &[
            &ints(DType::U8, &[1], &[0x80]),
            &ints(DType::I8, &[1], &[-128]),
        ],
    );
    exact(&got, &ints(DType::I16, &[1], &[-128]));
    let got = ok(
        binary(BinaryOp::BitwiseXor),
        &[&a, &ints(I32, &[4], &[3; 4])],
    );
    exact(&got, &ints(I32, &[4], &[3, 3, 2, 2]));
    // Floats, and shifts of bools, are type errors.
    let f = f32s(&[4], &[1.0; 4]);
    for op in [
        BinaryOp::BitwiseAnd,
        BinaryOp::BitwiseOr,
        BinaryOp::BitwiseXor,
        BinaryOp::LeftShift,
        BinaryOp::RightShift,
    ] {
        let e = run(binary(op), &[&f, &b]).unwrap_err().to_string();
        assert!(e.contains(op.name()) && e.contains("float"), "{e}");
    }
    // u64 with a signed integer promotes to f64 (numpy's rule): no integer holds both.
    let e = run(
        binary(BinaryOp::BitwiseAnd),
        &[&ints(DType::U64, &[1], &[1]), &ints(I64, &[1], &[1])],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("bitwise_and of u64 and i64"), "{e}");
    let e = run(unary(UnaryOp::BitwiseNot), &[&f])
        .unwrap_err()
        .to_string();
    assert!(e.contains("bitwise_not") && e.contains("float"), "{e}");
    for op in [BinaryOp::LeftShift, BinaryOp::RightShift] {
        let e = run(binary(op), &[&a, &b]).unwrap_err().to_string();
        assert!(e.contains(op.name()) && e.contains("bool"), "{e}");
    }
}
