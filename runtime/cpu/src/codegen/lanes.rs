//! Vector lanes across the outer domain, for kernels whose inner loops stride.
//!
//! The usual vector code runs a stage's innermost loop four elements at a time, which
//! needs its accesses contiguous in that loop. A reduction over a leading axis
//! (`sum(x, axes=[0])` of a row-major `[n, m]`: `acc = sum(r0) x[r0*m + i0]`), a softmax
//! over a middle axis, or a matmul without the extern GEMM (`x[i0*k + r0] * w[r0*n + i1]`)
//! strides in its inner loop but is contiguous in the innermost *outer* axis. Those kernels
//! take four neighbouring outer points (or `4u` with unrolling) as the lanes: every value
//! that depends on the last outer coordinate is a vector (lane `l` is point `i + l`),
//! values that do not are scalars splatted where vectors use them, inner loops step one
//! point at a time, and each reduction keeps one accumulator per lane. Points that do not
//! fill a group (the end of a row, or of the thread's range) run the scalar code.
//!
//! Numerics are the scalar code's, lane by lane: float sums and products accumulate in
//! `f64` (two `f64x2` halves per vector), products of a dot are exact in `f64`, and each
//! lane is rounded to `f32` once at the end; max/min keep the first of equal values and
//! let NaN stick, as the scalar `select` does. The results are therefore bit-identical to
//! the scalar code and to the reference evaluator.
//!
//! The decision reuses [`plan_vector`] with the last outer variable as the vector
//! variable: a node "is at the vector level" when it depends on that variable.

use super::index::{mentions, split_linear};
use super::kernel::{live_nodes, node_indices, stage_report, Emitter, LoopSpec};
use super::vectorize::{narrow_i64, plan_vector, Lanes, StageFacts};
use super::StageReport;
use crate::codegen::convert::bitcast;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, ConstantData, InstBuilder, Value};
use cranelift_frontend::Variable;
use ferrite_ir::loops::{
    ExprOp, Extents, IndexExpr, Kernel, ReduceKind, Reduction, Stage, StoreOp, Var,
};

/// How a kernel runs with lanes across its last outer axis.
#[derive(Clone, Debug)]
pub(super) struct OuterLanes {
    /// `f32x4` groups per step: a step covers `4 * unroll` outer points.
    pub unroll: usize,
    /// Per stage, what is a vector.
    pub stages: Vec<StageLanes>,
}

/// The lane plan of one stage.
#[derive(Clone, Debug)]
pub(super) struct StageLanes {
    /// Nodes whose value depends on the last outer coordinate (one vector per group).
    varies: Vec<bool>,
    /// The lane form of every vector node and of every splatted scalar.
    lanes: Vec<Option<Lanes>>,
    /// Scalar nodes that vector code uses: splatted where they are computed.
    splats: Vec<bool>,
}

