//! Resize (opsets 10 to 19, and Resize-10's Upsample-like form) as a separable filter
//! with constant taps: on each resized axis, output position `i` is `sum_t w[i, t] *
//! x[idx[i, t]]`, one `index_select` of the taps, a multiply by the constant weights
//! and a `sum` over the taps (nearest has one tap and is the `index_select` alone).
//!
//! The indices and weights are computed here, in f64, from onnx's definition: the
//! coordinate transformation (`half_pixel`, `half_pixel_symmetric`,
//! `pytorch_half_pixel`, `align_corners`, `asymmetric`, `tf_crop_and_resize` with its
//! `extrapolation_value`), the nearest rounding modes, linear (2 taps) and cubic (4
//! taps, `cubic_coeff_a`, `exclude_outside`) weights, taps past an edge reading the edge
//! element, `axes` and `keep_aspect_ratio_policy`. `antialias` is refused.

use super::one;
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{DType, Op, ReduceOp as R, Tensor, TensorType};
use std::sync::Arc;

/// The most taps one resized axis may have (output extent times taps per point), and
/// the most elements of a `tf_crop_and_resize` extrapolation mask: both are constants
/// built at import.
const MAX_TAPS: usize = 1 << 24;

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "Resize" => one(resize(ctx, n)?),
        _ => Ok(None),
    }
}

