//! The bitwise ops on the IR's own: BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot
//! (opset 18) on every integer type, and BitShift (opset 11) on the unsigned ones, as
//! `bitwise_left_shift` / `bitwise_right_shift`. Each maps exactly: ONNX's reference
//! computes them with numpy, whose shifts by the width or more give 0, as the IR's do.

use super::one;
use crate::error::{invalid, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, UnaryOp as U};

pub(crate) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    let b = match op {
        "BitwiseAnd" => B::BitwiseAnd,
        "BitwiseOr" => B::BitwiseOr,
        "BitwiseXor" => B::BitwiseXor,
        "BitwiseNot" => {
            let x = n.input(0)?;
            integer(op, ctx.dtype(x))?;
            return one(ctx.un(U::BitwiseNot, x)?);
        }
        "BitShift" => return one(shift(ctx, n)?),
        _ => return Ok(None),
    };
    let (x, y) = (n.input(0)?, n.input(1)?);
    let dt = integer(op, ctx.dtype(x))?;
    if ctx.dtype(y) != dt {
        invalid!(
            "{op} of {dt} and {}: ONNX needs operands of one type",
            ctx.dtype(y)
        );
    }
    one(ctx.bin(b, x, y)?)
}

/// `dt` if it is an integer type (ONNX's bitwise ops take no bool and no float).
fn integer(op: &str, dt: DType) -> OpResult<DType> {
    if !dt.is_int() {
        invalid!("{op} takes integer tensors, not {dt}");
    }
    Ok(dt)
}

fn shift(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (x, y) = (n.input(0)?, n.input(1)?);
    let dt = ctx.dtype(x);
    if !dt.is_unsigned() {
        invalid!("BitShift takes unsigned integers, not {dt}");
    }
    if ctx.dtype(y) != dt {
        invalid!("the shift is {}, x is {dt}", ctx.ty(y));
    }
    let b = match n.string("direction", "")?.as_str() {
        "LEFT" => B::LeftShift,
        "RIGHT" => B::RightShift,
        d => invalid!("direction=\"{d}\" is neither LEFT nor RIGHT"),
    };
    ctx.bin(b, x, y)
}
