//! DFT as matmuls with constant cosine and sine matrices (computed in f64 and rounded
//! once to the signal's dtype): forward, inverse, one-sided (rfft) and inverse
//! one-sided (irfft, numpy's Hermitian extension), with `dft_length` padding or
//! truncating the signal as numpy's `n` does. Quadratic in the length, which the
//! static shapes bound.

use super::{axis, one};
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{DType, Op, Tensor, TensorType};
use std::f64::consts::PI;
use std::sync::Arc;

/// At most this many entries in one DFT matrix.
pub const MAX_DFT_MATRIX: usize = 1 << 24;

pub(crate) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "DFT" => one(dft(ctx, n)?),
        "STFT" => one(stft(ctx, n)?),
        _ => Ok(None),
    }
}

/// A `rows x cols` constant of `dt`, `f(r, c)` rounded once.
fn matrix(rows: usize, cols: usize, dt: DType, f: impl Fn(usize, usize) -> f64) -> OpResult<Val> {
    let v: Vec<f64> = (0..rows)
        .flat_map(|r| (0..cols).map(move |c| (r, c)))
        .map(|(r, c)| f(r, c))
        .collect();
    let ty = TensorType::new(dt, vec![rows, cols])?;
    Ok(Val::Const(Arc::new(Tensor::from_f64(&ty, &v))))
}

/// `x` along its last axis cut or zero-padded to `len`.
fn fit(ctx: &mut Ctx, x: &Val, len: usize) -> OpResult<Val> {
    let r = ctx.rank(x);
    let have = ctx.dim(x, r - 1)?;
    if have > len {
        ctx.op(
            Op::Slice {
                axis: r as i64 - 1,
                start: 0,
                end: len as i64,
                step: 1,
            },
            &[x],
        )
    } else if have < len {
        let mut pads = vec![0; 2 * r];
        pads[2 * r - 1] = (len - have) as i64;
        ctx.op(Op::Pad { pads, value: 0.0 }, &[x])
    } else {
        Ok(x.clone())
    }
}

fn dft(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let x = n.input(0)?;
    let dt = ctx.dtype(x);
    if !dt.is_float() {
        invalid!("the signal must be float, not {}", ctx.ty(x));
    }
    let shape = ctx.shape(x);
    let rank = shape.len();
    if rank < 2 || !matches!(shape[rank - 1], 1 | 2) {
        invalid!(
            "the signal must end in a dim of 1 (real) or 2 (complex), not {}",
            ctx.ty(x)
        );
    }
    let a = if n.opset >= 20 {
        match n.opt(2) {
            Some(v) => ctx.ints(v, "axis")?.first().copied().unwrap_or(-2),
            None => -2,
        }
    } else {
        n.int("axis", 1)?
    };
    let a = axis(a, rank, "axis")?;
    if a == rank - 1 {
        invalid!("axis {a} is the real/imaginary axis");
    }
    let inverse = n.int("inverse", 0)? != 0;
    let onesided = n.int("onesided", 0)? != 0;
    let len = shape[a];
    let size = match n.opt(1) {
        Some(v) => {
            let l = ctx.ints(v, "dft_length")?;
            match l[..] {
                [l] if l > 0 => l as usize,
                _ => invalid!("dft_length must be one positive value, not {l:?}"),
            }
        }
        None if inverse && onesided => 2 * len.saturating_sub(1),
        None => len,
    };
    if size == 0 {
        invalid!("the transform length is 0");
    }
    transform(ctx, x, a, size, inverse, onesided)
}