/// The lanes plan for `kernel`, or `None` when its inner loops vectorize themselves (or
/// it cannot run with outer lanes). `unroll` is the preferred number of groups per step.
pub(super) fn plan_outer_lanes(
    kernel: &Kernel,
    reduce_stores: &[Vec<StoreOp>],
    unroll: usize,
) -> Option<OuterLanes> {
    let n = kernel.domain.len();
    if n == 0 || kernel.stages.is_empty() {
        return None;
    }
    let pointwise = kernel.stages.len() == 1 && kernel.stages[0].domain().is_empty();
    if pointwise {
        // Runs as a row loop, vectorized along the row already.
        return None;
    }
    let last = Var::outer(n - 1);
    let extent = kernel.domain[n - 1];
    let unroll = [unroll.clamp(1, 8), 4, 2, 1]
        .into_iter()
        .find(|&u| 4 * u <= extent)?;
    let mut worth = false;
    let mut stages = Vec::with_capacity(kernel.stages.len());
    for (si, stage) in kernel.stages.iter().enumerate() {
        let extra = reduce_stores.get(si).map_or(&[][..], |v| &v[..]);
        let body = stage.body();
        let len = body.nodes.len();
        let live = live_nodes(stage, extra);
        let ext = stage.extents(&kernel.domain);
        let inner = stage.domain().len().checked_sub(1).map(|k| match stage {
            Stage::Reduce { .. } => Var::reduce(k),
            Stage::Store { .. } => Var::store(k),
        });
        let mut varies = vec![false; len];
        for (i, node) in body.nodes.iter().enumerate() {
            let mut v = matches!(node.op, ExprOp::Acc(_));
            node.for_each_operand(&mut |r| v |= varies.get(r.index()).copied().unwrap_or(false));
            for e in node_indices(&node.op) {
                v |= mentions(e, last);
            }
            varies[i] = v;
            if !live[i] || !v {
                continue;
            }
            match &node.op {
                // Their vector forms step along an inner loop.
                ExprOp::Index(_) | ExprOp::CheckedIndex { .. } => return None,
                ExprOp::Load(l) => {
                    // Worth it when the inner loop could not run as vector code itself.
                    if let Some(iv) = inner {
                        if !matches!(split_linear(&l.index, iv), Some((_, 1))) {
                            worth = true;
                        }
                    }
                }
                _ => {}
            }
        }
        let levels: Vec<usize> = varies.iter().map(|&v| v as usize).collect();
        let narrow = narrow_i64(body, &ext, &[]);
        // Guarded loads that vary are refused by the plan; fixed ones run as scalar code,
        // which clamps them as the emitter decides.
        let clamped = vec![false; len];
        let index_level = |e: &IndexExpr| mentions(e, last) as usize;
        let (reductions, stores): (&[Reduction], &[StoreOp]) = match stage {
            Stage::Reduce { reductions, .. } => (reductions, extra),
            Stage::Store { stores, .. } => (&[], stores),
        };
        let facts = StageFacts {
            body,
            levels: &levels,
            live: &live,
            narrow: &narrow,
            clamped: &clamped,
            level: 1,
            var: last,
            index_level: &index_level,
            reductions,
            stores,
        };
        let plan = plan_vector(&facts).ok()?;
        let mut splats = vec![false; len];
        for &i in &plan.splats {
            splats[i] = true;
        }
        stages.push(StageLanes {
            varies,
            lanes: plan.lanes,
            splats,
        });
    }
    worth.then_some(OuterLanes { unroll, stages })
}

/// Accumulator registers of one reduction in lane code.
enum LaneAcc {
    /// Sum/product: per group, the `f64x2` of lanes 0-1 and of lanes 2-3.
    Wide(Vec<(Variable, Variable)>),
    /// Max/min: per group, one `f32x4`.
    Narrow(Vec<Variable>),
}

impl<'a, 'f> Emitter<'a, 'f> {
    /// Emits one stage of a lanes step at the current position: the outer coordinates
    /// are those of the group's first point.
    pub(super) fn emit_stage_lanes(
        &mut self,
        stage: &'a Stage,
        extra_stores: &'a [StoreOp],
        index: usize,
        ext: Extents,
        loops: Vec<LoopSpec>,
        outer: &OuterLanes,
    ) -> Result<StageReport, String> {
        let plan = &outer.stages[index];
        let unroll = outer.unroll;
        let (body, live, reductions, stores) = self.begin_stage(stage, extra_stores, ext, &loops);
        let n = body.nodes.len();
        let runs = loops.iter().all(|l| l.extent > 0);
        self.clamped = if runs {
            self.prove_accesses(body, &live, stores)?
        } else {
            vec![false; n]
        };
        self.lanes = plan.lanes.clone();
        for (i, node) in body.nodes.iter().enumerate() {
            if let ExprOp::Acc(a) = &node.op {
                if live[i] {
                    let v = self
                        .lane_accs
                        .get(a)
                        .cloned()
                        .ok_or_else(|| format!("internal error: {a} has no lane values"))?;
                    self.vvals[i] = Some(v);
                }
            }
        }
        let accs = self.init_lane_accumulators(reductions, unroll);
        let parts = self.hoisted_parts(body, &live, stores, loops.len());
        let last = Var::outer(self.ext.outer.len() - 1);
        let report = StageReport {
            vector: Some(format!("f32x4x{unroll} across {last}")),
            ..stage_report(stage, index, &loops)
        };
        let ctx = LaneCtx {
            loops: &loops,
            live: &live,
            parts: &parts,
            plan,
            reductions,
            stores,
            accs: &accs,
            unroll,
        };
        // An empty loop: nothing runs, the accumulators keep their identities.
        if runs {
            self.emit_lane_level(&ctx, 0)?;
            if loops.is_empty() {
                self.point_lanes(&ctx)?;
            } else {
                self.emit_lane_loop(&ctx, 1)?;
            }
        }
        self.finish_lane_accumulators(reductions, &accs);
        self.index_memo.clear();
        for l in &loops {
            self.vars.remove(&l.var);
        }
        self.var_levels.clear();
        self.loop_vars.clear();
        Ok(report)
    }

