//! One planned kernel to one Cranelift function: the outer loop, stages, reductions, stores.
//!
//! The function is `fn(slots: *const *mut u8, begin: i64, end: i64) -> i32`. It runs the
//! points `begin..end` of the kernel's outer domain, flattened row-major, so a thread pool
//! can hand disjoint ranges to its workers. `slots` holds one base pointer per buffer the
//! kernel touches (see [`KernelInfo::slots`]). It returns 0, or the 1-based number of the
//! run-time check that failed (see [`KernelInfo::checks`]).
//!
//! The outer coordinates `i0, i1, ..` are decomposed from `begin` once (division by the
//! extents) and then carried: each step increments the innermost coordinate and wraps
//! into the next one, branch-free. Two loop shapes exist:
//!
//! - a kernel that is a single store stage without inner loops (a pointwise kernel) runs
//!   its innermost outer axis as the loop: each iteration of the outer loop covers the
//!   rest of a row (or of the range), and that row loop is what gets vectorized;
//! - every other kernel runs its stages at each outer point, each stage a loop nest over
//!   its inner domain whose innermost loop may be vectorized.
//!
//! Within a stage every node is computed at the outermost loop level where all its inputs
//! are fixed (loop-invariant code is hoisted by construction), and so is the fixed part
//! of every index. Accumulators live in registers (Cranelift variables) for the whole
//! nest; vectorized `f32` reductions keep one `f32x4` accumulator per unrolled group and
//! fold them at the end. What is vectorized, which loads clamp, and which points run as
//! lanes, the plan's [`Schedule`] says.

use super::convert::round_f64_to;
use super::expr::scalar_type;
use super::KernelInfo;
use crate::error::{Error, Result};
use crate::jit::Jit;
use crate::plan::analysis::{live_nodes, node_indices, Levels};
use crate::plan::{Lanes, Schedule, StagePlan};
use crate::vmath::VMath;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, Block as ClifBlock, Function, InstBuilder, MemFlagsData, SigRef, StackSlotData,
    StackSlotKind, Type, Value,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use ferrite_ir::loops::{
    AccId, Block, Buffer, BufferId, BufferKind, ExprOp, Extents, IndexExpr, Kernel, ReduceKind,
    Reduction, Stage, StoreOp, Var,
};
use ferrite_ir::{Category, DType};
use std::collections::{HashMap, HashSet};

static EMPTY_BLOCK: Block = Block { nodes: Vec::new() };

/// One loop of a stage's nest.
#[derive(Clone, Copy)]
pub(super) struct LoopSpec {
    pub(super) var: Var,
    /// The loop's full extent, for reports (the bounds are `start..end`).
    pub(super) extent: usize,
    pub(super) start: Value,
    pub(super) end: Value,
}

/// The emission state of one kernel function. Other files of this module add methods
/// (index arithmetic in `index.rs`, node emission in `expr.rs`).
pub(super) struct Emitter<'a, 'f> {
    pub(super) b: &'a mut FunctionBuilder<'f>,
    pub(super) vm: VMath,
    pub(super) call_conv: CallConv,
    pub(super) ptr_type: Type,
    pub(super) buffers: &'a [Buffer],
    /// Base pointer of every buffer the kernel touches (loaded once at entry).
    pub(super) ptrs: HashMap<BufferId, Value>,
    /// Buffers the kernel only reads (their loads may be marked read-only).
    pub(super) read_only: HashSet<BufferId>,
    /// The current value of every loop variable in scope.
    pub(super) vars: HashMap<Var, Variable>,
    /// The loop level of the variables of the current stage's nest (others are level 0).
    pub(super) var_levels: HashMap<Var, usize>,
    /// The variable of each loop level (level `k` is `loop_vars[k - 1]`).
    pub(super) loop_vars: Vec<Var>,
    /// The level of the stage's innermost loop (the one that may be vector code).
    pub(super) innermost: usize,
    /// Extents of the variables in scope, for index ranges.
    pub(super) ext: Extents,
    /// The current stage's body.
    pub(super) body: &'a Block,
    pub(super) node_levels: Vec<usize>,
    /// Guarded loads whose index is clamped into the buffer (not provably in bounds).
    pub(super) clamped: Vec<bool>,
    /// Lane forms of the nodes used by vector code.
    pub(super) lanes: Vec<Option<Lanes>>,
    /// Scalar values of nodes at the current position.
    pub(super) svals: Vec<Option<Value>>,
    /// Vector values (one per unrolled group) in the vector loop.
    pub(super) vvals: Vec<Option<Vec<Value>>>,
    /// Splats of fixed nodes used by vector code.
    pub(super) splat_vals: Vec<Option<Value>>,
    /// Index values emitted so far, with their levels.
    pub(super) index_memo: HashMap<IndexExpr, (Value, usize)>,
    /// Finished accumulators of earlier stages, in the register form of their dtype.
    pub(super) accs: HashMap<AccId, Value>,
    /// In a lanes step (see `lanes.rs`): finished accumulators, one `f32x4` per group.
    pub(super) lane_accs: HashMap<AccId, Vec<Value>>,
    /// Messages of the run-time checks; check `k` returns code `k + 1`.
    pub(super) checks: Vec<String>,
    /// Returns its `i32` parameter: where failed checks go.
    pub(super) err_block: ClifBlock,
    /// The signature of the integer `pow` helper, once imported.
    pub(super) ipow_sig: Option<SigRef>,
    /// The signature of the large-argument `sin`/`cos` helpers, once imported.
    pub(super) trig_sig: Option<SigRef>,
    /// Whether the ISA has fused multiply-add (CLIF `fma` is then one instruction).
    has_fma: bool,
}

