//! Scatters as compositions: `ScatterElements` (and the old `Scatter`) and
//! `ScatterND`, with reductions none/add/mul/max/min, and TensorScatter.
//!
//! Every output position `p` along the scatter axis compares itself with every index
//! (a `[.., D[axis], I[axis], ..]` tensor of hits): `add`/`mul`/`max`/`min` reduce
//! the updates that hit `p` and combine them with `data[p]`; `none` takes the update
//! of the last index that hits `p` (onnx's reference writes them in order, so the last
//! duplicate wins). Positions no index hits keep `data`. Indices are wrapped when
//! negative and checked through an `index_select`, so an out-of-range index is a
//! run-time error as in ONNX, never a silently dropped update.

use super::{axis, one};
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, Op, ReduceOp};

/// At most this many elements in the hit tensor of one scatter.
pub const MAX_SCATTER_HITS: usize = 1 << 26;

#[derive(Clone, Copy, PartialEq)]
enum Red {
    None,
    Add,
    Mul,
    Max,
    Min,
}

pub(crate) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "ScatterElements" | "Scatter" => {
            let (data, idx, upd) = (n.input(0)?, n.input(1)?, n.input(2)?);
            let red = reduction(n)?;
            let a = axis(n.int("axis", 0)?, ctx.rank(data), "axis")?;
            one(scatter_elements(ctx, data, idx, upd, a, red)?)
        }
        "ScatterND" => {
            let (data, idx, upd) = (n.input(0)?, n.input(1)?, n.input(2)?);
            let red = reduction(n)?;
            one(scatter_nd(ctx, data, idx, upd, red)?)
        }
        "TensorScatter" => one(tensor_scatter(ctx, n)?),
        _ => Ok(None),
    }
}

/// TensorScatter (a KV-cache write): position `p` of the cache along `axis` takes
/// `update[p - w[b]]` where that is inside the update (modulo the cache length in
/// circular mode), else keeps the cache. The write offsets go through an `index_select`,
/// so a linear write past the cache's end (an error in onnx's reference) is a run-time
/// error here too.
fn tensor_scatter(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (cache, upd) = (n.input(0)?, n.input(1)?);
    let cs = ctx.shape(cache);
    let us = ctx.shape(upd);
    let r = cs.len();
    if r < 2 || us.len() != r || ctx.dtype(cache) != ctx.dtype(upd) {
        invalid!(
            "cache {} and update {} do not fit",
            ctx.ty(cache),
            ctx.ty(upd)
        );
    }
    let a = axis(n.int("axis", -2)?, r, "axis")?;
    if a == 0 {
        invalid!("axis 0 is the batch axis");
    }
    for d in 0..r {
        if (d != a && cs[d] != us[d]) || (d == a && us[d] > cs[d]) {
            invalid!(
                "update {} does not fit cache {} on axis {d}",
                ctx.ty(upd),
                ctx.ty(cache)
            );
        }
    }
    let circular = match n.string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        m => invalid!("mode=\"{m}\" is neither linear nor circular"),
    };
    let (b, m, len) = (cs[0], cs[a], us[a]);
    if len == 0 {
        return Ok(cache.clone());
    }
    let w = match n.opt(2) {
        Some(w) => {
            if ctx.shape(w) != [b] || !matches!(ctx.dtype(w), DType::I32 | DType::I64) {
                invalid!("write_indices must be an integer [{b}], not {}", ctx.ty(w));
            }
            let w = ctx.cast(w, DType::I64)?;
            // Offsets a write can start at: [0, m - len] linear, [0, m) circular.
            let room = if circular { m } else { m - len + 1 };
            let ok = ctx.arange(0, room as i64, 1)?;
            ctx.op(Op::IndexSelect { axis: 0 }, &[&ok, &w])?
        }
        None => ctx.scalar(0.0, DType::I64),
    };
    let mut wshape = vec![1; r];
    wshape[0] = if n.opt(2).is_some() { b } else { 1 };
    let w = ctx.reshape(&w, &wshape)?;
    let mut pshape = vec![1; r];
    pshape[a] = m;
    let p = ctx.arange(0, m as i64, 1)?;
    let p = ctx.reshape(&p, &pshape)?;
    let mut j = ctx.sub(&p, &w)?;
    if circular {
        let neg = ctx.bin_s(B::Lt, &j, 0.0)?;
        let up = ctx.bin_s(B::Add, &j, m as f64)?;
        j = ctx.select(&neg, &up, &j)?;
    }
    let lo = ctx.bin_s(B::Ge, &j, 0.0)?;
    let hi = ctx.bin_s(B::Lt, &j, len as f64)?;
    let inside = ctx.bin(B::And, &lo, &hi)?;
    let zero = ctx.scalar(0.0, DType::I64);
    let jc = ctx.select(&inside, &j, &zero)?;
    let mut full = vec![1i64; r];
    full[0] = b as i64;
    full[a] = m as i64;
    let jc = ctx.op(Op::Expand { shape: full }, &[&jc])?;
    let g = ctx.op(Op::Gather { axis: a as i64 }, &[upd, &jc])?;
    ctx.select(&inside, &g, cache)
}

