//! Movement and shape ops: Reshape, Transpose, Flatten, Squeeze/Unsqueeze, Expand,
//! Concat, Slice, Pad, Split, Tile, Gather, GatherElements, and the ops that make
//! constants (Constant, Shape, Size, ConstantOfShape, Range, EyeLike), Trilu, Dropout.

use super::{axes, axis, dtype_attr, one};
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use crate::tensor::{shape_of, to_tensor, NoExternalData};
use ferrite_ir::types::broadcast_shapes;
use ferrite_ir::{BinaryOp as B, DType, Op, Tensor, TensorType};
use std::sync::Arc;

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "Constant" => one(constant(n)?),
        "ConstantOfShape" => {
            let shape = ctx.ints(n.input(0)?, "input")?;
            let shape = shape_of(&shape).map_err(crate::error::OpError::Invalid)?;
            let (value, dtype) = match n.tensor("value")? {
                None => (0.0, DType::F32),
                Some(t) => {
                    let t = to_tensor(t, &mut NoExternalData)?;
                    if t.len() != 1 {
                        invalid!("`value` must hold one element, not {}", t.ty);
                    }
                    (t.to_f64()[0], t.ty.dtype)
                }
            };
            one(ctx.op(
                Op::Full {
                    shape,
                    value,
                    dtype,
                },
                &[],
            )?)
        }
        "Shape" => {
            let shape = ctx.shape(n.input(0)?);
            let r = shape.len() as i64;
            let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let start = clamp(n.int("start", 0)?);
            let end = clamp(n.int("end", r)?);
            let dims: Vec<i64> = shape[start..end.max(start)]
                .iter()
                .map(|&d| d as i64)
                .collect();
            one(int_tensor(&dims, &[dims.len()]))
        }
        "Size" => {
            let numel = ctx.ty(n.input(0)?).numel() as i64;
            one(int_tensor(&[numel], &[]))
        }
        "Range" => {
            let (s, l, d) = (n.input(0)?, n.input(1)?, n.input(2)?);
            let dtype = ctx.dtype(s);
            let (start, limit, delta) = (
                ctx.number(s, "start")?,
                ctx.number(l, "limit")?,
                ctx.number(d, "delta")?,
            );
            if delta == 0.0 {
                invalid!("delta is zero");
            }
            one(ctx.op(
                Op::Arange {
                    start,
                    end: limit,
                    step: delta,
                    dtype,
                },
                &[],
            )?)
        }
        "EyeLike" => {
            let x = n.input(0)?;
            let shape = ctx.shape(x);
            if shape.len() != 2 {
                invalid!("EyeLike takes a 2-D tensor, not rank {}", shape.len());
            }
            let dtype = dtype_attr(n, "dtype", Some(ctx.dtype(x)))?;
            let k = n.int("k", 0)?;
            let d = diagonal_offset(ctx, shape[0], shape[1])?;
            let k = ctx.scalar(k as f64, DType::I64);
            let m = ctx.bin(B::Eq, &d, &k)?;
            one(ctx.cast(&m, dtype)?)
        }
        "Trilu" => {
            let x = n.input(0)?;
            let shape = ctx.shape(x);
            let r = shape.len();
            if r < 2 {
                invalid!("Trilu takes a tensor of rank >= 2, not {r}");
            }
            let k = match n.opt(1) {
                Some(k) => ctx.number(k, "k")? as i64,
                None => 0,
            };
            let upper = n.int("upper", 1)? != 0;
            let d = diagonal_offset(ctx, shape[r - 2], shape[r - 1])?;
            let k = ctx.scalar(k as f64, DType::I64);
            let keep = ctx.bin(if upper { B::Ge } else { B::Le }, &d, &k)?;
            let zero = ctx.scalar(0.0, ctx.dtype(x));
            one(ctx.select(&keep, x, &zero)?)
        }
        "Dropout" => {
            let x = n.input(0)?.clone();
            let training = match n.opt(2) {
                Some(t) => ctx.number(t, "training_mode")? != 0.0,
                None => false,
            };
            // In training mode a ratio of 0 drops nothing: only random drops are refused.
            let drops = training
                && match n.opt(1) {
                    Some(r) => ctx.number(r, "ratio")? != 0.0,
                    None => true,
                };
            if drops || n.int("is_test", 1)? == 0 && n.opset < 7 {
                unsupported!(
                    "Dropout in training mode (with a ratio other than 0) is not supported"
                );
            }
            let mask = if n.outputs() > 1 {
                let shape = ctx.shape(&x);
                Some(ctx.op(
                    Op::Full {
                        shape,
                        value: 1.0,
                        dtype: DType::Bool,
                    },
                    &[],
                )?)
            } else {
                None
            };
            Ok(Some(vec![Some(x), mask]))
        }
        "Reshape" => {
            let x = n.input(0)?;
            let target = ctx.ints(n.input(1)?, "shape")?;
            let allowzero = n.int("allowzero", 0)? != 0;
            let from = ctx.shape(x);
            let mut shape = Vec::with_capacity(target.len());
            for (i, &d) in target.iter().enumerate() {
                shape.push(match d {
                    0 if !allowzero => match from.get(i) {
                        Some(&s) => s as i64,
                        None => invalid!(
                            "shape entry {i} is 0 (copy) but the input has rank {}",
                            from.len()
                        ),
                    },
                    d => d,
                });
            }
            one(ctx.op(Op::Reshape { shape }, &[x])?)
        }
        "Transpose" => {
            let x = n.input(0)?;
            let r = ctx.rank(x);
            let perm = match n.ints("perm")? {
                Some(p) => axes(&p, r, "perm entry")?,
                None => (0..r).rev().collect(),
            };
            if perm.len() != r {
                invalid!("perm has {} entries for rank {r}", perm.len());
            }
            one(ctx.permute(x, &perm)?)
        }
        "Flatten" => {
            let x = n.input(0)?;
            let shape = ctx.shape(x);
            let r = shape.len() as i64;
            let a = n.int("axis", 1)?;
            let a = if a < 0 { a + r } else { a };
            if !(0..=r).contains(&a) {
                invalid!("axis {a} is out of range for rank {r}");
            }
            let a = a as usize;
            let rows = shape[..a].iter().product();
            let cols = shape[a..].iter().product();
            one(ctx.reshape(x, &[rows, cols])?)
        }
        "Squeeze" => {
            let x = n.input(0)?;
            let list = if n.opset >= 13 {
                match n.opt(1) {
                    Some(a) => Some(ctx.ints(a, "axes")?),
                    None => None,
                }
            } else {
                n.ints("axes")?
            };
            let shape = ctx.shape(x);
            let drop = match list {
                Some(l) => {
                    let ax = axes(&l, shape.len(), "axis")?;
                    for &a in &ax {
                        if shape[a] != 1 {
                            invalid!("cannot squeeze axis {a} of extent {}", shape[a]);
                        }
                    }
                    ax
                }
                None => (0..shape.len()).filter(|&a| shape[a] == 1).collect(),
            };
            let out: Vec<usize> = (0..shape.len())
                .filter(|a| !drop.contains(a))
                .map(|a| shape[a])
                .collect();
            one(ctx.reshape(x, &out)?)
        }
        "Unsqueeze" => {
            let x = n.input(0)?;
            let list = if n.opset >= 13 {
                ctx.ints(n.input(1)?, "axes")?
            } else {
                n.ints("axes")?.unwrap_or_default()
            };
            let shape = ctx.shape(x);
            let rank = shape.len() + list.len();
            let ax = axes(&list, rank, "axis")?;
            let mut src = shape.iter();
            let out: Vec<usize> = (0..rank)
                .map(|a| {
                    if ax.contains(&a) {
                        1
                    } else {
                        *src.next().unwrap_or(&1)
                    }
                })
                .collect();
            one(ctx.reshape(x, &out)?)
        }
        "Expand" => {
            let x = n.input(0)?;
            let target = ctx.ints(n.input(1)?, "shape")?;
            let target = shape_of(&target).map_err(crate::error::OpError::Invalid)?;
            let shape = broadcast_shapes(&ctx.shape(x), &target)?;
            let shape = shape.iter().map(|&d| d as i64).collect();
            one(ctx.op(Op::Expand { shape }, &[x])?)
        }
        "Concat" => {
            let all = n.all()?;
            let Some(first) = all.first() else {
                invalid!("Concat needs at least one input");
            };
            let r = ctx.rank(first);
            let a = axis(n.int("axis", i64::MIN)?, r, "axis").or_else(|e| {
                if !n.has("axis") {
                    invalid!("attribute `axis` is required")
                }
                Err(e)
            })?;
            one(ctx.op(Op::Concat { axis: a as i64 }, &all)?)
        }
        "Slice" => one(slice(ctx, n)?),
        "Pad" => one(pad(ctx, n)?),
        "Split" => split(ctx, n),
        "Tile" => {
            let x = n.input(0)?;
            let reps = ctx.ints(n.input(1)?, "repeats")?;
            let shape = ctx.shape(x);
            if reps.len() != shape.len() {
                invalid!(
                    "repeats has {} entries for rank {}",
                    reps.len(),
                    shape.len()
                );
            }
            if reps.iter().any(|&r| r < 0) {
                invalid!("repeats {reps:?} has a negative entry");
            }
            // [d0, d1] -> [1, d0, 1, d1] -> expand [r0, d0, r1, d1] -> [r0*d0, r1*d1]
            let inter: Vec<usize> = shape.iter().flat_map(|&d| [1, d]).collect();
            let big: Vec<i64> = shape
                .iter()
                .zip(&reps)
                .flat_map(|(&d, &r)| [r, d as i64])
                .collect();
            let out: Vec<usize> = shape
                .iter()
                .zip(&reps)
                .map(|(&d, &r)| d * r as usize)
                .collect();
            let y = ctx.reshape(x, &inter)?;
            let y = ctx.op(Op::Expand { shape: big }, &[&y])?;
            one(ctx.reshape(&y, &out)?)
        }
        "Gather" => {
            let (x, idx) = (n.input(0)?, n.input(1)?);
            let r = ctx.rank(x);
            let a = axis(n.int("axis", 0)?, r, "axis")?;
            one(gather(ctx, x, idx, a)?)
        }
        "GatherElements" => {
            let (x, idx) = (n.input(0)?, n.input(1)?);
            let r = ctx.rank(x);
            let a = axis(n.int("axis", 0)?, r, "axis")?;
            let (xs, is) = (ctx.shape(x), ctx.shape(idx));
            if is.len() != r {
                invalid!("indices have rank {} but the data rank {r}", is.len());
            }
            // Only the first index-extent entries of the other axes are read.
            let mut xv = x.clone();
            for j in (0..r).filter(|&j| j != a) {
                if is[j] > xs[j] {
                    invalid!(
                        "indices extent {} on axis {j} exceeds the data's {}",
                        is[j],
                        xs[j]
                    );
                }
                if is[j] < xs[j] {
                    xv = ctx.op(
                        Op::Slice {
                            axis: j as i64,
                            start: 0,
                            end: is[j] as i64,
                            step: 1,
                        },
                        &[&xv],
                    )?;
                }
            }
            let idx = wrap_negative(ctx, idx, xs[a])?;
            one(ctx.op(Op::Gather { axis: a as i64 }, &[&xv, &idx])?)
        }
        _ => Ok(None),
    }
}

