//! Ops that pick positions along axes, as gathers of index tensors: Compress (a
//! condition known at import time), CenterCropPad (slices and zero pads), Upsample
//! (nearest, `floor(i / scale)`), and ReverseSequence (per-batch reversed time
//! indices, computed by the graph from the sequence lengths).

use super::{axes, axis, one};
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, Op, Tensor, TensorType};
use std::sync::Arc;

pub(crate) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "Compress" => one(compress(ctx, n)?),
        "CenterCropPad" => one(center_crop_pad(ctx, n)?),
        "Upsample" => one(upsample(ctx, n)?),
        "ReverseSequence" => one(reverse_sequence(ctx, n)?),
        _ => Ok(None),
    }
}

/// `x` at the constant positions `idx` along `a`.
fn pick(ctx: &mut Ctx, x: &Val, a: usize, idx: &[i64]) -> OpResult<Val> {
    let ty = TensorType::new(DType::I64, vec![idx.len()])?;
    let idx = Val::Const(Arc::new(Tensor::from_i64(&ty, idx)));
    ctx.op(Op::IndexSelect { axis: a as i64 }, &[x, &idx])
}

fn compress(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let x = n.input(0)?;
    let cond = ctx.constant(n.input(1)?, "condition")?;
    if cond.ty.rank() != 1 {
        invalid!("the condition must be 1-D, not {}", cond.ty);
    }
    let (x, a) = if n.has("axis") {
        let a = axis(n.int("axis", 0)?, ctx.rank(x), "axis")?;
        (x.clone(), a)
    } else {
        let numel = ctx.ty(x).numel();
        (ctx.reshape(x, &[numel])?, 0)
    };
    let len = ctx.dim(&x, a)?;
    let keep: Vec<i64> = cond
        .to_f64()
        .iter()
        .enumerate()
        .filter(|(_, &c)| c != 0.0)
        .map(|(i, _)| i as i64)
        .collect();
    if let Some(&last) = keep.last() {
        if last as usize >= len {
            invalid!("the condition selects position {last}, past the axis's {len}");
        }
    }
    pick(ctx, &x, a, &keep)
}

fn center_crop_pad(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let x = n.input(0)?;
    let target = ctx.ints(n.input(1)?, "shape")?;
    let rank = ctx.rank(x);
    let ax = match n.ints("axes")? {
        Some(l) => axes(&l, rank, "axis")?,
        None => (0..rank).collect(),
    };
    if target.len() != ax.len() {
        invalid!("shape has {} entries for {} axes", target.len(), ax.len());
    }
    let mut y = x.clone();
    for (&a, &t) in ax.iter().zip(&target) {
        if t < 0 {
            invalid!("shape entry {t} is negative");
        }
        let d = ctx.dim(&y, a)? as i64;
        if t < d {
            let start = (d - t) / 2;
            y = ctx.op(
                Op::Slice {
                    axis: a as i64,
                    start,
                    end: start + t,
                    step: 1,
                },
                &[&y],
            )?;
        } else if t > d {
            let before = (t - d) / 2;
            let mut pads = vec![0; 2 * rank];
            pads[2 * a] = before;
            pads[2 * a + 1] = t - d - before;
            y = ctx.op(Op::Pad { pads, value: 0.0 }, &[&y])?;
        }
    }
    Ok(y)
}

fn upsample(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let x = n.input(0)?;
    let mode = n.string("mode", "nearest")?;
    if mode != "nearest" {
        unsupported!("mode=\"{mode}\" is not supported (only nearest)");
    }
    let scales: Vec<f64> = if n.opset < 9 {
        match n.floats("scales")? {
            Some(s) => s.iter().map(|&v| v as f64).collect(),
            None => invalid!("attribute `scales` is required"),
        }
    } else {
        ctx.constant(n.input(1)?, "scales")?.to_f64()
    };
    let shape = ctx.shape(x);
    if scales.len() != shape.len() {
        invalid!(
            "scales has {} entries for rank {}",
            scales.len(),
            shape.len()
        );
    }
    let mut y = x.clone();
    for (a, (&s, &d)) in scales.iter().zip(&shape).enumerate() {
        if !(s >= 1.0 && s.is_finite()) {
            unsupported!("scale {s} on axis {a} is not supported (Upsample scales are >= 1)");
        }
        if s == 1.0 {
            continue;
        }
        let out = (d as f64 * s).floor() as usize;
        let idx: Vec<i64> = (0..out)
            .map(|i| ((i as f64 / s).floor() as i64).min(d as i64 - 1))
            .collect();
        y = pick(ctx, &y, a, &idx)?;
    }
    Ok(y)
}

fn reverse_sequence(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (x, lens) = (n.input(0)?, n.input(1)?);
    let shape = ctx.shape(x);
    let rank = shape.len();
    if rank < 2 {
        invalid!("the input must have rank >= 2, not {}", ctx.ty(x));
    }
    let ba = n.int("batch_axis", 1)?;
    let ta = n.int("time_axis", 0)?;
    if !matches!((ba, ta), (0, 1) | (1, 0)) {
        invalid!("batch_axis {ba} and time_axis {ta} must be 0 and 1 in some order");
    }
    let (ba, ta) = (ba as usize, ta as usize);
    let (b, t) = (shape[ba], shape[ta]);
    if ctx.shape(lens) != [b] || ctx.dtype(lens) != DType::I64 {
        invalid!("sequence_lens must be i64[{b}], not {}", ctx.ty(lens));
    }
    // idx[b, t] = len[b] - 1 - t inside the sequence, t beyond it.
    let mut lshape = vec![1; rank];
    lshape[ba] = b;
    let l = ctx.reshape(lens, &lshape)?;
    let mut tshape = vec![1; rank];
    tshape[ta] = t;
    let ts = ctx.arange(0, t as i64, 1)?;
    let ts = ctx.reshape(&ts, &tshape)?;
    let inside = ctx.bin(B::Lt, &ts, &l)?;
    let rev = ctx.sub(&l, &ts)?;
    let rev = ctx.bin_s(B::Sub, &rev, 1.0)?;
    let idx = ctx.select(&inside, &rev, &ts)?;
    // Lengths above the time extent leave an index out of range: a run-time error.
    let mut full: Vec<i64> = vec![1; rank];
    full[ba] = b as i64;
    full[ta] = t as i64;
    let idx = ctx.op(Op::Expand { shape: full }, &[&idx])?;
    ctx.op(Op::Gather { axis: ta as i64 }, &[x, &idx])
}