/// How one axis is resized.
struct AxisPlan {
    input: usize,
    output: usize,
    scale: f64,
    /// `tf_crop_and_resize`'s region, as fractions of the axis.
    roi: (f64, f64),
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// A constant list of floats of input `i`, or `None` when it is absent or empty.
fn floats_input(ctx: &Ctx, n: &NodeIn, i: usize, role: &str) -> OpResult<Option<Vec<f64>>> {
    match n.opt(i) {
        None => Ok(None),
        Some(v) => {
            let t = ctx.constant(v, role)?;
            Ok((!t.is_empty()).then(|| t.to_f64()))
        }
    }
}

fn resize(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let x = n.input(0)?;
    let shape = ctx.shape(x);
    let rank = shape.len();
    let antialias = n.int("antialias", 0)? != 0;
    let mode = match n.string("mode", "nearest")?.as_str() {
        "nearest" => Mode::Nearest,
        "linear" => Mode::Linear,
        "cubic" => Mode::Cubic,
        m => invalid!("attribute `mode` must be nearest, linear or cubic, not {m:?}"),
    };
    let (coord, nearest) = if n.opset < 11 {
        ("asymmetric".to_string(), "floor".to_string())
    } else {
        (
            n.string("coordinate_transformation_mode", "half_pixel")?,
            n.string("nearest_mode", "round_prefer_floor")?,
        )
    };
    let axes: Vec<usize> = match n.ints("axes")? {
        None => (0..rank).collect(),
        Some(a) => super::axes(&a, rank, "axes")?,
    };
    let (roi, scales, sizes) = if n.opset < 11 {
        (None, floats_input(ctx, n, 1, "scales")?, None)
    } else {
        (
            floats_input(ctx, n, 1, "roi")?,
            floats_input(ctx, n, 2, "scales")?,
            floats_input(ctx, n, 3, "sizes")?,
        )
    };
    let k = axes.len();
    let mut plans: Vec<AxisPlan> = shape
        .iter()
        .map(|&d| AxisPlan {
            input: d,
            output: d,
            scale: 1.0,
            roi: (0.0, 1.0),
        })
        .collect();
    match (scales, sizes) {
        (Some(_), Some(_)) => invalid!("only one of scales and sizes may be given"),
        (None, None) => invalid!("one of scales and sizes must be given"),
        (Some(s), None) => {
            if s.len() != k {
                invalid!("scales has {} entries for {k} axes", s.len());
            }
            for (&a, &sc) in axes.iter().zip(&s) {
                if !(sc > 0.0 && sc.is_finite()) {
                    invalid!("scale {sc} on axis {a} is not positive");
                }
                let out = (shape[a] as f64 * sc).floor();
                if out > ferrite_ir::MAX_ELEMENTS as f64 {
                    invalid!("scale {sc} on axis {a} gives {out} elements");
                }
                plans[a].output = out as usize;
                plans[a].scale = sc;
            }
        }
        (None, Some(z)) => {
            if z.len() != k {
                invalid!("sizes has {} entries for {k} axes", z.len());
            }
            if z.iter()
                .any(|&d| d < 0.0 || d > ferrite_ir::MAX_ELEMENTS as f64)
            {
                invalid!("sizes {z:?} must be extents");
            }
            let policy = n.string("keep_aspect_ratio_policy", "stretch")?;
            let ratios = axes.iter().zip(&z).map(|(&a, &d)| d / shape[a] as f64);
            let common = match policy.as_str() {
                "stretch" => None,
                "not_larger" => Some(ratios.fold(f64::INFINITY, f64::min)),
                "not_smaller" => Some(ratios.fold(0.0, f64::max)),
                p => invalid!(
                    "attribute `keep_aspect_ratio_policy` must be stretch, not_larger or not_smaller, not {p:?}"
                ),
            };
            for (&a, &d) in axes.iter().zip(&z) {
                let (out, scale) = match common {
                    None => (d as usize, d / shape[a] as f64),
                    Some(r) => ((r * shape[a] as f64).round_ties_even() as usize, r),
                };
                plans[a].output = out;
                plans[a].scale = scale;
            }
        }
    }
    if coord == "tf_crop_and_resize" {
        match &roi {
            Some(r) if r.len() == 2 * k => {
                for (i, &a) in axes.iter().enumerate() {
                    plans[a].roi = (r[i], r[k + i]);
                }
            }
            Some(r) => invalid!("roi has {} entries, not 2 * {k}", r.len()),
            None => invalid!("tf_crop_and_resize needs roi"),
        }
    }
    if mode != Mode::Nearest && !ctx.dtype(x).is_float() {
        invalid!(
            "{} resize needs a float input, not {}",
            n.string("mode", "")?,
            ctx.ty(x)
        );
    }
    let extrapolation = n.float("extrapolation_value", 0.0)?;
    let a_coeff = n.float("cubic_coeff_a", -0.75)?;
    let exclude = n.int("exclude_outside", 0)? != 0;
    let mut y = x.clone();
    let mut outside: Vec<(usize, Vec<bool>)> = Vec::new();
    for (a, p) in plans.iter().enumerate() {
        if p.input == p.output && p.scale == 1.0 && coord != "tf_crop_and_resize" {
            continue;
        }
        if p.input == 0 && p.output > 0 {
            invalid!("axis {a} of extent 0 cannot be resized to {}", p.output);
        }
        let per_point = match mode {
            Mode::Nearest => 1.0,
            Mode::Linear if antialias => 2.0 / p.scale.min(1.0) + 2.0,
            Mode::Linear => 2.0,
            _ if antialias => 4.0 / p.scale.min(1.0) + 2.0,
            Mode::Cubic => 4.0,
        };
        if p.output as f64 * per_point > MAX_TAPS as f64 {
            unsupported!(
                "resizing axis {a} to {} elements needs more than {MAX_TAPS} taps",
                p.output
            );
        }
        let mut taps: Vec<Vec<(i64, f64)>> = Vec::with_capacity(p.output);
        let mut out_of_range = Vec::with_capacity(p.output);
        for i in 0..p.output {
            let c = coordinate(&coord, i, p)?;
            let last = p.input as f64 - 1.0;
            out_of_range.push(coord == "tf_crop_and_resize" && (c < 0.0 || c > last));
            let aa = (antialias && mode != Mode::Nearest).then_some(p.scale.min(1.0));
            taps.push(filter(mode, &nearest, c, p.input, a_coeff, exclude, aa)?);
        }
        if out_of_range.iter().any(|&o| o) {
            outside.push((a, out_of_range));
        }
        y = apply(ctx, &y, a, &taps)?;
    }
    if !outside.is_empty() {
        // The positions where any axis read outside the input take extrapolation_value.
        let out_shape = ctx.shape(&y);
        let ty = TensorType::new(DType::Bool, out_shape.clone())?;
        if ty.numel() > MAX_TAPS {
            unsupported!("tf_crop_and_resize to {ty} is too large to import");
        }
        let mut mask = Vec::with_capacity(ty.numel());
        for f in 0..ty.numel() {
            let mut rest = f;
            let mut idx = vec![0; out_shape.len()];
            for d in (0..out_shape.len()).rev() {
                idx[d] = rest % out_shape[d];
                rest /= out_shape[d];
            }
            mask.push(outside.iter().any(|(a, o)| o[idx[*a]]) as i64);
        }
        let mask = Val::Const(Arc::new(Tensor::from_i64(&ty, &mask)));
        let ev = ctx.scalar(extrapolation, ctx.dtype(&y));
        y = ctx.select(&mask, &ev, &y)?;
    }
    Ok(y)
}

/// The input coordinate that output position `i` samples.
fn coordinate(mode: &str, i: usize, p: &AxisPlan) -> OpResult<f64> {
    let (i, inn, out, s) = (i as f64, p.input as f64, p.output as f64, p.scale);
    Ok(match mode {
        "half_pixel" => (i + 0.5) / s - 0.5,
        "half_pixel_symmetric" => {
            let adjustment = out / (s * inn);
            let center = inn / 2.0;
            let offset = center * (1.0 - adjustment);
            offset + (i + 0.5) / s - 0.5
        }
        "pytorch_half_pixel" if out > 1.0 => (i + 0.5) / s - 0.5,
        "pytorch_half_pixel" => 0.0,
        // The resized length is `in * scale`, unrounded, as in onnx's reference.
        "align_corners" if inn * s == 1.0 => 0.0,
        "align_corners" => i * (inn - 1.0) / (inn * s - 1.0),
        "asymmetric" => i / s,
        "tf_crop_and_resize" => {
            let (start, end) = p.roi;
            if out > 1.0 {
                start * (inn - 1.0) + i * (end - start) * (inn - 1.0) / (out - 1.0)
            } else {
                0.5 * (start + end) * (inn - 1.0)
            }
        }
        m => invalid!("attribute `coordinate_transformation_mode` {m:?} is not known"),
    })
}

/// The cubic kernel with coefficient `a`.
fn cubic(a: f64, s: f64) -> f64 {
    let s = s.abs();
    if s <= 1.0 {
        ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0
    } else if s < 2.0 {
        ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a
    } else {
        0.0
    }
}

/// Zeroes the weights of taps outside `0..n` and renormalizes (`exclude_outside`).
fn exclude_outside(taps: &mut [(i64, f64)], n: usize) {
    for tap in taps.iter_mut() {
        if tap.0 < 0 || tap.0 >= n as i64 {
            tap.1 = 0.0;
        }
    }
    let sum: f64 = taps.iter().map(|t| t.1).sum();
    if sum != 0.0 {
        for tap in taps.iter_mut() {
            tap.1 /= sum;
        }
    }
}

/// The taps `(index, weight)` that sample coordinate `c` of an axis of extent `n`;
/// indices past an edge read the edge element. `antialias` is the downscaling factor
/// (at most 1) by which linear and cubic kernels are stretched, as onnx's reference
/// does: the taps are those nearest `c`, weights normalized to sum 1.
fn filter(
    mode: Mode,
    nearest: &str,
    c: f64,
    n: usize,
    a: f64,
    exclude: bool,
    antialias: Option<f64>,
) -> OpResult<Vec<(i64, f64)>> {
    let clamp = |i: i64| i.clamp(0, n as i64 - 1);
    if let Some(scale) = antialias {
        // ratio in (0, 1]: the tap left of an integral `c` is the base.
        let ratio = if c.fract() == 0.0 { 1.0 } else { c - c.floor() };
        let base = (c - ratio).round() as i64;
        let (start, end) = match mode {
            Mode::Linear => {
                let start = (-1.0 / scale).floor() as i64 + 1;
                (start, 2 - start)
            }
            _ => {
                let start = (-2.0 / scale).floor() as i64 + 1;
                (start, 2 - start)
            }
        };
        let mut taps: Vec<(i64, f64)> = (start..end)
            .map(|j| {
                let arg = (j as f64 - ratio) * scale;
                let w = match mode {
                    Mode::Linear => (1.0 - arg.abs()).clamp(0.0, 1.0),
                    _ => cubic(a, arg),
                };
                (base + j, w)
            })
            .collect();
        let sum: f64 = taps.iter().map(|t| t.1).sum();
        for tap in &mut taps {
            tap.1 /= sum;
        }
        if exclude {
            exclude_outside(&mut taps, n);
        }
        return Ok(taps.into_iter().map(|(i, w)| (clamp(i), w)).collect());
    }
    Ok(match mode {
        Mode::Nearest => {
            let r = match nearest {
                "round_prefer_floor" => (c - 0.5).ceil(),
                "round_prefer_ceil" => (c + 0.5).floor(),
                "floor" => c.floor(),
                "ceil" => c.ceil(),
                m => invalid!("attribute `nearest_mode` {m:?} is not known"),
            };
            vec![(clamp(r as i64), 1.0)]
        }
        Mode::Linear => {
            let base = c.floor();
            let t = c - base;
            let b = base as i64;
            vec![(clamp(b), 1.0 - t), (clamp(b + 1), t)]
        }
        Mode::Cubic => {
            let base = c.floor();
            let t = c - base;
            let b = base as i64;
            let mut taps: Vec<(i64, f64)> =
                (-1..=2).map(|d| (b + d, cubic(a, t - d as f64))).collect();
            if exclude {
                exclude_outside(&mut taps, n);
            }
            taps.into_iter().map(|(i, w)| (clamp(i), w)).collect()
        }
    })
}

/// Resamples axis `a` of `x` by the taps of each output position.
fn apply(ctx: &mut Ctx, x: &Val, a: usize, taps: &[Vec<(i64, f64)>]) -> OpResult<Val> {
    let t = taps.first().map_or(1, Vec::len);
    let idx: Vec<i64> = taps.iter().flat_map(|ts| ts.iter().map(|p| p.0)).collect();
    let ity = TensorType::new(DType::I64, vec![taps.len(), t])?;
    let idx = Val::Const(Arc::new(Tensor::from_i64(&ity, &idx)));
    // index_select by a [out, T] index gives [.., out, T, ..].
    let picked = ctx.op(Op::IndexSelect { axis: a as i64 }, &[x, &idx])?;
    if t == 1 {
        let shape = ctx.shape(x);
        let mut out = shape.clone();
        out[a] = taps.len();
        return ctx.reshape(&picked, &out);
    }
    let rank = ctx.rank(x);
    let mut wshape = vec![taps.len(), t];
    wshape.extend(std::iter::repeat_n(1, rank - a - 1));
    let wty = TensorType::new(ctx.dtype(x), wshape)?;
    let w: Vec<f64> = taps.iter().flat_map(|ts| ts.iter().map(|p| p.1)).collect();
    let w = Val::Const(Arc::new(Tensor::from_f64(&wty, &w)));
    let weighted = ctx.mul(&picked, &w)?;
    ctx.reduce(R::Sum, &weighted, &[a + 1], false)
}
