//! One stage at the current position: its loop nest, the nodes computed at each level,
//! and the work done at each point, in one path for the ways a point runs ([`Shape`]):
//! one point at a time (its innermost loop possibly vector code first), or a lanes step
//! of several outer points at once.
//!
//! Every node is emitted at the outermost loop level where its inputs are fixed, so
//! loop-invariant work is hoisted by construction, and so is the fixed part of every
//! index. A vectorized innermost loop runs `4 * unroll` elements per iteration (group by
//! group, so each group's values die before the next starts), then four, then a scalar
//! tail.

use super::reduce::{reaches_fold, Accumulators};
use super::state::{Emitter, GuardMode, IntOp, LoopSpec, RowLoad};
use crate::error::{Error, Result};
use crate::plan::analysis::{live_nodes, node_indices, split_linear, Levels};
use crate::plan::wide::{ChainOperand, ChainRow};
use crate::plan::{Lanes, OuterLanes, StageLanes, StagePlan, VectorPlan};
use crate::wide::{ChainArgs, ChainFn, ChainStep};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_codegen::ir::{MemFlagsData, StackSlotData, StackSlotKind};
use cranelift_frontend::Variable;
use ferrite_ir::loops::{
    Block, Bound, BufferId, ExprOp, Extents, IndexExpr, Reduction, Stage, StoreOp, Var,
};
use ferrite_ir::DType;
use std::mem::{offset_of, size_of};

/// How the points of a stage run.
#[derive(Clone, Copy)]
pub(super) enum Shape<'s> {
    /// One point at a time, as the plan says; the innermost loop may first run as vector
    /// code.
    Point(&'s StagePlan),
    /// A lanes step (`4 * unroll` neighbouring outer points): the nodes that vary with
    /// the last outer coordinate are vectors, one per group of four points.
    Lanes {
        outer: &'s OuterLanes,
        stage: &'s StageLanes,
        plan: &'s StagePlan,
    },
}

/// Where the guards of a row's vector loads hold ([`Emitter::guard_interval`]).
struct GuardInterval {
    /// The first and last value of the innermost variable where every guard that moves
    /// with it holds (`lo > hi` where none), values fixed before the loop.
    lo: Value,
    hi: Value,
    /// 1 where every guard fixed for the row holds (an `i8`); `None` when there is none.
    fixed: Option<Value>,
}

/// Everything the loop emission of one stage reads.
struct StageCtx<'s> {
    loops: &'s [LoopSpec],
    live: &'s [bool],
    parts: &'s [Vec<IndexExpr>],
    reductions: &'s [Reduction],
    stores: &'s [StoreOp],
    accs: &'s Accumulators,
    shape: Shape<'s>,
}

impl StageCtx<'_> {
    /// The groups whose per-point work a point of the nest does: the scalar point, or
    /// every group of a lanes step.
    fn point_groups(&self) -> Vec<Option<usize>> {
        match self.shape {
            Shape::Point(_) => vec![None],
            Shape::Lanes { outer, .. } => (0..outer.unroll).map(Some).collect(),
        }
    }
}

