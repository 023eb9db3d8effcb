//! Movement, indexing and creation ops. Movement ops compute a source offset for
//! every output element and copy values bit for bit ([`pick`]), so no dtype ever
//! passes through f64 here.

use super::strided::{broadcast_strides, concat_data, pick, pick_strided, split_at_axis, Offsets};
use crate::infer::{permutation, slice_bounds};
use crate::types::{contiguous_strides, normalize_axis, TensorType};
use crate::{DType, Tensor};
use crate::{Error, Result};

fn with_data(out: &TensorType, data: crate::Data) -> Tensor {
    Tensor {
        ty: out.clone(),
        data,
    }
}

/// Reads `x` with its axes reordered: output axis `i` is input axis `perm[i]`.
fn permuted(perm: &[usize], x: &Tensor, out: &TensorType) -> Tensor {
    let own = contiguous_strides(&x.ty.shape);
    let strides: Vec<usize> = perm.iter().map(|&d| own[d]).collect();
    with_data(out, pick_strided(&x.data, &out.shape, &strides, 0))
}

/// `permute(x, dims)`.
pub(super) fn permute(dims: &[i64], x: &Tensor, out: &TensorType) -> Result<Tensor> {
    let perm = permutation("permute", dims, x.ty.rank())?;
    Ok(permuted(&perm, x, out))
}

/// `transpose(x, dim0, dim1)`: the permutation that swaps two axes.
pub(super) fn transpose(dim0: i64, dim1: i64, x: &Tensor, out: &TensorType) -> Result<Tensor> {
    let rank = x.ty.rank();
    let mut perm: Vec<usize> = (0..rank).collect();
    if rank > 0 {
        perm.swap(normalize_axis(dim0, rank)?, normalize_axis(dim1, rank)?);
    }
    Ok(permuted(&perm, x, out))
}

/// `expand(x, shape)`: a broadcasting read.
pub(super) fn expand(x: &Tensor, out: &TensorType) -> Tensor {
    with_data(
        out,
        pick_strided(
            &x.data,
            &out.shape,
            &broadcast_strides(&x.ty.shape, &out.shape),
            0,
        ),
    )
}

/// `slice(x, axis, start, end, step)` with Python clamping of `start` and `end`.
pub(super) fn slice(
    axis: i64,
    start: i64,
    end: i64,
    step: i64,
    x: &Tensor,
    out: &TensorType,
) -> Result<Tensor> {
    let a = normalize_axis(axis, x.ty.rank())?;
    if step < 1 || x.ty.rank() == 0 {
        return Err(Error::internal("slice needs rank >= 1 and step >= 1"));
    }
    let (lo, _) = slice_bounds(x.ty.shape[a], start, end);
    let mut strides = contiguous_strides(&x.ty.shape);
    let base = lo * strides[a];
    strides[a] *= step as usize;
    Ok(with_data(
        out,
        pick_strided(&x.data, &out.shape, &strides, base),
    ))
}

/// `concat(xs.., axis)`: for each block of the axes before `axis`, every operand's
/// contiguous block in turn.
pub(super) fn concat(axis: i64, xs: &[&Tensor], out: &TensorType) -> Result<Tensor> {
    let all = concat_data(&xs.iter().map(|t| &t.data).collect::<Vec<_>>())?;
    let (outer, _, _) = split_at_axis(&out.shape, axis)?;
    // Where each operand starts in `all`, and how long one of its blocks is.
    let mut parts = Vec::with_capacity(xs.len());
    let mut base = 0;
    for t in xs {
        let (_, len, inner) = split_at_axis(&t.ty.shape, axis)?;
        parts.push((base, len * inner));
        base += t.len();
    }
    let src = (0..outer).flat_map(|o| {
        parts
            .iter()
            .flat_map(move |&(start, block)| start + o * block..start + (o + 1) * block)
    });
    Ok(with_data(out, pick(&all, src)))
}

/// `value` as a one-element tensor of `dtype`. Integer dtypes reject values outside
/// their range and floats reject finite values that overflow to infinity, as
/// PyTorch's checked scalar conversion does.
fn fill_value(value: f64, dtype: DType, op: &str) -> Result<Tensor> {
    let scalar = TensorType::scalar(dtype);
    let t = Tensor::from_f64(&scalar, &[value]);
    let fits = match dtype {
        DType::I32 => value.fract() == 0.0 && value >= i32::MIN as f64 && value <= i32::MAX as f64,
        // 2^63 itself is the first value past i64::MAX.
        DType::I64 => value.fract() == 0.0 && value >= -(2f64.powi(63)) && value < 2f64.powi(63),
        DType::Bool => true,
        _ => !value.is_finite() || t.to_f64()[0].is_finite(),
    };
    if fits {
        Ok(t)
    } else {
        Err(Error::Eval(format!(
            "{op}: value {value} cannot be converted to {dtype} without overflow"
        )))
    }
}

