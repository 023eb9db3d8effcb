//! Losses that decompose exactly: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

use super::movement::gather;
use crate::error::{invalid, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, Op, ReduceOp as R, UnaryOp as U};

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "NegativeLogLikelihoodLoss" => {
            let loss = nll(ctx, n, n.input(0)?)?;
            Ok(Some(vec![Some(loss)]))
        }
        "SoftmaxCrossEntropyLoss" => {
            let x = n.input(0)?;
            if ctx.rank(x) < 2 {
                invalid!("scores must have rank >= 2");
            }
            let lp = ctx.op(Op::LogSoftmax { axis: 1 }, &[x])?;
            let loss = nll(ctx, n, &lp)?;
            Ok(Some(vec![Some(loss), Some(lp)]))
        }
        _ => Ok(None),
    }
}

/// `-input[n, target[n, ...], ...] * weight[target]`, reduced as `reduction` says,
/// with `ignore_index` targets contributing nothing.
fn nll(ctx: &mut Ctx, n: &NodeIn, x: &Val) -> OpResult<Val> {
    let t = n.input(1)?;
    let xs = ctx.shape(x);
    let ts = ctx.shape(t);
    if xs.len() < 2 || ts.len() + 1 != xs.len() {
        invalid!(
            "input {:?} and target {:?} do not fit ([N, C, ...] and [N, ...])",
            xs,
            ts
        );
    }
    let dt = ctx.dtype(x);
    let reduction = n.string("reduction", "mean")?;
    let ignore = if n.has("ignore_index") {
        Some(n.int("ignore_index", 0)?)
    } else {
        None
    };
    let valid = match ignore {
        Some(i) => Some(ctx.bin_s(B::Ne, t, i as f64)?),
        None => None,
    };
    let t0 = match &valid {
        Some(v) => {
            let zero = ctx.scalar(0.0, ctx.dtype(t));
            ctx.select(v, t, &zero)?
        }
        None => t.clone(),
    };
    let mut with_c = ts.clone();
    with_c.insert(1, 1);
    let idx = ctx.reshape(&t0, &with_c)?;
    let picked = ctx.op(Op::Gather { axis: 1 }, &[x, &idx])?;
    let picked = ctx.reshape(&picked, &ts)?;
    let mut loss = ctx.un(U::Neg, &picked)?;
    let mut w = match n.opt(2) {
        Some(weight) => {
            let w = gather(ctx, weight, &t0, 0)?;
            loss = ctx.mul(&loss, &w)?;
            Some(w)
        }
        None => None,
    };
    if let Some(v) = &valid {
        let zero = ctx.scalar(0.0, dt);
        loss = ctx.select(v, &loss, &zero)?;
        let vw = ctx.cast(v, dt)?;
        w = Some(match w {
            Some(w) => ctx.mul(&w, &vw)?,
            None => vw,
        });
    }
    Ok(match reduction.as_str() {
        "none" => loss,
        "sum" => ctx.reduce(R::Sum, &loss, &[], false)?,
        "mean" => match w {
            Some(w) => {
                let s = ctx.reduce(R::Sum, &loss, &[], false)?;
                let ws = ctx.reduce(R::Sum, &w, &[], false)?;
                ctx.div(&s, &ws)?
            }
            None => {
                if !dt.is_float() || dt == DType::Bool {
                    invalid!("the mean of a non-float loss");
                }
                ctx.reduce(R::Mean, &loss, &[], false)?
            }
        },
        r => invalid!("reduction=\"{r}\" is not none, sum or mean"),
    })
}
