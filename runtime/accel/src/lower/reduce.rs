//! Reduction stages: accumulators over blocks of the inner domain.
//!
//! Each program holds `BO` outer points, so each accumulator is a `[BO, 1]`
//! column. One block of the inner domain is a `[BO, BR]` tile; lanes past the
//! end of the domain are replaced by the reduction's identity (`where(mr, v,
//! -inf)` for a max) and the tile is reduced along its axis 1. When the domain
//! spans several blocks, the accumulators are carried around the block loop and
//! combined with each block's partial result.
//!
//! - `sum` and dot products accumulate in f32 (half-precision values are
//!   widened first) or in the integer dtype (wrapping), and are rounded to the
//!   accumulator's dtype at the end;
//! - `max` and `min` propagate NaN, as the loop IR does; bools reduce as i32;
//! - `prod` has no tile reduction, so a product stage walks its domain one
//!   point at a time (`BR = 1`), multiplying `[BO, 1]` columns;
//! - `argmax`/`argmin` take the block's max (min), the first lane equal to it (a
//!   NaN counts as maximal and minimal, as in the loop IR: `x != x` finds it),
//!   and keep a block's result only when it is strictly better than the running
//!   one, so ties resolve to the first position.

use super::body::{broadcast, Body, Scope};
use super::builder::{
    and, bin, call, call_kw, cast, column, dtype, int, or, tuple, where_, Builder, Def, Depth, E,
};
use super::frame::{Frame, AXIS0, AXIS1};
use super::ops::{self, lit, TileVal, Val};
use super::stage::{point_frame, points, Cx, Inner};
use crate::error::{Error, Result};
use crate::tile::ast::{BinaryOp as TBin, Builtin};
use ferrite_ir::loops::{scalar, AccId, ReduceKind, Reduction, Stage, Value};
use ferrite_ir::DType;
use std::collections::HashMap;

/// The running state of one accumulator.
enum Running {
    /// A value combined with each block's partial result.
    Value { name: Option<Def>, dtype: DType },
    /// The best value so far and its position.
    Arg {
        best: Option<Def>,
        pos: Option<Def>,
        dtype: DType,
    },
}

/// The dtype an accumulator runs in, for values of dtype `v`.
fn running_dtype(kind: ReduceKind, v: DType) -> DType {
    match kind {
        ReduceKind::Sum | ReduceKind::Prod if v.is_float() && v != DType::F64 => DType::F32,
        _ if v == DType::Bool => DType::I32,
        _ => v,
    }
}

/// The accumulator of a reduction over no points, as the loop IR defines it.
fn empty(r: &Reduction) -> Value {
    if r.kind.is_arg() {
        return Value::Int(0);
    }
    let v = if r.dtype.is_float() {
        Value::Float(match r.kind {
            ReduceKind::Sum => 0.0,
            ReduceKind::Prod => 1.0,
            ReduceKind::Max => f64::NEG_INFINITY,
            _ => f64::INFINITY,
        })
    } else {
        let x = match (r.kind, r.dtype.int_range()) {
            (ReduceKind::Sum, _) => 0,
            (ReduceKind::Prod, _) => 1,
            (ReduceKind::Max, Some((lo, _))) => lo,
            (_, Some((_, hi))) => hi,
            (ReduceKind::Max, None) => i64::MIN as i128,
            (_, None) => i64::MAX as i128,
        };
        if r.dtype == DType::Bool {
            return Value::Bool(x != 0);
        }
        Value::Int(x)
    };
    scalar::round_to(v, r.dtype)
}

fn reduce_axis1(f: Builtin, x: E) -> E {
    column(call_kw(f, vec![x], vec![("axis", int(1))]))
}