/// A constant i64 tensor.
fn int_tensor(values: &[i64], shape: &[usize]) -> Val {
    let ty = TensorType {
        dtype: DType::I64,
        shape: shape.to_vec(),
    };
    Val::Const(Arc::new(Tensor::from_i64(&ty, values)))
}

/// The value of a `Constant` node.
fn constant(n: &NodeIn) -> OpResult<Val> {
    if let Some(t) = n.tensor("value")? {
        return Ok(Val::Const(Arc::new(to_tensor(t, &mut NoExternalData)?)));
    }
    if n.has("value_float") {
        let v = n.float("value_float", 0.0)?;
        let ty = TensorType::scalar(DType::F32);
        return Ok(Val::Const(Arc::new(Tensor::from_f64(&ty, &[v]))));
    }
    if let Some(v) = n.floats("value_floats")? {
        let t = Tensor::from_f32(&[v.len()], v).map_err(crate::error::OpError::from)?;
        return Ok(Val::Const(Arc::new(t)));
    }
    if n.has("value_int") {
        return Ok(int_tensor(&[n.int("value_int", 0)?], &[]));
    }
    if let Some(v) = n.ints("value_ints")? {
        return Ok(int_tensor(&v, &[v.len()]));
    }
    if n.has("sparse_value") {
        unsupported!("sparse constants are not supported");
    }
    if n.has("value_string") || n.has("value_strings") {
        unsupported!("string constants are not supported");
    }
    invalid!("Constant has no value attribute")
}

