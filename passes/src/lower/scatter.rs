//! The kernel of an `index_add` or `index_reduce`, the ops whose stores go to
//! data-chosen places.
//!
//! Its outer domain is the result's axes other than the indexed one, so every outer
//! point owns one line along that axis and no two points touch the same element. At
//! each point a first store stage copies the base's line into the result, and a second
//! walks the index in order and adds each source element into the element its index
//! picks: a load of the result and a store back at the same checked, data-dependent
//! index (an out-of-range index is a run-time error naming the kernel, never a wild
//! write). Walking the index serially at each point is what makes duplicate indices
//! accumulate deterministically, in index order, on every backend. An `index_reduce`
//! combines with its op (`mul`, `maximum`, `minimum`) instead of adding; without
//! `include_self`, a stage between the two first stores the op's identity (1, -inf,
//! +inf, or the dtype's extreme integer) at every element an index picks, so those
//! elements reduce the source alone. (`mean` never gets here: `decompose` writes it
//! with `index_add`s.)
//!
//! Such an op is a kernel of its own: fusion may inline its operands' producers into
//! it (views, elementwise ops), never its consumers.

use super::domain::squeeze;
use super::plan::{Layout, Plan};
use super::refusal::{LowerError, Refusal};
use super::value::{bug, fail_to_error, Fail, KernelBuilder};
use crate::error::Error;
use ferrite_ir::loops::{
    ExprOp, Extents, IndexExpr, Kernel, KernelId, Load, ReduceKind, Stage, StoreOp, Value, Var,
};
use ferrite_ir::types::normalize_axis;
use ferrite_ir::{BinaryOp, DType, Op, ValueId};

/// The `index_add` or `index_reduce` among `members` (the values a group of `count`
/// scheduled nodes computes), if there is one; a group of it and anything else is refused.
pub(super) fn index_add_member(
    plan: &Plan,
    members: &[ValueId],
    count: usize,
) -> Result<Option<ValueId>, Refusal> {
    let g = plan.g;
    let Some(&v) = members
        .iter()
        .find(|&&v| matches!(g.node(v).op, Op::IndexAdd { .. } | Op::IndexReduce { .. }))
    else {
        return Ok(None);
    };
    if count > 1 {
        return Err(Refusal::new(
            "index-add-alone",
            format!(
                "%{} (an {}) is a kernel of its own",
                v.0,
                g.node(v).op.name()
            ),
        ));
    }
    Ok(Some(v))
}

/// The identity of the combining op in `dtype`: what an element starts from when the
/// base's value takes no part.
fn identity(op: BinaryOp, dtype: DType) -> Result<Value, LowerError> {
    let kind = match op {
        BinaryOp::Mul => ReduceKind::Prod,
        BinaryOp::Maximum => ReduceKind::Max,
        BinaryOp::Minimum => ReduceKind::Min,
        _ => return Err(Error::internal(format!("no identity of {} here", op.name())).into()),
    };
    Ok(kind.identity(dtype))
}

