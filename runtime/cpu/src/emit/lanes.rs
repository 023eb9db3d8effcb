//! Lanes across the outer domain: the emission of a lanes step (the plan's `lanes.rs`
//! decides which kernels run so, and what is a vector).
//!
//! A step covers `4 * unroll` neighbouring outer points along the last outer axis: every
//! value that depends on the last outer coordinate is a vector (lane `l` is point
//! `i + l`), values that do not are scalars splatted where vectors use them, inner loops
//! step one point at a time, and each reduction keeps one accumulator per lane. Numerics
//! are the scalar code's, lane by lane: float sums and products accumulate in `f64` (two
//! `f64x2` halves per vector), products of a dot are exact in `f64`, and each lane is
//! rounded to `f32` once at the end; max/min keep the first of equal values and let NaN
//! stick, as the scalar `select` does.

use super::convert::bitcast;
use super::kernel::{Emitter, LoopSpec};
use crate::error::{Error, Result};
use crate::plan::{OuterLanes, StageLanes, StagePlan};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, ConstantData, InstBuilder, Value};
use cranelift_frontend::Variable;
use ferrite_ir::loops::{ExprOp, Extents, IndexExpr, ReduceKind, Reduction, Stage, StoreOp};

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
        index: usize,
        ext: Extents,
        loops: Vec<LoopSpec>,
        outer: &OuterLanes,
        step: &StagePlan,
    ) -> Result<()> {
        let plan = &outer.stages[index];
        let unroll = outer.unroll;
        let (body, live, reductions, stores) = self.begin_stage(stage, ext, &loops);
        let runs = loops.iter().all(|l| l.extent > 0);
        self.clamped = step.clamped.clone();
        self.lanes = plan.lanes.clone();
        for (i, node) in body.nodes.iter().enumerate() {
            if let ExprOp::Acc(a) = &node.op {
                if live[i] {
                    let v = self
                        .lane_accs
                        .get(a)
                        .cloned()
                        .ok_or_else(|| Error::internal(format!("{a} has no lane values")))?;
                    self.vvals[i] = Some(v);
                }
            }
        }
        let accs = self.init_lane_accumulators(reductions, unroll);
        let parts = self.hoisted_parts(body, &live, stores, loops.len());
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
        Ok(())
    }

    /// The nodes fixed at `level`: vector nodes for every group, scalar nodes (splatted
    /// when vector code uses them), then the index parts fixed there.
    fn emit_lane_level(&mut self, ctx: &LaneCtx<'_>, level: usize) -> Result<()> {
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
                    let lanes =
                        ctx.plan.lanes[i].ok_or_else(|| Error::internal("splat without lanes"))?;
                    self.emit_splat(i, lanes)?;
                }
            }
        }
        for e in &ctx.parts[level] {
            self.index_value(e)?;
        }
        Ok(())
    }

    fn emit_lane_loop(&mut self, ctx: &LaneCtx<'_>, level: usize) -> Result<()> {
        let spec = ctx.loops[level - 1];
        let var = *self
            .vars
            .get(&spec.var)
            .ok_or_else(|| Error::internal(format!("{} has no variable", spec.var)))?;
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
    fn point_lanes(&mut self, ctx: &LaneCtx<'_>) -> Result<()> {
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