/// `col - row` for an `[rows, cols]` grid, as graph ops.
fn diagonal_offset(ctx: &mut Ctx, rows: usize, cols: usize) -> OpResult<Val> {
    let r = ctx.arange(0, rows as i64, 1)?;
    let r = ctx.reshape(&r, &[rows, 1])?;
    let c = ctx.arange(0, cols as i64, 1)?;
    let c = ctx.reshape(&c, &[1, cols])?;
    ctx.sub(&c, &r)
}

/// Negative indices count from the end (ONNX Gather, GatherElements): `where(i < 0, i + n, i)`.
pub(crate) fn wrap_negative(ctx: &mut Ctx, idx: &Val, n: usize) -> OpResult<Val> {
    let dt = ctx.dtype(idx);
    if !matches!(dt, DType::I32 | DType::I64) {
        invalid!("indices must be int32 or int64, not {dt}");
    }
    let neg = ctx.bin_s(B::Lt, idx, 0.0)?;
    let up = ctx.bin_s(B::Add, idx, n as f64)?;
    ctx.select(&neg, &up, idx)
}

/// numpy `take` along `a` (the IR's `index_select`): the result shape is
/// `x[:a] + idx.shape + x[a+1:]`, negative indices wrapped first.
pub(crate) fn gather(ctx: &mut Ctx, x: &Val, idx: &Val, a: usize) -> OpResult<Val> {
    let n = ctx.dim(x, a)?;
    let idx = wrap_negative(ctx, idx, n)?;
    ctx.op(Op::IndexSelect { axis: a as i64 }, &[x, &idx])
}

