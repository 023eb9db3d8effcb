//! The primitive reductions: sum/max/min/prod and argmax/argmin. Floats accumulate
//! in f64 and round once to the result dtype, integers in wrapping i64. (`mean` and
//! the normalizations are composites: `composite.rs`.)

use super::strided::{split_at_axis, Offsets};
use crate::infer::reduced_axes;
use crate::op::{ArgReduceOp, ReduceOp};
use crate::types::{contiguous_strides, TensorType};
use crate::Tensor;
use crate::{Error, Result};

/// `sum|max|min|prod(x, axes, keepdim)` with result type `out`.
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

    if x.ty.dtype.is_float() {
        let init = match op {
            ReduceOp::Sum => 0.0,
            ReduceOp::Prod => 1.0,
            ReduceOp::Max => f64::NEG_INFINITY,
            ReduceOp::Min => f64::INFINITY,
            ReduceOp::Mean => return Err(Error::internal("mean is a composite")),
        };
        let mut acc = vec![init; n_out];
        for (v, s) in x.to_f64().into_iter().zip(slots) {
            let a = &mut acc[s];
            match op {
                ReduceOp::Sum => *a += v,
                ReduceOp::Prod => *a *= v,
                // Once NaN, a slot stays NaN: `v > NaN` and `v < NaN` are false.
                ReduceOp::Max if v.is_nan() || v > *a => *a = v,
                ReduceOp::Min if v.is_nan() || v < *a => *a = v,
                ReduceOp::Max | ReduceOp::Min | ReduceOp::Mean => {}
            }
        }
        Ok(Tensor::from_f64(out, &acc))
    } else {
        let init = match op {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            // The identities of max and min are the ends of the dtype's range.
            // (Bool keeps the i64 ends, which read as true.)
            ReduceOp::Max => out.dtype.int_range().map_or(i64::MIN as i128, |(lo, _)| lo),
            ReduceOp::Min => out.dtype.int_range().map_or(i64::MAX as i128, |(_, hi)| hi),
            ReduceOp::Mean => return Err(Error::internal("mean is a composite")),
        };
        let mut acc = vec![init; n_out];
        for (v, s) in x.to_i128().into_iter().zip(slots) {
            let a = &mut acc[s];
            *a = match op {
                ReduceOp::Sum => a.wrapping_add(v),
                ReduceOp::Prod => a.wrapping_mul(v),
                ReduceOp::Max => (*a).max(v),
                _ => (*a).min(v),
            };
        }
        Ok(Tensor::from_i128(out, &acc))
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
        arg_extreme(&x.to_i128(), |_| false, want_max, (outer, len, inner))
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