fn reduction(n: &NodeIn) -> OpResult<Red> {
    Ok(match n.string("reduction", "none")?.as_str() {
        "none" => Red::None,
        "add" => Red::Add,
        "mul" => Red::Mul,
        "max" => Red::Max,
        "min" => Red::Min,
        r => invalid!("reduction=\"{r}\" is not one of none, add, mul, max, min"),
    })
}

/// Wrapped (negative counts from `extent`) and checked indices, as i64.
fn checked_index(ctx: &mut Ctx, idx: &Val, extent: usize) -> OpResult<Val> {
    if !matches!(ctx.dtype(idx), DType::I32 | DType::I64) {
        invalid!("indices must be int32 or int64, not {}", ctx.ty(idx));
    }
    let i = ctx.cast(idx, DType::I64)?;
    let neg = ctx.bin_s(B::Lt, &i, 0.0)?;
    let up = ctx.bin_s(B::Add, &i, extent as f64)?;
    let i = ctx.select(&neg, &up, &i)?;
    // `take(arange(extent), i)` is `i`, or a run-time error where `i` is out of range.
    let pos = ctx.arange(0, extent as i64, 1)?;
    ctx.op(Op::IndexSelect { axis: 0 }, &[&pos, &i])
}

fn scatter_elements(
    ctx: &mut Ctx,
    data: &Val,
    idx: &Val,
    upd: &Val,
    a: usize,
    red: Red,
) -> OpResult<Val> {
    let (d, i) = (ctx.shape(data), ctx.shape(idx));
    let r = d.len();
    if i.len() != r || ctx.shape(upd) != i {
        invalid!(
            "indices ({}) and updates ({}) must have one shape, of data's rank {r}",
            ctx.ty(idx),
            ctx.ty(upd)
        );
    }
    if ctx.dtype(upd) != ctx.dtype(data) {
        invalid!("updates are {}, data is {}", ctx.ty(upd), ctx.ty(data));
    }
    for k in 0..r {
        if k != a && i[k] > d[k] {
            invalid!(
                "indices ({}) exceed data ({}) on axis {k}",
                ctx.ty(idx),
                ctx.ty(data)
            );
        }
    }
    let hits: usize = i.iter().product::<usize>() * d[a];
    if hits > MAX_SCATTER_HITS {
        unsupported!(
            "the scatter compares {hits} index/position pairs, more than the {MAX_SCATTER_HITS} Ferrite composes"
        );
    }
    if i.contains(&0) {
        return Ok(data.clone());
    }
    let idx = checked_index(ctx, idx, d[a])?;
    // Axis `a` of the hit tensor is the output position, axis `a + 1` the index's.
    let idx = ctx.op(Op::Unsqueeze { axis: a as i64 }, &[&idx])?;
    let upd = ctx.op(Op::Unsqueeze { axis: a as i64 }, &[upd])?;
    let mut pshape = vec![1; r + 1];
    pshape[a] = d[a];
    let pos = ctx.arange(0, d[a] as i64, 1)?;
    let pos = ctx.reshape(&pos, &pshape)?;
    let hit = ctx.bin(B::Eq, &idx, &pos)?;
    let k = a + 1;
    // Bools sum to i64; the cast back to bool is `any`.
    let any = ctx.reduce(ReduceOp::Sum, &hit, &[k], false)?;
    let dt = ctx.dtype(data);
    let picked = match red {
        Red::None => {
            // The last index that hits each position, then its update.
            let mut kshape = vec![1; r + 1];
            kshape[k] = i[a];
            let ks = ctx.arange(0, i[a] as i64, 1)?;
            let ks = ctx.reshape(&ks, &kshape)?;
            let none = ctx.scalar(0.0, DType::I64);
            let last = ctx.select(&hit, &ks, &none)?;
            let last = ctx.reduce(ReduceOp::Max, &last, &[k], true)?;
            let full: Vec<i64> = ctx.shape(&hit).iter().map(|&x| x as i64).collect();
            let upd = ctx.op(Op::Expand { shape: full }, &[&upd])?;
            let g = ctx.op(Op::Gather { axis: k as i64 }, &[&upd, &last])?;
            ctx.op(
                Op::Squeeze {
                    axes: Some(vec![k as i64]),
                },
                &[&g],
            )?
        }
        _ => {
            let (identity, rop) = match red {
                Red::Add => (0.0, ReduceOp::Sum),
                Red::Mul => (1.0, ReduceOp::Prod),
                Red::Max => (lowest(dt), ReduceOp::Max),
                _ => (-lowest(dt), ReduceOp::Min),
            };
            let id = ctx.scalar(identity, dt);
            let masked = ctx.select(&hit, &upd, &id)?;
            ctx.reduce(rop, &masked, &[k], false)?
        }
    };
    // The region the indices cover, then padded back to data's shape.
    let mut sub = data.clone();
    for (ax, &n) in i.iter().enumerate() {
        if ax != a && n < d[ax] {
            sub = ctx.op(
                Op::Slice {
                    axis: ax as i64,
                    start: 0,
                    end: n as i64,
                    step: 1,
                },
                &[&sub],
            )?;
        }
    }
    let combined = match red {
        Red::None => picked,
        Red::Add => ctx.add(&sub, &picked)?,
        Red::Mul => ctx.mul(&sub, &picked)?,
        Red::Max => ctx.bin(B::Maximum, &sub, &picked)?,
        Red::Min => ctx.bin(B::Minimum, &sub, &picked)?,
    };
    let out = ctx.select(&any, &combined, &sub)?;
    if ctx.shape(&out) == d {
        return Ok(out);
    }
    // Data's own values beyond the covered region, concatenated axis by axis.
    let mut out = out;
    for ax in 0..r {
        let n = ctx.dim(&out, ax)?;
        if n < d[ax] {
            let mut rest = data.clone();
            for (bx, &m) in i.iter().enumerate() {
                if bx > ax && bx != a && m < d[bx] {
                    rest = ctx.op(
                        Op::Slice {
                            axis: bx as i64,
                            start: 0,
                            end: m as i64,
                            step: 1,
                        },
                        &[&rest],
                    )?;
                }
            }
            rest = ctx.op(
                Op::Slice {
                    axis: ax as i64,
                    start: n as i64,
                    end: d[ax] as i64,
                    step: 1,
                },
                &[&rest],
            )?;
            out = ctx.op(Op::Concat { axis: ax as i64 }, &[&out, &rest])?;
        }
    }
    Ok(out)
}

