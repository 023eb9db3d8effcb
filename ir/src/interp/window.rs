//! The window ops (`conv`, `conv_transpose`, `max_pool`, `avg_pool`) as plain loop
//! nests over output positions and taps, with the windows of
//! [`crate::infer::windows`].
//!
//! - `conv` and `conv_transpose` accumulate `x * w` in f64 and round once, as
//!   `matmul` does. A tap in the padding reads 0 (so `0 * inf` there is NaN, as an
//!   im2col convolution gives).
//! - `max_pool` never lets padding win: a window wholly in the padding gives `-inf`
//!   (the dtype's minimum for integers). NaN propagates, and `-0 < +0`, as `maximum`.
//! - `avg_pool` sums the taps inside the input in f64, rounds the sum to the compute
//!   dtype (f32 for half dtypes), then divides by the tap count, rounding again: the
//!   same two roundings as `mean` (a `sum` and a `div`). The count includes the taps
//!   in the explicit padding with `count_include_pad`, never those past it that
//!   `ceil_mode` adds.

use crate::infer::windows;
use crate::op::{BinaryOp, Op};
use crate::scalar_ops::float_binary;
use crate::tensor::round_to_dtype;
use crate::types::TensorType;
use crate::window::{self, Axis};
use crate::{DType, Error, Result, Tensor};

/// Strides of a row-major shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Every multi-index of `extents`, in row-major order.
fn indices(extents: &[usize]) -> impl Iterator<Item = Vec<usize>> + '_ {
    let total: usize = extents.iter().product();
    (0..total).map(move |mut f| {
        let mut idx = vec![0; extents.len()];
        for a in (0..extents.len()).rev() {
            idx[a] = f % extents[a];
            f /= extents[a];
        }
        idx
    })
}

/// The flat offset, within one `[*spatial]` plane of `axes`' inputs, that taps `k` of
/// output position `o` read, or `None` when a tap falls outside the input.
fn tap(axes: &[Axis], o: &[usize], k: &[usize], plane_strides: &[usize]) -> Option<usize> {
    let mut off = 0;
    for (a, ax) in axes.iter().enumerate() {
        let p = ax.position(o[a], k[a]);
        if p < 0 || p >= ax.input as i64 {
            return None;
        }
        off += p as usize * plane_strides[a];
    }
    Some(off)
}

/// `conv(x, w)` with the attributes of `op`.
pub(super) fn conv(op: &Op, x: &Tensor, w: &Tensor, out: &TensorType) -> Result<Tensor> {
    let Op::Conv { groups, .. } = op else {
        return Err(Error::internal("conv: not a conv"));
    };
    let axes = windows(op, &x.ty, Some(&w.ty))?;
    let (n, c) = (x.ty.shape[0], x.ty.shape[1]);
    let c_out = w.ty.shape[0];
    let g = *groups as usize;
    let (cg, og) = (c / g, c_out / g);
    let in_spatial = &x.ty.shape[2..];
    let kernel = &w.ty.shape[2..];
    let out_spatial: Vec<usize> = axes.iter().map(|a| a.output).collect();
    let (plane, in_strides) = (in_spatial.iter().product::<usize>(), strides(in_spatial));
    let (taps, out_plane) = (
        kernel.iter().product::<usize>(),
        out_spatial.iter().product::<usize>(),
    );
    let (xv, wv) = (x.to_f64(), w.to_f64());
    let mut acc = vec![0.0f64; out.numel()];
    let outs: Vec<Vec<usize>> = indices(&out_spatial).collect();
    let ks: Vec<Vec<usize>> = indices(kernel).collect();
    for b in 0..n {
        for oc in 0..c_out {
            let grp = oc / og;
            for (op_i, o) in outs.iter().enumerate() {
                let mut s = 0.0;
                for ci in 0..cg {
                    let ch = grp * cg + ci;
                    let xbase = (b * c + ch) * plane;
                    let wbase = (oc * cg + ci) * taps;
                    for (ki, k) in ks.iter().enumerate() {
                        let xval = tap(&axes, o, k, &in_strides).map_or(0.0, |t| xv[xbase + t]);
                        s += xval * wv[wbase + ki];
                    }
                }
                acc[(b * c_out + oc) * out_plane + op_i] = s;
            }
        }
    }
    Ok(Tensor::from_f64(out, &acc))
}

