//! Reductions and the ops built on them: sum/mean/max/min/prod, argmax/argmin,
//! softmax/log_softmax, layer_norm and rms_norm. Floats accumulate in f64, integers
//! in wrapping i64.

use super::strided::{split_at_axis, Offsets};
use crate::infer::reduced_axes;
use crate::op::{ArgReduceOp, ReduceOp};
use crate::types::{contiguous_strides, TensorType};
use crate::Tensor;
use crate::{Error, Result};

/// `sum|mean|max|min|prod(x, axes, keepdim)` with result type `out`.
pub(super) fn reduce(
    op: ReduceOp,
    axes: Option<&[i64]>,
    x: &Tensor,
    out: &TensorType,
) -> Result<Tensor> {
    let shape = &x.ty.shape;
    let reduced = reduced_axes(op.name(), axes, shape.len())?;
    // Each input element lands in the output slot found by dropping its reduced
    // coordinates; keepdim only inserts extent-1 axes, which leaves slots unchanged.
    let kept: Vec<usize> = (0..shape.len())
        .filter(|a| !reduced.contains(a))
        .map(|a| shape[a])
        .collect();
    let kept_strides = contiguous_strides(&kept);
    let mut next_kept = kept_strides.iter();
    let slot_strides: Vec<usize> = (0..shape.len())
        .map(|a| {
            if reduced.contains(&a) {
                0
            } else {
                next_kept.next().copied().unwrap_or(0)
            }
        })
        .collect();
    let slots = Offsets::new(shape, &slot_strides, 0);
    let n_out = out.numel();
    let count: usize = reduced.iter().map(|&a| shape[a]).product();

    if x.ty.dtype.is_float() {
        let init = match op {
            ReduceOp::Sum | ReduceOp::Mean => 0.0,
            ReduceOp::Prod => 1.0,
            ReduceOp::Max => f64::NEG_INFINITY,
            ReduceOp::Min => f64::INFINITY,
        };
        let mut acc = vec![init; n_out];
        for (v, s) in x.to_f64().into_iter().zip(slots) {
            let a = &mut acc[s];
            match op {
                ReduceOp::Sum | ReduceOp::Mean => *a += v,
                ReduceOp::Prod => *a *= v,
                // Once NaN, a slot stays NaN: `v > NaN` and `v < NaN` are false.
                ReduceOp::Max if v.is_nan() || v > *a => *a = v,
                ReduceOp::Min if v.is_nan() || v < *a => *a = v,
                ReduceOp::Max | ReduceOp::Min => {}
            }
        }
        if op == ReduceOp::Mean {
            // An empty mean is 0 / 0 = NaN, as in PyTorch.
            acc.iter_mut().for_each(|a| *a /= count as f64);
        }
        Ok(Tensor::from_f64(out, &acc))
    } else {
        let init = match op {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Max => i64::MIN,
            ReduceOp::Min => i64::MAX,
            ReduceOp::Mean => {
                return Err(Error::internal("mean needs a float tensor (cast first)"))
            }
        };
        let mut acc = vec![init; n_out];
        for (v, s) in x.to_i64().into_iter().zip(slots) {
            let a = &mut acc[s];
            *a = match op {
                ReduceOp::Sum => a.wrapping_add(v),
                ReduceOp::Prod => a.wrapping_mul(v),
                ReduceOp::Max => (*a).max(v),
                _ => (*a).min(v),
            };
        }
        Ok(Tensor::from_i64(out, &acc))
    }
}