/// Emits a reduction stage.
pub(super) fn emit(
    cx: &Cx,
    b: &mut Builder,
    outer: &Frame,
    accs: &mut HashMap<AccId, Val>,
    si: usize,
    stage: &Stage,
    block: usize,
) -> Result<()> {
    let Stage::Reduce {
        domain,
        body,
        reductions,
        ..
    } = stage
    else {
        return Err(Error::internal("not a reduction stage"));
    };
    let total = points(domain);
    let names: Vec<String> = reductions
        .iter()
        .map(|r| {
            format!(
                "{} = {}{}",
                r.acc,
                if r.rhs.is_some() {
                    "dot"
                } else {
                    r.kind.name()
                },
                if total > 1 {
                    format!(" over {total} points in blocks of {block}")
                } else {
                    String::new()
                }
            )
        })
        .collect();
    b.comment(&format!("stage {si}: {}", names.join("; ")));
    if total == 0 {
        for r in reductions {
            accs.insert(r.acc, Val::Lit(empty(r), r.dtype));
        }
        return Ok(());
    }
    if total == 1 {
        return one_point(cx, b, outer, accs, stage, reductions);
    }
    let looping = total > block;
    // Running values start at the identity before the block loop.
    let mut running = Vec::new();
    for r in reductions {
        let vd = body
            .get(r.value)
            .map(|n| n.dtype)
            .ok_or_else(|| Error::internal(format!("{} is not a node", r.value)))?;
        let rd = running_dtype(r.kind, vd);
        let full = |b: &mut Builder, hint: &str, v: Value, d: DType| -> Option<Def> {
            looping.then(|| {
                b.var(
                    hint,
                    call_kw(
                        Builtin::Full,
                        vec![tuple(&[outer.blocks[0], 1]), lit(v)],
                        vec![("dtype", dtype(d))],
                    ),
                )
            })
        };
        running.push(if r.kind.is_arg() {
            Running::Arg {
                best: full(b, &format!("best{}", r.acc.0), r.kind.identity(rd), rd),
                pos: full(b, &format!("pos{}", r.acc.0), Value::Int(0), cx.index_dtype),
                dtype: rd,
            }
        } else {
            let hint = if rd == r.dtype {
                format!("{}", r.acc)
            } else {
                format!("run{}", r.acc.0)
            };
            Running::Value {
                name: full(b, &hint, r.kind.identity(rd), rd),
                dtype: rd,
            }
        });
    }
    let inner = Inner::open(cx, b, outer, stage, block);
    let scope = Scope {
        params: cx.params,
        accs,
        frame: &inner.frame,
        index_dtype: cx.index_dtype,
        probe: cx.probe,
    };
    let mut emitted = Body::new(&scope, body);
    emitted.emit(b, &stage.roots())?;
    for (r, run) in reductions.iter().zip(running.iter_mut()) {
        block_partial(b, &emitted, &inner, r, run, total)?;
    }
    inner.close(b);
    for (r, run) in reductions.iter().zip(running) {
        let v = finish(cx, b, r, run)?;
        accs.insert(r.acc, v);
    }
    Ok(())
}

/// The value a reduction combines at each point, in its running dtype.
fn reduced_value(b: &mut Builder, body: &Body, r: &Reduction, rd: DType) -> Result<Val> {
    let v = body.val(r.value)?;
    Ok(match r.rhs {
        None => ops::convert(&v, rd),
        Some(rhs) => {
            // The product of two values, exact in f32 for half inputs.
            let w = body.val(rhs)?;
            let (x, y) = (ops::convert(&v, rd), ops::convert(&w, rd));
            ops::binary(b, ferrite_ir::BinaryOp::Mul, &x, &y, rd, rd)?
        }
    })
}

/// Reduces one block and combines it into the running state.
fn block_partial(
    b: &mut Builder,
    body: &Body,
    inner: &Inner,
    r: &Reduction,
    run: &mut Running,
    total: usize,
) -> Result<()> {
    let frame = &inner.frame;
    let block = frame.blocks[1];
    let rd = match run {
        Running::Value { dtype, .. } | Running::Arg { dtype, .. } => *dtype,
    };
    let v = reduced_value(b, body, r, rd)?;
    // The block's values, padding lanes replaced by the identity.
    let deps = v.deps() | AXIS1;
    let x = match &frame.masks[1] {
        Some(m) => {
            let id = r.kind.identity(rd);
            let typed = match &v {
                Val::Lit(..) => broadcast(frame, &v, rd, deps),
                Val::Tile(t) => t.e.clone(),
            };
            where_(m.clone(), typed, lit(id))
        }
        None if block > 1 => broadcast(frame, &v, rd, deps),
        None => ops::typed(&v, rd),
    };
    let reduce = |f: Builtin, x: E| -> E {
        if block > 1 {
            reduce_axis1(f, x)
        } else {
            x
        }
    };
    match run {
        Running::Value { name, dtype } => {
            let (f, combine): (Builtin, fn(E, E) -> E) = match r.kind {
                ReduceKind::Sum => (Builtin::Sum, |a, p| bin(TBin::Add, a, p)),
                ReduceKind::Prod => {
                    if block > 1 {
                        return Err(Error::internal("a product over a block"));
                    }
                    // One point per block: nothing is reduced, the builtin is unused.
                    (Builtin::Sum, |a, p| bin(TBin::Mul, a, p))
                }
                ReduceKind::Max => (Builtin::Max, |a, p| call(Builtin::Maximum, vec![a, p])),
                _ => (Builtin::Min, |a, p| call(Builtin::Minimum, vec![a, p])),
            };
            let partial = reduce(f, x);
            match name {
                Some(n) => b.assign(*n, combine(E::Def(*n), partial)),
                None => {
                    let hint = if *dtype == r.dtype {
                        format!("{}", r.acc)
                    } else {
                        format!("run{}", r.acc.0)
                    };
                    *name = Some(b.var(&hint, widen_rows(partial, frame, &v)));
                }
            }
        }
        Running::Arg { best, pos, dtype } => {
            let x = b.bind("v", x);
            let maximal = r.kind == ReduceKind::ArgMax;
            let f = if maximal { Builtin::Max } else { Builtin::Min };
            let bm = b.bind("bm", reduce(f, x.clone()));
            let mut hit = bin(TBin::Eq, x.clone(), bm.clone());
            if dtype.is_float() {
                hit = or(hit, bin(TBin::Ne, x.clone(), x));
            }
            let first = where_(hit, inner.lanes.clone(), int(total as i64));
            let bp = b.bind("bp", reduce(Builtin::Min, first));
            match (best.as_ref(), pos.as_ref()) {
                (Some(best), Some(pos)) => {
                    let (best, pos) = (*best, *pos);
                    let (bn, pn) = (E::Def(best), E::Def(pos));
                    let op = if maximal { TBin::Gt } else { TBin::Lt };
                    let mut better = bin(op, bm.clone(), bn.clone());
                    if dtype.is_float() {
                        // A first NaN beats any number; nothing beats a NaN.
                        better = or(
                            better,
                            and(
                                bin(TBin::Ne, bm.clone(), bm.clone()),
                                bin(TBin::Eq, bn.clone(), bn.clone()),
                            ),
                        );
                    }
                    let better = b.bind("better", better);
                    b.assign(best, where_(better.clone(), bm, bn));
                    b.assign(pos, where_(better, bp, pn));
                }
                _ => {
                    *best = Some(b.var(&format!("best{}", r.acc.0), widen_rows(bm, frame, &v)));
                    *pos = Some(b.var(&format!("pos{}", r.acc.0), widen_rows(bp, frame, &v)));
                }
            }
        }
    }
    Ok(())
}

