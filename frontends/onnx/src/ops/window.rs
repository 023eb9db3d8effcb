//! Sliding-window ops: Conv, ConvTranspose, MaxPool, AveragePool and LpPool as the
//! IR's `conv`, `conv_transpose`, `max_pool` and `avg_pool` (LpPool as a depthwise
//! `conv` with a kernel of ones over `|x|^p`, then `^(1/p)`); ConvInteger and
//! QLinearConv as an exact f64 `conv` of the zero-point-shifted 8-bit operands.
//!
//! ONNX's `pads` (`[begin_1, .., begin_s, end_1, .., end_s]`) is the IR's asymmetric
//! `padding` as it is; `auto_pad` is resolved here into explicit pads. ONNX's
//! strides default to 1 for pooling too (the IR's to the kernel), so they are always
//! written out.

use super::one;
use super::quant::{saturate, shifted};
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::window::{self, Attrs};
use ferrite_ir::{BinaryOp as B, DType, Op, Tensor, TensorType, UnaryOp as U};
use std::sync::Arc;

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "Conv" => one(conv(ctx, n)?),
        "ConvInteger" => one(conv_integer(ctx, n)?),
        "QLinearConv" => one(qlinear_conv(ctx, n)?),
        "ConvTranspose" => one(conv_transpose(ctx, n)?),
        "MaxPool" | "AveragePool" | "LpPool" => pool(ctx, n, op).map(Some),
        _ => Ok(None),
    }
}

/// The spatial extents of an `[N, C, *spatial]` operand, 1 to 3 of them.
fn spatial(ctx: &Ctx, x: &Val) -> OpResult<Vec<usize>> {
    let shape = ctx.shape(x);
    if !(3..=2 + window::MAX_SPATIAL).contains(&shape.len()) {
        invalid!(
            "the input must be [N, C, *spatial] with 1 to 3 spatial axes, not {}",
            ctx.ty(x)
        );
    }
    Ok(shape[2..].to_vec())
}

/// A per-axis attribute of `s` entries, or `default` on every axis.
/// The largest magnitude of a window attribute entry (a stride, dilation, pad, kernel or
/// output extent): far beyond any tensor's extent ([`ferrite_ir::types::MAX_ELEMENTS`] is
/// 2^31), and small enough that the output-size arithmetic on a few such products cannot
/// overflow an `i64`.
const MAX_WINDOW_ATTR: i64 = 1 << 30;

/// The integer list attribute `name` of a window op, each entry within
/// [`MAX_WINDOW_ATTR`].
fn window_ints(n: &NodeIn, name: &str) -> OpResult<Option<Vec<i64>>> {
    let v = n.ints(name)?;
    if let Some(&bad) = v
        .iter()
        .flatten()
        .find(|x| x.unsigned_abs() > MAX_WINDOW_ATTR as u64)
    {
        invalid!("attribute `{name}` entry {bad} is out of range (at most 2^30 in magnitude)");
    }
    Ok(v)
}

fn per_axis(n: &NodeIn, name: &str, s: usize, default: i64) -> OpResult<Vec<i64>> {
    match window_ints(n, name)? {
        None => Ok(vec![default; s]),
        Some(v) if v.len() == s => Ok(v),
        Some(v) => invalid!(
            "attribute `{name}` has {} entries for {s} spatial axes",
            v.len()
        ),
    }
}

/// The explicit `[begins.., ends..]` pads of a window op, from `pads` or `auto_pad`.
fn pads(
    n: &NodeIn,
    input: &[usize],
    kernel: &[usize],
    strides: &[i64],
    dil: &[i64],
) -> OpResult<Vec<i64>> {
    let s = input.len();
    match n.string("auto_pad", "NOTSET")?.as_str() {
        "NOTSET" => match window_ints(n, "pads")? {
            None => Ok(vec![0; 2 * s]),
            Some(p) if p.len() == 2 * s => Ok(p),
            Some(p) => invalid!("attribute `pads` has {} entries, not 2 * {s}", p.len()),
        },
        "VALID" => Ok(vec![0; 2 * s]),
        mode @ ("SAME_UPPER" | "SAME_LOWER") => {
            let mut p = vec![0; 2 * s];
            for i in 0..s {
                let st = strides[i].max(1);
                let out = (input[i] as i64 + st - 1) / st;
                let span = dil[i] * (kernel[i] as i64 - 1) + 1;
                let total = ((out - 1) * st + span - input[i] as i64).max(0);
                let small = total / 2;
                let (b, e) = if mode == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                p[i] = b;
                p[s + i] = e;
            }
            Ok(p)
        }
        m => invalid!(
            "attribute `auto_pad` must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, not {m:?}"
        ),
    }
}

