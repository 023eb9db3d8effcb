//! Short rows of a pointwise kernel with per-point parameters, as one point's inner loops.
//!
//! A pointwise kernel runs its innermost outer axis as the row loop, and everything
//! fixed along the row (a depthwise conv's nine weights and bias: their loads, splats and
//! the point's coordinates) once per row. Over rows of 14 or 7 (MobileNetV2's late
//! depthwise convs) that work was as long as the row's vector code. When a load is fixed
//! along the last two axes, and enough outer points are left for the threads, those two
//! axes become the store loops `j0, j1` of the one stage: the work fixed along both is
//! done once per point of the shorter domain, and the rows are plain inner loops (their
//! bounds constants). The rewrite renames variables only, so each point computes and
//! stores what the rows it took did, and outer points still write disjoint elements.

use super::analysis::{is_pointwise, substitute};
use ferrite_ir::loops::{Block, ExprOp, IndexExpr, Kernel, Stage, StoreOp, Var};

/// Rows shorter than this are nested (a row call takes rows from 32 points).
const SHORT_ROW: usize = 32;

/// Outer points the nested kernel must keep, so the threads still have work each.
const MIN_POINTS: usize = 32;

/// `kernel` with its last two outer axes as the store loops of its stage, and a note, or
/// `None` when it is not a pointwise kernel of short rows with a load fixed along both.
pub fn nest_short_rows(kernel: &Kernel) -> Option<(Kernel, String)> {
    if !is_pointwise(kernel) || kernel.domain.len() < 3 {
        return None;
    }
    let Stage::Store { body, stores, .. } = kernel.stages.first()? else {
        return None;
    };
    let n = kernel.domain.len();
    let (a, b) = (n - 2, n - 1);
    let points: usize = kernel.domain[..a].iter().product();
    if kernel.domain[b] >= SHORT_ROW || points < MIN_POINTS {
        return None;
    }
    let mentions_row = |e: &IndexExpr| {
        let mut found = false;
        e.for_each_var(&mut |v| found |= v == Var::outer(a) || v == Var::outer(b));
        found
    };
    let per_point = body.nodes.iter().find_map(|node| match &node.op {
        ExprOp::Load(l)
            if !mentions_row(&l.index) && l.guard.iter().all(|g| !mentions_row(&g.expr)) =>
        {
            Some(l.buffer)
        }
        _ => None,
    })?;
    let rename = |e: &IndexExpr| -> IndexExpr {
        substitute(e, &|v| {
            if v == Var::outer(a) {
                Some(IndexExpr::Var(Var::store(0)))
            } else if v == Var::outer(b) {
                Some(IndexExpr::Var(Var::store(1)))
            } else {
                None
            }
        })
    };
    let nodes = body
        .nodes
        .iter()
        .map(|node| node.map_indices(rename))
        .collect();
    let stores = stores
        .iter()
        .map(|s| StoreOp {
            index: rename(&s.index),
            ..s.clone()
        })
        .collect();
    let note = format!(
        "rows of {} nested: i{a} and i{b} are the stage's loops ({per_point} is read once per point)",
        kernel.domain[b]
    );
    Some((
        Kernel {
            domain: kernel.domain[..a].to_vec(),
            stages: vec![Stage::Store {
                domain: kernel.domain[a..].to_vec(),
                body: Block { nodes },
                stores,
            }],
            ..kernel.clone()
        },
        note,
    ))
}
