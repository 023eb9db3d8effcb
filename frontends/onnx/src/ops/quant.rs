//! Quantization as float and integer arithmetic, as onnx's reference computes it:
//! QuantizeLinear (`clip(rint(x / scale) + zero_point)`, round half to even, saturating
//! to the 8- and 16-bit integer types), DequantizeLinear (`(x - zero_point) * scale`
//! in f32), per tensor, per axis or blocked; DynamicQuantizeLinear; MatMulInteger and
//! QLinearMatMul as an i32 matmul of the zero-point-shifted operands (exact: the
//! products of 8-bit values sum far below 2^31 for any static size Ferrite takes).
//! Float 8/4 and 2/4-bit integer types have no Ferrite dtype and stay refused.

use super::{axis, dtype_attr, elementwise::round_half_even, one};
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, Op, ReduceOp as R, Tensor, TensorType};
use std::sync::Arc;

pub(crate) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "QuantizeLinear" => one(quantize(ctx, n)?),
        "DequantizeLinear" => one(dequantize(ctx, n)?),
        "DynamicQuantizeLinear" => Ok(Some(dynamic(ctx, n)?)),
        "MatMulInteger" => one(matmul_integer(ctx, n)?),
        "QLinearMatMul" => one(qlinear_matmul(ctx, n)?),
        _ => Ok(None),
    }
}

/// The saturation range of a quantized type.
pub(super) fn range(dt: DType) -> OpResult<(f64, f64)> {
    Ok(match dt {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65535.0),
        DType::I16 => (-32768.0, 32767.0),
        d => unsupported!("quantization to {d} is not supported (only u8, i8, u16, i16)"),
    })
}

/// A scale or zero point shaped to broadcast against `x`: a scalar (or one value), a
/// vector along `axis`, or (blocked) `x`'s shape with `axis` in blocks of `block`.
fn param(ctx: &mut Ctx, v: &Val, x: &[usize], ax: i64, block: i64) -> OpResult<Val> {
    let s = ctx.shape(v);
    let numel: usize = s.iter().product();
    if s.is_empty() || numel == 1 {
        return ctx.reshape(v, &[]);
    }
    let ax = axis(ax, x.len(), "axis")?;
    if block == 0 {
        if s.len() != 1 || s[0] != x[ax] {
            invalid!(
                "a per-axis scale or zero point must be a vector of {} (axis {ax}), not {}",
                x[ax],
                ctx.ty(v)
            );
        }
        let mut dims = vec![1; x.len()];
        dims[ax] = x[ax];
        return ctx.reshape(v, &dims);
    }
    if block < 0 {
        invalid!("block_size must be positive, not {block}");
    }
    let block = block as usize;
    let blocks = x[ax].div_ceil(block);
    let mut want = x.to_vec();
    want[ax] = blocks;
    if s != want {
        invalid!(
            "a blocked scale or zero point must have shape {want:?} (block_size {block}), not {}",
            ctx.ty(v)
        );
    }
    let idx: Vec<i64> = (0..x[ax]).map(|j| (j / block) as i64).collect();
    let ty = TensorType::new(DType::I64, vec![idx.len()])?;
    let idx = Val::Const(Arc::new(Tensor::from_i64(&ty, &idx)));
    ctx.op(Op::IndexSelect { axis: ax as i64 }, &[v, &idx])
}

/// The quantization axis (as written: a per-tensor scale never reads it) and block size.
fn axis_block(n: &NodeIn) -> OpResult<(i64, i64)> {
    let block = if n.opset >= 21 {
        n.int("block_size", 0)?
    } else {
        0
    };
    Ok((n.int("axis", 1)?, block))
}

/// `clip(rint(q) + zp, lo, hi)` computed in `wide` (exact for 16-bit integers), cast to `out`.
pub(super) fn saturate(
    ctx: &mut Ctx,
    q: &Val,
    zp: Option<&Val>,
    out: DType,
    wide: DType,
) -> OpResult<Val> {
    let (lo, hi) = range(out)?;
    let r = round_half_even(ctx, q)?;
    let r = ctx.cast(&r, wide)?;
    let r = match zp {
        Some(z) => {
            let z = ctx.cast(z, wide)?;
            ctx.add(&r, &z)?
        }
        None => r,
    };
    let r = ctx.bin_s(B::Maximum, &r, lo)?;
    let r = ctx.bin_s(B::Minimum, &r, hi)?;
    ctx.cast(&r, out)
}

