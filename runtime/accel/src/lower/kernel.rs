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
use super::body::{Body, Scope};
use super::builder::{add, arange, cast, column, int, lt, name_expr, program_id, row, Builder};
use super::frame::{unflatten, Frame, AXIS0, AXIS1};
use super::ops::Val;
use super::reduce;
use crate::sim::{Machine, Placement};
use crate::tile::ast::Expr;
use ferrite_ir::loops::{
    AccId, BufferId, ExprOp, Extents, IndexExpr, Kernel, Program, ReduceKind, Stage, Var, VarKind,
};
use ferrite_ir::DType;
use std::collections::HashMap;

/// What lowering one kernel shares between its parts.
pub(super) struct Cx<'a> {
    pub program: &'a Program,
    pub machine: &'a Machine,
    /// The kernel parameter of each buffer it touches.
    pub params: &'a HashMap<BufferId, String>,
    /// i32, or i64 when some offset does not fit 31 bits.
    pub index_dtype: DType,
    /// Where each buffer of the program lives (by buffer index).
    pub placements: &'a [Placement],
}

impl Cx<'_> {
    /// True when buffer `id` lives in LPDDR (buffers without a placement do).
    pub fn in_lpddr(&self, id: BufferId) -> bool {
        self.placements.get(id.index()) != Some(&Placement::Sram)
    }

    /// The lanes `program_id(axis) * block + arange(0, block)` in the index dtype.
    pub fn lanes(&self, axis: usize, block: Expr) -> Expr {
        let ar = super::builder::call(
            crate::tile::ast::Builtin::Arange,
            vec![int(0), block.clone()],
        );
        if self.index_dtype == DType::I32 {
            add(super::builder::mul(program_id(axis), block), ar)
        } else {
            add(
                super::builder::mul(cast(program_id(axis), DType::I64), block),
                cast(ar, DType::I64),
            )
        }
    }

    /// `arange(0, block)` in the index dtype.
    pub fn lanes_from_zero(&self, block: usize) -> Expr {
        if self.index_dtype == DType::I32 {
            arange(block)
        } else {
            cast(arange(block), DType::I64)
        }
    }

    /// `start + arange(0, block)` in the index dtype.
    pub fn offset_lanes(&self, start: Expr, block: usize) -> Expr {
        let ar = arange(block);
        if self.index_dtype == DType::I32 {
            add(start, ar)
        } else {
            add(start, cast(ar, DType::I64))
        }
    }
}

/// Estimated bytes a stage holds per tile point: every node's value, the offsets
/// and mask of every access, and the running values of reductions.
pub(super) fn bytes_per_point(stage: &Stage, index_bytes: usize) -> usize {
    let mut n = 8;
    for node in &stage.body().nodes {
        n += node.dtype.size_bytes().max(1);
        if matches!(
            node.op,
            ExprOp::Load(_) | ExprOp::Index(_) | ExprOp::CheckedIndex { .. }
        ) {
            n += index_bytes + 1;
        }
    }
    match stage {
        Stage::Store { stores, .. } => n += stores.len() * (index_bytes + 1),
        Stage::Reduce { reductions, .. } => n += reductions.len() * 16,
    }
    n
}

/// The number of points of a domain.
pub(super) fn points(domain: &[usize]) -> usize {
    domain.iter().product()
}

