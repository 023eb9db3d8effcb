//! Ops over the order of one axis, as comparisons over the pairs of its positions (the
//! work and the intermediate are quadratic in the axis's extent):
//!
//! - CumSum as a sum over a triangle: `y[i] = sum_j where(keep(i, j), x[j], 0)`, `keep`
//!   being `j <= i` (or `j < i` exclusive, `j >= i` / `j > i` in reverse). The same terms
//!   are added in the same order as a sequential scan, plus zeros, and the `where` and the
//!   `sum` fuse into one kernel. This is the composition the builder's `cumsum` makes.
//!   CumProd is the same triangle under a product, with ones for the terms left out.
//! - TopK by ranks: the rank of `x[i]` is the number of `j` that come before it (larger,
//!   or equal with `j < i`, NaN largest, as PyTorch orders), the index of the `p`-th
//!   result is the `i` of rank `p`, and the values are gathered at those indices.

use super::{axis, one};
use crate::error::unsupported;
use crate::error::{invalid, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, Op, ReduceOp as R};

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "CumSum" => one(cumulative(ctx, n, R::Sum)?),
        "CumProd" => one(cumulative(ctx, n, R::Prod)?),
        "TopK" => Ok(Some(top_k(ctx, n)?)),
        _ => Ok(None),
    }
}

fn flag(n: &NodeIn, name: &str) -> OpResult<bool> {
    match n.int(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        v => invalid!("attribute `{name}` must be 0 or 1, not {v}"),
    }
}

/// CumSum (`r` = sum) and CumProd (`r` = prod, the terms left out are ones).
fn cumulative(ctx: &mut Ctx, n: &NodeIn, r: R) -> OpResult<Val> {
    let x = n.input(0)?;
    let ax = ctx.ints(n.input(1)?, "axis")?;
    let [ax] = ax[..] else {
        invalid!("operand `axis` must hold one value, not {}", ax.len());
    };
    let exclusive = flag(n, "exclusive")?;
    let reverse = flag(n, "reverse")?;
    let dt = ctx.dtype(x);
    if dt == DType::Bool {
        invalid!("the input must be numeric, not {}", ctx.ty(x));
    }
    let shape = ctx.shape(x);
    let rank = shape.len();
    if rank == 0 {
        invalid!("the input must have rank >= 1");
    }
    let a = axis(ax, rank, "axis")?;
    let len = shape[a];
    // keep[i, j] over (j - i) against the diagonal: <= 0, <= -1, >= 0 or >= 1.
    let rows = ctx.arange(0, len as i64, 1)?;
    let rows = ctx.reshape(&rows, &[len, 1])?;
    let cols = ctx.arange(0, len as i64, 1)?;
    let offset = ctx.sub(&cols, &rows)?;
    let keep = match (exclusive, reverse) {
        (false, false) => ctx.bin_s(B::Le, &offset, 0.0)?,
        (true, false) => ctx.bin_s(B::Le, &offset, -1.0)?,
        (false, true) => ctx.bin_s(B::Ge, &offset, 0.0)?,
        (true, true) => ctx.bin_s(B::Ge, &offset, 1.0)?,
    };
    let keep = grid(ctx, &keep, len, rank, a)?;
    let xu = ctx.op(Op::Unsqueeze { axis: a as i64 }, &[x])?;
    let identity = ctx.scalar(if r == R::Prod { 1.0 } else { 0.0 }, dt);
    let terms = ctx.select(&keep, &xu, &identity)?;
    ctx.reduce(r, &terms, &[a + 1], false)
}

/// `[n, n, 1, ..]` with `1`s for the axes after `a`: the (i, j) grid of an axis at `a`
/// and `a + 1` of a tensor of rank `rank + 1`.
fn grid(ctx: &mut Ctx, v: &Val, len: usize, rank: usize, a: usize) -> OpResult<Val> {
    let mut shape = vec![len, len];
    shape.extend(std::iter::repeat_n(1, rank - a - 1));
    ctx.reshape(v, &shape)
}