fn slice(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let x = n.input(0)?;
    let shape = ctx.shape(x);
    let r = shape.len();
    let (starts, ends, ax, steps) = if n.opset < 10 {
        let starts = n.ints("starts")?.unwrap_or_default();
        let ends = n.ints("ends")?.unwrap_or_default();
        let ax = n
            .ints("axes")?
            .unwrap_or_else(|| (0..starts.len() as i64).collect());
        let steps = vec![1; starts.len()];
        (starts, ends, ax, steps)
    } else {
        let starts = ctx.ints(n.input(1)?, "starts")?;
        let ends = ctx.ints(n.input(2)?, "ends")?;
        let ax = match n.opt(3) {
            Some(a) => ctx.ints(a, "axes")?,
            None => (0..starts.len() as i64).collect(),
        };
        let steps = match n.opt(4) {
            Some(s) => ctx.ints(s, "steps")?,
            None => vec![1; starts.len()],
        };
        (starts, ends, ax, steps)
    };
    if ends.len() != starts.len() || ax.len() != starts.len() || steps.len() != starts.len() {
        invalid!("starts, ends, axes and steps differ in length");
    }
    let ax = axes(&ax, r, "axis")?;
    let mut y = x.clone();
    for i in 0..ax.len() {
        let (a, step) = (ax[i], steps[i]);
        let dim = shape[a] as i64;
        let fix = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
        if step == 0 {
            invalid!("step 0 on axis {a}");
        }
        if step > 0 {
            let s = fix(starts[i]).clamp(0, dim);
            let e = fix(ends[i]).clamp(0, dim);
            if s == 0 && e == dim && step == 1 {
                continue;
            }
            y = ctx.op(
                Op::Slice {
                    axis: a as i64,
                    start: s,
                    end: e.max(s),
                    step,
                },
                &[&y],
            )?;
        } else {
            let s = fix(starts[i]).clamp(0, dim - 1);
            let e = fix(ends[i]).clamp(-1, dim - 1);
            let idx = if s > e {
                ctx.arange(s, e, step)?
            } else {
                ctx.arange(0, 0, 1)?
            };
            y = ctx.op(Op::IndexSelect { axis: a as i64 }, &[&y, &idx])?;
        }
    }
    Ok(y)
}