/// `pad(x, pads, value)`: output coordinate `c` on axis `i` reads input coordinate
/// `c - pads[2i]` when that is in range, and `value` otherwise. Negative pads crop.
pub(super) fn pad(pads: &[i64], value: f64, x: &Tensor, out: &TensorType) -> Result<Tensor> {
    let fill = fill_value(value, x.ty.dtype, "pad")?;
    let shape = &x.ty.shape;
    let rank = shape.len();
    if pads.len() != 2 * rank {
        return Err(Error::internal(format!(
            "pad: pads needs {} amounts, got {}",
            2 * rank,
            pads.len()
        )));
    }
    let strides = contiguous_strides(shape);
    // The fill value sits just past the input's elements.
    let fill_at = x.len();
    let all = concat_data(&[&x.data, &fill.data])?;
    let mut src = Vec::with_capacity(out.numel());
    let mut index = vec![0usize; rank];
    for _ in 0..out.numel() {
        let mut offset = Some(0usize);
        for i in 0..rank {
            let c = index[i] as i64 - pads[2 * i];
            offset = match offset {
                Some(o) if c >= 0 && (c as usize) < shape[i] => Some(o + c as usize * strides[i]),
                _ => None,
            };
        }
        src.push(offset.unwrap_or(fill_at));
        // Next output coordinate, row-major.
        for i in (0..rank).rev() {
            index[i] += 1;
            if index[i] < out.shape[i] {
                break;
            }
            index[i] = 0;
        }
    }
    Ok(with_data(out, pick(&all, src.into_iter())))
}

/// Checks one index value against the extent it selects from.
fn checked_index(op: &str, k: i64, extent: usize) -> Result<usize> {
    if k >= 0 && (k as u64) < extent as u64 {
        Ok(k as usize)
    } else {
        Err(Error::Eval(format!(
            "{op}: index {k} out of range for axis of extent {extent}"
        )))
    }
}

/// `index_select(x, index, axis)`: entry `j` of the index (any rank, read in row-major
/// order) picks slice `index[j]` of `x` along `axis`, so the result is
/// `x.shape[:axis] + index.shape + x.shape[axis+1:]` laid out as outer x picks x inner.
/// Every index element is checked, even when the result is empty (as PyTorch does);
/// negative indices are out of range, as in PyTorch.
pub(super) fn index_select(
    axis: i64,
    x: &Tensor,
    index: &Tensor,
    out: &TensorType,
) -> Result<Tensor> {
    let (outer, len, inner) = split_at_axis(&x.ty.shape, axis)?;
    let picks = index
        .to_i64()
        .into_iter()
        .map(|k| checked_index("index_select", k, len))
        .collect::<Result<Vec<usize>>>()?;
    let src = (0..outer).flat_map(|o| {
        picks
            .iter()
            .flat_map(move |&k| (o * len + k) * inner..(o * len + k + 1) * inner)
    });
    Ok(with_data(out, pick(&x.data, src)))
}

/// `gather(x, index, axis)` with `take_along_dim` semantics: `out[c] = x[c with
/// c[axis] replaced by index[c]]`, where `x` and `index` broadcast against each other
/// on every axis but `axis`.
pub(super) fn gather(axis: i64, x: &Tensor, index: &Tensor, out: &TensorType) -> Result<Tensor> {
    let rank = x.ty.rank();
    let a = normalize_axis(axis, rank)?;
    if index.ty.rank() != rank || out.rank() != rank {
        return Err(Error::internal(
            "gather: the index must have the input's rank",
        ));
    }
    let xs = contiguous_strides(&x.ty.shape);
    let is = contiguous_strides(&index.ty.shape);
    // Extent-1 axes repeat (stride 0); along `axis`, x is addressed by the index value
    // instead of the output coordinate, while the index is walked normally.
    let x_strides: Vec<usize> = (0..rank)
        .map(|i| {
            if i == a || x.ty.shape[i] == 1 {
                0
            } else {
                xs[i]
            }
        })
        .collect();
    let i_strides: Vec<usize> = (0..rank)
        .map(|i| {
            if i != a && index.ty.shape[i] == 1 {
                0
            } else {
                is[i]
            }
        })
        .collect();
    let values = index.to_i64();
    let extent = x.ty.shape[a];
    let src = Offsets::new(&out.shape, &x_strides, 0)
        .zip(Offsets::new(&out.shape, &i_strides, 0))
        .map(|(xo, io)| Ok(xo + checked_index("gather", values[io], extent)? * xs[a]))
        .collect::<Result<Vec<usize>>>()?;
    Ok(with_data(out, pick(&x.data, src.into_iter())))
}

/// `full(shape, value, dtype)`.
pub(super) fn full(value: f64, out: &TensorType) -> Result<Tensor> {
    let one = fill_value(value, out.dtype, "full")?;
    Ok(with_data(
        out,
        pick(&one.data, std::iter::repeat_n(0, out.numel())),
    ))
}

/// `arange(start, end, step, dtype)`: element `i` is `start + i * step`; the length is
/// already in `out`. Integer dtypes truncate `start` and `step` first and compute in
/// wrapping i64, as PyTorch's CPU kernel does.
pub(super) fn arange(start: f64, step: f64, out: &TensorType) -> Tensor {
    let n = out.numel();
    if out.dtype.is_float() {
        let v: Vec<f64> = (0..n).map(|i| start + i as f64 * step).collect();
        Tensor::from_f64(out, &v)
    } else {
        let (s, d) = (start as i64, step as i64);
        let v: Vec<i64> = (0..n as i64)
            .map(|i| s.wrapping_add(d.wrapping_mul(i)))
            .collect();
        Tensor::from_i64(out, &v)
    }
}