/// Accumulator registers of one reduction.
struct AccVars {
    /// Running value: `f64` for float sum/prod, the value's own register for float
    /// max/min, `i64` for integers; for argmax/argmin the position.
    acc: Variable,
    /// Argmax/argmin: the best value so far and the running position.
    best: Option<(Variable, Variable)>,
    /// Vectorized: one `f32x4` per unrolled group.
    vector: Vec<Variable>,
    /// Vectorized float sums (not dot products): the `f64x2` halves the `f32x4` partial
    /// sums are folded into every `FOLD_EVERY` iterations of the unrolled loop.
    wide: Option<(Variable, Variable)>,
}

/// Iterations of the unrolled vector loop (16 elements each by default) between folds of
/// a float sum's `f32` lanes into `f64`: each lane adds at most this many terms in `f32`,
/// so a long row sums about as accurately as a pairwise sum (1M elements in 16 lanes
/// would otherwise chain 65,536 `f32` additions per lane).
const FOLD_EVERY: i64 = 16;

/// Builds (without compiling) the Cranelift function `name` computing the planned
/// `kernel` (whose buffers are `buffers`) as `schedule` says, for the ISA of `jit`.
pub fn function(
    jit: &Jit,
    name: &str,
    buffers: &[Buffer],
    kernel: &Kernel,
    schedule: &Schedule,
) -> Result<(Function, KernelInfo)> {
    let ptr_type = jit.pointer_type();
    let signature = jit.signature(&[ptr_type, types::I64, types::I64], &[types::I32]);
    let call_conv = signature.call_conv;
    let mut func = jit.new_function(name, signature);
    let mut fctx = FunctionBuilderContext::new();
    let vm = VMath::for_isa(jit.isa());
    let frontend_config = jit.isa().frontend_config();
    let scratch = |b: &BufferId| {
        buffers
            .get(b.index())
            .is_some_and(|b| b.kind == BufferKind::Scratch)
    };
    let mut slots: Vec<BufferId> = kernel
        .reads
        .iter()
        .chain(&kernel.writes)
        .map(|a| a.buffer)
        .collect();
    for stage in &kernel.stages {
        for node in &stage.body().nodes {
            if let ExprOp::Load(l) = &node.op {
                slots.push(l.buffer);
            }
        }
        slots.extend(stage.stores().iter().map(|s| s.buffer));
    }
    // Scratch buffers live in the stack frame, not in a slot.
    slots.retain(|b| !scratch(b));
    slots.sort();
    slots.dedup();
    for s in &slots {
        if s.index() >= buffers.len() {
            return Err(Error::InvalidProgram {
                message: format!("kernel {}: {s} does not exist", kernel.name),
            });
        }
    }
    let written: HashSet<BufferId> = kernel
        .stages
        .iter()
        .flat_map(|s| s.stores().iter().map(|w| w.buffer))
        .collect();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    let err_block = b.create_block();
    b.append_block_param(err_block, types::I32);
    b.set_cold_block(err_block);
    let mut e = Emitter {
        b: &mut b,
        vm,
        call_conv,
        ptr_type,
        buffers,
        ptrs: HashMap::new(),
        read_only: slots
            .iter()
            .copied()
            .filter(|s| !written.contains(s))
            .collect(),
        vars: HashMap::new(),
        var_levels: HashMap::new(),
        loop_vars: Vec::new(),
        innermost: 0,
        ext: Extents::default(),
        body: &EMPTY_BLOCK,
        node_levels: Vec::new(),
        clamped: Vec::new(),
        lanes: Vec::new(),
        svals: Vec::new(),
        vvals: Vec::new(),
        splat_vals: Vec::new(),
        index_memo: HashMap::new(),
        accs: HashMap::new(),
        lane_accs: HashMap::new(),
        checks: Vec::new(),
        err_block,
        ipow_sig: None,
        trig_sig: None,
        has_fma: jit.has_fma(),
    };
    e.emit_kernel(entry, kernel, &slots, schedule)?;
    let checks = std::mem::take(&mut e.checks);
    drop(e);
    b.seal_all_blocks();
    b.finalize(frontend_config);
    let info = KernelInfo {
        function: name.to_string(),
        kernel: kernel.name.clone(),
        slots,
        checks,
        stages: schedule.reports(),
        parallel: schedule.parallel,
        points: kernel.domain.iter().product(),
        work_per_point: kernel
            .stages
            .iter()
            .map(|s| s.domain().iter().product::<usize>().max(1))
            .sum(),
        notes: schedule.notes.clone(),
    };
    Ok((func, info))
}

impl<'a, 'f> Emitter<'a, 'f> {
    pub(super) fn var_level(&self, v: Var) -> usize {
        self.var_levels.get(&v).copied().unwrap_or(0)
    }

    pub(super) fn level_var(&self, level: usize) -> Var {
        self.loop_vars[level - 1]
    }

    pub(super) fn var_value(&mut self, v: Var) -> Result<Value> {
        let var = *self
            .vars
            .get(&v)
            .ok_or_else(|| Error::internal(format!("variable {v} is not in scope")))?;
        Ok(self.b.use_var(var))
    }

