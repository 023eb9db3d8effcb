//! The loop-IR evaluator: runs a [`Program`] on host tensors, plainly.
//!
//! It exists so that fusion and scheduling are verified independently of any backend:
//! every kernel runs point by point in the obvious order, every node computes in its
//! dtype ([`super::scalar`]), accumulators are f64 (wrapping i64 for integers) and are
//! rounded to their dtype when read, and every load, store and data-dependent index is
//! bounds-checked. Errors name the kernel, the stage and the buffer; nothing panics.
//!
//! Because each node rounds to its dtype exactly as the reference interpreter rounds
//! each op, a fused pointwise chain gives bit-identical results to the interpreter;
//! reductions and matmul agree too (same order, same f64 accumulation of unrounded
//! products). The one difference is float `arange` with a fractional start or step,
//! computed here in its dtype rather than in f64.

use super::expr::{ExprOp, Value};
use super::ids::ExprRef;
use super::index::{Var, VarKind};
use super::program::{Kernel, Program, ReduceKind, Stage};
use super::scalar;
use crate::{DType, Error, Tensor};

/// Runs `p` on `inputs` (one tensor per graph parameter, of the input buffers'
/// types) and returns one tensor per graph output.
///
/// A failure while running is an [`Error::Eval`]: the program is verified first, so
/// what fails is the data (an index out of range, an integer to a negative power).
pub fn evaluate(p: &Program, inputs: &[Tensor]) -> crate::Result<Vec<Tensor>> {
    p.verify()
        .map_err(|e| e.context(format!("program `{}` is invalid", p.name)))?;
    if inputs.len() != p.inputs.len() {
        return Err(Error::Input(format!(
            "program `{}` takes {} inputs, got {}",
            p.name,
            p.inputs.len(),
            inputs.len()
        )));
    }
    let mut memory: Vec<Option<Vec<Value>>> = vec![None; p.buffers.len()];
    for (i, (&b, t)) in p.inputs.iter().zip(inputs).enumerate() {
        let buf = &p.buffers[b.index()];
        if t.ty != buf.ty {
            return Err(Error::Input(format!(
                "input {i} (`{}`) has type {} but the program expects {}",
                buf.name, t.ty, buf.ty
            )));
        }
        let values = tensor_values(t);
        if values.len() != buf.ty.numel() {
            return Err(Error::Input(format!(
                "input {i} (`{}`) has the wrong element count",
                buf.name
            )));
        }
        memory[b.index()] = Some(values);
    }
    for b in &p.buffers {
        if let super::BufferKind::Constant(c) = b.kind {
            // `verify` checked that the constant exists and has the buffer's type.
            let constant = p
                .constants
                .get(c)
                .ok_or_else(|| Error::internal(format!("{} has no constant", b.id)))?;
            memory[b.id.index()] = Some(tensor_values(constant.tensor()));
        }
    }
    // A donated output starts as its input's value.
    for d in &p.donated {
        let (from, to) = (p.inputs[d.input], p.outputs[d.output]);
        memory[to.index()] = memory[from.index()].clone();
    }
    for k in &p.kernels {
        run_kernel(p, k, &mut memory)
            .map_err(|e| Error::Eval(format!("kernel {}: {e}", k.name)))?;
    }
    p.outputs
        .iter()
        .map(|&b| {
            let buf = &p.buffers[b.index()];
            let values = memory[b.index()]
                .as_ref()
                .ok_or_else(|| Error::internal(format!("output {} was never written", buf.id)))?;
            Ok(to_tensor(&buf.ty, values))
        })
        .collect()
}

/// A tensor's elements as values of its dtype's domain.
fn tensor_values(t: &Tensor) -> Vec<Value> {
    match t.ty.dtype.category() {
        crate::Category::Float => t.to_f64().into_iter().map(Value::Float).collect(),
        crate::Category::Int => t.to_i128().into_iter().map(Value::Int).collect(),
        crate::Category::Bool => t
            .to_i64()
            .into_iter()
            .map(|v| Value::Bool(v != 0))
            .collect(),
    }
}

