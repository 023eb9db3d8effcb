//! Tensors made from a size: the window functions (HannWindow, HammingWindow,
//! BlackmanWindow), built from an `arange` and cosines, which fold to constants at
//! import (the size must be known then).

use super::{dtype_attr, one};
use crate::error::{invalid, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, Op, UnaryOp as U};

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => one(window(ctx, n, op)?),
        _ => Ok(None),
    }
}

/// `w[n]` for `n` in `0..size`, over a period of `size` (`periodic=1`) or `size - 1`,
/// computed in f32 as the ONNX reference does and cast to `output_datatype`.
fn window(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Val> {
    let size = ctx.number(n.input(0)?, "size")?;
    if size < 0.0 || size.fract() != 0.0 || size > i64::MAX as f64 {
        invalid!("size must be a non-negative integer, not {size}");
    }
    let to = dtype_attr(n, "output_datatype", Some(DType::F32))?;
    if to == DType::Bool {
        invalid!("output_datatype must be numeric, not bool");
    }
    let period = match n.int("periodic", 1)? {
        1 => size,
        0 => size - 1.0,
        p => invalid!("attribute `periodic` must be 0 or 1, not {p}"),
    };
    let i = ctx.op(
        Op::Arange {
            start: 0.0,
            end: size,
            step: 1.0,
            dtype: DType::F32,
        },
        &[],
    )?;
    // cos(2 pi k n / period), in the reference's order: (n * (2 pi k)) / period.
    let cosine = |ctx: &mut Ctx, k: f64| -> OpResult<Val> {
        let a = ctx.bin_s(B::Mul, &i, 2.0 * std::f64::consts::PI * k)?;
        let a = ctx.bin_s(B::Div, &a, period)?;
        ctx.un(U::Cos, &a)
    };
    let w = match op {
        "HannWindow" => {
            // sin(pi n / period)^2.
            let a = ctx.bin_s(B::Mul, &i, std::f64::consts::PI)?;
            let a = ctx.bin_s(B::Div, &a, period)?;
            let s = ctx.un(U::Sin, &a)?;
            ctx.mul(&s, &s)?
        }
        "HammingWindow" => {
            let alpha = 25.0 / 46.0;
            let c = cosine(ctx, 1.0)?;
            let c = ctx.bin_s(B::Mul, &c, 1.0 - alpha)?;
            let a = ctx.scalar(alpha, DType::F32);
            ctx.sub(&a, &c)?
        }
        _ => {
            let c1 = cosine(ctx, 1.0)?;
            let c1 = ctx.bin_s(B::Mul, &c1, -0.5)?;
            let c2 = cosine(ctx, 2.0)?;
            let c2 = ctx.bin_s(B::Mul, &c2, 0.08)?;
            let y = ctx.add(&c1, &c2)?;
            ctx.bin_s(B::Add, &y, 0.42)?
        }
    };
    ctx.cast(&w, to)
}
