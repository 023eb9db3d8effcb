//! What lowering one stage needs: the kernel's context ([`Cx`]), the frame of a
//! stage's inner domain ([`Inner`], [`point_frame`]), and store stages.
//! Reduction stages are `reduce.rs`; `kernel.rs` and `gemm.rs` lay stages out.

use super::body::{Body, Scope};
use super::builder::{add, arange, call, cast, int, lt, mul, param, program_id, row, Builder, E};
use super::frame::{unflatten, Frame, AXIS1};
use super::ops::Val;
use crate::error::{Error, Result};
use crate::sim::{Machine, Placement};
use crate::tile::ast::Builtin;
use ferrite_ir::loops::{AccId, BufferId, ExprOp, IndexExpr, Program, Stage, Var, VarKind};
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
    /// Bytes of SRAM free while the kernel runs.
    pub sram_room: u64,
    /// A buffer the kernel stores to that has elements, for the probe that checks an
    /// index no access reads through (see `Body::probe_index`).
    pub probe: Option<BufferId>,
    /// For a row kernel of a row program (`lower_rows`): its rows, whose count is
    /// the kernel's scalar parameter [`ROWS_PARAM`] at each launch.
    pub rows: Option<RowCx>,
}

/// The scalar parameter of a row kernel: the points of its masked row axis at
/// the launch's row count (see [`Cx::row_mask`]).
pub(crate) const ROWS_PARAM: &str = "n_rows";

/// A row kernel's rows while it is lowered: the program's most rows, and what
/// [`Cx::row_mask`] recorded of the tile axis that enumerates them.
pub(super) struct RowCx {
    /// The most rows (the program's extents are at this count).
    pub max: usize,
    /// The kernel domain's row axis.
    pub axis: usize,
    /// The row count the blocks are chosen for (their cost model's size).
    pub hint: usize,
    /// Per buffer of the program (by index): its rows per row, when it has rows.
    pub buffers: Vec<Option<usize>>,
    /// `(per_row, block)` of the masked tile axis: its extent is `per_row * rows`,
    /// `block` lanes per program along grid axis 0.
    pub grid: std::cell::Cell<Option<(usize, usize)>>,
    /// Set when a row mask disagreed with an earlier one (the kernel is refused).
    pub conflict: std::cell::Cell<bool>,
}

impl Cx<'_> {
    /// The mask `lanes < extent` of the tile axis that enumerates `extent` points
    /// at the most rows in blocks of `block` along grid axis 0, or `None` when
    /// every lane is inside. In a row kernel the extent is a run-time size, the
    /// scalar parameter [`ROWS_PARAM`] (`extent / max * rows` at a launch), so the
    /// mask is always made and the axis recorded for the launch's grid.
    pub fn row_mask(
        &self,
        b: &mut Builder,
        hint: &str,
        lanes: E,
        extent: usize,
        block: usize,
    ) -> Option<E> {
        match &self.rows {
            Some(r) if extent.is_multiple_of(r.max) => {
                let seen = (extent / r.max, block);
                match r.grid.get() {
                    Some(g) if g != seen => r.conflict.set(true),
                    _ => r.grid.set(Some(seen)),
                }
                Some(b.bind(hint, lt(lanes, param(ROWS_PARAM))))
            }
            Some(r) => {
                r.conflict.set(true);
                None
            }
            None => {
                (!extent.is_multiple_of(block)).then(|| b.bind(hint, lt(lanes, int(extent as i64))))
            }
        }
    }

    /// An extent of `extent` points at the most rows as the block choices see it:
    /// in a row kernel, the extent at the row count its blocks are chosen for.
    pub fn sized(&self, extent: usize) -> usize {
        match &self.rows {
            Some(r) if extent.is_multiple_of(r.max) => extent / r.max * r.hint,
            _ => extent,
        }
    }

    /// Bytes of buffer `id` as the block choices see it: in a row kernel, a row
    /// buffer's at the row count its blocks are chosen for.
    pub fn buffer_bytes(&self, id: BufferId) -> u64 {
        let Some(buf) = self.program.buffer(id) else {
            return 0;
        };
        let per_row = self
            .rows
            .as_ref()
            .and_then(|r| Some((r.buffers.get(id.index()).copied().flatten()?, r.hint)));
        match per_row {
            Some((elems, hint)) => (elems * hint * buf.ty.dtype.size_bytes()) as u64,
            None => buf.ty.size_bytes() as u64,
        }
    }

    /// True when the kernel's rows are along `axis` of its domain (a row kernel).
    pub fn rows_along(&self, axis: usize) -> bool {
        self.rows.as_ref().is_some_and(|r| r.axis == axis)
    }

    /// True when buffer `id` lives in LPDDR (buffers without a placement do).
    pub fn in_lpddr(&self, id: BufferId) -> bool {
        self.placements.get(id.index()) != Some(&Placement::Sram)
    }

    /// The lanes `program_id(axis) * block + arange(0, block)` in the index dtype.
    pub fn lanes(&self, axis: usize, block: E) -> E {
        let ar = call(Builtin::Arange, vec![int(0), block.clone()]);
        if self.index_dtype == DType::I32 {
            add(mul(program_id(axis), block), ar)
        } else {
            add(
                mul(cast(program_id(axis), DType::I64), block),
                cast(ar, DType::I64),
            )
        }
    }

    /// `arange(0, block)` in the index dtype.
    pub fn lanes_from_zero(&self, block: usize) -> E {
        if self.index_dtype == DType::I32 {
            arange(block)
        } else {
            cast(arange(block), DType::I64)
        }
    }

    /// `start + arange(0, block)` in the index dtype.
    pub fn offset_lanes(&self, start: E, block: usize) -> E {
        let ar = arange(block);
        if self.index_dtype == DType::I32 {
            add(start, ar)
        } else {
            add(start, cast(ar, DType::I64))
        }
    }

    /// The parameter of buffer `id`.
    pub fn param(&self, id: BufferId) -> Result<E> {
        self.params
            .get(&id)
            .map(|n| param(n))
            .ok_or_else(|| Error::internal(format!("{id} is not a parameter")))
    }
}

/// The parameter name of buffer `id`.
pub(super) fn param_name(id: BufferId) -> String {
    id.to_string()
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
    pub lanes: E,
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

/// Emits store stage `si` in `outer`'s frame, with inner blocks of `block` points.
pub(super) fn emit_store(
    cx: &Cx,
    b: &mut Builder,
    outer: &Frame,
    accs: &HashMap<AccId, Val>,
    si: usize,
    stage: &Stage,
    block: usize,
) -> Result<()> {
    let Stage::Store { body, stores, .. } = stage else {
        return Err(Error::internal("not a store stage"));
    };
    let total = points(stage.domain());
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
        probe: cx.probe,
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