    /// The nodes fixed at `level`: vector nodes for every group, scalar nodes (splatted
    /// when vector code uses them), then the index parts fixed there.
    fn emit_lane_level(&mut self, ctx: &LaneCtx<'_>, level: usize) -> Result<(), String> {
        for i in 0..self.body.nodes.len() {
            if !ctx.live[i] || self.node_levels[i] != level {
                continue;
            }
            if ctx.plan.varies[i] {
                if matches!(self.body.nodes[i].op, ExprOp::Acc(_)) {
                    continue;
                }
                for g in 0..ctx.unroll {
                    self.emit_vector_node(i, g)?;
                }
            } else {
                self.emit_scalar_node(i)?;
                if ctx.plan.splats[i] {
                    let lanes = ctx.plan.lanes[i].ok_or("internal error: splat without lanes")?;
                    self.emit_splat(i, lanes)?;
                }
            }
        }
        for e in &ctx.parts[level] {
            self.index_value(e)?;
        }
        Ok(())
    }

    fn emit_lane_loop(&mut self, ctx: &LaneCtx<'_>, level: usize) -> Result<(), String> {
        let spec = ctx.loops[level - 1];
        let var = *self
            .vars
            .get(&spec.var)
            .ok_or_else(|| format!("internal error: {} has no variable", spec.var))?;
        self.b.def_var(var, spec.start);
        let lp = self.begin_loop(var, spec.end);
        self.emit_lane_level(ctx, level)?;
        if level == ctx.loops.len() {
            self.point_lanes(ctx)?;
        } else {
            self.emit_lane_loop(ctx, level + 1)?;
        }
        self.end_loop(var, 1, lp);
        self.forget_from(level);
        Ok(())
    }

    /// Stores and accumulates every group at the current inner point.
    fn point_lanes(&mut self, ctx: &LaneCtx<'_>) -> Result<(), String> {
        for s in ctx.stores {
            for g in 0..ctx.unroll {
                let x = self.vector_operand(s.value, g)?;
                let (addr, flags) = self.store_address(s.buffer, &s.index)?;
                self.b.ins().store(flags, x, addr, (16 * g) as i32);
            }
        }
        for (r, acc) in ctx.reductions.iter().zip(ctx.accs) {
            for g in 0..ctx.unroll {
                let x = self.vector_operand(r.value, g)?;
                match acc {
                    LaneAcc::Wide(halves) => {
                        let (lo_var, hi_var) = halves[g];
                        let (mut xl, mut xh) = self.widen_halves(x);
                        if let Some(rhs) = r.rhs {
                            // Products of two f32 are exact in f64.
                            let y = self.vector_operand(rhs, g)?;
                            let (yl, yh) = self.widen_halves(y);
                            xl = self.b.ins().fmul(xl, yl);
                            xh = self.b.ins().fmul(xh, yh);
                        }
                        let lo = self.b.use_var(lo_var);
                        let hi = self.b.use_var(hi_var);
                        let (lo, hi) = if r.kind == ReduceKind::Prod {
                            (self.b.ins().fmul(lo, xl), self.b.ins().fmul(hi, xh))
                        } else {
                            (self.b.ins().fadd(lo, xl), self.b.ins().fadd(hi, xh))
                        };
                        self.b.def_var(lo_var, lo);
                        self.b.def_var(hi_var, hi);
                    }
                    LaneAcc::Narrow(vars) => {
                        let acc = self.b.use_var(vars[g]);
                        // The scalar rule per lane: take x when beyond acc or NaN.
                        let cc = if r.kind == ReduceKind::Max {
                            FloatCC::GreaterThan
                        } else {
                            FloatCC::LessThan
                        };
                        let beyond = self.b.ins().fcmp(cc, x, acc);
                        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                        let take = self.b.ins().bor(beyond, nan);
                        let take = bitcast(self.b, types::F32X4, take);
                        let next = self.b.ins().bitselect(take, x, acc);
                        self.b.def_var(vars[g], next);
                    }
                }
            }
        }
        Ok(())
    }