fn pad(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let x = n.input(0)?;
    let r = ctx.rank(x);
    let mode = n.string("mode", "constant")?;
    if !matches!(mode.as_str(), "constant" | "reflect" | "edge" | "wrap") {
        invalid!("mode=\"{mode}\" is not one of constant, reflect, edge, wrap");
    }
    let (pads, value) = if n.opset < 11 {
        let pads = n.ints("pads")?.unwrap_or_default();
        (pads, n.float("value", 0.0)?)
    } else {
        let pads = ctx.ints(n.input(1)?, "pads")?;
        let value = match n.opt(2) {
            Some(v) => ctx.number(v, "constant_value")?,
            None => 0.0,
        };
        (pads, value)
    };
    let ax = match n.opt(3) {
        Some(a) => axes(&ctx.ints(a, "axes")?, r, "axis")?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * ax.len() {
        invalid!("pads has {} entries for {} axes", pads.len(), ax.len());
    }
    // ONNX lists every begin, then every end; the IR pairs them per axis.
    let mut ir = vec![0; 2 * r];
    for (i, &a) in ax.iter().enumerate() {
        ir[2 * a] = pads[i];
        ir[2 * a + 1] = pads[i + ax.len()];
    }
    if mode == "constant" {
        return ctx.op(Op::Pad { pads: ir, value }, &[x]);
    }
    // reflect, edge, wrap: each axis gathers its source positions (numpy's `pad`).
    let mut y = x.clone();
    for a in 0..r {
        let (before, after) = (ir[2 * a], ir[2 * a + 1]);
        if before == 0 && after == 0 {
            continue;
        }
        let len = ctx.dim(&y, a)? as i64;
        let out = len + before + after;
        if out < 0 {
            invalid!("pads {before}, {after} crop more than the {len} elements of axis {a}");
        }
        if len == 0 && out > 0 {
            invalid!("mode=\"{mode}\" cannot pad axis {a}, which is empty");
        }
        let src: Vec<i64> = (-before..len + after)
            .map(|j| match mode.as_str() {
                "edge" => j.clamp(0, len - 1),
                "wrap" => j.rem_euclid(len),
                _ if len == 1 => 0,
                _ => {
                    let m = j.abs() % (2 * (len - 1));
                    if m < len {
                        m
                    } else {
                        2 * (len - 1) - m
                    }
                }
            })
            .collect();
        let ty = TensorType::new(DType::I64, vec![src.len()])?;
        let idx = Val::Const(Arc::new(Tensor::from_i64(&ty, &src)));
        y = ctx.op(Op::IndexSelect { axis: a as i64 }, &[&y, &idx])?;
    }
    Ok(y)
}

fn split(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Option<Vec<Option<Val>>>> {
    let x = n.input(0)?;
    let shape = ctx.shape(x);
    let a = axis(n.int("axis", 0)?, shape.len(), "axis")?;
    let dim = shape[a];
    let outs = n.outputs();
    let sizes: Vec<i64> = match if n.opset >= 13 {
        n.opt(1).cloned()
    } else {
        None
    } {
        Some(s) => ctx.ints(&s, "split")?,
        None => match n.ints("split")? {
            Some(s) if n.opset < 13 => s,
            _ => {
                let parts = if n.opset >= 18 && n.has("num_outputs") {
                    n.int("num_outputs", 0)?
                } else {
                    outs as i64
                };
                if parts < 1 {
                    invalid!("cannot split into {parts} parts");
                }
                // One part per output: a `num_outputs` of 2^40 would be a list of 8 TiB.
                if parts > crate::MAX_NODE_ARITY as i64 {
                    invalid!(
                        "cannot split into {parts} parts (at most {} outputs)",
                        crate::MAX_NODE_ARITY
                    );
                }
                let parts = parts as usize;
                if n.opset >= 18 && n.has("num_outputs") {
                    let chunk = dim.div_ceil(parts);
                    (0..parts)
                        .map(|i| (dim.saturating_sub(i * chunk)).min(chunk) as i64)
                        .collect()
                } else {
                    if !dim.is_multiple_of(parts) {
                        invalid!(
                            "axis {a} of extent {dim} does not split into {parts} equal parts"
                        );
                    }
                    vec![(dim / parts) as i64; parts]
                }
            }
        },
    };
    if sizes.iter().any(|&s| s < 0) || sizes.iter().sum::<i64>() != dim as i64 {
        invalid!("split sizes {sizes:?} do not add up to extent {dim}");
    }
    if sizes.len() != outs {
        invalid!("{} split sizes for {outs} outputs", sizes.len());
    }
    let mut start = 0;
    let mut result = Vec::new();
    for s in sizes {
        let y = ctx.op(
            Op::Slice {
                axis: a as i64,
                start,
                end: start + s,
                step: 1,
            },
            &[x],
        )?;
        start += s;
        result.push(Some(y));
    }
    Ok(Some(result))
}