/// `conv_transpose(x, w)`: every input element scatters `x * w` into the output
/// positions its taps reach, accumulated in f64 and rounded once.
pub(super) fn conv_transpose(op: &Op, x: &Tensor, w: &Tensor, out: &TensorType) -> Result<Tensor> {
    let Op::ConvTranspose {
        stride,
        padding,
        dilation,
        groups,
        ..
    } = op
    else {
        return Err(Error::internal("conv_transpose: not a conv_transpose"));
    };
    let s = x.ty.rank() - 2;
    let at = |v: &Option<Vec<i64>>, i: usize, default: i64| v.as_ref().map_or(default, |v| v[i]);
    let pad_begin = |i: usize| at(padding, i, 0);
    let (n, c) = (x.ty.shape[0], x.ty.shape[1]);
    let c_out = out.shape[1];
    let g = *groups as usize;
    let (cg, og) = (c / g, c_out / g);
    let in_spatial = &x.ty.shape[2..];
    let kernel = &w.ty.shape[2..];
    let out_spatial = &out.shape[2..];
    let (plane, out_plane) = (
        in_spatial.iter().product::<usize>(),
        out_spatial.iter().product::<usize>(),
    );
    let taps: usize = kernel.iter().product();
    let out_strides = strides(out_spatial);
    let (xv, wv) = (x.to_f64(), w.to_f64());
    let mut acc = vec![0.0f64; out.numel()];
    let ins: Vec<Vec<usize>> = indices(in_spatial).collect();
    let ks: Vec<Vec<usize>> = indices(kernel).collect();
    for b in 0..n {
        for ch in 0..c {
            let grp = ch / cg;
            for (ii, i) in ins.iter().enumerate() {
                let xval = xv[(b * c + ch) * plane + ii];
                for (ki, k) in ks.iter().enumerate() {
                    // The output position this tap reaches, if inside the (cropped) result.
                    let mut off = Some(0usize);
                    for a in 0..s {
                        let p = i[a] as i64 * at(stride, a, 1) + k[a] as i64 * at(dilation, a, 1)
                            - pad_begin(a);
                        off = match off {
                            Some(o) if p >= 0 && p < out_spatial[a] as i64 => {
                                Some(o + p as usize * out_strides[a])
                            }
                            _ => None,
                        };
                    }
                    let Some(off) = off else { continue };
                    for oc in 0..og {
                        let wval = wv[(ch * og + oc) * taps + ki];
                        acc[(b * c_out + grp * og + oc) * out_plane + off] += xval * wval;
                    }
                }
            }
        }
    }
    Ok(Tensor::from_f64(out, &acc))
}

/// `max_pool(x)` or `avg_pool(x)` with the attributes of `op`.
pub(super) fn pool(op: &Op, x: &Tensor, out: &TensorType) -> Result<Tensor> {
    let axes = windows(op, &x.ty, None)?;
    let planes = x.ty.shape[0] * x.ty.shape[1];
    let in_spatial = &x.ty.shape[2..];
    let kernel: Vec<usize> = axes.iter().map(|a| a.kernel).collect();
    let out_spatial: Vec<usize> = axes.iter().map(|a| a.output).collect();
    let (plane, in_strides) = (in_spatial.iter().product::<usize>(), strides(in_spatial));
    let out_plane: usize = out_spatial.iter().product();
    let outs: Vec<Vec<usize>> = indices(&out_spatial).collect();
    let ks: Vec<Vec<usize>> = indices(&kernel).collect();
    match op {
        Op::MaxPool { .. } if x.ty.dtype.is_float() => {
            let xv = x.to_f64();
            let mut res = Vec::with_capacity(out.numel());
            for p in 0..planes {
                for o in &outs {
                    let mut m = f64::NEG_INFINITY;
                    for k in &ks {
                        if let Some(t) = tap(&axes, o, k, &in_strides) {
                            m = float_binary(BinaryOp::Maximum, m, xv[p * plane + t])?;
                        }
                    }
                    res.push(m);
                }
            }
            Ok(Tensor::from_f64(out, &res))
        }
        Op::MaxPool { .. } => {
            let xv = x.to_i128();
            let (lo, _) =
                x.ty.dtype
                    .int_range()
                    .ok_or_else(|| Error::internal("max_pool: an integer dtype has no range"))?;
            let mut res = Vec::with_capacity(out.numel());
            for p in 0..planes {
                for o in &outs {
                    let m = ks
                        .iter()
                        .filter_map(|k| tap(&axes, o, k, &in_strides))
                        .map(|t| xv[p * plane + t])
                        .fold(lo, i128::max);
                    res.push(m);
                }
            }
            Ok(Tensor::from_i128(out, &res))
        }
        Op::AvgPool {
            count_include_pad, ..
        } => {
            let compute = match x.ty.dtype {
                DType::F16 | DType::Bf16 => DType::F32,
                d => d,
            };
            let xv = x.to_f64();
            let counts: Vec<f64> = outs
                .iter()
                .map(|o| window::divisor(&axes, o, *count_include_pad) as f64)
                .collect();
            let mut res = Vec::with_capacity(out.numel());
            for p in 0..planes {
                for (oi, o) in outs.iter().enumerate() {
                    let s: f64 = ks
                        .iter()
                        .filter_map(|k| tap(&axes, o, k, &in_strides))
                        .map(|t| xv[p * plane + t])
                        .sum();
                    let s = round_to_dtype(s, compute);
                    res.push(round_to_dtype(s / counts[oi], compute));
                }
            }
            debug_assert_eq!(res.len(), planes * out_plane);
            Ok(Tensor::from_f64(out, &res))
        }
        _ => Err(Error::internal(format!(
            "{} is not a pooling op",
            op.name()
        ))),
    }
}