fn to_tensor(ty: &crate::TensorType, values: &[Value]) -> Tensor {
    if ty.dtype.is_float() {
        let v: Vec<f64> = values.iter().map(|v| v.as_f64()).collect();
        Tensor::from_f64(ty, &v)
    } else {
        let v: Vec<i128> = values
            .iter()
            .map(|v| match v {
                Value::Int(x) => *x,
                Value::Bool(b) => *b as i128,
                Value::Float(x) => *x as i128,
            })
            .collect();
        Tensor::from_i128(ty, &v)
    }
}

/// Iterates the points of a row-major domain: calls `f` with each multi-index.
fn for_each_point(
    domain: &[usize],
    mut f: impl FnMut(&[i64]) -> Result<(), String>,
) -> Result<(), String> {
    if domain.contains(&0) {
        return Ok(());
    }
    let mut idx = vec![0i64; domain.len()];
    loop {
        f(&idx)?;
        let mut axis = domain.len();
        loop {
            if axis == 0 {
                return Ok(());
            }
            axis -= 1;
            idx[axis] += 1;
            if (idx[axis] as usize) < domain[axis] {
                break;
            }
            idx[axis] = 0;
        }
    }
}

/// An accumulator's running state.
#[derive(Clone, Copy)]
enum AccState {
    Float(f64),
    Int(i128),
    /// Best value, its position, whether any value was seen.
    Arg(Value, i64, bool),
}

fn run_kernel(p: &Program, k: &Kernel, memory: &mut [Option<Vec<Value>>]) -> Result<(), String> {
    // Buffers this kernel writes start zeroed.
    for w in &k.writes {
        let b = &p.buffers[w.buffer.index()];
        if memory[b.id.index()].is_none() {
            memory[b.id.index()] = Some(vec![Value::zero(b.ty.dtype); b.ty.numel()]);
        }
    }
    let mut accs: Vec<(super::AccId, DType, Value)> = Vec::new();
    let mut scratch: Vec<Value> = Vec::new();
    for_each_point(&k.domain, |outer| {
        accs.clear();
        for (si, stage) in k.stages.iter().enumerate() {
            run_stage(p, stage, outer, &mut accs, &mut scratch, memory)
                .map_err(|e| format!("stage {si}: {e}"))?;
        }
        Ok(())
    })
}

fn run_stage(
    p: &Program,
    stage: &Stage,
    outer: &[i64],
    accs: &mut Vec<(super::AccId, DType, Value)>,
    scratch: &mut Vec<Value>,
    memory: &mut [Option<Vec<Value>>],
) -> Result<(), String> {
    let inner_kind = match stage {
        Stage::Reduce { .. } => VarKind::Reduce,
        Stage::Store { .. } => VarKind::Store,
    };
    match stage {
        Stage::Reduce {
            domain,
            body,
            reductions,
            stores,
        } => {
            let mut states: Vec<AccState> = reductions
                .iter()
                .map(|r| match (r.kind, r.dtype.category()) {
                    (ReduceKind::ArgMax | ReduceKind::ArgMin, _) => {
                        AccState::Arg(Value::Int(0), 0, false)
                    }
                    (kind, crate::Category::Float) => AccState::Float(match kind {
                        ReduceKind::Sum => 0.0,
                        ReduceKind::Prod => 1.0,
                        ReduceKind::Max => f64::NEG_INFINITY,
                        _ => f64::INFINITY,
                    }),
                    (kind, _) => AccState::Int(match kind {
                        ReduceKind::Sum => 0,
                        ReduceKind::Prod => 1,
                        // The identities of max and min are the ends of the dtype's range.
                        // (Bool keeps the i64 ends, which read as true.)
                        ReduceKind::Max => {
                            r.dtype.int_range().map_or(i64::MIN as i128, |(lo, _)| lo)
                        }
                        _ => r.dtype.int_range().map_or(i64::MAX as i128, |(_, hi)| hi),
                    }),
                })
                .collect();
            let mut position: i64 = 0;
            for_each_point(domain, |inner| {
                eval_block(p, body, outer, inner, inner_kind, accs, scratch, memory)?;
                write_stores(p, stores, outer, inner, inner_kind, scratch, memory)?;
                for (r, st) in reductions.iter().zip(states.iter_mut()) {
                    let v = scratch
                        .get(r.value.index())
                        .copied()
                        .ok_or("reduced value is not a node")?;
                    let v = match r.rhs {
                        None => v,
                        Some(rhs) => {
                            let w = scratch
                                .get(rhs.index())
                                .copied()
                                .ok_or("dot factor is not a node")?;
                            exact_product(v, w)
                        }
                    };
                    combine(r.kind, st, v, position);
                }
                position += 1;
                Ok(())
            })?;
            for (r, st) in reductions.iter().zip(states) {
                let v = match st {
                    AccState::Float(x) => Value::Float(x),
                    AccState::Int(x) if r.dtype == DType::Bool => Value::Bool(x != 0),
                    AccState::Int(x) => Value::Int(x),
                    AccState::Arg(_, pos, _) => Value::Int(pos as i128),
                };
                accs.push((r.acc, r.dtype, scalar::round_to(v, r.dtype)));
            }
            Ok(())
        }
        Stage::Store {
            domain,
            body,
            stores,
        } => for_each_point(domain, |inner| {
            eval_block(p, body, outer, inner, inner_kind, accs, scratch, memory)?;
            write_stores(p, stores, outer, inner, inner_kind, scratch, memory)
        }),
    }
}