/// `argmax|argmin(x, axis, keepdim)`: the index of the first extremum along `axis`
/// (of the flattened tensor with no axis). A NaN counts as the extremum for both, as
/// in PyTorch, so the first NaN's index is the answer.
pub(super) fn arg_reduce(
    op: ArgReduceOp,
    axis: Option<i64>,
    x: &Tensor,
    out: &TensorType,
) -> Result<Tensor> {
    let (outer, len, inner) = match axis {
        None => (1, x.len(), 1),
        Some(a) => split_at_axis(&x.ty.shape, a).map_err(|e| e.context(op.name()))?,
    };
    if len == 0 && outer * inner > 0 {
        return Err(Error::internal(format!(
            "{} over an axis of extent 0",
            op.name()
        )));
    }
    let want_max = op == ArgReduceOp::ArgMax;
    let result = if x.ty.dtype.is_float() {
        arg_extreme(&x.to_f64(), |v| v.is_nan(), want_max, (outer, len, inner))
    } else {
        arg_extreme(&x.to_i64(), |_| false, want_max, (outer, len, inner))
    };
    Ok(Tensor::from_i64(out, &result))
}

fn arg_extreme<T: PartialOrd + Copy>(
    v: &[T],
    is_nan: impl Fn(T) -> bool,
    want_max: bool,
    (outer, len, inner): (usize, usize, usize),
) -> Vec<i64> {
    let mut result = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| v[(o * len + k) * inner + i];
            let (mut best_k, mut best) = (0, at(0));
            if !is_nan(best) {
                for k in 1..len {
                    let c = at(k);
                    if is_nan(c) {
                        best_k = k;
                        break;
                    }
                    // Strict comparison keeps the first of equal values.
                    if (want_max && c > best) || (!want_max && c < best) {
                        best_k = k;
                        best = c;
                    }
                }
            }
            result.push(best_k as i64);
        }
    }
    result
}

/// `softmax(x, axis)`, or `log_softmax` when `log` is set, computed stably by
/// subtracting the maximum along the axis first.
pub(super) fn softmax(axis: i64, log: bool, x: &Tensor, out: &TensorType) -> Result<Tensor> {
    let (outer, len, inner) = split_at_axis(&x.ty.shape, axis)?;
    let mut v = x.to_f64();
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * len + k) * inner + i;
            // NaN-propagating maximum: a NaN anywhere makes the whole slice NaN.
            let m = (0..len).map(|k| v[at(k)]).fold(f64::NEG_INFINITY, |m, c| {
                if c.is_nan() || c > m {
                    c
                } else {
                    m
                }
            });
            let sum: f64 = (0..len).map(|k| (v[at(k)] - m).exp()).sum();
            for k in 0..len {
                let shifted = v[at(k)] - m;
                v[at(k)] = if log {
                    shifted - sum.ln()
                } else {
                    shifted.exp() / sum
                };
            }
        }
    }
    Ok(Tensor::from_f64(out, &v))
}

/// `layer_norm(x, w, b, eps)` over the last axis (biased variance, `eps` inside the
/// square root, then `* w + b`); with no bias, `rms_norm(x, w, eps)`:
/// `x / sqrt(mean(x^2) + eps) * w`.
pub(super) fn layer_norm(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    eps: f64,
    out: &TensorType,
) -> Result<Tensor> {
    let n = match x.ty.shape.last() {
        Some(&n) => n,
        None => return Err(Error::internal("normalization needs a tensor of rank >= 1")),
    };
    let mut v = x.to_f64();
    let w = w.to_f64();
    let b = b.map(|b| b.to_f64());
    if n > 0 {
        for row in v.chunks_mut(n) {
            let nf = n as f64;
            let (center, scale) = match b {
                Some(_) => {
                    let mean = row.iter().sum::<f64>() / nf;
                    let var = row.iter().map(|&e| (e - mean) * (e - mean)).sum::<f64>() / nf;
                    (mean, (var + eps).sqrt())
                }
                None => {
                    let mean_sq = row.iter().map(|&e| e * e).sum::<f64>() / nf;
                    (0.0, (mean_sq + eps).sqrt())
                }
            };
            for (k, e) in row.iter_mut().enumerate() {
                let shift = b.as_ref().map_or(0.0, |b| b[k]);
                *e = (*e - center) / scale * w[k] + shift;
            }
        }
    }
    Ok(Tensor::from_f64(out, &v))
}