/// The lowest value of `dt` (for max, negated for min): -inf for floats.
fn lowest(dt: DType) -> f64 {
    match dt {
        DType::I8 => i8::MIN as f64,
        DType::I16 => i16::MIN as f64,
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool => 0.0,
        _ => f64::NEG_INFINITY,
    }
}

fn scatter_nd(ctx: &mut Ctx, data: &Val, idx: &Val, upd: &Val, red: Red) -> OpResult<Val> {
    let (d, i, u) = (ctx.shape(data), ctx.shape(idx), ctx.shape(upd));
    let Some(&q) = i.last() else {
        invalid!("indices must have rank at least 1");
    };
    if q == 0 || q > d.len() {
        invalid!(
            "the last dim of indices ({q}) must be between 1 and data's rank {}",
            d.len()
        );
    }
    let lead = &i[..i.len() - 1];
    let want: Vec<usize> = lead.iter().chain(&d[q..]).copied().collect();
    if u != want {
        invalid!("updates are {}, expected shape {want:?}", ctx.ty(upd));
    }
    let m: usize = lead.iter().product();
    let rows: usize = d[..q].iter().product();
    let rest: usize = d[q..].iter().product();
    // The row of each index tuple in data viewed as [rows, rest].
    let mut lin: Option<Val> = None;
    let mut stride = 1usize;
    let idx2 = ctx.reshape(idx, &[m, q])?;
    for j in (0..q).rev() {
        let col = ctx.op(
            Op::Slice {
                axis: 1,
                start: j as i64,
                end: j as i64 + 1,
                step: 1,
            },
            &[&idx2],
        )?;
        let col = checked_index(ctx, &col, d[j])?;
        let term = ctx.bin_s(B::Mul, &col, stride as f64)?;
        lin = Some(match lin {
            None => term,
            Some(l) => ctx.add(&l, &term)?,
        });
        stride *= d[j];
    }
    let lin = lin.expect("q >= 1");
    let lin = ctx.op(
        Op::Expand {
            shape: vec![m as i64, rest as i64],
        },
        &[&lin],
    )?;
    let data2 = ctx.reshape(data, &[rows, rest])?;
    let upd2 = ctx.reshape(upd, &[m, rest])?;
    let out = scatter_elements(ctx, &data2, &lin, &upd2, 0, red)?;
    ctx.reshape(&out, &d)
}