fn top_k(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Vec<Option<Val>>> {
    let x = n.input(0)?;
    let shape = ctx.shape(x);
    let rank = shape.len();
    if rank == 0 {
        invalid!("the input must have rank >= 1");
    }
    let dt = ctx.dtype(x);
    if dt == DType::Bool {
        invalid!("the input must be numeric, not {}", ctx.ty(x));
    }
    let k = if n.opset < 10 {
        n.int("k", -1)?
    } else {
        let k = ctx.ints(n.input(1)?, "K")?;
        match k[..] {
            [k] => k,
            _ => invalid!("operand `K` must hold one value, not {}", k.len()),
        }
    };
    let a = axis(n.int("axis", -1)?, rank, "axis")?;
    let len = shape[a];
    if k < 0 || k as usize > len {
        invalid!("K = {k} is not in 0..={len}, the extent of axis {a}");
    }
    let k = k as usize;
    let largest = match n.int("largest", 1)? {
        0 => false,
        1 => true,
        v => invalid!("attribute `largest` must be 0 or 1, not {v}"),
    };
    if !matches!(n.int("sorted", 1)?, 0 | 1) {
        invalid!("attribute `sorted` must be 0 or 1");
    }
    if len
        .checked_mul(len)
        .is_none_or(|sq| sq > ferrite_ir::types::MAX_ELEMENTS)
    {
        unsupported!("TopK over an axis of {len} is too large for the quadratic decomposition");
    }
    // x_i at axis a, x_j at axis a + 1.
    let xi = ctx.op(Op::Unsqueeze { axis: a as i64 + 1 }, &[x])?;
    let xj = ctx.op(Op::Unsqueeze { axis: a as i64 }, &[x])?;
    let wins = if largest { B::Gt } else { B::Lt };
    let mut better = ctx.bin(wins, &xj, &xi)?;
    let mut same = ctx.bin(B::Eq, &xj, &xi)?;
    if dt.is_float() {
        // NaN is larger than every number and equal to NaN.
        let nan_i = ctx.bin(B::Ne, &xi, &xi)?;
        let nan_j = ctx.bin(B::Ne, &xj, &xj)?;
        let (first, second) = if largest {
            (&nan_j, &nan_i)
        } else {
            (&nan_i, &nan_j)
        };
        let not_second = ctx.un(ferrite_ir::UnaryOp::Not, second)?;
        let nan_wins = ctx.bin(B::And, first, &not_second)?;
        better = ctx.bin(B::Or, &better, &nan_wins)?;
        let both = ctx.bin(B::And, &nan_i, &nan_j)?;
        same = ctx.bin(B::Or, &same, &both)?;
    }
    let rows = ctx.arange(0, len as i64, 1)?;
    let rows = ctx.reshape(&rows, &[len, 1])?;
    let cols = ctx.arange(0, len as i64, 1)?;
    let earlier = ctx.bin(B::Lt, &cols, &rows)?;
    let earlier = grid(ctx, &earlier, len, rank, a)?;
    let tie = ctx.bin(B::And, &same, &earlier)?;
    let before = ctx.bin(B::Or, &better, &tie)?;
    let before = ctx.cast(&before, DType::I64)?;
    let ranks = ctx.reduce(R::Sum, &before, &[a + 1], false)?;
    // index[p] = the i whose rank is p: sum_i where(rank_i == p, i, 0).
    let ranks = ctx.op(Op::Unsqueeze { axis: a as i64 }, &[&ranks])?;
    let p = ctx.arange(0, k as i64, 1)?;
    let mut pshape = vec![k, 1];
    pshape.extend(std::iter::repeat_n(1, rank - a - 1));
    let p = ctx.reshape(&p, &pshape)?;
    let hit = ctx.bin(B::Eq, &ranks, &p)?;
    let i = ctx.arange(0, len as i64, 1)?;
    let mut ishape = vec![len];
    ishape.extend(std::iter::repeat_n(1, rank - a - 1));
    let i = ctx.reshape(&i, &ishape)?;
    let zero = ctx.scalar(0.0, DType::I64);
    let picked = ctx.select(&hit, &i, &zero)?;
    let indices = ctx.reduce(R::Sum, &picked, &[a + 1], false)?;
    let values = ctx.op(Op::Gather { axis: a as i64 }, &[x, &indices])?;
    Ok(vec![Some(values), Some(indices)])
}
