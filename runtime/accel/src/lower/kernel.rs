//! Lowering a loop-IR kernel that is not a GEMM: choosing its layout, then
//! emitting each stage.
//!
//! Layouts, by the shape of the kernel:
//!
//! - **pointwise, flat**: no stage loops over an inner domain; the outer domain
//!   is flattened and each program handles `BO` consecutive points (`o`);
//! - **pointwise, 2-D**: the same with two or more outer axes whose last extent
//!   splits into blocks of 16 to 1024 with few idle lanes: tiles are `[BR, BC]`
//!   blocks of rows (`o`, the leading axes flattened) by columns (`c`, the last
//!   axis), so values indexed by the row alone (a per-row mean) or by the column
//!   alone (a bias) are read once per row or column of the block instead of
//!   once per element;
//! - **rows**: some stage loops over an inner domain (a reduction, or a store
//!   after one): tiles are `[BO, BR]`, `BO` outer points (`o[:, None]`) by a
//!   block of the stage's flattened inner domain (`r[None, :]`). A stage whose
//!   inner domain is longer than its block loops over blocks (`for rb in
//!   range(0, R, BR)`), accumulating as it goes.
//!
//! A stage with an inner domain of one point is computed at the outer points
//! alone, and a stage with an empty domain does nothing (its accumulators hold
//! their identities).

use super::blocks::{self, InnerNeed};
use super::builder::{column, int, lt, row, Builder};
use super::frame::{unflatten, Frame, AXIS0, AXIS1};
use super::ops::Val;
use super::reduce;
use super::stage::{self, bytes_per_point, points, Cx};
use crate::error::Result;
use ferrite_ir::loops::{AccId, ExprOp, Extents, IndexExpr, Kernel, ReduceKind, Stage, Var};
use std::collections::HashMap;

/// True for a stage that loads a buffer it stores (an `index_add` adding at checked
/// indices): its inner points run one at a time, since two of them may pick the same
/// element, and a tile of them would lose all but one addition.
fn updates_in_place(s: &Stage) -> bool {
    s.stores().iter().any(|w| {
        s.body()
            .nodes
            .iter()
            .any(|n| matches!(&n.op, ExprOp::Load(l) if l.buffer == w.buffer))
    })
}

