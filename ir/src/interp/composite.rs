//! The composite ops built on reductions (`mean`, `softmax`, `log_softmax`,
//! `layer_norm`, `rms_norm`), evaluated as the primitive ops that `decompose`
//! (in `ferrite-passes`) rewrites them into, each primitive rounded to its dtype.
//!
//! This is the accumulation policy (ARCHITECTURE.md, "Numerics"): a value the
//! decomposition materializes in f32 is an f32 here too, so an intermediate that
//! overflows f32 (`x * x` in `rms_norm`, a sum past f32's range in `mean`) overflows
//! in the interpreter exactly where it does in PyTorch's f32 kernels and in every
//! backend; inside one primitive reduction the interpreter still accumulates in f64
//! and rounds once. The formulas here and in `decompose.rs` must stay the same
//! (`passes/tests/decompose.rs` checks that the two agree bit for bit).

use super::{elementwise, reduce};
use crate::infer::{infer, reduced_axes};
use crate::op::{BinaryOp, Op, ReduceOp, UnaryOp};
use crate::types::TensorType;
use crate::{DType, Result, Tensor};

/// A binary op with the result type its typing rule gives.
fn binary(op: BinaryOp, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let out = infer(&Op::Binary(op), &[&x.ty, &y.ty])?;
    elementwise::binary(op, x, y, &out)
}

/// `op(x, c)` for a literal `c` of `x`'s (float) dtype, as `decompose` writes it.
fn binary_const(op: BinaryOp, x: &Tensor, c: f64) -> Result<Tensor> {
    let c = Tensor::from_f64(&TensorType::scalar(x.ty.dtype), &[c]);
    binary(op, x, &c)
}

fn unary(u: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let out = infer(&Op::Unary(u), &[&x.ty])?;
    elementwise::unary(u, x, &out)
}

/// A primitive reduction (`sum`, `max`) along `axes`.
fn reduce_keep(op: ReduceOp, x: &Tensor, axes: Option<Vec<i64>>, keepdim: bool) -> Result<Tensor> {
    let out = infer(
        &Op::Reduce {
            op,
            axes: axes.clone(),
            keepdim,
        },
        &[&x.ty],
    )?;
    reduce::reduce(op, axes.as_deref(), x, &out)
}

/// Runs `body` on `ins` in f32 when `ins[0]` is a half dtype (every operand cast up,
/// the result cast back down), else on `ins` as they are.
fn in_f32(ins: &[&Tensor], body: impl FnOnce(&[&Tensor]) -> Result<Tensor>) -> Result<Tensor> {
    let dt = ins[0].ty.dtype;
    if !matches!(dt, DType::F16 | DType::Bf16) {
        return body(ins);
    }
    let up: Vec<Tensor> = ins
        .iter()
        .map(|t| elementwise::cast(t, DType::F32))
        .collect();
    let refs: Vec<&Tensor> = up.iter().collect();
    Ok(elementwise::cast(&body(&refs)?, dt))
}

/// `sum(x, axes, keepdim) / count` of a float `x` (in its own dtype).
fn mean_of(x: &Tensor, axes: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
    let reduced = reduced_axes("mean", axes, x.ty.rank())?;
    let count: usize = reduced.iter().map(|&a| x.ty.shape[a]).product();
    let sum = reduce_keep(ReduceOp::Sum, x, axes.map(<[i64]>::to_vec), keepdim)?;
    binary_const(BinaryOp::Div, &sum, count as f64)
}

/// `mean(x, axes, keepdim)`, computed in f32 for half dtypes.
pub(super) fn mean(axes: Option<&[i64]>, keepdim: bool, x: &Tensor) -> Result<Tensor> {
    in_f32(&[x], |v| mean_of(v[0], axes, keepdim))
}

/// `softmax(x, axis)`, or `log_softmax` when `log` is set: the row maximum is
/// subtracted first, so `exp` never overflows.
pub(super) fn softmax(axis: i64, log: bool, x: &Tensor, out: &TensorType) -> Result<Tensor> {
    if out.numel() == 0 {
        return Ok(Tensor::zeros(out));
    }
    in_f32(&[x], |v| {
        let x = v[0];
        let max = reduce_keep(ReduceOp::Max, x, Some(vec![axis]), true)?;
        let shifted = binary(BinaryOp::Sub, x, &max)?;
        let e = unary(UnaryOp::Exp, &shifted)?;
        let sum = reduce_keep(ReduceOp::Sum, &e, Some(vec![axis]), true)?;
        if log {
            binary(BinaryOp::Sub, &shifted, &unary(UnaryOp::Log, &sum)?)
        } else if e.ty.dtype == DType::F32 {
            // As `decompose` writes it: a subnormal e counts as 0, times 1 / sum.
            let tiny = binary_const(BinaryOp::Lt, &e, f32::MIN_POSITIVE as f64)?;
            let zero = Tensor::from_f64(&TensorType::scalar(DType::F32), &[0.0]);
            let out = infer(&Op::Where, &[&tiny.ty, &zero.ty, &e.ty])?;
            let kept = elementwise::select(&tiny, &zero, &e, &out)?;
            binary(BinaryOp::Mul, &kept, &unary(UnaryOp::Reciprocal, &sum)?)
        } else {
            binary(BinaryOp::Div, &e, &sum)
        }
    })
}