/// Performs a stage's writes at one point, from the values `eval_block` left in `scratch`.
fn write_stores(
    p: &Program,
    stores: &[super::StoreOp],
    outer: &[i64],
    inner: &[i64],
    inner_kind: VarKind,
    scratch: &[Value],
    memory: &mut [Option<Vec<Value>>],
) -> Result<(), String> {
    for s in stores {
        let var = |v: Var| lookup(v, outer, inner, inner_kind);
        let dynamic = |r: ExprRef| dynamic_value(scratch, r);
        let at = s.index.eval(&var, &dynamic)?;
        let value = scratch
            .get(s.value.index())
            .copied()
            .ok_or("stored value is not a node")?;
        let buf = &p.buffers[s.buffer.index()];
        let data = memory[s.buffer.index()]
            .as_mut()
            .ok_or_else(|| format!("{} has no storage", s.buffer))?;
        let slot = usize::try_from(at)
            .ok()
            .and_then(|i| data.get_mut(i))
            .ok_or_else(|| {
                format!(
                    "store to {} (`{}`): index {at} out of bounds 0..{}",
                    s.buffer,
                    buf.name,
                    buf.ty.numel()
                )
            })?;
        *slot = value;
    }
    Ok(())
}

/// The unrounded product of two values of one dtype (f64 holds the product of two
/// f32s exactly; integers wrap as the accumulator does).
fn exact_product(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Value::Int(x.wrapping_mul(y)),
        (x, y) => Value::Float(x.as_f64() * y.as_f64()),
    }
}

fn combine(kind: ReduceKind, st: &mut AccState, v: Value, position: i64) {
    match st {
        AccState::Float(a) => {
            let x = v.as_f64();
            match kind {
                ReduceKind::Sum => *a += x,
                ReduceKind::Prod => *a *= x,
                // Once NaN, the accumulator stays NaN: nothing compares above NaN.
                ReduceKind::Max if x.is_nan() || x > *a => *a = x,
                ReduceKind::Min if x.is_nan() || x < *a => *a = x,
                _ => {}
            }
        }
        AccState::Int(a) => {
            let x = match v {
                Value::Int(x) => x,
                Value::Bool(b) => b as i128,
                Value::Float(x) => x as i128,
            };
            *a = match kind {
                ReduceKind::Sum => a.wrapping_add(x),
                ReduceKind::Prod => a.wrapping_mul(x),
                ReduceKind::Max => (*a).max(x),
                _ => (*a).min(x),
            };
        }
        AccState::Arg(best, pos, seen) => {
            let is_nan = |v: Value| matches!(v, Value::Float(x) if x.is_nan());
            if !*seen {
                (*best, *pos, *seen) = (v, position, true);
                return;
            }
            if is_nan(*best) {
                return;
            }
            let better = is_nan(v)
                || match (v, *best) {
                    (Value::Float(x), Value::Float(b)) => {
                        if kind == ReduceKind::ArgMax {
                            x > b
                        } else {
                            x < b
                        }
                    }
                    (Value::Int(x), Value::Int(b)) => {
                        if kind == ReduceKind::ArgMax {
                            x > b
                        } else {
                            x < b
                        }
                    }
                    _ => false,
                };
            if better {
                (*best, *pos) = (v, position);
            }
        }
    }
}

