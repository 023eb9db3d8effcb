//! BitShift on unsigned integers without bitwise IR ops: `x << y` is `x * 2^y` in x's
//! dtype (integer multiplication wraps, as the shifted-out bits vanish), `x >> y` is
//! `floor(x / 2^y)` in f64, exact for up to 32 bits. `2^y` is a gather from the table of
//! powers, so a shift of the dtype's width or more is a run-time error (C leaves it
//! undefined). A right shift of u64 needs an exact integer division and is refused.

use super::one;
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{DType, Op, Tensor, TensorType, UnaryOp as U};
use std::sync::Arc;

pub(crate) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "BitShift" => one(shift(ctx, n)?),
        _ => Ok(None),
    }
}

fn shift(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (x, y) = (n.input(0)?, n.input(1)?);
    let dt = ctx.dtype(x);
    let bits = match dt {
        DType::U8 => 8,
        DType::U16 => 16,
        DType::U32 => 32,
        DType::U64 => 64,
        d => invalid!("BitShift takes unsigned integers, not {d}"),
    };
    if ctx.dtype(y) != dt {
        invalid!("the shift is {}, x is {dt}", ctx.ty(y));
    }
    let left = match n.string("direction", "")?.as_str() {
        "LEFT" => true,
        "RIGHT" => false,
        d => invalid!("direction=\"{d}\" is neither LEFT nor RIGHT"),
    };
    if !left && bits == 64 {
        unsupported!("a right shift of u64 is not supported (no exact integer division in the IR)");
    }
    let table_dt = if left { dt } else { DType::F64 };
    let powers: Vec<i128> = (0..bits).map(|k| 1i128 << k).collect();
    let ty = TensorType::new(table_dt, vec![bits])?;
    let table = Val::Const(Arc::new(Tensor::from_i128(&ty, &powers)));
    let yi = ctx.cast(y, DType::I64)?;
    let p = ctx.op(Op::IndexSelect { axis: 0 }, &[&table, &yi])?;
    if left {
        return ctx.mul(x, &p);
    }
    let xf = ctx.cast(x, DType::F64)?;
    let q = ctx.div(&xf, &p)?;
    let q = ctx.un(U::Floor, &q)?;
    ctx.cast(&q, dt)
}