/// `layer_norm(x, w, b, eps)` over the last axis (when `b` is given) or
/// `rms_norm(x, w, eps)`.
///
/// `layer_norm` computes `c = x - (p + sum(x/n - p/n))` with `p = x[..., :1]` and
/// `/n` a multiplication by `1/n` (a constant row's mean is exactly `p`, in every
/// dtype, and no term overflows); its variance
/// `sum(c * c) / n` overflows where PyTorch's sum of squared deviations does.
pub(super) fn layer_norm(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    eps: f64,
    out: &TensorType,
) -> Result<Tensor> {
    if out.numel() == 0 {
        return Ok(Tensor::zeros(out));
    }
    let ins: Vec<&Tensor> = [Some(x), Some(w), b].into_iter().flatten().collect();
    in_f32(&ins, |v| {
        let last = [-1i64];
        let n = *v[0].ty.shape.last().unwrap_or(&1);
        let centered;
        let x = if b.is_some() {
            let first = Op::Slice {
                axis: -1,
                start: 0,
                end: 1,
                step: 1,
            };
            let pivot = super::eval_node(&first, &[v[0]], &infer(&first, &[&v[0].ty])?)?;
            let scale = 1.0 / n as f64;
            let xs = binary_const(BinaryOp::Mul, v[0], scale)?;
            let ps = binary_const(BinaryOp::Mul, &pivot, scale)?;
            let d = binary(BinaryOp::Sub, &xs, &ps)?;
            let shift = reduce_keep(ReduceOp::Sum, &d, Some(last.to_vec()), true)?;
            let mean = binary(BinaryOp::Add, &pivot, &shift)?;
            centered = binary(BinaryOp::Sub, v[0], &mean)?;
            &centered
        } else {
            v[0]
        };
        let square = binary(BinaryOp::Mul, x, x)?;
        let mean_square = mean_of(&square, Some(&last), true)?;
        let shifted = binary_const(BinaryOp::Add, &mean_square, eps)?;
        let inv = unary(UnaryOp::Rsqrt, &shifted)?;
        let normed = binary(BinaryOp::Mul, x, &inv)?;
        let scaled = binary(BinaryOp::Mul, &normed, v[1])?;
        match v.get(2) {
            Some(bias) => binary(BinaryOp::Add, &scaled, bias),
            None => Ok(scaled),
        }
    })
}

/// `batch_norm(x, weight, bias, mean, var, eps)` in inference form, as PyTorch's CPU
/// kernel and `decompose` compute it: `scale = weight * rsqrt(var + eps)`, `shift =
/// bias - mean * scale`, `x * scale + shift` per channel (axis 1); in f32 for half
/// dtypes.
pub(super) fn batch_norm(ins: &[&Tensor], eps: f64) -> Result<Tensor> {
    in_f32(ins, |v| {
        let x = v[0];
        let mut shape = vec![1; x.ty.rank() - 1];
        shape[0] = x.ty.shape[1];
        let per_channel = |t: &Tensor| Tensor {
            ty: t.ty.with_shape(shape.clone()),
            data: t.data.clone(),
        };
        let (w, b, mean, var) = (
            per_channel(v[1]),
            per_channel(v[2]),
            per_channel(v[3]),
            per_channel(v[4]),
        );
        let shifted = binary_const(BinaryOp::Add, &var, eps)?;
        let inv = unary(UnaryOp::Rsqrt, &shifted)?;
        let scale = binary(BinaryOp::Mul, &w, &inv)?;
        let moved = binary(BinaryOp::Mul, &mean, &scale)?;
        let shift = binary(BinaryOp::Sub, &b, &moved)?;
        let scaled = binary(BinaryOp::Mul, x, &scale)?;
        binary(BinaryOp::Add, &scaled, &shift)
    })
}

/// `clip(x, min, max)`: `minimum(maximum(x, min), max)`, NaN propagating.
pub(super) fn clip(x: &Tensor, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
    let bound = |v: f64| Tensor::from_f64(&TensorType::scalar(x.ty.dtype), &[v]);
    let mut y = x.clone();
    if let Some(lo) = min {
        y = binary(BinaryOp::Maximum, &y, &bound(lo))?;
    }
    if let Some(hi) = max {
        y = binary(BinaryOp::Minimum, &y, &bound(hi))?;
    }
    Ok(y)
}