/// Checks `kernel_shape`, when given, against the weight's kernel.
fn check_kernel(n: &NodeIn, kernel: &[usize]) -> OpResult<()> {
    if let Some(k) = window_ints(n, "kernel_shape")? {
        if k.len() != kernel.len() || k.iter().zip(kernel).any(|(&a, &b)| a != b as i64) {
            invalid!("kernel_shape {k:?} differs from the weight's kernel {kernel:?}");
        }
    }
    Ok(())
}

/// `y + b.reshape([C, 1, ..])` for an optional bias input.
fn add_bias(ctx: &mut Ctx, n: &NodeIn, y: Val, at: usize) -> OpResult<Val> {
    let Some(b) = n.opt(at) else { return Ok(y) };
    let rank = ctx.rank(&y);
    let c = ctx.dim(&y, 1)?;
    if ctx.shape(b) != [c] {
        invalid!("the bias must have shape [{c}], not {}", ctx.ty(b));
    }
    let mut shape = vec![1; rank - 1];
    shape[0] = c;
    let b = ctx.reshape(b, &shape)?;
    ctx.add(&y, &b)
}

fn conv(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (x, w) = (n.input(0)?, n.input(1)?);
    let y = conv_of(ctx, n, x, w)?;
    add_bias(ctx, n, y, 2)
}

/// ConvInteger: `conv(x - x_zero_point, w - w_zero_point)` in i32, computed as an f64
/// conv, which is exact (8-bit products sum far below 2^53).
fn conv_integer(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let acc = shifted_conv(ctx, n, (0, n.opt(2)), (1, n.opt(3)))?;
    ctx.cast(&acc, DType::I32)
}

/// The f64 conv of the zero-point-shifted 8-bit operands `(input, zero point)`.
fn shifted_conv(
    ctx: &mut Ctx,
    n: &NodeIn,
    x: (usize, Option<&Val>),
    w: (usize, Option<&Val>),
) -> OpResult<Val> {
    let xz = match x.1 {
        Some(z) if ctx.ty(z).numel() != 1 => {
            invalid!(
                "the input's zero point must be one value, not {}",
                ctx.ty(z)
            )
        }
        z => z,
    };
    let xi = shifted(ctx, n.input(x.0)?, xz, 0)?;
    let wi = shifted(ctx, n.input(w.0)?, w.1, 0)?;
    let xf = ctx.cast(&xi, DType::F64)?;
    let wf = ctx.cast(&wi, DType::F64)?;
    conv_of(ctx, n, &xf, &wf)
}

/// QLinearConv: the exact conv of the shifted operands plus the i32 bias, scaled by
/// `x_scale * w_scale / y_scale` (per output channel when `w_scale` is), rounded half
/// to even, shifted by `y_zero_point` and saturated, as QLinearMatMul is.
fn qlinear_conv(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (xs, ws, ys) = (n.input(1)?, n.input(4)?, n.input(6)?);
    let mut acc = shifted_conv(ctx, n, (0, n.opt(2)), (3, n.opt(5)))?;
    let c_out = ctx.dim(&acc, 1)?;
    let rank = ctx.rank(&acc);
    let mut per_channel = vec![1; rank - 1];
    per_channel[0] = c_out;
    if let Some(b) = n.opt(8) {
        if ctx.shape(b) != [c_out] {
            invalid!("the bias must have shape [{c_out}], not {}", ctx.ty(b));
        }
        let b = ctx.reshape(b, &per_channel)?;
        let b = ctx.cast(&b, DType::F64)?;
        acc = ctx.add(&acc, &b)?;
    }
    let scale_of = |ctx: &mut Ctx, s: &Val| -> OpResult<Val> {
        match ctx.ty(s).numel() {
            1 => ctx.reshape(s, &[]),
            k if k == c_out => ctx.reshape(s, &per_channel),
            _ => invalid!(
                "a scale of {} does not fit {c_out} output channels",
                ctx.ty(s)
            ),
        }
    };
    let sdt = ctx.dtype(xs);
    let xs = scale_of(ctx, xs)?;
    let ws = scale_of(ctx, ws)?;
    let ys = scale_of(ctx, ys)?;
    let ws = ctx.cast(&ws, sdt)?;
    let ys = ctx.cast(&ys, sdt)?;
    let m = ctx.mul(&xs, &ws)?;
    let m = ctx.div(&m, &ys)?;
    let m = ctx.cast(&m, DType::F64)?;
    let d = ctx.mul(&acc, &m)?;
    let out = match n.opt(7) {
        Some(z) => ctx.dtype(z),
        None => ctx.dtype(n.input(0)?),
    };
    let yz = match n.opt(7) {
        Some(z) if ctx.ty(z).numel() == 1 => Some(ctx.reshape(z, &[])?),
        Some(z) => invalid!("y_zero_point must be one value, not {}", ctx.ty(z)),
        None => None,
    };
    saturate(ctx, &d, yz.as_ref(), out, DType::F64)
}