    /// Lanes 0-1 and 2-3 of an `f32x4` as two `f64x2`.
    pub(super) fn widen_halves(&mut self, x: Value) -> (Value, Value) {
        let lo = self.b.ins().fvpromote_low(x);
        let swapped = self.shuffle_f32x4(x, x, (8..16).chain(0..8));
        let hi = self.b.ins().fvpromote_low(swapped);
        (lo, hi)
    }

    /// The `f32x4` made of bytes `bytes` of `a` (0-15) and `b` (16-31).
    fn shuffle_f32x4(&mut self, a: Value, b: Value, bytes: impl Iterator<Item = u8>) -> Value {
        let a = bitcast(self.b, types::I8X16, a);
        let b = bitcast(self.b, types::I8X16, b);
        let mask = ConstantData::from(bytes.collect::<Vec<u8>>());
        let mask = self.b.func.dfg.immediates.push(mask);
        let v = self.b.ins().shuffle(a, b, mask);
        bitcast(self.b, types::F32X4, v)
    }

    fn init_lane_accumulators(&mut self, reductions: &[Reduction], unroll: usize) -> Vec<LaneAcc> {
        reductions
            .iter()
            .map(|r| match r.kind {
                ReduceKind::Sum | ReduceKind::Prod => {
                    let identity = if r.kind == ReduceKind::Sum { 0.0 } else { 1.0 };
                    let s = self.b.ins().f64const(identity);
                    let v = self.b.ins().splat(types::F64X2, s);
                    LaneAcc::Wide(
                        (0..unroll)
                            .map(|_| {
                                let lo = self.b.declare_var(types::F64X2);
                                let hi = self.b.declare_var(types::F64X2);
                                self.b.def_var(lo, v);
                                self.b.def_var(hi, v);
                                (lo, hi)
                            })
                            .collect(),
                    )
                }
                _ => {
                    let identity = if r.kind == ReduceKind::Max {
                        f32::NEG_INFINITY
                    } else {
                        f32::INFINITY
                    };
                    let s = self.b.ins().f32const(identity);
                    let v = self.b.ins().splat(types::F32X4, s);
                    LaneAcc::Narrow(
                        (0..unroll)
                            .map(|_| {
                                let var = self.b.declare_var(types::F32X4);
                                self.b.def_var(var, v);
                                var
                            })
                            .collect(),
                    )
                }
            })
            .collect()
    }

    /// Records each accumulator's lanes, rounded to `f32` once, for later stages.
    fn finish_lane_accumulators(&mut self, reductions: &[Reduction], accs: &[LaneAcc]) {
        for (r, acc) in reductions.iter().zip(accs) {
            let groups: Vec<Value> = match acc {
                LaneAcc::Wide(halves) => halves
                    .iter()
                    .map(|&(lo, hi)| {
                        let lo = self.b.use_var(lo);
                        let hi = self.b.use_var(hi);
                        // Each half rounds to f32 lanes 0-1 (lanes 2-3 zero); interleave.
                        let lo = self.b.ins().fvdemote(lo);
                        let hi = self.b.ins().fvdemote(hi);
                        self.shuffle_f32x4(lo, hi, (0..8).chain(16..24))
                    })
                    .collect(),
                LaneAcc::Narrow(vars) => vars.iter().map(|&v| self.b.use_var(v)).collect(),
            };
            self.lane_accs.insert(r.acc, groups);
        }
    }
}

/// Everything the lane emission of one stage reads.
struct LaneCtx<'s> {
    loops: &'s [LoopSpec],
    live: &'s [bool],
    parts: &'s [Vec<IndexExpr>],
    plan: &'s StageLanes,
    reductions: &'s [Reduction],
    stores: &'s [StoreOp],
    accs: &'s [LaneAcc],
    unroll: usize,
}