    fn new_var(&mut self, ty: Type, init: Value) -> Variable {
        let var = self.b.declare_var(ty);
        self.b.def_var(var, init);
        var
    }

    fn emit_kernel(
        &mut self,
        entry: ClifBlock,
        kernel: &'a Kernel,
        slots: &[BufferId],
        schedule: &'a Schedule,
    ) -> Result<()> {
        self.b.switch_to_block(entry);
        let params = self.b.block_params(entry).to_vec();
        let (slot_ptr, begin, end) = (params[0], params[1], params[2]);
        let slot_flags = MemFlagsData::trusted().with_readonly();
        for (i, &buf) in slots.iter().enumerate() {
            let offset = (i * self.ptr_type.bytes() as usize) as i32;
            let p = self
                .b
                .ins()
                .load(self.ptr_type, slot_flags, slot_ptr, offset);
            self.ptrs.insert(buf, p);
        }
        for s in &schedule.scratch {
            // 16-byte aligned, like the vectors it holds.
            let slot = self.b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                s.bytes as u32,
                4,
            ));
            let p = self.b.ins().stack_addr(self.ptr_type, slot, 0);
            self.ptrs.insert(s.buffer, p);
        }
        let done = self.b.create_block();
        let body = self.b.create_block();
        if kernel.domain.contains(&0) {
            // No points: there is nothing to run (and no extent to divide by).
            self.b.ins().jump(done, &[]);
            self.b.switch_to_block(done);
            let ok = self.b.ins().iconst(types::I32, 0);
            self.b.ins().return_(&[ok]);
            self.b.switch_to_block(body);
            self.b.ins().jump(done, &[]);
            self.b.switch_to_block(self.err_block);
            let code = self.b.block_params(self.err_block)[0];
            self.b.ins().return_(&[code]);
            return Ok(());
        }
        let empty = self
            .b
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, begin, end);
        self.b.ins().brif(empty, done, &[], body, &[]);
        self.b.switch_to_block(body);

        // The outer coordinates of `begin`, then carried from point to point.
        let domain = &kernel.domain;
        let n = domain.len();
        let flat = self.new_var(types::I64, begin);
        let mut coords = Vec::with_capacity(n);
        let mut rest = begin;
        for k in (0..n).rev() {
            if k == 0 {
                coords.push(rest);
            } else {
                let d = domain[k] as i64;
                coords.push(self.b.ins().urem_imm_u(rest, d));
                rest = self.b.ins().udiv_imm_u(rest, d);
            }
        }
        coords.reverse();
        let outer: Vec<Variable> = coords
            .iter()
            .map(|&c| self.new_var(types::I64, c))
            .collect();
        let header = self.b.create_block();
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);

        let row_loop = n >= 1 && crate::plan::analysis::is_pointwise(kernel);
        self.accs.clear();
        let step = if row_loop {
            let last = n - 1;
            for (k, &v) in outer.iter().enumerate().take(last) {
                self.vars.insert(Var::outer(k), v);
            }
            let i_last = self.b.use_var(outer[last]);
            let f = self.b.use_var(flat);
            let left_in_range = self.b.ins().isub(end, f);
            let d_last = self.b.ins().iconst(types::I64, domain[last] as i64);
            let left_in_row = self.b.ins().isub(d_last, i_last);
            let seg = self.b.ins().smin(left_in_range, left_in_row);
            let seg_end = self.b.ins().iadd(i_last, seg);
            let row_var = self.b.declare_var(types::I64);
            self.vars.insert(Var::outer(last), row_var);
            let spec = LoopSpec {
                var: Var::outer(last),
                extent: domain[last],
                start: i_last,
                end: seg_end,
            };
            let ext = Extents {
                outer: domain.clone(),
                reduce: vec![],
                store: vec![],
            };
            let plan = stage_plan(schedule, 0)?;
            self.emit_stage(&kernel.stages[0], plan, ext, vec![spec])?;
            let next_last = self.b.ins().iadd(i_last, seg);
            self.b.def_var(outer[last], next_last);
            seg
        } else {
            for (k, &v) in outer.iter().enumerate() {
                self.vars.insert(Var::outer(k), v);
            }
            let step_var = self.b.declare_var(types::I64);
            let join = self.b.create_block();
            if let Some(plan) = &schedule.lanes {
                // A whole group of points left in the row and in the range: a lanes step.
                let width = 4 * plan.unroll as i64;
                let i_last = self.b.use_var(outer[n - 1]);
                let group_end = self.b.ins().iadd_imm_s(i_last, width);
                let in_row = self.b.ins().icmp_imm_s(
                    IntCC::SignedLessThanOrEqual,
                    group_end,
                    domain[n - 1] as i64,
                );
                let f = self.b.use_var(flat);
                let f_end = self.b.ins().iadd_imm_s(f, width);
                let in_range = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, f_end, end);
                let whole = self.b.ins().band(in_row, in_range);
                let lanes_block = self.b.create_block();
                let scalar_block = self.b.create_block();
                self.b
                    .ins()
                    .brif(whole, lanes_block, &[], scalar_block, &[]);
                self.b.switch_to_block(lanes_block);
                self.lane_accs.clear();
                let lane_kernel = match &plan.stash {
                    Some(ls) => {
                        // Lane `l` of inner point `p` lives at `p*width + l` of the slot:
                        // the lanes index `p*width + i_last + l` from a base `i_last`
                        // elements below the slot. The step runs only for
                        // `i_last + width <= extent`, so every access is in the slot.
                        let i_last = self.b.use_var(outer[n - 1]);
                        let shift = self.b.ins().ishl_imm_u(i_last, 2);
                        for (scalar_id, lane_buf) in &ls.scratch {
                            let slot = *self
                                .ptrs
                                .get(scalar_id)
                                .ok_or_else(|| Error::internal("scratch without a slot"))?;
                            let base = self.b.ins().isub(slot, shift);
                            self.ptrs.insert(lane_buf.id, base);
                        }
                        &ls.kernel
                    }
                    None => kernel,
                };
                for (si, stage) in lane_kernel.stages.iter().enumerate() {
                    let ext = stage.extents(domain);
                    let loops = self.stage_loops(stage);
                    let step = plan
                        .plans
                        .get(si)
                        .ok_or_else(|| Error::internal(format!("lanes stage {si} has no plan")))?;
                    self.emit_stage_lanes(stage, si, ext, loops, plan, step)?;
                }
                self.lane_accs.clear();
                let i_last = self.b.use_var(outer[n - 1]);
                let next = self.b.ins().iadd_imm_s(i_last, width);
                self.b.def_var(outer[n - 1], next);
                let w = self.b.ins().iconst(types::I64, width);
                self.b.def_var(step_var, w);
                self.b.ins().jump(join, &[]);
                self.b.switch_to_block(scalar_block);
            }
            self.accs.clear();
            for (si, stage) in kernel.stages.iter().enumerate() {
                let ext = stage.extents(domain);
                let loops = self.stage_loops(stage);
                self.emit_stage(stage, stage_plan(schedule, si)?, ext, loops)?;
            }
            if n > 0 {
                let i_last = self.b.use_var(outer[n - 1]);
                let next = self.b.ins().iadd_imm_s(i_last, 1);
                self.b.def_var(outer[n - 1], next);
            }
            let one = self.b.ins().iconst(types::I64, 1);
            self.b.def_var(step_var, one);
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(join);
            self.b.use_var(step_var)
        };
        let f = self.b.use_var(flat);
        let next = self.b.ins().iadd(f, step);
        self.b.def_var(flat, next);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, next, end);
        let latch = self.b.create_block();
        self.b.ins().brif(more, latch, &[], done, &[]);
        self.b.switch_to_block(latch);
        // Carry: a coordinate that reached its extent wraps to 0 and bumps the next one.
        for k in (1..n).rev() {
            let x = self.b.use_var(outer[k]);
            let wrap = self.b.ins().icmp_imm_s(IntCC::Equal, x, domain[k] as i64);
            let zero = self.b.ins().iconst(types::I64, 0);
            let x = self.b.ins().select(wrap, zero, x);
            self.b.def_var(outer[k], x);
            let up = self.b.use_var(outer[k - 1]);
            let carry = self.b.ins().uextend(types::I64, wrap);
            let up = self.b.ins().iadd(up, carry);
            self.b.def_var(outer[k - 1], up);
        }
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(done);
        let ok = self.b.ins().iconst(types::I32, 0);
        self.b.ins().return_(&[ok]);
        self.b.switch_to_block(self.err_block);
        let code = self.b.block_params(self.err_block)[0];
        self.b.ins().return_(&[code]);
        Ok(())
    }

    /// Resets the per-stage emission state for `stage` over `loops`: returns its body,
    /// live nodes, reductions and stores.
    pub(super) fn begin_stage(
        &mut self,
        stage: &'a Stage,
        ext: Extents,
        loops: &[LoopSpec],
    ) -> (&'a Block, Vec<bool>, &'a [Reduction], &'a [StoreOp]) {
        let body = stage.body();
        let n = body.nodes.len();
        self.body = body;
        self.ext = ext;
        self.var_levels = loops
            .iter()
            .enumerate()
            .map(|(k, l)| (l.var, k + 1))
            .collect();
        self.loop_vars = loops.iter().map(|l| l.var).collect();
        self.innermost = loops.len();
        self.index_memo.clear();
        self.svals = vec![None; n];
        self.vvals = vec![None; n];
        self.splat_vals = vec![None; n];
        self.node_levels = Levels::new(body, &self.loop_vars).nodes;
        let live = live_nodes(stage);
        let reductions: &[Reduction] = match stage {
            Stage::Reduce { reductions, .. } => reductions,
            Stage::Store { .. } => &[],
        };
        (body, live, reductions, stage.stores())
    }

    /// The loops of a stage's inner domain, from 0 to each extent, with fresh variables.
    fn stage_loops(&mut self, stage: &Stage) -> Vec<LoopSpec> {
        stage
            .domain()
            .iter()
            .enumerate()
            .map(|(k, &d)| {
                let var = match stage {
                    Stage::Reduce { .. } => Var::reduce(k),
                    Stage::Store { .. } => Var::store(k),
                };
                let start = self.b.ins().iconst(types::I64, 0);
                let end = self.b.ins().iconst(types::I64, d as i64);
                self.vars.insert(var, self.b.declare_var(types::I64));
                LoopSpec {
                    var,
                    extent: d,
                    start,
                    end,
                }
            })
            .collect()
    }

    /// Emits one stage at the current position (one point of the outer loop, or one row)
    /// as `plan` says.
    fn emit_stage(
        &mut self,
        stage: &'a Stage,
        plan: &StagePlan,
        ext: Extents,
        loops: Vec<LoopSpec>,
    ) -> Result<()> {
        let (body, live, reductions, stores) = self.begin_stage(stage, ext, &loops);
        let n = body.nodes.len();
        let runs = loops.iter().all(|l| l.extent > 0);
        // Reductions start at their identities whether or not the loop runs.
        let acc_vars = self.init_accumulators(reductions, body)?;
        if runs {
            self.clamped = plan.clamped.clone();
            let unroll = plan.unroll;
            match &plan.vector {
                Some(p) => self.lanes = p.lanes.clone(),
                None => self.lanes = vec![None; n],
            }
            let acc_vars =
                self.init_vector_accumulators(reductions, acc_vars, plan.vector.is_some(), unroll);
            let parts = self.hoisted_parts(body, &live, stores, loops.len());
            let fold_count = acc_vars.iter().any(|v| v.wide.is_some()).then(|| {
                let zero = self.b.ins().iconst(types::I64, 0);
                self.new_var(types::I64, zero)
            });
            let ctx = StageCtx {
                loops: &loops,
                live: &live,
                parts: &parts,
                reductions,
                stores,
                acc_vars: &acc_vars,
                splats: plan.vector.as_ref().map(|p| p.splats.clone()),
                unroll,
                fold_count,
            };
            self.emit_level_nodes(&ctx, 0)?;
            if loops.is_empty() {
                self.point_scalar(&ctx)?;
            } else {
                self.emit_loop(&ctx, 1)?;
            }
            self.finish_accumulators(reductions, &acc_vars)?;
        } else {
            self.finish_accumulators(reductions, &acc_vars)?;
        }
        self.index_memo.clear();
        for l in &loops {
            self.vars.remove(&l.var);
        }
        self.var_levels.clear();
        self.loop_vars.clear();
        Ok(())
    }
}