fn quantize(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (x, scale) = (n.input(0)?, n.input(1)?);
    if n.int("precision", 0)? != 0 {
        unsupported!("attribute `precision` is not supported");
    }
    let zp = n.opt(2);
    let out = match zp {
        Some(z) => {
            let d = ctx.dtype(z);
            if n.has("output_dtype") && dtype_attr(n, "output_dtype", None)? != d {
                invalid!("output_dtype differs from the zero point's {d}");
            }
            d
        }
        None if n.opset >= 21 => dtype_attr(n, "output_dtype", Some(DType::U8))?,
        None => DType::U8,
    };
    range(out)?;
    let sdt = ctx.dtype(scale);
    if !sdt.is_float() {
        invalid!("the scale must be float, not {}", ctx.ty(scale));
    }
    let shape = ctx.shape(x);
    let (a, block) = axis_block(n)?;
    let s = param(ctx, scale, &shape, a, block)?;
    let zp = match zp {
        Some(z) => Some(param(ctx, z, &shape, a, block)?),
        None => None,
    };
    // x / scale in x's float type (an int32 x divides in the scale's).
    let xdt = ctx.dtype(x);
    let fdt = if xdt.is_float() { xdt } else { sdt };
    let xf = ctx.cast(x, fdt)?;
    let s = ctx.cast(&s, fdt)?;
    let q = ctx.div(&xf, &s)?;
    let wide = if fdt == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    saturate(ctx, &q, zp.as_ref(), out, wide)
}

fn dequantize(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (x, scale) = (n.input(0)?, n.input(1)?);
    let xdt = ctx.dtype(x);
    if !matches!(
        xdt,
        DType::U8 | DType::I8 | DType::U16 | DType::I16 | DType::I32
    ) {
        unsupported!("DequantizeLinear of {xdt} is not supported");
    }
    let sdt = ctx.dtype(scale);
    if !sdt.is_float() {
        invalid!("the scale must be float, not {}", ctx.ty(scale));
    }
    let out = if n.opset >= 23 {
        dtype_attr(n, "output_dtype", Some(sdt))?
    } else {
        sdt
    };
    let shape = ctx.shape(x);
    let (a, block) = axis_block(n)?;
    let s = param(ctx, scale, &shape, a, block)?;
    let xf = ctx.cast(x, DType::F32)?;
    let dx = match n.opt(2) {
        Some(z) => {
            if ctx.dtype(z) != xdt {
                invalid!("the zero point is {}, x is {xdt}", ctx.ty(z));
            }
            let z = param(ctx, z, &shape, a, block)?;
            let z = ctx.cast(&z, DType::F32)?;
            ctx.sub(&xf, &z)?
        }
        None => xf,
    };
    let s = ctx.cast(&s, DType::F32)?;
    let y = ctx.mul(&dx, &s)?;
    ctx.cast(&y, out)
}