/// Lowers a non-GEMM kernel into `b`; returns the launch grid and a line
/// describing the blocks.
pub(super) fn lower(cx: &Cx, k: &Kernel, b: &mut Builder) -> Result<([usize; 3], String)> {
    let index_bytes = cx.index_dtype.size_bytes();
    let outer = points(&k.domain);
    let has_inner = k.stages.iter().any(|s| points(s.domain()) > 1);
    let mut accs: HashMap<AccId, Val> = HashMap::new();
    let o_var = Var::outer(0);
    if has_inner {
        let needs: Vec<InnerNeed> = k
            .stages
            .iter()
            .map(|s| InnerNeed {
                extent: points(s.domain()),
                bytes_per_point: bytes_per_point(s, index_bytes),
                serial: matches!(s, Stage::Reduce { reductions, .. }
                    if reductions.iter().any(|r| r.kind == ReduceKind::Prod))
                    || updates_in_place(s),
            })
            .collect();
        let (b0, inner) = blocks::rows(cx.machine, cx.sized(outer), &needs);
        let bo = b.constant("BO", b0 as i64);
        let o = b.bind("o", column(cx.lanes(0, bo)));
        let mask = cx.row_mask(b, "mo", o.clone(), outer, b0);
        let mut frame = Frame {
            rank: 2,
            blocks: [b0, 1],
            masks: [mask, None],
            subst: HashMap::new(),
            ext: Extents {
                outer: vec![outer],
                reduce: vec![],
                store: vec![],
            },
            leaves: HashMap::from([(o_var, (o, AXIS0))]),
        };
        for (i, c) in unflatten(&k.domain, &IndexExpr::Var(o_var))
            .into_iter()
            .enumerate()
        {
            frame.subst.insert(Var::outer(i), c);
        }
        for (si, (stage, &bi)) in k.stages.iter().zip(&inner).enumerate() {
            emit_stage(cx, b, &frame, &mut accs, si, stage, bi)?;
        }
        let distinct: Vec<String> = k
            .stages
            .iter()
            .zip(&inner)
            .filter(|(s, _)| points(s.domain()) > 1)
            .map(|(s, bi)| format!("{} in blocks of {bi}", points(s.domain())))
            .collect();
        let note = format!(
            "{b0} outer point{} per program; inner domains of {}",
            if b0 == 1 { "" } else { "s" },
            distinct.join(", ")
        );
        return Ok(([outer.div_ceil(b0), 1, 1], note));
    }
    let bpp = k
        .stages
        .iter()
        .map(|s| bytes_per_point(s, index_bytes))
        .max()
        .unwrap_or(8);
    let last = k.domain.last().copied().unwrap_or(1);
    // Rows along the last axis (a domain `[1, .., R]`) are never split into
    // columns: the row mask is along tile axis 0.
    let split = if k.domain.len() >= 2 && !cx.rows_along(k.domain.len() - 1) {
        blocks::column_block(last)
    } else {
        None
    };
    if let Some(bc) = split {
        let rows = outer / last.max(1);
        let col_blocks = last.div_ceil(bc);
        let br = blocks::row_block(cx.machine, cx.sized(rows), col_blocks, bc, bpp);
        let brc = b.constant("BR", br as i64);
        let bcc = b.constant("BC", bc as i64);
        let o = b.bind("o", column(cx.lanes(0, brc)));
        let c = b.bind("c", row(cx.lanes(1, bcc)));
        let mo = cx.row_mask(b, "mo", o.clone(), rows, br);
        let mc = (!last.is_multiple_of(bc)).then(|| b.bind("mc", lt(c.clone(), int(last as i64))));
        let c_var = Var::outer(1);
        let mut frame = Frame {
            rank: 2,
            blocks: [br, bc],
            masks: [mo, mc],
            subst: HashMap::new(),
            ext: Extents {
                outer: vec![rows, last],
                reduce: vec![],
                store: vec![],
            },
            leaves: HashMap::from([(o_var, (o, AXIS0)), (c_var, (c, AXIS1))]),
        };
        let lead = &k.domain[..k.domain.len() - 1];
        for (i, e) in unflatten(lead, &IndexExpr::Var(o_var))
            .into_iter()
            .enumerate()
        {
            frame.subst.insert(Var::outer(i), e);
        }
        frame
            .subst
            .insert(Var::outer(k.domain.len() - 1), IndexExpr::Var(c_var));
        for (si, stage) in k.stages.iter().enumerate() {
            emit_stage(cx, b, &frame, &mut accs, si, stage, 1)?;
        }
        let note = format!("[{br}, {bc}] blocks of the [{rows}, {last}] outer domain per program");
        return Ok(([rows.div_ceil(br), col_blocks, 1], note));
    }
    let b0 = blocks::pointwise(cx.machine, cx.sized(outer), bpp);
    let bo = b.constant("BO", b0 as i64);
    let o = b.bind("o", cx.lanes(0, bo));
    let mask = cx.row_mask(b, "mo", o.clone(), outer, b0);
    let mut frame = Frame {
        rank: 1,
        blocks: [b0, 1],
        masks: [mask, None],
        subst: HashMap::new(),
        ext: Extents {
            outer: vec![outer],
            reduce: vec![],
            store: vec![],
        },
        leaves: HashMap::from([(o_var, (o, AXIS0))]),
    };
    for (i, c) in unflatten(&k.domain, &IndexExpr::Var(o_var))
        .into_iter()
        .enumerate()
    {
        frame.subst.insert(Var::outer(i), c);
    }
    for (si, stage) in k.stages.iter().enumerate() {
        emit_stage(cx, b, &frame, &mut accs, si, stage, 1)?;
    }
    Ok((
        [outer.div_ceil(b0), 1, 1],
        format!("{b0} of the {outer} outer points per program"),
    ))
}

/// Emits stage `si` of a kernel in `outer`'s frame, with inner blocks of `block`
/// points; the accumulators it defines are added to `accs`.
pub(super) fn emit_stage(
    cx: &Cx,
    b: &mut Builder,
    outer: &Frame,
    accs: &mut HashMap<AccId, Val>,
    si: usize,
    stage: &Stage,
    block: usize,
) -> Result<()> {
    match stage {
        Stage::Reduce { .. } => reduce::emit(cx, b, outer, accs, si, stage, block),
        Stage::Store { .. } => stage::emit_store(cx, b, outer, accs, si, stage, block),
    }
}
