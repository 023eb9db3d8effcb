//! Ops whose result shapes depend on their operands' values (Unique, NonZero): their
//! operand is needed at import time, so they fold once it is known (given as a value,
//! or computed from constants), and are a `NeedsValue` error otherwise.

use crate::error::OpResult;
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{DType, Op, Tensor, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "Unique" => Ok(Some(unique(ctx, n)?)),
        "NonZero" => Ok(Some(vec![Some(nonzero(ctx, n)?)])),
        _ => Ok(None),
    }
}

fn i64s(values: &[i64]) -> OpResult<Val> {
    let ty = TensorType::new(DType::I64, vec![values.len()])?;
    Ok(Val::Const(Arc::new(Tensor::from_i64(&ty, values))))
}

/// Each element as a key whose order is numeric order (-0 equals 0; NaNs last).
fn keys(t: &Tensor) -> Vec<i128> {
    if t.ty.dtype.is_float() {
        t.to_f64()
            .iter()
            .map(|&v| {
                let b = (v + 0.0).to_bits() as i64;
                (b ^ ((((b >> 63) as u64) >> 1) as i64)) as i128
            })
            .collect()
    } else {
        t.to_i128()
    }
}

fn unique(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Vec<Option<Val>>> {
    let x = n.input(0)?;
    let t = ctx.constant(x, "X")?;
    let sorted = n.int("sorted", 1)? != 0;
    let shape = t.ty.shape.clone();
    // Slices along the axis (elements of the flattened input without one).
    let (xs, a) = match n.has("axis") {
        true => (
            x.clone(),
            super::axis(n.int("axis", 0)?, shape.len(), "axis")?,
        ),
        false => (ctx.reshape(x, &[t.len()])?, 0),
    };
    let xs_t = ctx.constant(&xs, "X")?;
    let s = xs_t.ty.shape.clone();
    let (outer, len): (usize, usize) = (s[..a].iter().product(), s[a]);
    let inner: usize = s[a + 1..].iter().product();
    let k = keys(&xs_t);
    let slice = |i: usize| -> Vec<i128> {
        let mut v = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            let base = (o * len + i) * inner;
            v.extend_from_slice(&k[base..base + inner]);
        }
        v
    };
    let mut first: Vec<usize> = Vec::new();
    let mut group: HashMap<Vec<i128>, usize> = HashMap::new();
    let mut which = Vec::with_capacity(len);
    let mut counts: Vec<i64> = Vec::new();
    for i in 0..len {
        let key = slice(i);
        let g = *group.entry(key).or_insert_with(|| {
            first.push(i);
            counts.push(0);
            first.len() - 1
        });
        counts[g] += 1;
        which.push(g);
    }
    // The output order: by first occurrence, or by the slices' values.
    let mut order: Vec<usize> = (0..first.len()).collect();
    if sorted {
        order.sort_by_key(|&g| slice(first[g]));
    }
    let mut rank = vec![0; order.len()];
    for (p, &g) in order.iter().enumerate() {
        rank[g] = p as i64;
    }
    let indices: Vec<i64> = order.iter().map(|&g| first[g] as i64).collect();
    let inverse: Vec<i64> = which.iter().map(|&g| rank[g]).collect();
    let counts: Vec<i64> = order.iter().map(|&g| counts[g]).collect();
    let idx = i64s(&indices)?;
    let y = ctx.op(Op::IndexSelect { axis: a as i64 }, &[&xs, &idx])?;
    Ok(vec![
        Some(y),
        Some(idx),
        Some(i64s(&inverse)?),
        Some(i64s(&counts)?),
    ])
}

fn nonzero(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let t = ctx.constant(n.input(0)?, "X")?;
    let shape = t.ty.shape.clone();
    let nz: Vec<usize> = t
        .to_f64()
        .iter()
        .enumerate()
        .filter(|(_, &v)| v != 0.0)
        .map(|(i, _)| i)
        .collect();
    // [rank, count]: the coordinates of each nonzero, in row-major order.
    let r = shape.len().max(1);
    let mut out = vec![0i64; r * nz.len()];
    for (j, &flat) in nz.iter().enumerate() {
        let mut rem = flat;
        for d in (0..shape.len()).rev() {
            out[d * nz.len() + j] = (rem % shape[d]) as i64;
            rem /= shape[d];
        }
    }
    let ty = TensorType::new(DType::I64, vec![r, nz.len()])?;
    Ok(Val::Const(Arc::new(Tensor::from_i64(&ty, &out))))
}