fn dynamic(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Vec<Option<Val>>> {
    let x = n.input(0)?;
    if ctx.dtype(x) != DType::F32 {
        invalid!("the input must be f32, not {}", ctx.ty(x));
    }
    if ctx.ty(x).numel() == 0 {
        invalid!("the input is empty");
    }
    let mx = ctx.reduce(R::Max, x, &[], false)?;
    let mn = ctx.reduce(R::Min, x, &[], false)?;
    let mx = ctx.bin_s(B::Maximum, &mx, 0.0)?;
    let mn = ctx.bin_s(B::Minimum, &mn, 0.0)?;
    // (max - min) / 255, with a span of 1 when max == min.
    let span = ctx.sub(&mx, &mn)?;
    let same = ctx.bin(B::Eq, &mx, &mn)?;
    let one_ = ctx.scalar(1.0, DType::F32);
    let span = ctx.select(&same, &one_, &span)?;
    let scale = ctx.bin_s(B::Div, &span, 255.0)?;
    let zp = ctx.div(&mn, &scale)?;
    let zero = ctx.scalar(0.0, DType::F32);
    let zp = ctx.sub(&zero, &zp)?;
    let zp = ctx.bin_s(B::Maximum, &zp, 0.0)?;
    let zp = ctx.bin_s(B::Minimum, &zp, 255.0)?;
    let zpi = round_half_even(ctx, &zp)?;
    let q = ctx.div(x, &scale)?;
    let y = saturate(ctx, &q, Some(&zpi), DType::U8, DType::F32)?;
    let zpu = ctx.cast(&zpi, DType::U8)?;
    Ok(vec![Some(y), Some(scale), Some(zpu)])
}

/// `x - zp` in i32; a vector zero point applies along `axis` (rows of A, columns of B).
pub(super) fn shifted(ctx: &mut Ctx, x: &Val, zp: Option<&Val>, ax: usize) -> OpResult<Val> {
    let xdt = ctx.dtype(x);
    if !matches!(xdt, DType::U8 | DType::I8) {
        unsupported!("integer matmul of {xdt} is not supported (only u8, i8)");
    }
    let xi = ctx.cast(x, DType::I32)?;
    let Some(z) = zp else {
        return Ok(xi);
    };
    if ctx.dtype(z) != xdt {
        invalid!("the zero point is {}, its operand {xdt}", ctx.ty(z));
    }
    let shape = ctx.shape(x);
    let zs = ctx.shape(z);
    let numel: usize = zs.iter().product();
    let z = if zs.is_empty() || numel == 1 {
        ctx.reshape(z, &[])?
    } else if shape.len() >= 2 && zs.len() == 1 && zs[0] == shape[ax] {
        let mut dims = vec![1; shape.len()];
        dims[ax] = shape[ax];
        ctx.reshape(z, &dims)?
    } else {
        unsupported!(
            "a zero point of {} for an operand of {} is not supported",
            ctx.ty(z),
            ctx.ty(x)
        );
    };
    let z = ctx.cast(&z, DType::I32)?;
    ctx.sub(&xi, &z)
}

fn matmul_integer(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    let (ra, rb) = (ctx.rank(a), ctx.rank(b));
    let ai = shifted(ctx, a, n.opt(2), ra.saturating_sub(2))?;
    let bi = shifted(ctx, b, n.opt(3), rb.saturating_sub(1))?;
    ctx.op(Op::MatMul, &[&ai, &bi])
}

fn qlinear_matmul(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (a, a_s, a_z) = (n.input(0)?, n.input(1)?, n.opt(2));
    let (b, b_s, b_z) = (n.input(3)?, n.input(4)?, n.opt(5));
    let (y_s, y_z) = (n.input(6)?, n.opt(7));
    for s in [a_s, b_s, y_s] {
        if ctx.ty(s).numel() != 1 {
            unsupported!(
                "QLinearMatMul with a scale of {} (not per tensor) is not supported",
                ctx.ty(s)
            );
        }
        if !ctx.dtype(s).is_float() {
            invalid!("scales must be float, not {}", ctx.ty(s));
        }
    }
    for z in [a_z, b_z, y_z].into_iter().flatten() {
        if ctx.ty(z).numel() != 1 {
            unsupported!(
                "QLinearMatMul with a zero point of {} (not per tensor) is not supported",
                ctx.ty(z)
            );
        }
    }
    let out = match y_z {
        Some(z) => ctx.dtype(z),
        None => ctx.dtype(a),
    };
    let (ra, rb) = (ctx.rank(a), ctx.rank(b));
    let ai = shifted(ctx, a, a_z, ra.saturating_sub(2))?;
    let bi = shifted(ctx, b, b_z, rb.saturating_sub(1))?;
    let c = ctx.op(Op::MatMul, &[&ai, &bi])?;
    // a_scale * b_scale / y_scale in the scales' type; the rest in f64, as numpy promotes.
    let sdt = ctx.dtype(a_s);
    let (a_s, b_s, y_s) = (
        ctx.reshape(a_s, &[])?,
        ctx.reshape(b_s, &[])?,
        ctx.reshape(y_s, &[])?,
    );
    let b_s = ctx.cast(&b_s, sdt)?;
    let y_s = ctx.cast(&y_s, sdt)?;
    let m = ctx.mul(&a_s, &b_s)?;
    let m = ctx.div(&m, &y_s)?;
    let m = ctx.cast(&m, DType::F64)?;
    let cf = ctx.cast(&c, DType::F64)?;
    let d = ctx.mul(&cf, &m)?;
    let y_z = match y_z {
        Some(z) => Some(ctx.reshape(z, &[])?),
        None => None,
    };
    // rint(d + zp): zp is an integer, so rounding after adding it is the same.
    let d = match &y_z {
        Some(z) => {
            let z = ctx.cast(z, DType::F64)?;
            ctx.add(&d, &z)?
        }
        None => d,
    };
    saturate(ctx, &d, None, out, DType::F64)
}
