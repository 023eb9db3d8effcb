//! Reductions (ReduceSum ... ReduceLogSumExp), ArgMax/ArgMin, Softmax, LogSoftmax, Hardmax.

use super::{axes, axis, one};
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{ArgReduceOp, BinaryOp as B, DType, Op, ReduceOp as R, UnaryOp as U};

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => {
            let x = n.input(0)?.clone();
            // Axes became an operand in opset 13 for ReduceSum and 18 for the others.
            let from_input = n.opset >= if op == "ReduceSum" { 13 } else { 18 };
            let listed = if from_input {
                match n.opt(1) {
                    Some(a) => Some(ctx.ints(a, "axes")?),
                    None => None,
                }
            } else {
                n.ints("axes")?
            };
            let keep = n.int("keepdims", 1)? != 0;
            let noop = n.int("noop_with_empty_axes", 0)? != 0;
            let rank = ctx.rank(&x);
            let list = match listed {
                Some(l) if !l.is_empty() => axes(&l, rank, "axis")?,
                _ if noop && from_input => return one(x),
                _ => (0..rank).collect(),
            };
            if rank == 0 {
                return one(reduce_family(ctx, op, &x, &[], keep)?);
            }
            let zero_size = list.iter().any(|&a| ctx.shape(&x)[a] == 0);
            if zero_size && matches!(op, "ReduceMax" | "ReduceMin" | "ReduceLogSumExp") {
                // Opset 18 defines the empty reduction as the identity: the lowest value
                // for max and log-sum-exp (log 0), the highest for min.
                if n.opset < 18 {
                    unsupported!("{op} over an empty axis is undefined before opset 18");
                }
                let dt = ctx.dtype(&x);
                let Some(value) = empty_identity(op, dt) else {
                    unsupported!("{op} over an empty axis of {dt}: its identity is not exact as a fill value");
                };
                let shape: Vec<usize> = ctx
                    .shape(&x)
                    .iter()
                    .enumerate()
                    .filter_map(|(a, &d)| match (list.contains(&a), keep) {
                        (false, _) => Some(d),
                        (true, true) => Some(1),
                        (true, false) => None,
                    })
                    .collect();
                let y = ctx.g.add(
                    Op::Full {
                        shape,
                        value,
                        dtype: dt,
                    },
                    &[],
                    None,
                )?;
                return one(Val::Ir(y));
            }
            one(reduce_family(ctx, op, &x, &list, keep)?)
        }
        "ArgMax" | "ArgMin" => {
            let x = n.input(0)?;
            let rank = ctx.rank(x);
            let a = axis(n.int("axis", 0)?, rank.max(1), "axis")?;
            let keep = n.int("keepdims", 1)? != 0;
            let last = n.int("select_last_index", 0)? != 0;
            let which = if op == "ArgMax" {
                ArgReduceOp::ArgMax
            } else {
                ArgReduceOp::ArgMin
            };
            let arg = |ctx: &mut Ctx, x: &Val| {
                ctx.op(
                    Op::ArgReduce {
                        op: which,
                        axis: Some(a as i64),
                        keepdim: keep,
                    },
                    &[x],
                )
            };
            // One element (a rank-0 operand): its first extremum is its last.
            if !last || rank == 0 {
                return one(arg(ctx, x)?);
            }
            // The last extremum is the first one of the reversed axis.
            let len = ctx.dim(x, a)? as i64;
            let rev = ctx.arange(len - 1, -1, -1)?;
            let xr = ctx.op(Op::IndexSelect { axis: a as i64 }, &[x, &rev])?;
            let i = arg(ctx, &xr)?;
            let top = ctx.scalar((len - 1) as f64, DType::I64);
            one(ctx.sub(&top, &i)?)
        }
        "Softmax" | "LogSoftmax" | "Hardmax" => {
            let x = n.input(0)?;
            let rank = ctx.rank(x);
            if n.opset < 13 {
                // Opsets before 13 flatten to 2-D at `axis` (default 1) and normalize the rows.
                let a = axis(n.int("axis", 1)?, rank, "axis")?;
                let shape = ctx.shape(x);
                let rows: usize = shape[..a].iter().product();
                let cols: usize = shape[a..].iter().product();
                let x2 = ctx.reshape(x, &[rows, cols])?;
                let y = normalize(ctx, op, &x2, 1)?;
                one(ctx.reshape(&y, &shape)?)
            } else {
                let a = axis(n.int("axis", -1)?, rank, "axis")?;
                one(normalize(ctx, op, x, a)?)
            }
        }
        _ => Ok(None),
    }
}