/// The DFT of `x` (last dim 1 or 2) along `a`, of length `size`.
fn transform(
    ctx: &mut Ctx,
    x: &Val,
    a: usize,
    size: usize,
    inverse: bool,
    onesided: bool,
) -> OpResult<Val> {
    let dt = ctx.dtype(x);
    let shape = ctx.shape(x);
    let rank = shape.len();
    // Input positions read and output positions written along the axis.
    let (inp, out) = match (inverse, onesided) {
        (false, false) => (size, size),
        (false, true) => (size, size / 2 + 1),
        (true, false) => (size, size),
        (true, true) => (size / 2 + 1, size),
    };
    // Checked: a hostile `dft_length` near 2^32 would wrap the product past the bound.
    if inp.checked_mul(out).is_none_or(|n| n > MAX_DFT_MATRIX) {
        unsupported!("a DFT of length {size} needs a {inp}x{out} matrix, more than Ferrite builds");
    }
    // Real and imaginary parts, the axis moved last and fitted to `inp`.
    let complex = shape[rank - 1] == 2;
    let part = |ctx: &mut Ctx, k: i64| -> OpResult<Val> {
        let p = ctx.op(
            Op::Slice {
                axis: rank as i64 - 1,
                start: k,
                end: k + 1,
                step: 1,
            },
            &[x],
        )?;
        let p = ctx.op(
            Op::Squeeze {
                axes: Some(vec![rank as i64 - 1]),
            },
            &[&p],
        )?;
        let mut perm: Vec<usize> = (0..rank - 1).filter(|&d| d != a).collect();
        perm.push(a);
        let p = ctx.permute(&p, &perm)?;
        fit(ctx, &p, inp)
    };
    let xr = part(ctx, 0)?;
    let xi = if complex { Some(part(ctx, 1)?) } else { None };
    let nf = size as f64;
    let angle = move |t: usize, k: usize| 2.0 * PI * ((t * k) % size) as f64 / nf;
    // y = x @ M with M[t, k] over input t and output k.
    let (re, im) = if !inverse {
        // X_k = sum_t x_t e^{-i angle}: re = xr cos + xi sin, im = xi cos - xr sin.
        let c = matrix(inp, out, dt, |t, k| angle(t, k).cos())?;
        let s = matrix(inp, out, dt, |t, k| angle(t, k).sin())?;
        let rc = ctx.op(Op::MatMul, &[&xr, &c])?;
        let rs = ctx.op(Op::MatMul, &[&xr, &s])?;
        match &xi {
            None => (rc, Some(ctx.un(ferrite_ir::UnaryOp::Neg, &rs)?)),
            Some(xi) => {
                let is = ctx.op(Op::MatMul, &[xi, &s])?;
                let ic = ctx.op(Op::MatMul, &[xi, &c])?;
                (ctx.add(&rc, &is)?, Some(ctx.sub(&ic, &rs)?))
            }
        }
    } else if !onesided {
        // x_t = (1/n) sum_k X_k e^{+i angle}: re = Xr cos - Xi sin, im = Xr sin + Xi cos.
        let c = matrix(inp, out, dt, |k, t| angle(t, k).cos() / nf)?;
        let s = matrix(inp, out, dt, |k, t| angle(t, k).sin() / nf)?;
        let rc = ctx.op(Op::MatMul, &[&xr, &c])?;
        let rs = ctx.op(Op::MatMul, &[&xr, &s])?;
        match &xi {
            None => (rc, Some(rs)),
            Some(xi) => {
                let is = ctx.op(Op::MatMul, &[xi, &s])?;
                let ic = ctx.op(Op::MatMul, &[xi, &c])?;
                (ctx.sub(&rc, &is)?, Some(ctx.add(&rs, &ic)?))
            }
        }
    } else {
        // irfft: the Hermitian extension of k < n/2 + 1, real out. Bins 0 and n/2 (n even)
        // count once and their imaginary parts drop, as numpy's irfft does.
        let w = move |k: usize| {
            if k == 0 || 2 * k == size {
                1.0
            } else {
                2.0
            }
        };
        let c = matrix(inp, out, dt, |k, t| w(k) * angle(t, k).cos() / nf)?;
        let s = matrix(inp, out, dt, |k, t| {
            if k == 0 || 2 * k == size {
                0.0
            } else {
                w(k) * angle(t, k).sin() / nf
            }
        })?;
        let rc = ctx.op(Op::MatMul, &[&xr, &c])?;
        match &xi {
            None => (rc, None),
            Some(xi) => {
                let is = ctx.op(Op::MatMul, &[xi, &s])?;
                (ctx.sub(&rc, &is)?, None)
            }
        }
    };
    // The axis back in place, then [re, im] (or [re]) as the last dim.
    let mut perm: Vec<usize> = (0..rank - 1).filter(|&d| d != a).collect();
    perm.push(a);
    let mut back = vec![0; rank - 1];
    for (i, &p) in perm.iter().enumerate() {
        back[p] = i;
    }
    let last = rank as i64 - 1;
    let re = ctx.permute(&re, &back)?;
    let re = ctx.op(Op::Unsqueeze { axis: last }, &[&re])?;
    match im {
        None => Ok(re),
        Some(im) => {
            let im = ctx.permute(&im, &back)?;
            let im = ctx.op(Op::Unsqueeze { axis: last }, &[&im])?;
            ctx.op(Op::Concat { axis: last }, &[&re, &im])
        }
    }
}

/// STFT: frames `[f * step, f * step + length)` gathered into `[batch, frames, length, c]`,
/// times the window, then the DFT of each frame (one-sided by default).
fn stft(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let x = n.input(0)?;
    let dt = ctx.dtype(x);
    let shape = ctx.shape(x);
    if shape.len() != 3 || !matches!(shape[2], 1 | 2) || !dt.is_float() {
        invalid!(
            "the signal must be float [batch, length, 1 or 2], not {}",
            ctx.ty(x)
        );
    }
    let step = ctx.number(n.input(1)?, "frame_step")?;
    if step.is_nan() || step < 1.0 {
        invalid!("frame_step must be positive, not {step}");
    }
    let step = step as usize;
    let window = n.opt(2).cloned();
    let length = match (n.opt(3), &window) {
        (Some(l), _) => ctx.number(l, "frame_length")? as i64,
        (None, Some(w)) => ctx.shape(w).first().copied().unwrap_or(0) as i64,
        (None, None) => shape[1] as i64,
    };
    let len = shape[1];
    if length < 1 || length as usize > len {
        invalid!("frame_length {length} does not fit the signal's {len}");
    }
    let length = length as usize;
    if let Some(w) = &window {
        if ctx.shape(w) != [length] {
            invalid!("the window is {}, not of frame_length {length}", ctx.ty(w));
        }
    }
    let frames = (len - length) / step + 1;
    if frames
        .checked_mul(length)
        .is_none_or(|n| n > MAX_DFT_MATRIX)
    {
        unsupported!("{frames} frames of {length} need a larger frame index than Ferrite builds");
    }
    let idx: Vec<i64> = (0..frames)
        .flat_map(|f| (0..length).map(move |t| (f * step + t) as i64))
        .collect();
    let ty = TensorType::new(DType::I64, vec![frames, length])?;
    let idx = Val::Const(Arc::new(Tensor::from_i64(&ty, &idx)));
    let mut fr = ctx.op(Op::IndexSelect { axis: 1 }, &[x, &idx])?;
    if let Some(w) = &window {
        let w = ctx.cast(w, dt)?;
        let w = ctx.reshape(&w, &[1, 1, length, 1])?;
        fr = ctx.mul(&fr, &w)?;
    }
    let onesided = n.int("onesided", 1)? != 0;
    transform(ctx, &fr, 2, length, false, onesided)
}