/// A block's partial result as an accumulator column: reductions of values that
/// do not vary along the outer axis give one value; broadcast it to `[BO, 1]`
/// so every accumulator has the same shape.
fn widen_rows(partial: E, frame: &Frame, v: &Val) -> E {
    if v.deps() & AXIS0 != 0 || frame.blocks[0] == 1 {
        partial
    } else {
        call(
            Builtin::BroadcastTo,
            vec![partial, tuple(&[frame.blocks[0], 1])],
        )
    }
}

/// The accumulator's final value, in its dtype.
fn finish(cx: &Cx, b: &mut Builder, r: &Reduction, run: Running) -> Result<Val> {
    let acc = format!("{}", r.acc);
    let e = match run {
        Running::Value { name, dtype } => {
            let n = E::Def(name.ok_or_else(|| Error::internal("an accumulator was never set"))?);
            if dtype == r.dtype {
                n
            } else if r.dtype == DType::Bool {
                b.bind(&acc, bin(TBin::Ne, n, int(0)))
            } else {
                b.bind(&acc, cast(n, r.dtype))
            }
        }
        Running::Arg { pos, .. } => {
            let n = E::Def(pos.ok_or_else(|| Error::internal("a position was never set"))?);
            if cx.index_dtype == DType::I64 {
                n
            } else {
                b.bind(&acc, cast(n, DType::I64))
            }
        }
    };
    Ok(Val::Tile(TileVal {
        e,
        dtype: r.dtype,
        deps: AXIS0,
        depth: Depth::ZERO,
    }))
}

/// A reduction over a single point: each accumulator is its value there.
fn one_point(
    cx: &Cx,
    b: &mut Builder,
    outer: &Frame,
    accs: &mut HashMap<AccId, Val>,
    stage: &Stage,
    reductions: &[Reduction],
) -> Result<()> {
    let frame = point_frame(outer, stage);
    let mut values = Vec::new();
    {
        let scope = Scope {
            params: cx.params,
            accs,
            frame: &frame,
            index_dtype: cx.index_dtype,
            probe: cx.probe,
        };
        let mut emitted = Body::new(&scope, stage.body());
        emitted.emit(b, &stage.roots())?;
        for r in reductions {
            let v = if r.kind.is_arg() {
                Val::Lit(Value::Int(0), DType::I64)
            } else {
                let vd = emitted.dtype(r.value)?;
                let rd = running_dtype(r.kind, vd);
                let v = reduced_value(b, &emitted, r, if r.rhs.is_some() { rd } else { vd })?;
                ops::convert(&v, r.dtype)
            };
            values.push(v);
        }
    }
    for (r, v) in reductions.iter().zip(values) {
        let v = match v {
            Val::Tile(t) => Val::Tile(TileVal {
                e: b.bind(&format!("{}", r.acc), t.e),
                depth: Depth::ZERO,
                ..t
            }),
            lit => lit,
        };
        accs.insert(r.acc, v);
    }
    Ok(())
}