fn normalize(ctx: &mut Ctx, op: &str, x: &Val, a: usize) -> OpResult<Val> {
    let axis = a as i64;
    Ok(match op {
        "Softmax" => ctx.op(Op::Softmax { axis }, &[x])?,
        "LogSoftmax" => ctx.op(Op::LogSoftmax { axis }, &[x])?,
        _ => {
            // One-hot of the first maximum.
            let i = ctx.op(
                Op::ArgReduce {
                    op: ArgReduceOp::ArgMax,
                    axis: Some(axis),
                    keepdim: true,
                },
                &[x],
            )?;
            let len = ctx.dim(x, a)?;
            let r = ctx.arange(0, len as i64, 1)?;
            let mut shape = vec![1; ctx.rank(x)];
            shape[a] = len;
            let r = ctx.reshape(&r, &shape)?;
            let hot = ctx.bin(B::Eq, &r, &i)?;
            ctx.cast(&hot, ctx.dtype(x))?
        }
    })
}

fn reduce_family(ctx: &mut Ctx, op: &str, x: &Val, ax: &[usize], keep: bool) -> OpResult<Val> {
    let dt = ctx.dtype(x);
    let float_only = |dt: DType| -> OpResult<()> {
        if !dt.is_float() {
            unsupported!("{op} of {dt} is not supported");
        }
        Ok(())
    };
    Ok(match op {
        "ReduceSum" => ctx.reduce(R::Sum, x, ax, keep)?,
        "ReduceMean" => {
            float_only(dt)?;
            ctx.reduce(R::Mean, x, ax, keep)?
        }
        "ReduceMax" => ctx.reduce(R::Max, x, ax, keep)?,
        "ReduceMin" => ctx.reduce(R::Min, x, ax, keep)?,
        "ReduceProd" => ctx.reduce(R::Prod, x, ax, keep)?,
        "ReduceL1" => {
            let a = ctx.un(U::Abs, x)?;
            ctx.reduce(R::Sum, &a, ax, keep)?
        }
        "ReduceSumSquare" => {
            let s = ctx.mul(x, x)?;
            ctx.reduce(R::Sum, &s, ax, keep)?
        }
        "ReduceL2" => {
            float_only(dt)?;
            let s = ctx.mul(x, x)?;
            let s = ctx.reduce(R::Sum, &s, ax, keep)?;
            ctx.un(U::Sqrt, &s)?
        }
        "ReduceLogSum" => {
            float_only(dt)?;
            let s = ctx.reduce(R::Sum, x, ax, keep)?;
            ctx.un(U::Log, &s)?
        }
        "ReduceLogSumExp" => {
            float_only(dt)?;
            // m + log(sum(exp(x - m))), with m the maximum (0 where it is infinite).
            let m = ctx.reduce(R::Max, x, ax, true)?;
            let fin = ctx.sub(&m, &m)?;
            let fin = ctx.bin(B::Eq, &fin, &fin)?;
            let zero = ctx.scalar(0.0, dt);
            let m = ctx.select(&fin, &m, &zero)?;
            let d = ctx.sub(x, &m)?;
            let e = ctx.un(U::Exp, &d)?;
            let s = ctx.reduce(R::Sum, &e, ax, keep)?;
            let l = ctx.un(U::Log, &s)?;
            let m = if keep {
                m
            } else {
                let shape = ctx.shape(&l);
                ctx.reshape(&m, &shape)?
            };
            ctx.add(&l, &m)?
        }
        _ => invalid!("{op} is not a reduction"),
    })
}

/// ReduceMax and ReduceLogSumExp of nothing: the lowest value of `dt`; ReduceMin: the highest.
/// `None` where that value has no exact f64 (the fill value of `full`).
fn empty_identity(op: &str, dt: DType) -> Option<f64> {
    let (lo, hi) = match dt {
        DType::I8 => (i8::MIN as f64, i8::MAX as f64),
        DType::U8 => (0.0, u8::MAX as f64),
        DType::I16 => (i16::MIN as f64, i16::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::U32 => (0.0, u32::MAX as f64),
        DType::I64 | DType::U64 if op == "ReduceMin" => return None,
        DType::I64 => (i64::MIN as f64, 0.0),
        DType::U64 => (0.0, 0.0),
        DType::Bool => (0.0, 1.0),
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    };
    Some(if op == "ReduceMin" { hi } else { lo })
}
