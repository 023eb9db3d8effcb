//! Elementwise ops: unary, binary (broadcasting, promoting), `where` and `cast`.
//!
//! Operands are first cast to the dtype the op computes in (the promoted common dtype,
//! or the float result dtype of `div` and transcendental ops on integers, as PyTorch's
//! TensorIterator does), then computed in one of three domains: f64 for floats
//! (rounded once to the result dtype), wrapping i128 for integers (wrapped into the
//! result dtype), or bool. What an
//! op computes on each element is defined once, in `scalar_ops`, which the loop IR
//! applies too.

use super::strided::{broadcast_offsets, concat_data, pick};
use crate::op::{BinaryOp, UnaryOp};
use crate::scalar_ops as ops;
use crate::types::TensorType;
use crate::{promote, DType, Data, Tensor};
use crate::{Error, Result};

/// A tensor's elements in its computation domain, exactly.
enum Values {
    Float(Vec<f64>),
    Int(Vec<i128>),
    Bool(Vec<bool>),
}

fn values(t: &Tensor) -> Values {
    match &t.data {
        Data::Bool(v) => Values::Bool(v.clone()),
        _ if t.ty.dtype.is_int() => Values::Int(t.to_i128()),
        _ => Values::Float(t.to_f64()),
    }
}

/// Each element read as a truth value: nonzero (NaN included) is true.
fn truth(t: &Tensor) -> Vec<bool> {
    match values(t) {
        Values::Float(v) => v.into_iter().map(|x| x != 0.0).collect(),
        Values::Int(v) => v.into_iter().map(|x| x != 0).collect(),
        Values::Bool(v) => v,
    }
}

/// Converts `t` to dtype `to`, as `cast` and implicit promotion do. Floats to integers
/// truncate toward zero and saturate (NaN is 0); integers wrap into their dtype; anything to
/// `bool` is `!= 0`; every conversion into a float dtype rounds once, to nearest even.
pub(super) fn cast(t: &Tensor, to: DType) -> Tensor {
    let ty = t.ty.with_dtype(to);
    if t.ty.dtype == to {
        return t.clone();
    }
    match (&t.data, to.category()) {
        // Integers convert exactly to i128; `from_i128` then rounds once (floats),
        // wraps (integers) or tests `!= 0` (bool).
        _ if !t.ty.dtype.is_float() => Tensor::from_i128(&ty, &t.to_i128()),
        // Float sources widen to f64 exactly; `from_f64` then rounds once (floats),
        // saturates and truncates (`as` casts to integers), or tests `!= 0` (bool).
        _ => Tensor::from_f64(&ty, &t.to_f64()),
    }
}

/// A unary op with result type `out`.
pub(super) fn unary(u: UnaryOp, x: &Tensor, out: &TensorType) -> Result<Tensor> {
    if u == UnaryOp::Not {
        return Ok(bool_tensor(out, truth(x).into_iter().map(|b| !b)));
    }
    // The result dtype is the operand's, or f32 for transcendental ops on integers
    // (and bools), which compute on the operand converted to it.
    match values(&cast(x, out.dtype)) {
        Values::Float(v) => {
            let v: Vec<f64> = v.into_iter().map(|v| ops::float_unary(u, v)).collect();
            Ok(Tensor::from_f64(out, &v))
        }
        Values::Int(v) => {
            let v = v
                .into_iter()
                .map(|v| ops::int_unary(u, v))
                .collect::<Result<Vec<i128>>>()?;
            Ok(Tensor::from_i128(out, &v))
        }
        Values::Bool(v) => {
            let v = v
                .into_iter()
                .map(|v| ops::bool_unary(u, v))
                .collect::<Result<Vec<bool>>>()?;
            Ok(bool_tensor(out, v))
        }
    }
}

/// A broadcasting binary op with result type `out`.
pub(super) fn binary(b: BinaryOp, x: &Tensor, y: &Tensor, out: &TensorType) -> Result<Tensor> {
    // Comparisons and logic compute in the common dtype; arithmetic in the result dtype,
    // which is the common dtype except for integer `div` (computed in f32).
    let compute = if b.is_comparison() || b.is_logical() {
        promote(x.ty.dtype, y.ty.dtype)
    } else {
        out.dtype
    };
    let (xs, ys) = (cast(x, compute), cast(y, compute));
    let pairs =
        broadcast_offsets(&x.ty.shape, &out.shape).zip(broadcast_offsets(&y.ty.shape, &out.shape));
    if b.is_logical() {
        let (p, q) = (truth(&xs), truth(&ys));
        return Ok(bool_tensor(
            out,
            pairs.map(|(i, j)| ops::logical(b, p[i], q[j])),
        ));
    }
    let cmp = b.is_comparison();
    match (values(&xs), values(&ys)) {
        (Values::Float(p), Values::Float(q)) if cmp => Ok(bool_tensor(
            out,
            pairs.map(|(i, j)| ops::compare(b, p[i], q[j])),
        )),
        (Values::Int(p), Values::Int(q)) if cmp => Ok(bool_tensor(
            out,
            pairs.map(|(i, j)| ops::compare(b, p[i], q[j])),
        )),
        (Values::Bool(p), Values::Bool(q)) if cmp => Ok(bool_tensor(
            out,
            pairs.map(|(i, j)| ops::compare(b, p[i], q[j])),
        )),
        (Values::Float(p), Values::Float(q)) => {
            let v = pairs
                .map(|(i, j)| ops::float_binary(b, p[i], q[j]))
                .collect::<Result<Vec<f64>>>()?;
            Ok(Tensor::from_f64(out, &v))
        }
        (Values::Int(p), Values::Int(q)) => {
            let v = pairs
                .map(|(i, j)| ops::int_binary(b, p[i], q[j]))
                .collect::<Result<Vec<i128>>>()?;
            Ok(Tensor::from_i128(out, &v))
        }
        (Values::Bool(p), Values::Bool(q)) => {
            let v = pairs
                .map(|(i, j)| ops::bool_binary(b, p[i], q[j]))
                .collect::<Result<Vec<bool>>>()?;
            Ok(bool_tensor(out, v))
        }
        _ => Err(Error::internal(format!(
            "{}: operands did not convert to one dtype",
            b.name()
        ))),
    }
}

/// A tensor of type `out` (bool for every caller) from truth values.
fn bool_tensor(out: &TensorType, v: impl IntoIterator<Item = bool>) -> Tensor {
    let v: Vec<i64> = v.into_iter().map(|b| b as i64).collect();
    Tensor::from_i64(out, &v)
}

/// `where(cond, a, b)`: all three broadcast; `a` and `b` are cast to the result dtype.
pub(super) fn select(cond: &Tensor, a: &Tensor, b: &Tensor, out: &TensorType) -> Result<Tensor> {
    let c = truth(cond);
    let (a2, b2) = (cast(a, out.dtype), cast(b, out.dtype));
    // Picking from `a` followed by `b` keeps values bit-exact in their dtype.
    let both = concat_data(&[&a2.data, &b2.data])?;
    let na = a2.len();
    let src = broadcast_offsets(&cond.ty.shape, &out.shape)
        .zip(broadcast_offsets(&a.ty.shape, &out.shape))
        .zip(broadcast_offsets(&b.ty.shape, &out.shape))
        .map(|((k, i), j)| if c[k] { i } else { na + j });
    Ok(Tensor {
        ty: out.clone(),
        data: pick(&both, src),
    })
}
