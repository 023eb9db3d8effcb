//! OneHot and GatherND as comparisons and `index_select`s over flattened axes.

use super::one;
use crate::error::{invalid, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, Op};

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "OneHot" => one(one_hot(ctx, n)?),
        "GatherND" => one(gather_nd(ctx, n)?),
        _ => Ok(None),
    }
}

/// `i < 0 ? i + extent : i`, in i64.
fn wrap(ctx: &mut Ctx, i: &Val, extent: &Val) -> OpResult<Val> {
    let zero = ctx.scalar(0.0, DType::I64);
    let neg = ctx.bin(B::Lt, i, &zero)?;
    let up = ctx.add(i, extent)?;
    ctx.select(&neg, &up, i)
}

/// `OneHot(indices, depth, values)`: `values[1]` where the index (negative ones
/// counted from `depth`) equals the position along the new axis, `values[0]` elsewhere.
fn one_hot(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (idx, depth, values) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let depth = ctx.number(depth, "depth")?;
    if depth < 1.0 || depth > i64::MAX as f64 {
        invalid!("depth must be at least 1, not {depth}");
    }
    let depth = depth as i64;
    if ctx.shape(values) != [2] {
        invalid!(
            "values must hold two values [off, on], not {}",
            ctx.ty(values)
        );
    }
    if ctx.dtype(idx) == DType::Bool {
        invalid!("indices must be numeric, not {}", ctx.ty(idx));
    }
    let rank = ctx.rank(idx);
    let a = n.int("axis", -1)?;
    let r = rank as i64 + 1;
    if a < -r || a >= r {
        invalid!("attribute `axis` {a} is out of range for the result's rank {r}");
    }
    let a = if a < 0 { a + r } else { a } as usize;
    // Float indices are truncated toward zero, as a cast does.
    let i = ctx.cast(idx, DType::I64)?;
    let d = ctx.scalar(depth as f64, DType::I64);
    let i = wrap(ctx, &i, &d)?;
    let i = ctx.op(Op::Unsqueeze { axis: a as i64 }, &[&i])?;
    let pos = ctx.arange(0, depth, 1)?;
    let mut shape = vec![1; rank + 1];
    shape[a] = depth as usize;
    let pos = ctx.reshape(&pos, &shape)?;
    let hit = ctx.bin(B::Eq, &i, &pos)?;
    let slice = |ctx: &mut Ctx, k: i64| {
        ctx.op(
            Op::Slice {
                axis: 0,
                start: k,
                end: k + 1,
                step: 1,
            },
            &[values],
        )
    };
    let off = slice(ctx, 0)?;
    let on = slice(ctx, 1)?;
    let off = ctx.reshape(&off, &[])?;
    let on = ctx.reshape(&on, &[])?;
    ctx.select(&hit, &on, &off)
}

/// `GatherND(data, indices, batch_dims)`: each index tuple (the last axis of
/// `indices`) becomes one offset into `data`'s gathered axes flattened (negative
/// entries wrapped), plus the batch's offset, and an `index_select` picks the slices.
fn gather_nd(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (data, idx) = (n.input(0)?, n.input(1)?);
    let ds = ctx.shape(data);
    let is = ctx.shape(idx);
    if ctx.dtype(idx) != DType::I64 {
        invalid!("indices must be int64, not {}", ctx.ty(idx));
    }
    let b = n.int("batch_dims", 0)?;
    if b < 0 || b as usize >= ds.len().min(is.len()) {
        invalid!(
            "attribute `batch_dims` {b} must be less than the ranks of data ({}) and indices ({})",
            ds.len(),
            is.len()
        );
    }
    let b = b as usize;
    if ds[..b] != is[..b] {
        invalid!("the batch axes of data {ds:?} and indices {is:?} differ");
    }
    let m = is[is.len() - 1];
    if m < 1 || b + m > ds.len() {
        invalid!(
            "index tuples of {m} entries do not fit data of rank {} with {b} batch axes",
            ds.len()
        );
    }
    let batch: usize = ds[..b].iter().product();
    let span: usize = ds[b..b + m].iter().product();
    let rest = &ds[b + m..];
    // The offset of each tuple within its batch: sum of entry k times its stride.
    let lead = &is[..is.len() - 1];
    let mut offset: Option<Val> = None;
    for k in 0..m {
        // Entry k's stride: the product of the extents after it (no division, so an
        // extent of 0 is no division by zero).
        let stride: usize = ds[b + k + 1..b + m].iter().product();
        let e = ctx.op(
            Op::Slice {
                axis: -1,
                start: k as i64,
                end: k as i64 + 1,
                step: 1,
            },
            &[idx],
        )?;
        let e = ctx.reshape(&e, lead)?;
        let extent = ctx.scalar(ds[b + k] as f64, DType::I64);
        let e = wrap(ctx, &e, &extent)?;
        // An entry out of its axis's range must stay an error even when the sum would
        // land in range: it contributes `batch * span`, past the end of every batch.
        let zero = ctx.scalar(0.0, DType::I64);
        let lo = ctx.bin(B::Ge, &e, &zero)?;
        let hi = ctx.bin(B::Lt, &e, &extent)?;
        let ok = ctx.bin(B::And, &lo, &hi)?;
        let scaled = ctx.bin_s(B::Mul, &e, stride as f64)?;
        let past = ctx.scalar((batch * span) as f64, DType::I64);
        let e = ctx.select(&ok, &scaled, &past)?;
        offset = Some(match offset {
            Some(o) => ctx.add(&o, &e)?,
            None => e,
        });
    }
    let mut offset = offset.expect("m >= 1");
    if b > 0 {
        let base = ctx.arange(0, (batch * span) as i64, span as i64)?;
        let mut shape = ds[..b].to_vec();
        shape.extend(std::iter::repeat_n(1, lead.len() - b));
        let base = ctx.reshape(&base, &shape)?;
        offset = ctx.add(&offset, &base)?;
    }
    let flat: Vec<usize> = [&[batch * span][..], rest].concat();
    let d = ctx.reshape(data, &flat)?;
    ctx.op(Op::IndexSelect { axis: 0 }, &[&d, &offset])
}