fn lookup(v: Var, outer: &[i64], inner: &[i64], inner_kind: VarKind) -> Option<i64> {
    if v.kind == VarKind::Outer {
        outer.get(v.index as usize).copied()
    } else if v.kind == inner_kind {
        inner.get(v.index as usize).copied()
    } else {
        None
    }
}

fn dynamic_value(scratch: &[Value], r: ExprRef) -> Option<i64> {
    match scratch.get(r.index()) {
        Some(Value::Int(x)) => i64::try_from(*x).ok(),
        _ => None,
    }
}

/// Evaluates every node of `body` at one point into `scratch`.
#[allow(clippy::too_many_arguments)]
fn eval_block(
    p: &Program,
    body: &super::Block,
    outer: &[i64],
    inner: &[i64],
    inner_kind: VarKind,
    accs: &[(super::AccId, DType, Value)],
    scratch: &mut Vec<Value>,
    memory: &[Option<Vec<Value>>],
) -> Result<(), String> {
    scratch.clear();
    let var = |v: Var| lookup(v, outer, inner, inner_kind);
    for (i, node) in body.nodes.iter().enumerate() {
        let here = ExprRef(i as u32);
        let get = |r: ExprRef| -> Result<Value, String> {
            scratch
                .get(r.index())
                .copied()
                .ok_or_else(|| format!("{here} uses {r} before it is computed"))
        };
        let guard_holds = |guard: &[super::Bound], scratch: &[Value]| -> Result<bool, String> {
            for b in guard {
                let x = b.expr.eval(&var, &|r| dynamic_value(scratch, r))?;
                if x < b.lo || x >= b.hi {
                    return Ok(false);
                }
            }
            Ok(true)
        };
        let value = match &node.op {
            ExprOp::Const(v) => scalar::round_to(*v, node.dtype),
            ExprOp::Load(l) => {
                if !guard_holds(&l.guard, scratch)? {
                    l.other
                } else {
                    let at = l.index.eval(&var, &|r| dynamic_value(scratch, r))?;
                    let buf = &p.buffers[l.buffer.index()];
                    let data = memory[l.buffer.index()].as_ref().ok_or_else(|| {
                        format!(
                            "load from {} (`{}`) before it is written",
                            l.buffer, buf.name
                        )
                    })?;
                    usize::try_from(at)
                        .ok()
                        .and_then(|i| data.get(i))
                        .copied()
                        .ok_or_else(|| {
                            format!(
                                "load from {} (`{}`): index {at} out of bounds 0..{}",
                                l.buffer,
                                buf.name,
                                buf.ty.numel()
                            )
                        })?
                }
            }
            ExprOp::Acc(a) => accs
                .iter()
                .find(|(x, _, _)| x == a)
                .map(|(_, _, v)| *v)
                .ok_or_else(|| format!("{here} reads {a} before it is computed"))?,
            ExprOp::Index(e) => Value::Int(e.eval(&var, &|r| dynamic_value(scratch, r))? as i128),
            ExprOp::CheckedIndex {
                value,
                extent,
                guard,
            } => {
                if !guard_holds(guard, scratch)? {
                    Value::Int(0)
                } else {
                    let v = match get(*value)? {
                        Value::Int(x) => x,
                        other => return Err(format!("{here}: index {other} is not an integer")),
                    };
                    if v < 0 || v as u128 >= *extent as u128 {
                        return Err(format!(
                            "index {v} out of range for an axis of extent {extent}"
                        ));
                    }
                    Value::Int(v)
                }
            }
            ExprOp::Unary(u, a) => scalar::unary(*u, get(*a)?, node.dtype)?,
            ExprOp::Binary(b, x, y) => scalar::binary(*b, get(*x)?, get(*y)?, node.dtype)?,
            ExprOp::Where(c, a, b) => {
                if scalar::truth(get(*c)?) {
                    get(*a)?
                } else {
                    get(*b)?
                }
            }
            ExprOp::Cast(a) => scalar::cast(get(*a)?, node.dtype),
        };
        scratch.push(value);
    }
    Ok(())
}