/// The kernel computing `index_add` or `index_reduce` value `v` into its buffer.
pub(super) fn index_add_kernel(
    plan: &Plan,
    layout: &Layout,
    v: ValueId,
    id: KernelId,
    name: String,
) -> Result<Kernel, LowerError> {
    let g = plan.g;
    let node = g.node(v);
    let (axis, combine, include_self) = match node.op {
        Op::IndexAdd { axis } => (axis, BinaryOp::Add, true),
        Op::IndexReduce {
            axis,
            reduce,
            include_self,
        } => match reduce.combine() {
            Some(op) => (axis, op, include_self),
            None => return Err(Error::internal("index_reduce(mean) was not decomposed").into()),
        },
        _ => return Err(Error::internal("index_add_kernel of another op").into()),
    };
    let (base, index, source) = (node.inputs[0], node.inputs[1], node.inputs[2]);
    let shape = node.ty.shape.clone();
    let dtype = node.ty.dtype;
    let a = normalize_axis(axis, shape.len()).map_err(|e| Error::internal(e.to_string()))?;
    let (m, p) = (shape[a], g.ty(index).shape[0]);
    let buffer = layout.of_value[v.index()]
        .ok_or_else(|| Error::internal(format!("%{} has no buffer", v.0)))?;

    // The outer domain: every axis but `a`, extents of 1 dropped.
    // Outer points are the dimensions before the axis; each stage loops over the axis
    // and, inside it, the dimensions after it, so that the copy and the scatter walk
    // rows in memory order (with the trailing dimensions outer, each pass over a column
    // re-read the whole table: a DLRM table update took 0.6 s).
    let mut outer = Vec::new();
    let mut coords = Vec::with_capacity(shape.len());
    let mut trailing = Vec::new();
    for (k, &d) in shape.iter().enumerate() {
        if k == a || d == 1 {
            coords.push(IndexExpr::Const(0));
        } else if k < a {
            coords.push(IndexExpr::Var(Var::outer(outer.len())));
            outer.push(d);
        } else {
            trailing.push((k, d));
            coords.push(IndexExpr::Const(0));
        }
    }
    // A stage over `extent` positions of the axis: its store domain (without extents of
    // 1), the axis coordinate, and every coordinate with the axis at `at(axis)`.
    let stage_domain = |extent: usize| {
        let mut domain = vec![extent];
        domain.extend(trailing.iter().map(|&(_, d)| d));
        squeeze(&domain)
    };
    let axis_var = |extent: usize| {
        if extent == 1 {
            IndexExpr::Const(0)
        } else {
            IndexExpr::Var(Var::store(0))
        }
    };
    let along = |extent: usize, e: IndexExpr| {
        let first = usize::from(extent != 1);
        let mut c = coords.clone();
        for (n, &(k, _)) in trailing.iter().enumerate() {
            c[k] = IndexExpr::Var(Var::store(first + n));
        }
        c[a] = e;
        c
    };
    let mut b = KernelBuilder::alone(plan, layout, outer.clone(), v);
    let open = |b: &mut KernelBuilder, domain: &[usize]| {
        b.open_stage(Extents {
            outer: outer.clone(),
            reduce: vec![],
            store: domain.to_vec(),
        })
    };
    let mut stages: Vec<Stage> = Vec::new();

    // The base's line, copied.
    let domain = stage_domain(m);
    open(&mut b, &domain);
    let at = along(m, axis_var(m));
    let value = b.value_at(base, &at, &[]).map_err(fail_to_error)?;
    let index_of = b.flat(&at, &shape);
    stages.push(b.close_store_stage(
        domain,
        vec![StoreOp {
            buffer,
            index: index_of,
            value,
        }],
    ));

    // Without the base: the identity at every element an index picks.
    if !include_self && p > 0 && m > 0 {
        let domain = stage_domain(p);
        open(&mut b, &domain);
        let j = axis_var(p);
        let start = identity(combine, dtype)?;
        let store = (|| -> Result<StoreOp, Fail> {
            let iv = b.value_at(index, std::slice::from_ref(&j), &[])?;
            let k = b.checked_index(iv, m, &[]);
            let target = b.flat(&along(p, k), &shape);
            let value = b.push(dtype, ExprOp::Const(start));
            Ok(StoreOp {
                buffer,
                index: target,
                value,
            })
        })()
        .map_err(fail_to_error)?;
        stages.push(b.close_store_stage(domain, vec![store]));
    }

    // Each source element combined where its index says, in index order. Into an empty
    // axis nothing is added, and the index is checked by the check `index_checks` adds.
    if p > 0 && m > 0 {
        let domain = stage_domain(p);
        open(&mut b, &domain);
        let j = axis_var(p);
        let add = (|| -> Result<StoreOp, Fail> {
            let iv = b.value_at(index, std::slice::from_ref(&j), &[])?;
            let k = b.checked_index(iv, m, &[]);
            let target = b.flat(&along(p, k), &shape);
            let old = b.push(
                dtype,
                ExprOp::Load(Load {
                    buffer,
                    index: target.clone(),
                    guard: vec![],
                    other: Value::zero(dtype),
                }),
            );
            let s = b.value_at(source, &along(p, j.clone()), &[])?;
            if b.cur.block.get(s).map(|n| n.dtype) != Some(dtype) {
                return Err(bug("index_add: the source has another dtype"));
            }
            let sum = b.push(dtype, ExprOp::Binary(combine, old, s));
            Ok(StoreOp {
                buffer,
                index: target,
                value: sum,
            })
        })()
        .map_err(fail_to_error)?;
        stages.push(b.close_store_stage(domain, vec![add]));
    }

    Ok(b.finish(id, name, stages, None))
}