/// The IR `conv` of `x` and `w` with the node's window attributes.
fn conv_of(ctx: &mut Ctx, n: &NodeIn, x: &Val, w: &Val) -> OpResult<Val> {
    let input = spatial(ctx, x)?;
    let s = input.len();
    if ctx.rank(w) != s + 2 {
        invalid!(
            "the weight {} must have the input's rank {}",
            ctx.ty(w),
            s + 2
        );
    }
    let kernel = ctx.shape(w)[2..].to_vec();
    check_kernel(n, &kernel)?;
    let strides = per_axis(n, "strides", s, 1)?;
    let dil = per_axis(n, "dilations", s, 1)?;
    let padding = pads(n, &input, &kernel, &strides, &dil)?;
    let op = Op::Conv {
        stride: Some(strides),
        padding: Some(padding),
        dilation: Some(dil),
        groups: n.int("group", 1)?,
    };
    ctx.op(op, &[x, w])
}

fn conv_transpose(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (x, w) = (n.input(0)?, n.input(1)?);
    let input = spatial(ctx, x)?;
    let s = input.len();
    if ctx.rank(w) != s + 2 {
        invalid!(
            "the weight {} must have the input's rank {}",
            ctx.ty(w),
            s + 2
        );
    }
    let kernel = ctx.shape(w)[2..].to_vec();
    check_kernel(n, &kernel)?;
    let strides = per_axis(n, "strides", s, 1)?;
    let dil = per_axis(n, "dilations", s, 1)?;
    let extra = per_axis(n, "output_padding", s, 0)?;
    let auto = n.string("auto_pad", "NOTSET")?;
    let target: Option<Vec<i64>> = match window_ints(n, "output_shape")? {
        Some(o) if o.len() == s => Some(o),
        Some(o) if o.len() == s + 2 => Some(o[2..].to_vec()),
        Some(o) => invalid!(
            "attribute `output_shape` has {} entries for {s} spatial axes",
            o.len()
        ),
        None if auto.starts_with("SAME") => Some(
            input
                .iter()
                .zip(&strides)
                .map(|(&i, &st)| i as i64 * st)
                .collect(),
        ),
        None => None,
    };
    // Pads from the wanted output shape; negative ones (an output larger than the full
    // transposed conv) become zeros around the result.
    let (padding, grow) = match target {
        Some(t) => {
            let mut p = vec![0i64; 2 * s];
            let mut grow = vec![0i64; 2 * s];
            for i in 0..s {
                let full = strides[i] * (input[i] as i64 - 1)
                    + extra[i]
                    + dil[i] * (kernel[i] as i64 - 1)
                    + 1;
                let total = full - t[i];
                // Floor division, as onnx's reference computes it: a total of -1
                // grows the end.
                let half = total.div_euclid(2);
                let (b, e) = if auto == "SAME_UPPER" {
                    (half, total - half)
                } else {
                    (total - half, half)
                };
                (p[i], grow[i]) = (b.max(0), (-b).max(0));
                (p[s + i], grow[s + i]) = (e.max(0), (-e).max(0));
            }
            (p, grow)
        }
        None => match auto.as_str() {
            "NOTSET" | "VALID" => (
                match window_ints(n, "pads")? {
                    None => vec![0; 2 * s],
                    Some(_) if auto == "VALID" => vec![0; 2 * s],
                    Some(p) if p.len() == 2 * s => p,
                    Some(p) => invalid!("attribute `pads` has {} entries, not 2 * {s}", p.len()),
                },
                vec![0; 2 * s],
            ),
            m => invalid!(
                "attribute `auto_pad` must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, not {m:?}"
            ),
        },
    };
    let op = Op::ConvTranspose {
        stride: Some(strides),
        padding: Some(padding),
        output_padding: Some(extra),
        dilation: Some(dil),
        groups: n.int("group", 1)?,
    };
    let mut y = ctx.op(op, &[x, w])?;
    if grow.iter().any(|&g| g != 0) {
        let mut p = vec![0i64; 4];
        for i in 0..s {
            p.extend([grow[i], grow[s + i]]);
        }
        y = ctx.op(
            Op::Pad {
                pads: p,
                value: 0.0,
            },
            &[&y],
        )?;
    }
    add_bias(ctx, n, y, 2)
}