/// The plan of stage `index` of the kernel `schedule` belongs to.
fn stage_plan(schedule: &Schedule, index: usize) -> Result<&StagePlan> {
    schedule
        .stages
        .get(index)
        .ok_or_else(|| Error::internal(format!("stage {index} has no plan")))
}

/// The blocks of a counted loop being emitted.
pub(super) struct LoopBlocks {
    body: ClifBlock,
    exit: ClifBlock,
    end: Value,
}

/// Everything the loop emission of one stage reads.
struct StageCtx<'s> {
    loops: &'s [LoopSpec],
    live: &'s [bool],
    parts: &'s [Vec<IndexExpr>],
    reductions: &'s [Reduction],
    stores: &'s [StoreOp],
    acc_vars: &'s [AccVars],
    splats: Option<Vec<usize>>,
    unroll: usize,
    /// Iterations of the unrolled vector loop since the sums' last fold into `f64`.
    fold_count: Option<Variable>,
}

impl<'a, 'f> Emitter<'a, 'f> {
    /// The loop-invariant parts of the stage's index expressions, by the level where they
    /// become fixed (emitted there, so inner loops only add the moving part).
    pub(super) fn hoisted_parts(
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

    /// Scalar nodes fixed at `level`, then the index parts that become fixed there.
    fn emit_level_nodes(&mut self, ctx: &StageCtx<'_>, level: usize) -> Result<()> {
        for i in 0..self.body.nodes.len() {
            if ctx.live[i] && self.node_levels[i] == level {
                self.emit_scalar_node(i)?;
            }
        }
        for e in &ctx.parts[level] {
            self.index_value(e)?;
        }
        Ok(())
    }

    /// Forgets the values computed inside loops of `level` and deeper (they do not
    /// dominate the code after the loop).
    pub(super) fn forget_from(&mut self, level: usize) {
        for i in 0..self.svals.len() {
            if self.node_levels[i] >= level {
                self.svals[i] = None;
                self.vvals[i] = None;
            }
        }
        self.index_memo.retain(|_, (_, l)| *l < level);
    }

    /// Enters a counted loop `while var < end` (tested once before the first iteration,
    /// then at the bottom of each, so an iteration costs one branch) and positions the
    /// builder in its body.
    pub(super) fn begin_loop(&mut self, var: Variable, end: Value) -> LoopBlocks {
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let v = self.b.use_var(var);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, v, end);
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        LoopBlocks { body, exit, end }
    }