/// Lowers a non-GEMM kernel into `b`; returns the launch grid and a line
/// describing the blocks.
pub(super) fn lower(cx: &Cx, k: &Kernel, b: &mut Builder) -> Result<([usize; 3], String), String> {
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
                    if reductions.iter().any(|r| r.kind == ReduceKind::Prod)),
            })
            .collect();
        let (b0, inner) = blocks::rows(cx.machine, outer, &needs);
        let bo = b.constant("BO", b0 as i64);
        let o = b.bind("o", column(cx.lanes(0, bo)));
        let mask =
            (!outer.is_multiple_of(b0)).then(|| b.bind("mo", lt(o.clone(), int(outer as i64))));
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
    let split = if k.domain.len() >= 2 {
        blocks::column_block(last)
    } else {
        None
    };
    if let Some(bc) = split {
        let rows = outer / last.max(1);
        let col_blocks = last.div_ceil(bc);
        let br = blocks::row_block(cx.machine, rows, col_blocks, bc, bpp);
        let brc = b.constant("BR", br as i64);
        let bcc = b.constant("BC", bc as i64);
        let o = b.bind("o", column(cx.lanes(0, brc)));
        let c = b.bind("c", row(cx.lanes(1, bcc)));
        let mo = (!rows.is_multiple_of(br)).then(|| b.bind("mo", lt(o.clone(), int(rows as i64))));
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
    let b0 = blocks::pointwise(cx.machine, outer, bpp);
    let bo = b.constant("BO", b0 as i64);
    let o = b.bind("o", cx.lanes(0, bo));
    let mask = (!outer.is_multiple_of(b0)).then(|| b.bind("mo", lt(o.clone(), int(outer as i64))));
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

/// The stage's inner loop variables' kind.
fn inner_kind(stage: &Stage) -> VarKind {
    match stage {
        Stage::Reduce { .. } => VarKind::Reduce,
        Stage::Store { .. } => VarKind::Store,
    }
}

/// The frame of a stage whose inner domain is one point: the outer frame, with
/// the inner variables (all of extent 1) known to be 0.
pub(super) fn point_frame(outer: &Frame, stage: &Stage) -> Frame {
    let mut f = outer.clone();
    match inner_kind(stage) {
        VarKind::Reduce => f.ext.reduce = stage.domain().to_vec(),
        _ => f.ext.store = stage.domain().to_vec(),
    }
    f
}

/// An inner loop over the blocks of a stage's flattened inner domain: opened by
/// [`Inner::open`], closed by [`Inner::close`].
pub(super) struct Inner {
    /// The frame inside: the outer frame plus the inner axis.
    pub frame: Frame,
    /// The inner lane tile (`r` or `j`, `[1, BR]`).
    pub lanes: Expr,
    /// True when the blocks are iterated by a loop (more than one block).
    pub looping: bool,
}

impl Inner {
    /// Opens the loop (when there is more than one block) and defines the lanes.
    pub fn open(cx: &Cx, b: &mut Builder, outer: &Frame, stage: &Stage, block: usize) -> Inner {
        let dims = stage.domain();
        let total = points(dims);
        let kind = inner_kind(stage);
        let letter = if kind == VarKind::Reduce { "r" } else { "j" };
        let looping = total > block;
        let start = if looping {
            Some(b.open_loop(
                &format!("{letter}b"),
                int(0),
                int(total as i64),
                int(block as i64),
            ))
        } else {
            None
        };
        let lanes_expr = match start {
            Some(s) => cx.offset_lanes(s, block),
            None => cx.lanes_from_zero(block),
        };
        let lanes = b.bind(letter, row(lanes_expr));
        let mask = (!total.is_multiple_of(block))
            .then(|| b.bind(&format!("m{letter}"), lt(lanes.clone(), int(total as i64))));
        let var = Var { kind, index: 0 };
        let mut frame = outer.clone();
        frame.blocks[1] = block;
        frame.masks[1] = mask;
        frame.leaves.insert(var, (lanes.clone(), AXIS1));
        for (i, e) in unflatten(dims, &IndexExpr::Var(var))
            .into_iter()
            .enumerate()
        {
            frame.subst.insert(
                Var {
                    kind,
                    index: i as u32,
                },
                e,
            );
        }
        match kind {
            VarKind::Reduce => frame.ext.reduce = vec![total],
            _ => frame.ext.store = vec![total],
        }
        Inner {
            frame,
            lanes,
            looping,
        }
    }

    pub fn close(self, b: &mut Builder) {
        if self.looping {
            b.close_loop();
        }
    }
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
) -> Result<(), String> {
    let total = points(stage.domain());
    match stage {
        Stage::Reduce { .. } => reduce::emit(cx, b, outer, accs, si, stage, block),
        Stage::Store { body, stores, .. } => {
            b.comment(&format!(
                "stage {si}: store {}{}",
                stores
                    .iter()
                    .map(|s| s.buffer.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if total > 1 {
                    format!(" over {total} inner points")
                } else {
                    String::new()
                }
            ));
            if total == 0 {
                return Ok(());
            }
            let inner = (total > 1).then(|| Inner::open(cx, b, outer, stage, block));
            let frame = match &inner {
                Some(i) => i.frame.clone(),
                None => point_frame(outer, stage),
            };
            let scope = Scope {
                params: cx.params,
                accs,
                frame: &frame,
                index_dtype: cx.index_dtype,
            };
            let mut emitted = Body::new(&scope, body);
            emitted.emit(b, &stage.roots())?;
            for st in stores {
                emitted.store(b, st)?;
            }
            if let Some(i) = inner {
                i.close(b);
            }
            Ok(())
        }
    }
}

/// The parameter name of buffer `id`.
pub(super) fn param_name(id: BufferId) -> String {
    id.to_string()
}

/// A name expression for a parameter.
pub(super) fn param(cx: &Cx, id: BufferId) -> Result<Expr, String> {
    cx.params
        .get(&id)
        .map(|n| name_expr(n))
        .ok_or_else(|| format!("internal error: {id} is not a parameter"))
}