fn pool(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Vec<Option<Val>>> {
    let x = n.input(0)?;
    let input = spatial(ctx, x)?;
    let s = input.len();
    let kernel = match window_ints(n, "kernel_shape")? {
        Some(k) if k.len() == s && k.iter().all(|&k| k >= 1) => k,
        Some(k) => invalid!("kernel_shape {k:?} must hold {s} positive extents"),
        None => invalid!("attribute `kernel_shape` is required"),
    };
    let ku: Vec<usize> = kernel.iter().map(|&k| k as usize).collect();
    let strides = per_axis(n, "strides", s, 1)?;
    let dil = per_axis(n, "dilations", s, 1)?;
    let padding = pads(n, &input, &ku, &strides, &dil)?;
    let ceil_mode = n.int("ceil_mode", 0)? != 0;
    if op != "MaxPool" && n.outputs() > 1 {
        invalid!("{op} has one result, not {}", n.outputs());
    }
    let y = match op {
        "MaxPool" => {
            let pool = Op::MaxPool {
                kernel: kernel.clone(),
                stride: Some(strides.clone()),
                padding: Some(padding.clone()),
                dilation: Some(dil.clone()),
                ceil_mode,
            };
            let y = ctx.op(pool, &[x])?;
            if n.outputs() > 1 {
                let column_major = n.int("storage_order", 0)? != 0;
                let attrs = Attrs {
                    op: "MaxPool",
                    stride: Some(&strides),
                    padding: Some(&padding),
                    dilation: Some(&dil),
                    ceil_mode,
                    stride_is_kernel: false,
                };
                let i = max_indices(ctx, x, &attrs, &ku, column_major)?;
                return Ok(vec![Some(y), Some(i)]);
            }
            Ok(y)
        }
        "AveragePool" => {
            let op = Op::AvgPool {
                kernel,
                stride: Some(strides),
                padding: Some(padding),
                dilation: Some(dil),
                ceil_mode,
                count_include_pad: n.int("count_include_pad", 0)? != 0,
            };
            ctx.op(op, &[x])
        }
        _ => lp_pool(ctx, n, x, &ku, strides, padding, dil, ceil_mode),
    }?;
    Ok(vec![Some(y)])
}

/// MaxPool's Indices: the flat position of each window's first maximum, over the whole
/// tensor: `(n * C + c) * plane` plus its position in the plane, row-major, or
/// column-major (`storage_order=1`, the first spatial axis fastest). The taps of every window are gathered from the padded,
/// flattened input (padding `-inf` or the dtype's minimum, as `max_pool` pads), an
/// `argmax` over them picks the tap, and a constant `[taps, positions]` table maps
/// the tap back to its position in the unpadded input.
fn max_indices(
    ctx: &mut Ctx,
    x: &Val,
    attrs: &Attrs,
    kernel: &[usize],
    column_major: bool,
) -> OpResult<Val> {
    let xt = ctx.ty(x);
    let axes = window::resolve(attrs, &xt.shape[2..], kernel)?;
    let (n, c) = (xt.shape[0], xt.shape[1]);
    let taps: usize = kernel.iter().product();
    let outs: Vec<usize> = axes.iter().map(|a| a.output).collect();
    let positions: usize = outs.iter().product();
    let plane: usize = xt.shape[2..].iter().product();
    if taps.saturating_mul(positions) > 1 << 24 {
        unsupported!("MaxPool Indices over {taps} taps and {positions} positions is too large");
    }
    let mut pads = vec![0i64; 4];
    for a in &axes {
        pads.extend([
            a.pad_begin as i64,
            (a.padded_extent() - a.pad_begin - a.input) as i64,
        ]);
    }
    let fill = match xt.dtype.int_range() {
        Some((lo, _)) => lo as f64,
        None => f64::NEG_INFINITY,
    };
    let padded = ctx.op(Op::Pad { pads, value: fill }, &[x])?;
    let extents: Vec<usize> = axes.iter().map(|a| a.padded_extent()).collect();
    let flat = ctx.reshape(&padded, &[n, c, extents.iter().product()])?;
    let (mut gather, mut source) = (Vec::new(), Vec::new());
    for t in 0..taps {
        let ks = window::unravel(t, kernel);
        for o in 0..positions {
            let os = window::unravel(o, &outs);
            let (mut g, mut s, mut inside) = (0usize, 0i64, true);
            for (i, a) in axes.iter().enumerate() {
                g = g * extents[i] + os[i] * a.stride + ks[i] * a.dilation;
                let p = a.position(os[i], ks[i]);
                inside &= p >= 0 && p < a.input as i64;
                if !column_major {
                    s = s * a.input as i64 + p;
                }
            }
            if column_major {
                for (i, a) in axes.iter().enumerate().rev() {
                    s = s * a.input as i64 + a.position(os[i], ks[i]);
                }
            }
            gather.push(g as i64);
            source.push(if inside { s } else { 0 });
        }
    }
    let ity = TensorType::new(DType::I64, vec![taps, positions])?;
    let g = Val::Const(Arc::new(Tensor::from_i64(&ity, &gather)));
    let table = Val::Const(Arc::new(Tensor::from_i64(&ity, &source)));
    let cols = ctx.op(Op::IndexSelect { axis: 2 }, &[&flat, &g])?;
    let arg = Op::ArgReduce {
        op: ferrite_ir::ArgReduceOp::ArgMax,
        axis: Some(2),
        keepdim: false,
    };
    let best = ctx.op(arg, &[&cols])?;
    let best = ctx.reshape(&best, &[n * c, positions])?;
    let within = ctx.op(Op::Gather { axis: 0 }, &[&table, &best])?;
    let planes = ctx.arange(0, (n * c) as i64, 1)?;
    let planes = ctx.bin_s(B::Mul, &planes, plane as f64)?;
    let planes = ctx.reshape(&planes, &[n * c, 1])?;
    let idx = ctx.add(&within, &planes)?;
    let mut shape = vec![n, c];
    shape.extend_from_slice(&outs);
    ctx.reshape(&idx, &shape)
}

/// `(sum over the window of |x|^p)^(1/p)`: the sum is a depthwise `conv` with a kernel
/// of ones (the window's padding, ceil_mode's included, adds zeros).
#[allow(clippy::too_many_arguments)]
fn lp_pool(
    ctx: &mut Ctx,
    n: &NodeIn,
    x: &Val,
    kernel: &[usize],
    strides: Vec<i64>,
    padding: Vec<i64>,
    dil: Vec<i64>,
    ceil_mode: bool,
) -> OpResult<Val> {
    let p = n.int("p", 2)?;
    if p < 1 {
        invalid!("attribute `p` must be at least 1, not {p}");
    }
    let xt = ctx.ty(x);
    if !xt.dtype.is_float() {
        invalid!("the input must be float, not {xt}");
    }
    // The windows as max_pool would lay them out, ceil_mode included; the extra end
    // padding that ceil_mode needs becomes explicit.
    let attrs = Attrs {
        op: "LpPool",
        stride: Some(&strides),
        padding: Some(&padding),
        dilation: Some(&dil),
        ceil_mode,
        stride_is_kernel: false,
    };
    let axes = window::resolve(&attrs, &xt.shape[2..], kernel)?;
    let s = kernel.len();
    let mut full = padding.clone();
    for (i, a) in axes.iter().enumerate() {
        full[s + i] = (a.padded_extent() - a.pad_begin - a.input) as i64;
    }
    let c = xt.shape[1];
    let mut wshape = vec![c, 1];
    wshape.extend_from_slice(kernel);
    let wty = TensorType::new(xt.dtype, wshape)?;
    let ones = Val::Const(Arc::new(Tensor::from_f64(&wty, &vec![1.0; wty.numel()])));
    let a = ctx.un(U::Abs, x)?;
    let powered = if p == 1 {
        a
    } else if p == 2 {
        ctx.mul(&a, &a)?
    } else {
        ctx.bin_s(B::Pow, &a, p as f64)?
    };
    let op = Op::Conv {
        stride: Some(strides),
        padding: Some(full),
        dilation: Some(dil),
        groups: c as i64,
    };
    let sum = ctx.op(op, &[&powered, &ones])?;
    match p {
        1 => Ok(sum),
        2 => ctx.un(U::Sqrt, &sum),
        _ => ctx.bin_s(B::Pow, &sum, 1.0 / p as f64),
    }
}