    /// Steps the loop variable, branches back while it is below the end, and positions
    /// the builder after the loop.
    pub(super) fn end_loop(&mut self, var: Variable, step: i64, lp: LoopBlocks) {
        let v = self.b.use_var(var);
        let next = self.b.ins().iadd_imm_s(v, step);
        self.b.def_var(var, next);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, next, lp.end);
        self.b.ins().brif(more, lp.body, &[], lp.exit, &[]);
        self.b.switch_to_block(lp.exit);
    }

    fn emit_loop(&mut self, ctx: &StageCtx<'_>, level: usize) -> Result<()> {
        let spec = ctx.loops[level - 1];
        let var = *self
            .vars
            .get(&spec.var)
            .ok_or_else(|| Error::internal(format!("{} has no variable", spec.var)))?;
        self.b.def_var(var, spec.start);
        let innermost = level == ctx.loops.len();
        if innermost {
            if let Some(splats) = &ctx.splats {
                for &i in splats {
                    let lanes =
                        self.lanes[i].ok_or_else(|| Error::internal("splat without lanes"))?;
                    self.emit_splat(i, lanes)?;
                }
                let len = self.b.ins().isub(spec.end, spec.start);
                let mut shapes = Vec::new();
                if ctx.unroll > 1 {
                    shapes.push(ctx.unroll);
                }
                shapes.push(1);
                for u in shapes {
                    let width = 4 * u as i64;
                    let whole = self.b.ins().band_imm_s(len, !(width - 1));
                    let end = self.b.ins().iadd(spec.start, whole);
                    let lp = self.begin_loop(var, end);
                    // Group by group: each group's values die before the next starts, so
                    // long bodies (vector math) do not run out of registers.
                    for g in 0..u {
                        for i in 0..self.body.nodes.len() {
                            if ctx.live[i] && self.node_levels[i] == level {
                                self.emit_vector_node(i, g)?;
                            }
                        }
                        self.point_vector(ctx, g)?;
                    }
                    if u == ctx.unroll {
                        self.fold_sums(ctx);
                    }
                    self.end_loop(var, width, lp);
                    self.forget_from(level);
                }
            }
        }
        let lp = self.begin_loop(var, spec.end);
        self.emit_level_nodes(ctx, level)?;
        if innermost {
            self.point_scalar(ctx)?;
        } else {
            self.emit_loop(ctx, level + 1)?;
        }
        self.end_loop(var, 1, lp);
        self.forget_from(level);
        Ok(())
    }

    // ---- per-point work ----

    fn point_scalar(&mut self, ctx: &StageCtx<'_>) -> Result<()> {
        for s in ctx.stores {
            let value = self.scalar_of(s.value)?;
            let dtype = self.buffer_dtype(s.buffer)?;
            let (addr, flags) = self.store_address(s.buffer, &s.index)?;
            self.store_scalar(dtype, flags, value, addr);
        }
        for (r, vars) in ctx.reductions.iter().zip(ctx.acc_vars) {
            let x = self.scalar_of(r.value)?;
            let value_dtype = self.body.nodes[r.value.index()].dtype;
            match r.rhs {
                Some(rhs) => {
                    let y = self.scalar_of(rhs)?;
                    self.accumulate_product(value_dtype, vars, x, y);
                }
                None => self.combine_scalar(r.kind, value_dtype, vars, x),
            }
        }
        Ok(())
    }

    /// The per-point work of unrolled group `g` in vector code.
    fn point_vector(&mut self, ctx: &StageCtx<'_>, g: usize) -> Result<()> {
        for s in ctx.stores {
            let x = self.vector_operand(s.value, g)?;
            let (addr, flags) = self.store_address(s.buffer, &s.index)?;
            self.b.ins().store(flags, x, addr, (16 * g) as i32);
        }
        for (r, vars) in ctx.reductions.iter().zip(ctx.acc_vars) {
            let x = self.vector_operand(r.value, g)?;
            let var = vars.vector[g];
            let acc = self.b.use_var(var);
            let next = match r.rhs {
                Some(rhs) => {
                    let y = self.vector_operand(rhs, g)?;
                    if self.has_fma {
                        // f32 lanes: the product is rounded once, fused into the add.
                        self.b.ins().fma(x, y, acc)
                    } else {
                        let p = self.b.ins().fmul(x, y);
                        self.b.ins().fadd(acc, p)
                    }
                }
                None => self.vector_combine(r.kind, acc, x),
            };
            self.b.def_var(var, next);
        }
        Ok(())
    }

    // ---- reductions ----

    /// In the unrolled vector loop: every `FOLD_EVERY` iterations, adds each float sum's
    /// `f32x4` partial sums into its `f64x2` halves and restarts them at zero.
    fn fold_sums(&mut self, ctx: &StageCtx<'_>) {
        let Some(count_var) = ctx.fold_count else {
            return;
        };
        // One counter and one branch for all the stage's sums.
        let count = self.b.use_var(count_var);
        let count = self.b.ins().iadd_imm_s(count, 1);
        let due = self.b.ins().icmp_imm_s(IntCC::Equal, count, FOLD_EVERY);
        let zero = self.b.ins().iconst(types::I64, 0);
        let count = self.b.ins().select(due, zero, count);
        self.b.def_var(count_var, count);
        let fold = self.b.create_block();
        let cont = self.b.create_block();
        self.b.ins().brif(due, fold, &[], cont, &[]);
        self.b.switch_to_block(fold);
        self.b.set_cold_block(fold);
        let z = self.b.ins().f32const(0.0);
        let z = self.b.ins().splat(types::F32X4, z);
        for vars in ctx.acc_vars {
            let Some((lo_var, hi_var)) = vars.wide else {
                continue;
            };
            let mut lo = self.b.use_var(lo_var);
            let mut hi = self.b.use_var(hi_var);
            for &var in &vars.vector {
                let part = self.b.use_var(var);
                let (pl, ph) = self.widen_halves(part);
                lo = self.b.ins().fadd(lo, pl);
                hi = self.b.ins().fadd(hi, ph);
                self.b.def_var(var, z);
            }
            self.b.def_var(lo_var, lo);
            self.b.def_var(hi_var, hi);
        }
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
    }

    fn init_accumulators(
        &mut self,
        reductions: &[Reduction],
        body: &Block,
    ) -> Result<Vec<AccVars>> {
        let mut out = Vec::with_capacity(reductions.len());
        for r in reductions {
            let value = body.get(r.value).ok_or_else(|| {
                Error::internal(format!(
                    "{} reduces {}, which is not a node",
                    r.acc, r.value
                ))
            })?;
            let vd = value.dtype;
            let float = vd.category() == Category::Float;
            let acc = if r.kind.is_arg() {
                let (best_ty, best_init) = if float {
                    let inf = if r.kind == ReduceKind::ArgMax {
                        f32::NEG_INFINITY
                    } else {
                        f32::INFINITY
                    };
                    (types::F32, self.b.ins().f32const(inf))
                } else {
                    let init = if r.kind == ReduceKind::ArgMax {
                        i64::MIN
                    } else {
                        i64::MAX
                    };
                    (types::I64, self.b.ins().iconst(types::I64, init))
                };
                let zero = self.b.ins().iconst(types::I64, 0);
                let best = self.new_var(best_ty, best_init);
                let count = self.new_var(types::I64, zero);
                let pos = self.new_var(types::I64, zero);
                AccVars {
                    acc: pos,
                    best: Some((best, count)),
                    vector: Vec::new(),
                    wide: None,
                }
            } else {
                let init = match (float, r.kind) {
                    (true, ReduceKind::Sum) => self.b.ins().f64const(0.0),
                    (true, ReduceKind::Prod) => self.b.ins().f64const(1.0),
                    (true, ReduceKind::Max) => self.b.ins().f32const(f32::NEG_INFINITY),
                    (true, _) => self.b.ins().f32const(f32::INFINITY),
                    (false, ReduceKind::Sum) => self.b.ins().iconst(types::I64, 0),
                    (false, ReduceKind::Prod) => self.b.ins().iconst(types::I64, 1),
                    (false, ReduceKind::Max) => self.b.ins().iconst(types::I64, i64::MIN),
                    (false, _) => self.b.ins().iconst(types::I64, i64::MAX),
                };
                let ty = self.b.func.dfg.value_type(init);
                AccVars {
                    acc: self.new_var(ty, init),
                    best: None,
                    vector: Vec::new(),
                    wide: None,
                }
            };
            out.push(acc);
        }
        Ok(out)
    }

    fn init_vector_accumulators(
        &mut self,
        reductions: &[Reduction],
        mut vars: Vec<AccVars>,
        vectorized: bool,
        unroll: usize,
    ) -> Vec<AccVars> {
        if !vectorized {
            return vars;
        }
        for (r, v) in reductions.iter().zip(vars.iter_mut()) {
            let identity = match r.kind {
                ReduceKind::Sum => 0.0,
                ReduceKind::Prod => 1.0,
                ReduceKind::Max => f32::NEG_INFINITY,
                _ => f32::INFINITY,
            };
            let s = self.b.ins().f32const(identity);
            let splat = self.b.ins().splat(types::F32X4, s);
            v.vector = (0..unroll)
                .map(|_| self.new_var(types::F32X4, splat))
                .collect();
            if r.kind == ReduceKind::Sum && r.rhs.is_none() {
                let zero = self.b.ins().f64const(0.0);
                let zero = self.b.ins().splat(types::F64X2, zero);
                v.wide = Some((
                    self.new_var(types::F64X2, zero),
                    self.new_var(types::F64X2, zero),
                ));
            }
        }
        vars
    }

    /// `acc <- acc (op) x` for scalars, with the reference's NaN rules.
    fn combine_scalar(&mut self, kind: ReduceKind, value_dtype: DType, vars: &AccVars, x: Value) {
        let float = value_dtype.category() == Category::Float;
        if let Some((best_var, count_var)) = vars.best {
            let best = self.b.use_var(best_var);
            let count = self.b.use_var(count_var);
            let pos = self.b.use_var(vars.acc);
            let (x, update) = if float {
                let best_nan = self.b.ins().fcmp(FloatCC::Unordered, best, best);
                let x_nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                let cc = if kind == ReduceKind::ArgMax {
                    FloatCC::GreaterThan
                } else {
                    FloatCC::LessThan
                };
                let better = self.b.ins().fcmp(cc, x, best);
                let better = self.b.ins().bor(better, x_nan);
                // The first NaN wins and stays.
                let settled = self.b.ins().bxor_imm_u(best_nan, 1);
                (x, self.b.ins().band(better, settled))
            } else {
                let w = self.widen_to_i64(x);
                let cc = if kind == ReduceKind::ArgMax {
                    IntCC::SignedGreaterThan
                } else {
                    IntCC::SignedLessThan
                };
                (w, self.b.ins().icmp(cc, w, best))
            };
            let best = self.b.ins().select(update, x, best);
            let pos = self.b.ins().select(update, count, pos);
            let count = self.b.ins().iadd_imm_s(count, 1);
            self.b.def_var(best_var, best);
            self.b.def_var(vars.acc, pos);
            self.b.def_var(count_var, count);
            return;
        }
        let acc = self.b.use_var(vars.acc);
        let next = if float {
            match kind {
                ReduceKind::Sum | ReduceKind::Prod => {
                    let w = self.b.ins().fpromote(types::F64, x);
                    if kind == ReduceKind::Sum {
                        self.b.ins().fadd(acc, w)
                    } else {
                        self.b.ins().fmul(acc, w)
                    }
                }
                _ => self.nan_sticky_extreme(kind, acc, x),
            }
        } else {
            let w = self.widen_to_i64(x);
            match kind {
                ReduceKind::Sum => self.b.ins().iadd(acc, w),
                ReduceKind::Prod => self.b.ins().imul(acc, w),
                ReduceKind::Max => self.b.ins().smax(acc, w),
                _ => self.b.ins().smin(acc, w),
            }
        };
        self.b.def_var(vars.acc, next);
    }

    /// `acc <- acc + x*y` for a dot product: the product is exact (in `f64`, or wrapping
    /// `i64`), as the reference computes it.
    fn accumulate_product(&mut self, value_dtype: DType, vars: &AccVars, x: Value, y: Value) {
        let acc = self.b.use_var(vars.acc);
        let next = if value_dtype.category() == Category::Float {
            let a = self.b.ins().fpromote(types::F64, x);
            let c = self.b.ins().fpromote(types::F64, y);
            let p = self.b.ins().fmul(a, c);
            self.b.ins().fadd(acc, p)
        } else {
            let a = self.widen_to_i64(x);
            let c = self.widen_to_i64(y);
            let p = self.b.ins().imul(a, c);
            self.b.ins().iadd(acc, p)
        };
        self.b.def_var(vars.acc, next);
    }

    /// `x` replaces `acc` when it is NaN or beyond it (so NaN, once in, stays).
    fn nan_sticky_extreme(&mut self, kind: ReduceKind, acc: Value, x: Value) -> Value {
        let cc = if kind == ReduceKind::Max {
            FloatCC::GreaterThan
        } else {
            FloatCC::LessThan
        };
        let beyond = self.b.ins().fcmp(cc, x, acc);
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let take = self.b.ins().bor(beyond, nan);
        self.b.ins().select(take, x, acc)
    }

    fn vector_combine(&mut self, kind: ReduceKind, acc: Value, x: Value) -> Value {
        let vm = self.vm;
        match kind {
            ReduceKind::Sum => self.b.ins().fadd(acc, x),
            ReduceKind::Prod => self.b.ins().fmul(acc, x),
            ReduceKind::Max => vm.maximum(self.b, acc, x),
            _ => vm.minimum(self.b, acc, x),
        }
    }

    /// Folds vector accumulators into the scalar one and records each accumulator's
    /// final value, rounded to its dtype, for later stages.
    fn finish_accumulators(&mut self, reductions: &[Reduction], vars: &[AccVars]) -> Result<()> {
        for (r, v) in reductions.iter().zip(vars) {
            if !v.vector.is_empty() {
                let mut parts: Vec<Value> =
                    v.vector.iter().map(|&var| self.b.use_var(var)).collect();
                while parts.len() > 1 {
                    let mut next = Vec::with_capacity(parts.len().div_ceil(2));
                    for pair in parts.chunks(2) {
                        next.push(if pair.len() == 2 {
                            self.vector_combine(r.kind, pair[0], pair[1])
                        } else {
                            pair[0]
                        });
                    }
                    parts = next;
                }
                let lanes: Vec<Value> = (0..4u8)
                    .map(|l| self.b.ins().extractlane(parts[0], l))
                    .collect();
                let h01 = self.scalar_fold(r.kind, lanes[0], lanes[1]);
                let h23 = self.scalar_fold(r.kind, lanes[2], lanes[3]);
                let h = self.scalar_fold(r.kind, h01, h23);
                let acc = self.b.use_var(v.acc);
                let merged = match r.kind {
                    ReduceKind::Sum => {
                        let w = self.b.ins().fpromote(types::F64, h);
                        let mut acc = self.b.ins().fadd(acc, w);
                        if let Some((lo, hi)) = v.wide {
                            // The folded f64 part.
                            let lo = self.b.use_var(lo);
                            let hi = self.b.use_var(hi);
                            let both = self.b.ins().fadd(lo, hi);
                            let l0 = self.b.ins().extractlane(both, 0);
                            let l1 = self.b.ins().extractlane(both, 1);
                            let folded = self.b.ins().fadd(l0, l1);
                            acc = self.b.ins().fadd(acc, folded);
                        }
                        acc
                    }
                    ReduceKind::Prod => {
                        let w = self.b.ins().fpromote(types::F64, h);
                        self.b.ins().fmul(acc, w)
                    }
                    _ => self.nan_sticky_extreme(r.kind, acc, h),
                };
                self.b.def_var(v.acc, merged);
            }
            let acc = self.b.use_var(v.acc);
            let value = if r.kind.is_arg() {
                acc
            } else {
                match r.dtype.category() {
                    Category::Float => match r.kind {
                        ReduceKind::Sum | ReduceKind::Prod => round_f64_to(self.b, acc, r.dtype),
                        _ => acc,
                    },
                    Category::Int => {
                        if r.dtype == DType::I32 {
                            self.b.ins().ireduce(types::I32, acc)
                        } else {
                            acc
                        }
                    }
                    Category::Bool => self.b.ins().icmp_imm_s(IntCC::NotEqual, acc, 0),
                }
            };
            debug_assert_eq!(self.b.func.dfg.value_type(value), scalar_type(r.dtype));
            self.accs.insert(r.acc, value);
        }
        Ok(())
    }

    /// Combines two `f32` partial results of a vectorized reduction.
    fn scalar_fold(&mut self, kind: ReduceKind, a: Value, c: Value) -> Value {
        match kind {
            ReduceKind::Sum => self.b.ins().fadd(a, c),
            ReduceKind::Prod => self.b.ins().fmul(a, c),
            _ => self.nan_sticky_extreme(kind, a, c),
        }
    }
}