impl<'a> Emitter<'a, '_> {
    /// The loops of a stage's inner domain, from 0 to each extent, with fresh variables.
    pub(super) fn stage_loops(&mut self, stage: &Stage) -> Vec<LoopSpec> {
        crate::plan::analysis::stage_loops(stage)
            .into_iter()
            .map(|(var, d)| {
                let start = self.int_const(types::I64, 0);
                let end = self.int_const(types::I64, d as i64);
                self.nest.vars.insert(var, self.b.declare_var(types::I64));
                LoopSpec {
                    var,
                    extent: d,
                    whole: true,
                    start,
                    end,
                }
            })
            .collect()
    }

    /// Emits one stage at the current position (one outer point, a row, or a lanes
    /// group) over `loops`, as `shape` says.
    pub(super) fn emit_stage(
        &mut self,
        stage: &'a Stage,
        ext: Extents,
        loops: Vec<LoopSpec>,
        shape: Shape<'_>,
    ) -> Result<()> {
        let (body, live, reductions, stores) = self.begin_stage(stage, ext, &loops);
        let n = body.nodes.len();
        let runs = loops.iter().all(|l| l.extent > 0);
        let accs = match shape {
            Shape::Point(plan) => {
                // Reductions start at their identities whether or not the loop runs.
                let scalar = self.init_accumulators(reductions, body)?;
                if runs {
                    self.vals.clamped = plan.clamped.clone();
                    self.vals.lanes = match &plan.vector {
                        Some(p) => p.lanes.clone(),
                        None => vec![None; n],
                    };
                    self.vals.strided = plan
                        .vector
                        .as_ref()
                        .map_or_else(Vec::new, |p| p.strided.clone());
                }
                let vectorized = runs && plan.vector.is_some();
                self.init_vector_accumulators(reductions, scalar, vectorized, plan.unroll)
            }
            Shape::Lanes {
                outer, stage, plan, ..
            } => {
                self.vals.clamped = plan.clamped.clone();
                self.vals.lanes = stage.lanes.clone();
                self.vals.strided.clear();
                for (i, node) in body.nodes.iter().enumerate() {
                    if let ExprOp::Acc(a) = &node.op {
                        if live[i] {
                            let v = self.done.lanes.get(a).cloned().ok_or_else(|| {
                                Error::internal(format!("{a} has no lane values"))
                            })?;
                            self.vals.vector[i] = Some(v);
                        }
                    }
                }
                self.init_lane_accumulators(reductions, outer.unroll)
            }
        };
        if runs {
            let parts = self.hoisted_parts(body, &live, stores, loops.len());
            let ctx = StageCtx {
                loops: &loops,
                live: &live,
                parts: &parts,
                reductions,
                stores,
                accs: &accs,
                shape,
            };
            self.emit_level(&ctx, 0)?;
            if loops.is_empty() {
                self.point(&ctx, &ctx.point_groups())?;
            } else {
                self.emit_loop(&ctx, 1)?;
            }
        }
        self.finish_accumulators(reductions, &accs)?;
        self.end_stage(&loops);
        Ok(())
    }

    /// Forgets the per-stage emission state of a stage over `loops`.
    fn end_stage(&mut self, loops: &[LoopSpec]) {
        self.nest.index_memo.clear();
        for l in loops {
            self.nest.vars.remove(&l.var);
        }
        self.nest.levels = Levels::default();
        self.nest.loop_vars.clear();
    }

    /// A stage the plan made a chain row call ([`ChainRow`]): the nodes fixed over its
    /// loop as scalars (as the loop's own code computes them before the loop), the
    /// call's arguments in a stack slot, the call, and for a reduce stage its sum as the
    /// accumulator.
    pub(super) fn emit_chain_stage(
        &mut self,
        stage: &'a Stage,
        ext: Extents,
        loops: Vec<LoopSpec>,
        plan: &StagePlan,
        chain: &ChainRow,
        routine: ChainFn,
    ) -> Result<()> {
        let [spec] = loops.as_slice() else {
            return Err(Error::internal("a chain row's stage has one loop"));
        };
        let spec = *spec;
        let (body, live, _, _) = self.begin_stage(stage, ext, &loops);
        self.vals.clamped = plan.clamped.clone();
        self.vals.lanes = vec![None; body.nodes.len()];
        self.vals.strided.clear();
        for (i, &l) in live.iter().enumerate() {
            if l && self.node_level(i) == 0 {
                self.emit_scalar_node(i)?;
            }
        }
        let ptr = self.target.ptr_type;
        let bytes = size_of::<ChainArgs>() as u32;
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            bytes,
            3,
        ));
        let flags = MemFlagsData::trusted();
        let args = self.b.ins().stack_addr(ptr, slot, 0);
        // The rows' addresses at the loop's first point (a pointwise kernel's segment
        // starts inside its row).
        self.start_loop(spec)?;
        // Each field at its offset in the routine's `repr(C)` layout.
        let field = |o: usize| o as i32;
        let x = self.element_pointer(chain.x.buffer, &chain.x.index)?;
        self.b
            .ins()
            .store(flags, x, args, field(offset_of!(ChainArgs, x)));
        let count = self.int_const(types::I64, chain.steps.len() as i64);
        self.b
            .ins()
            .store(flags, count, args, field(offset_of!(ChainArgs, count)));
        let null = self.b.ins().iconst(ptr, 0);
        for (k, link) in chain.steps.iter().enumerate() {
            let at = field(offset_of!(ChainArgs, steps) + k * size_of::<ChainStep>());
            let op = self.b.ins().iconst(types::I32, link.op as u32 as i64);
            self.b
                .ins()
                .store(flags, op, args, at + field(offset_of!(ChainStep, op)));
            let (scalar, row) = match &link.operand {
                ChainOperand::None => (self.b.ins().f32const(0.0), null),
                ChainOperand::Scalar { node, .. } => (self.scalar_of(*node)?, null),
                ChainOperand::Row(l) => {
                    let p = self.element_pointer(l.buffer, &l.index)?;
                    (self.b.ins().f32const(0.0), p)
                }
            };
            self.b.ins().store(
                flags,
                scalar,
                args,
                at + field(offset_of!(ChainStep, scalar)),
            );
            self.b
                .ins()
                .store(flags, row, args, at + field(offset_of!(ChainStep, row)));
            let out = match &link.out {
                Some((b, i)) => self.element_pointer(*b, i)?,
                None => null,
            };
            self.b
                .ins()
                .store(flags, out, args, at + field(offset_of!(ChainStep, out)));
        }
        let n = self.b.ins().isub(spec.end, spec.start);
        let sum = self.call_helper(routine as usize, &[ptr, types::I64], types::F32, &[args, n]);
        if let Some(acc) = chain.acc {
            self.done.scalar.insert(acc, sum);
        }
        self.end_stage(&loops);
        Ok(())
    }

    /// Resets the per-stage emission state for `stage` over `loops`: returns its body,
    /// live nodes, reductions and stores.
    fn begin_stage(
        &mut self,
        stage: &'a Stage,
        ext: Extents,
        loops: &[LoopSpec],
    ) -> (&'a Block, Vec<bool>, &'a [Reduction], &'a [StoreOp]) {
        let body = stage.body();
        let n = body.nodes.len();
        self.vals.body = body;
        self.nest.ext = ext;
        self.nest.loop_vars = loops.iter().map(|l| l.var).collect();
        self.nest.levels = Levels::new(body, &self.nest.loop_vars);
        self.nest.innermost = loops.len();
        self.nest.index_memo.clear();
        self.vals.scalar = vec![None; n];
        self.vals.vector = vec![None; n];
        self.vals.splat = vec![None; n];
        let live = live_nodes(stage);
        let reductions: &[Reduction] = match stage {
            Stage::Reduce { reductions, .. } => reductions,
            Stage::Store { .. } => &[],
        };
        (body, live, reductions, stage.stores())
    }

    /// The loop-invariant parts of the stage's index expressions, by the level where they
    /// become fixed (emitted there, so inner loops only add the moving part).
    fn hoisted_parts(
        &self,
        body: &Block,
        live: &[bool],
        stores: &[StoreOp],
        levels: usize,
    ) -> Vec<Vec<IndexExpr>> {
        let mut parts: Vec<Vec<IndexExpr>> = vec![Vec::new(); levels + 1];
        let mut found = Vec::new();
        for (i, node) in body.nodes.iter().enumerate() {
            if !live[i] {
                continue;
            }
            for e in node_indices(&node.op) {
                self.invariant_parts(e, &mut found);
            }
        }
        for s in stores {
            self.invariant_parts(&s.index, &mut found);
        }
        for (e, level) in found {
            if !parts[level].contains(&e) {
                parts[level].push(e);
            }
        }
        parts
    }

    /// The nodes fixed at `level` (for a lanes step: vectors for every group where they
    /// vary, else scalars, splatted when vector code uses them), then the index parts
    /// that become fixed there.
    fn emit_level(&mut self, ctx: &StageCtx<'_>, level: usize) -> Result<()> {
        for i in 0..self.vals.body.nodes.len() {
            if !ctx.live[i] || self.node_level(i) != level {
                continue;
            }
            match ctx.shape {
                Shape::Lanes { outer, stage, .. } if stage.varies[i] => {
                    // Accumulators of earlier stages already hold their lanes.
                    if matches!(self.vals.body.nodes[i].op, ExprOp::Acc(_)) {
                        continue;
                    }
                    for g in 0..outer.unroll {
                        self.emit_vector_node(i, g)?;
                    }
                }
                Shape::Lanes { stage, .. } => {
                    self.emit_scalar_node(i)?;
                    if stage.splats[i] {
                        let lanes =
                            stage.lanes[i].ok_or_else(|| Error::internal("splat without lanes"))?;
                        self.emit_splat(i, lanes)?;
                    }
                }
                Shape::Point(_) => self.emit_scalar_node(i)?,
            }
        }
        for e in &ctx.parts[level] {
            self.index_value(e)?;
        }
        Ok(())
    }

    /// Sets the variable of loop `spec` to its first point; returns the variable.
    fn start_loop(&mut self, spec: LoopSpec) -> Result<Variable> {
        let var = *self
            .nest
            .vars
            .get(&spec.var)
            .ok_or_else(|| Error::internal(format!("{} has no variable", spec.var)))?;
        self.b.def_var(var, spec.start);
        Ok(var)
    }

    /// The loop of `level` and everything inside it.
    fn emit_loop(&mut self, ctx: &StageCtx<'_>, level: usize) -> Result<()> {
        let spec = ctx.loops[level - 1];
        let var = self.start_loop(spec)?;
        let innermost = level == ctx.loops.len();
        if innermost {
            let mut rest = true;
            if let Shape::Point(StagePlan {
                vector: Some(vector),
                unroll,
                ..
            }) = ctx.shape
            {
                rest = self.emit_vector_loops(ctx, level, var, spec, vector, *unroll)?;
            }
            if rest {
                self.scalar_loop(ctx, level, var, spec.end)?;
            }
            Ok(())
        } else {
            self.scalar_loop(ctx, level, var, spec.end)
        }
    }

    /// The loop of `level`, one element at a time from the variable's current value while
    /// it is below `end`: the points of the innermost level, or each one's inner loops.
    fn scalar_loop(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
        var: Variable,
        end: Value,
    ) -> Result<()> {
        let lp = self.begin_loop(var, end);
        self.emit_level(ctx, level)?;
        if level == ctx.loops.len() {
            self.point(ctx, &ctx.point_groups())?;
        } else {
            self.emit_loop(ctx, level + 1)?;
        }
        self.end_loop(var, 1, lp);
        self.forget_from(level);
        Ok(())
    }

    /// The vector loops over the innermost level: `4 * unroll` elements per iteration,
    /// then four, leaving the rest to the scalar loop after them.
    ///
    /// A store stage whose vector loads are guarded (a padded window: a convolution's or a
    /// pool's taps) is peeled instead: every guard is affine in the innermost variable, so
    /// the elements where all of those that move with it hold form an interval, computed
    /// once before the loops ([`Emitter::guard_interval`]). Scalar iterations with the
    /// guards run up to its start, `4 * unroll`-wide and then four-wide iterations with
    /// plain vector loads (no tests, no branches) while they stay inside it, and the scalar
    /// loop after them does the rest, guards tested. A row where a guard that does not move
    /// fails (a window's first or last rows) runs the interval four-wide with those loads
    /// masked ([`GuardMode::Row`]). Each element is computed by the same expression either way.
    ///
    /// The edges are not guarded vector loops: a window's edge is a tap or two wide (wider
    /// rows than 16, as the plan stores shorter padded rows), and a guarded vector body
    /// tests its guards lane by lane. Three such loops per stage (before, after, and the
    /// overlapping tail) were nine tenths of a ResNet im2col kernel's code, and that
    /// kernel's Cranelift compile was the longest of the model's. A store-only row does its
    /// first and last four as one guarded group each at a constant position, where the
    /// moving guards are constants ([`Emitter::head_groups`], [`Emitter::tail_group`]).
    ///
    /// Over bounds known here (`0..extent`), a loop that would run no iteration is left
    /// out, and so is the scalar loop when nothing is left for it: whether it is needed
    /// is the return value. A copy of 112 elements is one wide loop and nothing else.
    fn emit_vector_loops(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
        var: Variable,
        spec: LoopSpec,
        vector: &VectorPlan,
        unroll: usize,
    ) -> Result<bool> {
        for &i in &vector.splats {
            let lanes = self.vals.lanes[i].ok_or_else(|| Error::internal("splat without lanes"))?;
            self.emit_splat(i, lanes)?;
        }
        let interval = if ctx.reductions.is_empty() {
            self.guard_interval(ctx, level)?
        } else {
            None
        };
        if let Some(GuardInterval { lo, hi, fixed }) = interval {
            // A row of at least four of a stage that only stores starts and ends with
            // guarded groups of four, over elements the interior does again.
            let edges = self.tail_may_overlap(ctx) && spec.extent >= 4;
            if edges {
                self.head_groups(ctx, level, var, lo, spec)?;
            }
            // One at a time, guarded, until the interval starts (all of the row where it
            // is empty).
            let before = self.int_op(IntOp::Min, lo, spec.end);
            self.scalar_loop(ctx, level, var, before)?;
            let hi_end = self.int_op_imm(IntOp::Add, hi, 1);
            let stop = self.int_op(IntOp::Min, hi_end, spec.end);
            let from = self.int_op(IntOp::Max, lo, spec.start);
            let Some(ok) = fixed else {
                self.interior(ctx, level, var, unroll, (from, stop), GuardMode::Hold)?;
                if edges {
                    self.tail_group(ctx, level, var, spec)?;
                }
                return Ok(true);
            };
            // A row where a guard that does not move with the loop fails (a padded
            // window's first or last rows) runs its interior as vector code too, four
            // at a time, the loads whose fixed guards fail giving their fill.
            let memo = self.nest.index_memo.clone();
            let hold = self.b.create_block();
            let edge = self.b.create_block();
            let join = self.b.create_block();
            self.b.ins().brif(ok, hold, &[], edge, &[]);
            self.b.switch_to_block(hold);
            self.b.seal_block(hold);
            self.interior(ctx, level, var, unroll, (from, stop), GuardMode::Hold)?;
            self.b.ins().jump(join, &[]);
            self.nest.index_memo = memo.clone();
            self.b.switch_to_block(edge);
            self.b.seal_block(edge);
            self.edge_row_interior(ctx, level, var, (from, stop))?;
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(join);
            self.b.seal_block(join);
            // What either arm computed does not dominate the join.
            self.nest.index_memo = memo;
            self.forget_from(level);
            if edges {
                self.tail_group(ctx, level, var, spec)?;
            }
            return Ok(true);
        }
        // Elements the loops emitted so far leave, where the bounds are known.
        let mut left = spec.whole.then_some(spec.extent as i64);
        let len = self.int_op(IntOp::Sub, spec.end, spec.start);
        let mut shapes = Vec::new();
        if unroll > 1 {
            shapes.push(unroll);
        }
        shapes.push(1);
        for u in shapes {
            let width = 4 * u as i64;
            // The iterations this loop runs, where the bounds are known.
            let mut runs = None;
            if let Some(n) = &mut left {
                if *n < width {
                    continue;
                }
                runs = Some(*n / width);
                *n %= width;
            }
            let whole = self.int_op_imm(IntOp::And, len, !(width - 1));
            let end = self.int_op(IntOp::Add, spec.start, whole);
            let fold = u == unroll && runs.is_none_or(reaches_fold);
            self.vector_loop(ctx, level, var, u, end, GuardMode::Test, fold)?;
        }
        if left == Some(0) {
            return Ok(false);
        }
        // Over known bounds the tail is emitted only where it runs, and then finishes the row.
        if self.tail_may_overlap(ctx) && (left.is_none() || spec.extent >= 4) {
            self.overlapping_tail(ctx, level, var, spec.start, spec.end, GuardMode::Test)?;
            return Ok(left.is_none());
        }
        Ok(true)
    }

    /// The start of a peeled row, before the interval `lo..`: where the row segment
    /// starts at the row's start and has four elements, one group of four there in
    /// [`GuardMode::Masked`] (the guards that move with the loop are constants at a
    /// constant position); then, for a window wider than that, guarded groups while the
    /// interval has not started.
    fn head_groups(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
        var: Variable,
        lo: Value,
        spec: LoopSpec,
    ) -> Result<()> {
        if self.known_i64(lo).is_some_and(|l| l <= 0) {
            return Ok(());
        }
        let zero = self.int_const(types::I64, 0);
        let four = self.int_const(types::I64, 4);
        let at_start = self.b.ins().icmp(IntCC::Equal, spec.start, zero);
        let room = self.icmp_imm(IntCC::SignedGreaterThanOrEqual, spec.end, 4);
        let go = self.b.ins().band(at_start, room);
        self.group_if(ctx, level, var, go, (zero, four))?;
        if self.known_i64(lo).is_none_or(|l| l > 4) {
            let last_start = self.int_op_imm(IntOp::Add, spec.end, -3);
            let head_end = self.int_op(IntOp::Min, lo, last_start);
            self.vector_loop(ctx, level, var, 1, head_end, GuardMode::Test, false)?;
        }
        Ok(())
    }

    /// The end of a peeled row, after its interval: where at most four elements are left,
    /// the segment ends at the row's end and holds its last four, those four as one group
    /// in [`GuardMode::Masked`] (the guards that move with the loop are constants there),
    /// over elements already done. More left (a row whose interval is empty, or ends more
    /// than four before the row) is the scalar loop's.
    fn tail_group(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
        var: Variable,
        spec: LoopSpec,
    ) -> Result<()> {
        let n = spec.extent as i64;
        let at = self.b.use_var(var);
        let left = self.b.ins().icmp(IntCC::SignedLessThan, at, spec.end);
        let few = self.icmp_imm(IntCC::SignedGreaterThanOrEqual, at, n - 4);
        let at_end = self.icmp_imm(IntCC::Equal, spec.end, n);
        let room = self.icmp_imm(IntCC::SignedLessThanOrEqual, spec.start, n - 4);
        let go = self.b.ins().band(left, few);
        let go = self.b.ins().band(go, at_end);
        let go = self.b.ins().band(go, room);
        let last4 = self.int_const(types::I64, n - 4);
        let end = self.int_const(types::I64, n);
        self.group_if(ctx, level, var, go, (last4, end))
    }

    /// Where `go`, one guarded group of four at `at` (a constant), leaving the variable at
    /// `next`. Its guarded loads are read in [`GuardMode::Masked`] where every element
    /// they read in lanes whose moving guards fail is in the buffer (all but a buffer's
    /// first or last rows), tested here; elsewhere the group is left to the scalar loop.
    fn group_if(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
        var: Variable,
        go: Value,
        (at, next): (Value, Value),
    ) -> Result<()> {
        let inside = self.group_inside(ctx, level, at)?;
        let go = self.flag_and(go, inside);
        let group = self.b.create_block();
        let after = self.b.create_block();
        self.b.ins().brif(go, group, &[], after, &[]);
        self.b.switch_to_block(group);
        self.b.seal_block(group);
        let memo = self.nest.index_memo.clone();
        self.edge_group(ctx, level, var, at, next)?;
        self.b.ins().jump(after, &[]);
        self.b.switch_to_block(after);
        self.b.seal_block(after);
        self.nest.index_memo = memo;
        self.forget_from(level);
        Ok(())
    }

    /// 1 where every element that the group of four at `at` (a constant) reads through
    /// a guarded vector load whose moving guards fail in some of its lanes but not all is
    /// in its buffer (an `i8`): the lanes where they hold are, by the plan's proof. Loads
    /// of one buffer whose indices differ by constants (a window's taps) are tested as one
    /// span, its least and its greatest element.
    fn group_inside(&mut self, ctx: &StageCtx<'_>, level: usize, at: Value) -> Result<Value> {
        let at = self
            .known_i64(at)
            .ok_or_else(|| Error::internal("an edge group at a position not known"))?;
        let v = self.level_var(level);
        let ext = self.nest.ext.clone();
        let lane = |e: &IndexExpr, j: i64| {
            crate::plan::analysis::substitute(e, &|w| (w == v).then_some(IndexExpr::Const(at + j)))
                .simplify(&ext)
        };
        let body = self.vals.body;
        // (buffer, the index's variable terms) -> (an index, its constant, the span's
        // least and greatest element).
        type Span = (BufferId, Vec<(Var, i64)>);
        let mut spans: Vec<(Span, IndexExpr, i64, i64, i64)> = Vec::new();
        for (i, node) in body.nodes.iter().enumerate() {
            if !ctx.live[i] || self.node_level(i) != level || self.vals.lanes[i].is_none() {
                continue;
            }
            let ExprOp::Load(l) = &node.op else { continue };
            // The lanes where the moving bounds hold, where all are constants here.
            let mut holds = [true; 4];
            let mut known = true;
            for b in &l.guard {
                if split_linear(&b.expr, v).is_some_and(|(_, a)| a == 0) {
                    continue;
                }
                for (j, h) in holds.iter_mut().enumerate() {
                    match lane(&b.expr, j as i64) {
                        IndexExpr::Const(k) => *h &= (b.lo..b.hi).contains(&k),
                        _ => known = false,
                    }
                }
            }
            if !known || holds.iter().all(|&h| h) || !holds.iter().any(|&h| h) {
                continue;
            }
            let first = lane(&l.index, 0);
            let reach = 3 * self.lane_stride(i);
            let (c, terms) = first
                .as_affine(&self.nest.ext)
                .unwrap_or((0, vec![(v, i64::MIN + i as i64)]));
            let key = (l.buffer, terms);
            match spans.iter_mut().find(|s| s.0 == key) {
                Some(s) => {
                    s.3 = s.3.min(c);
                    s.4 = s.4.max(c + reach);
                }
                None => spans.push((key, first, c, c, c + reach)),
            }
        }
        let mut all = self.int_const(types::I8, 1);
        for ((buffer, _), first, c, least, greatest) in spans {
            let x = self.index_value(&first)?;
            let low = self.int_op_imm(IntOp::Add, x, least - c);
            let high = self.int_op_imm(IntOp::Add, x, greatest - c);
            let numel = self.buffer_numel(buffer)? as i64;
            let ok = match (self.known_i64(low), self.known_i64(high)) {
                (Some(f), Some(t)) => self.int_const(types::I8, (f >= 0 && t < numel) as i64),
                _ => {
                    let ge = self.icmp_imm(IntCC::SignedGreaterThanOrEqual, low, 0);
                    let lt = self.icmp_imm(IntCC::SignedLessThan, high, numel);
                    self.b.ins().band(ge, lt)
                }
            };
            all = self.flag_and(all, ok);
        }
        Ok(all)
    }

    /// One guarded group of four at `at`, leaving the variable at `next`.
    fn edge_group(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
        var: Variable,
        at: Value,
        next: Value,
    ) -> Result<()> {
        self.b.def_var(var, at);
        self.nest.guards = GuardMode::Masked;
        self.vector_body(ctx, level, 1)?;
        self.nest.guards = GuardMode::Test;
        self.b.def_var(var, next);
        self.forget_from(level);
        Ok(())
    }

    /// The interval `from..stop` of a peeled row with its loads read as `mode` says:
    /// `4 * unroll`-wide, then four-wide iterations (no tests, no branches) while they
    /// stay inside it, and where the stage allows, its last four as one group over
    /// elements already done. The scalar loop after these does the rest.
    fn interior(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
        var: Variable,
        unroll: usize,
        (from, stop): (Value, Value),
        mode: GuardMode,
    ) -> Result<()> {
        let width = 4 * unroll as i64;
        if unroll > 1 {
            let inside = self.int_op_imm(IntOp::Add, stop, 1 - width);
            self.vector_loop(ctx, level, var, unroll, inside, mode, false)?;
        }
        let inside4 = self.int_op_imm(IntOp::Add, stop, -3);
        self.vector_loop(ctx, level, var, 1, inside4, mode, false)?;
        if self.tail_may_overlap(ctx) {
            self.overlapping_tail(ctx, level, var, from, stop, mode)?;
        }
        Ok(())
    }

    /// The interior `from..stop` of a row where some guard fixed for the row fails, in
    /// [`GuardMode::Row`]: for every vector load with fixed guards, the row's mask of
    /// them and an index part that keeps each element the groups read in the buffer
    /// (its own where the guards hold: those elements are in bounds). Where no such part
    /// exists (a row longer than the buffer) the interval is left to the scalar loop.
    fn edge_row_interior(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
        var: Variable,
        (from, stop): (Value, Value),
    ) -> Result<()> {
        let body = self.vals.body;
        let v = self.level_var(level);
        let last = self.int_op_imm(IntOp::Add, stop, -1);
        let mut row_loads = vec![None; body.nodes.len()];
        let mut go: Option<Value> = None;
        for (i, node) in body.nodes.iter().enumerate() {
            if !ctx.live[i] || self.node_level(i) != level {
                continue;
            }
            let (ExprOp::Load(l), Some(lanes)) = (&node.op, self.vals.lanes[i]) else {
                continue;
            };
            let fixed: Vec<Bound> = l
                .guard
                .iter()
                .filter(|b| split_linear(&b.expr, v).is_some_and(|(_, a)| a == 0))
                .cloned()
                .collect();
            let Some(ok) = self.guard_value(&fixed)? else {
                continue;
            };
            let (rest, step) = split_linear(&l.index, v)
                .ok_or_else(|| Error::internal(format!("index `{}` is not affine", l.index)))?;
            // Only `f32` loads whose lanes step with their index take this path; with
            // any other, the row is left to the scalar loop.
            let d = node.dtype;
            if lanes != Lanes::F32 || d != DType::F32 || self.lane_stride(i) != step {
                return Ok(());
            }
            let rest = rest.simplify(&self.nest.ext);
            let rest = self.index_value(&rest)?;
            // The groups read `rest + step * x` for x in `from..=last`: the part that
            // keeps the least of those at 0 or above and the greatest below `numel`.
            let numel = self.buffer_numel(l.buffer)? as i64;
            let (low_x, high_x) = if step >= 0 {
                (from, last)
            } else {
                (last, from)
            };
            let low = self.int_op_imm(IntOp::Mul, low_x, -step);
            let high = self.int_op_imm(IntOp::Mul, high_x, -step);
            let high = self.int_op_imm(IntOp::Add, high, numel - 1);
            let fits = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, low, high);
            let kept = self.int_op(IntOp::Max, rest, low);
            let kept = self.int_op(IntOp::Min, kept, high);
            let rest = self.b.ins().select(ok, rest, kept);
            let can = self.b.ins().bor(ok, fits);
            go = Some(match go {
                None => can,
                Some(g) => self.b.ins().band(g, can),
            });
            let mask = self.lane_mask(ok);
            let fill = self.constant(l.other, d)?;
            let fill = self.splat_lanes(fill, lanes);
            row_loads[i] = Some(RowLoad {
                rest,
                step,
                mask,
                fill,
            });
        }
        let stop = match go {
            Some(go) => {
                let now = self.b.use_var(var);
                self.b.ins().select(go, stop, now)
            }
            None => stop,
        };
        self.nest.row_loads = row_loads;
        self.interior(ctx, level, var, 1, (from, stop), GuardMode::Row)?;
        self.nest.row_loads.clear();
        Ok(())
    }

    /// Whether the last elements of the innermost loop may be computed as one vector
    /// group that overlaps elements already done: a stage that only stores, whose loads
    /// read none of the buffers it stores to, computes the same value for an element
    /// however often it runs.
    fn tail_may_overlap(&self, ctx: &StageCtx<'_>) -> bool {
        if !ctx.reductions.is_empty() || ctx.stores.is_empty() {
            return false;
        }
        !self.vals.body.nodes.iter().any(|n| match &n.op {
            ExprOp::Load(l) => ctx.stores.iter().any(|s| s.buffer == l.buffer),
            _ => false,
        })
    }

    /// Fewer than four elements of `from..to` left after the vector loops, where that run
    /// has at least four: its last four, as one vector group (guarded loads read as
    /// `mode` says), instead of the scalar loop.
    fn overlapping_tail(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
        var: Variable,
        from: Value,
        to: Value,
        mode: GuardMode,
    ) -> Result<()> {
        let v = self.b.use_var(var);
        let left = self.int_op(IntOp::Sub, to, v);
        let len = self.int_op(IntOp::Sub, to, from);
        let some = self.icmp_imm(IntCC::SignedGreaterThan, left, 0);
        let room = self.icmp_imm(IntCC::SignedGreaterThanOrEqual, len, 4);
        let go = self.b.ins().band(some, room);
        let tail = self.b.create_block();
        let after = self.b.create_block();
        self.b.ins().brif(go, tail, &[], after, &[]);
        self.b.switch_to_block(tail);
        self.b.seal_block(tail);
        let memo = self.nest.index_memo.clone();
        let last4 = self.int_op_imm(IntOp::Add, to, -4);
        self.b.def_var(var, last4);
        self.nest.guards = mode;
        self.vector_body(ctx, level, 1)?;
        self.nest.guards = GuardMode::Test;
        // The scalar loop after this starts at `to`.
        self.b.def_var(var, to);
        self.b.ins().jump(after, &[]);
        self.b.switch_to_block(after);
        self.b.seal_block(after);
        self.nest.index_memo = memo;
        self.forget_from(level);
        Ok(())
    }

    /// One vector loop over the innermost level from the variable's current value while
    /// it is below `end`, `4 * u` elements per iteration, guarded loads read as `mode`
    /// says (the caller has proved what it assumes); `fold`: the loop that folds the
    /// stage's vector sums periodically.
    #[allow(clippy::too_many_arguments)]
    fn vector_loop(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
        var: Variable,
        u: usize,
        end: Value,
        mode: GuardMode,
        fold: bool,
    ) -> Result<()> {
        let width = 4 * u as i64;
        let lp = self.begin_loop(var, end);
        self.nest.guards = mode;
        self.vector_body(ctx, level, u)?;
        self.nest.guards = GuardMode::Test;
        if fold {
            self.fold_sums(ctx.accs);
        }
        self.end_loop(var, width, lp);
        self.forget_from(level);
        Ok(())
    }

    /// One iteration of a vector loop: `u` groups of four elements at the variable's
    /// current value.
    fn vector_body(&mut self, ctx: &StageCtx<'_>, level: usize, u: usize) -> Result<()> {
        // Group by group: each group's values die before the next starts, so long
        // bodies (vector math) do not run out of registers.
        for g in 0..u {
            for i in 0..self.vals.body.nodes.len() {
                if ctx.live[i] && self.node_level(i) == level {
                    self.emit_vector_node(i, g)?;
                }
            }
            self.point(ctx, &[Some(g)])?;
        }
        Ok(())
    }

    /// The interval of the innermost variable where every guard of the stage's guarded
    /// vector loads that moves with it holds, and whether those that do not all hold;
    /// `None` when the innermost loop has no guarded vector load. Each bound
    /// `lo_b <= a * v + c < hi_b` has a constant `a` and a `c` fixed outside the loop (the
    /// plan vectorizes no other guard), so it holds on one interval of `v`, or (`a = 0`)
    /// on all of the row or none of it.
    fn guard_interval(
        &mut self,
        ctx: &StageCtx<'_>,
        level: usize,
    ) -> Result<Option<GuardInterval>> {
        let body = self.vals.body;
        let mut bounds: Vec<&Bound> = Vec::new();
        for (i, node) in body.nodes.iter().enumerate() {
            if !ctx.live[i] || self.node_level(i) != level || self.vals.lanes[i].is_none() {
                continue;
            }
            if let ExprOp::Load(l) = &node.op {
                for b in &l.guard {
                    if !bounds.contains(&b) {
                        bounds.push(b);
                    }
                }
            }
        }
        if bounds.is_empty() {
            return Ok(None);
        }
        let v = self.level_var(level);
        // Far from any index, so that `v + width` cannot overflow.
        const FAR: i64 = 1 << 60;
        let mut lo = self.int_const(types::I64, -FAR);
        let mut hi = self.int_const(types::I64, FAR);
        // Bounds that do not move with `v` hold on all of the row or on none of it.
        let mut fixed: Vec<Bound> = Vec::new();
        for b in bounds {
            let (rest, a) = split_linear(&b.expr, v)
                .ok_or_else(|| Error::internal(format!("guard `{}` is not affine", b.expr)))?;
            if a == 0 {
                fixed.push(b.clone());
                continue;
            }
            let rest = rest.simplify(&self.nest.ext);
            let c = self.index_value(&rest)?;
            // lo_b <= a v + c < hi_b, i.e. for a > 0: ceil((lo_b - c) / a) <= v <=
            // floor((hi_b - 1 - c) / a); for a < 0 (|a| = m): ceil((c - hi_b + 1) / m) <= v
            // <= floor((c - lo_b) / m).
            let (from, to, m) = if a > 0 {
                let neg = self.int_neg(c);
                let from = self.int_op_imm(IntOp::Add, neg, b.lo);
                let to = self.int_op_imm(IntOp::Add, neg, b.hi - 1);
                (from, to, a)
            } else {
                let from = self.int_op_imm(IntOp::Add, c, 1 - b.hi);
                let to = self.int_op_imm(IntOp::Add, c, -b.lo);
                (from, to, -a)
            };
            let first = self.ceil_div(from, m);
            let last = self.floor_div_imm(to, m);
            lo = self.int_op(IntOp::Max, lo, first);
            hi = self.int_op(IntOp::Min, hi, last);
        }
        let fixed = self.guard_value(&fixed)?;
        Ok(Some(GuardInterval { lo, hi, fixed }))
    }

    /// `ceil(x / m)` for a constant `m > 0`.
    fn ceil_div(&mut self, x: Value, m: i64) -> Value {
        let neg = self.int_neg(x);
        let f = self.floor_div_imm(neg, m);
        self.int_neg(f)
    }

    /// The work of one point of the nest for `groups` (`None`: the scalar point): every
    /// store, then every reduction's accumulation.
    fn point(&mut self, ctx: &StageCtx<'_>, groups: &[Option<usize>]) -> Result<()> {
        for s in ctx.stores {
            for &g in groups {
                match g {
                    None => {
                        let value = self.scalar_of(s.value)?;
                        let dtype = self.buffer_dtype(s.buffer)?;
                        let (addr, flags) = self.store_address(s.buffer, &s.index)?;
                        self.store_scalar(dtype, flags, value, addr);
                    }
                    Some(g) => {
                        let x = self.vector_operand(s.value, g)?;
                        let ((addr, offset), flags) = self.store_address(s.buffer, &s.index)?;
                        self.b.ins().store(flags, x, addr, offset + (16 * g) as i32);
                    }
                }
            }
        }
        for (ri, r) in ctx.reductions.iter().enumerate() {
            for &g in groups {
                self.accumulate(r, ri, ctx.accs, g)?;
            }
        }
        Ok(())
    }
}
