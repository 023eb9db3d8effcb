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
//! When the plan gives the kernel lanes, each step first tests whether a whole group of
//! points is left in the row and in the range, and runs it as a lanes step; the other
//! points run one at a time. The stages themselves are `stage.rs`'s.

use super::stage::Shape;
use super::state::{Emitter, Exits, Finished, IntOp, Ints, LoopSpec, Memory, Nest, Target, Values};
use crate::error::{Error, Result};
use crate::jit::{isa_has_fma, signature};
use crate::plan::analysis::{is_pointwise, substitute};
use crate::plan::wide::{ChainRow, Factor, WideCall, WideOp};
use crate::plan::{Schedule, StagePlan, StageReport};
use crate::vmath::VMath;
use crate::wide::{
    chain_routine, exp_sum_routine, in_place_routine, offset_routine, row_routine, scale_routine,
    ChainFn,
};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, Block as ClifBlock, Function, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind,
    UserFuncName, Value,
};
use cranelift_codegen::isa::TargetIsa;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use ferrite_ir::hash::{HashMap, HashSet};
use ferrite_ir::loops::{
    Buffer, BufferId, BufferKind, ExprOp, Extents, IndexExpr, Kernel, Load, Var,
};

/// What the executor needs to know about a compiled kernel function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The function's name in the JIT module.
    pub function: String,
    /// The kernel's name in the program.
    pub kernel: String,
    /// `slots[s]` is the buffer whose base pointer goes in slot `s` of the call.
    pub slots: Vec<BufferId>,
    /// Run-time check messages: a call returning `k > 0` failed check `checks[k - 1]`.
    pub checks: Vec<String>,
    /// One report per stage.
    pub stages: Vec<StageReport>,
    /// Whether outer points write disjoint elements, so ranges may run in parallel.
    pub parallel: bool,
    /// Points of the outer domain.
    pub points: usize,
    /// Inner-loop iterations per outer point (at least 1 per stage), to size work chunks.
    pub work_per_point: usize,
    /// Rewrites made before emission (values stashed once per point), one line each.
    pub notes: Vec<String>,
}

/// Builds (without compiling) the Cranelift function `name` computing the planned
/// `kernel` (whose buffers are `buffers`) as `schedule` says, for `isa` (a
/// [`Jit`](crate::jit::Jit)'s: any thread may build functions for it).
pub fn function(
    isa: &dyn TargetIsa,
    name: &str,
    buffers: &[Buffer],
    kernel: &Kernel,
    schedule: &Schedule,
) -> Result<(Function, KernelInfo)> {
    let ptr_type = isa.pointer_type();
    let signature = signature(isa, &[ptr_type, types::I64, types::I64], &[types::I32]);
    let call_conv = signature.call_conv;
    let mut func = Function::with_name_signature(UserFuncName::testcase(name), signature);
    let mut fctx = FunctionBuilderContext::new();
    let vm = VMath::for_isa(isa);
    let frontend_config = isa.frontend_config();
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
    // Scratch buffers live in the stack frame, not in a slot. Slots are in order of
    // first appearance (not of buffer number), so that twins (kernels equal up to their
    // buffers' numbers, see [`twin_key`]) build the same function.
    slots.retain(|b| !scratch(b));
    let mut seen = HashSet::default();
    slots.retain(|b| seen.insert(*b));
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
        target: Target {
            vm,
            call_conv,
            ptr_type,
            has_fma: isa_has_fma(isa),
            sigs: HashMap::default(),
        },
        mem: Memory {
            buffers,
            ptrs: HashMap::default(),
            read_only: slots
                .iter()
                .copied()
                .filter(|s| !written.contains(s))
                .collect(),
        },
        exits: Exits {
            checks: Vec::new(),
            err_block,
        },
        nest: Nest::default(),
        ints: Ints::default(),
        vals: Values::new(),
        done: Finished::default(),
    };
    e.emit_kernel(entry, kernel, &slots, schedule)?;
    let checks = std::mem::take(&mut e.exits.checks);
    drop(e);
    b.seal_all_blocks();
    b.finalize(frontend_config);
    Ok((func, KernelInfo::new(name, kernel, schedule, slots, checks)))
}

impl KernelInfo {
    /// The facts of the function `name` built for `kernel` scheduled so.
    pub fn new(
        name: &str,
        kernel: &Kernel,
        schedule: &Schedule,
        slots: Vec<BufferId>,
        checks: Vec<String>,
    ) -> KernelInfo {
        KernelInfo {
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
        }
    }

    /// The facts of the function built for `kernel`, a twin of the kernel this one was
    /// built for (see [`twin_key`]: `order` and `twin_order` are their buffers in the
    /// order of the key): the same function, its slots holding the twin's buffers.
    pub fn for_twin(
        &self,
        name: &str,
        kernel: &Kernel,
        schedule: &Schedule,
        order: &[BufferId],
        twin_order: &[BufferId],
    ) -> KernelInfo {
        let map: HashMap<BufferId, BufferId> = order
            .iter()
            .copied()
            .zip(twin_order.iter().copied())
            .collect();
        let slots = self.slots.iter().map(|b| map[b]).collect();
        KernelInfo::new(name, kernel, schedule, slots, self.checks.clone())
    }
}

/// What [`function`] builds from, with the buffers renumbered by first appearance: two
/// planned kernels with equal keys (a layer's kernel and its twin in the next layer) build
/// the same function, up to which buffer each slot holds. Returns the key and the buffers
/// in their key order.
///
/// The key is the `Debug` text of every field the emitter reads (the kernel but its id,
/// name and graph nodes; the schedule but its notes; the element type and shape of each
/// buffer, and whether it is scratch), so that a field added later takes part without a
/// list to keep; debug builds check each twin against a fresh build
/// (`CpuProgram::compile`).
pub fn twin_key(
    buffers: &[Buffer],
    kernel: &Kernel,
    schedule: &Schedule,
) -> (String, Vec<BufferId>) {
    use std::fmt::Write;
    let Kernel {
        id: _,
        name: _,
        nodes: _,
        domain,
        stages,
        gemm,
        reads,
        writes,
    } = kernel;
    let Schedule {
        parallel,
        lanes,
        stages: plans,
        scratch,
        notes: _,
        wide,
    } = schedule;
    let text = format!(
        "{domain:?}{stages:?}{gemm:?}{reads:?}{writes:?}{parallel:?}{lanes:?}{plans:?}{scratch:?}{wide:?}"
    );
    const TAG: &str = "BufferId(";
    let mut key = String::with_capacity(text.len() + 64);
    let mut order: Vec<BufferId> = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(TAG) {
        let (head, tail) = rest.split_at(at + TAG.len());
        key.push_str(head);
        let digits = tail
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(tail.len());
        match tail[..digits].parse::<u32>() {
            Ok(n) => {
                let b = BufferId(n);
                let ordinal = match order.iter().position(|&o| o == b) {
                    Some(p) => p,
                    None => {
                        order.push(b);
                        order.len() - 1
                    }
                };
                let _ = write!(key, "{ordinal}");
            }
            Err(_) => key.push_str(&tail[..digits]),
        }
        rest = &tail[digits..];
    }
    key.push_str(rest);
    for b in &order {
        match buffers.get(b.index()) {
            Some(buf) => {
                let _ = write!(key, "|{:?} {}", buf.ty, buf.kind == BufferKind::Scratch);
            }
            None => key.push_str("|missing"),
        }
    }
    (key, order)
}

impl<'a> Emitter<'a, '_> {
    /// The whole function body: entry, outer loop, exits.
    fn emit_kernel(
        &mut self,
        entry: ClifBlock,
        kernel: &'a Kernel,
        slots: &[BufferId],
        schedule: &'a Schedule,
    ) -> Result<()> {
        self.b.switch_to_block(entry);
        self.b.seal_block(entry);
        let params = self.b.block_params(entry).to_vec();
        let (slot_ptr, begin, end) = (params[0], params[1], params[2]);
        let slot_flags = MemFlagsData::trusted().with_readonly();
        for (i, &buf) in slots.iter().enumerate() {
            let offset = (i * self.target.ptr_type.bytes() as usize) as i32;
            let p = self
                .b
                .ins()
                .load(self.target.ptr_type, slot_flags, slot_ptr, offset);
            self.mem.ptrs.insert(buf, p);
        }
        for s in &schedule.scratch {
            // 16-byte aligned, like the vectors it holds.
            let slot = self.b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                s.bytes as u32,
                4,
            ));
            let p = self.b.ins().stack_addr(self.target.ptr_type, slot, 0);
            self.mem.ptrs.insert(s.buffer, p);
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
            self.b.switch_to_block(self.exits.err_block);
            let code = self.b.block_params(self.exits.err_block)[0];
            self.b.ins().return_(&[code]);
            return Ok(());
        }
        let empty = self
            .b
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, begin, end);
        self.b.ins().brif(empty, done, &[], body, &[]);
        self.b.switch_to_block(body);
        self.b.seal_block(body);

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
        // The point's coordinates and flat index, read once here: the stages' loops do
        // not change them, and a variable read after a loop would be looked up through it.
        let here: Vec<Value> = outer.iter().map(|&v| self.b.use_var(v)).collect();
        let flat_here = self.b.use_var(flat);

        let row_loop = n >= 1 && is_pointwise(kernel);
        self.done.scalar.clear();
        let step = if row_loop {
            let last = n - 1;
            for (k, &v) in here.iter().enumerate().take(last) {
                self.nest.fixed.insert(Var::outer(k), v);
            }
            let i_last = here[last];
            let left_in_range = self.b.ins().isub(end, flat_here);
            let d_last = self.b.ins().iconst(types::I64, domain[last] as i64);
            let left_in_row = self.b.ins().isub(d_last, i_last);
            let seg = self.b.ins().smin(left_in_range, left_in_row);
            let seg_end = self.b.ins().iadd(i_last, seg);
            let row_var = self.b.declare_var(types::I64);
            self.nest.vars.insert(Var::outer(last), row_var);
            let spec = LoopSpec {
                var: Var::outer(last),
                extent: domain[last],
                whole: false,
                start: i_last,
                end: seg_end,
            };
            let ext = Extents {
                outer: domain.clone(),
                reduce: vec![],
                store: vec![],
            };
            let plan = stage_plan(schedule, 0)?;
            match schedule.wide.first().and_then(|c| chain_call(c.as_ref()?)) {
                // The segment as one chain call.
                Some((chain, routine)) => {
                    self.emit_chain_stage(&kernel.stages[0], ext, vec![spec], plan, chain, routine)?
                }
                None => self.emit_stage(&kernel.stages[0], ext, vec![spec], Shape::Point(plan))?,
            }
            let next_last = self.b.ins().iadd(i_last, seg);
            self.b.def_var(outer[last], next_last);
            seg
        } else {
            for (k, &v) in here.iter().enumerate() {
                self.nest.fixed.insert(Var::outer(k), v);
            }
            let step_var = self.b.declare_var(types::I64);
            let join = self.b.create_block();
            if let Some(plan) = &schedule.lanes {
                // A whole group of points left in the row and in the range: a lanes step.
                let width = 4 * plan.unroll as i64;
                let i_last = here[n - 1];
                let group_end = self.int_op_imm(IntOp::Add, i_last, width);
                let in_row = self.icmp_imm(
                    IntCC::SignedLessThanOrEqual,
                    group_end,
                    domain[n - 1] as i64,
                );
                let f_end = self.int_op_imm(IntOp::Add, flat_here, width);
                let in_range = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, f_end, end);
                let whole = self.b.ins().band(in_row, in_range);
                let lanes_block = self.b.create_block();
                let scalar_block = self.b.create_block();
                self.b
                    .ins()
                    .brif(whole, lanes_block, &[], scalar_block, &[]);
                self.b.switch_to_block(lanes_block);
                self.b.seal_block(lanes_block);
                self.done.lanes.clear();
                let lane_kernel = match &plan.stash {
                    Some(ls) => {
                        // Lane `l` of inner point `p` lives at `p*width + l` of the slot:
                        // the lanes index `p*width + i_last + l` from a base `i_last`
                        // elements below the slot. The step runs only for
                        // `i_last + width <= extent`, so every access is in the slot.
                        let shift = self.int_op_imm(IntOp::Shl, i_last, 2);
                        for (scalar_id, lane_buf) in &ls.scratch {
                            let slot = *self
                                .mem
                                .ptrs
                                .get(scalar_id)
                                .ok_or_else(|| Error::internal("scratch without a slot"))?;
                            let base = self.b.ins().isub(slot, shift);
                            self.mem.ptrs.insert(lane_buf.id, base);
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
                    let shape = Shape::Lanes {
                        outer: plan,
                        stage: &plan.stages[si],
                        plan: step,
                    };
                    self.emit_stage(stage, ext, loops, shape)?;
                }
                self.done.lanes.clear();
                let next = self.int_op_imm(IntOp::Add, i_last, width);
                self.b.def_var(outer[n - 1], next);
                let w = self.int_const(types::I64, width);
                self.b.def_var(step_var, w);
                self.b.ins().jump(join, &[]);
                self.b.switch_to_block(scalar_block);
                self.b.seal_block(scalar_block);
            }
            self.done.scalar.clear();
            for (si, stage) in kernel.stages.iter().enumerate() {
                if let Some(Some(call)) = schedule.wide.get(si) {
                    if let Some((chain, routine)) = chain_call(call) {
                        let plan = stage_plan(schedule, si)?;
                        let ext = stage.extents(domain);
                        let loops = self.stage_loops(stage);
                        self.emit_chain_stage(stage, ext, loops, plan, chain, routine)?;
                        continue;
                    }
                    if self.emit_wide_call(call)? {
                        continue;
                    }
                    // A width this CPU lacks: the stage is a loop like any other.
                }
                let ext = stage.extents(domain);
                let loops = self.stage_loops(stage);
                let shape = Shape::Point(stage_plan(schedule, si)?);
                self.emit_stage(stage, ext, loops, shape)?;
            }
            if n > 0 {
                let next = self.int_op_imm(IntOp::Add, here[n - 1], 1);
                self.b.def_var(outer[n - 1], next);
            }
            let one = self.int_const(types::I64, 1);
            self.b.def_var(step_var, one);
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(join);
            self.b.seal_block(join);
            self.b.use_var(step_var)
        };
        let next = self.int_op(IntOp::Add, flat_here, step);
        self.b.def_var(flat, next);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, next, end);
        let latch = self.b.create_block();
        self.b.ins().brif(more, latch, &[], done, &[]);
        self.b.switch_to_block(latch);
        self.b.seal_block(latch);
        // Carry: a coordinate that reached its extent wraps to 0 and bumps the next one.
        // Only the last one changed since the header.
        let mut coords = here;
        if n > 0 {
            coords[n - 1] = self.b.use_var(outer[n - 1]);
        }
        for k in (1..n).rev() {
            let x = coords[k];
            let wrap = self.icmp_imm(IntCC::Equal, x, domain[k] as i64);
            let zero = self.int_const(types::I64, 0);
            let x = self.b.ins().select(wrap, zero, x);
            self.b.def_var(outer[k], x);
            let carry = self.b.ins().uextend(types::I64, wrap);
            coords[k - 1] = self.int_op(IntOp::Add, coords[k - 1], carry);
            self.b.def_var(outer[k - 1], coords[k - 1]);
        }
        self.b.ins().jump(header, &[]);
        self.b.seal_block(header);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
        let ok = self.b.ins().iconst(types::I32, 0);
        self.b.ins().return_(&[ok]);
        self.b.switch_to_block(self.exits.err_block);
        let code = self.b.block_params(self.exits.err_block)[0];
        self.b.ins().return_(&[code]);
        Ok(())
    }
}

impl Emitter<'_, '_> {
    /// A stage the plan made a wide routine call, as that call; false (nothing emitted)
    /// when this CPU lacks the routine's width.
    fn emit_wide_call(&mut self, call: &WideCall) -> Result<bool> {
        let ptr = self.target.ptr_type;
        let len = self.b.ins().iconst(types::I64, call.len as i64);
        match &call.op {
            WideOp::Apply { f, buffer } => {
                let Some(routine) = in_place_routine(*f, call.isa) else {
                    return Ok(false);
                };
                let row = self.slot_of(*buffer)?;
                let sig = self.signature(&[ptr, types::I64], None);
                let callee = self.b.ins().iconst(ptr, routine as usize as i64);
                self.b.ins().call_indirect(sig, callee, &[row, len]);
            }
            WideOp::Reduce { kind, src, acc } => {
                let Some(routine) = row_routine(*kind, call.isa) else {
                    return Ok(false);
                };
                let xs = self.row_start(src)?;
                let value =
                    self.call_helper(routine as usize, &[ptr, types::I64], types::F32, &[xs, len]);
                self.done.scalar.insert(*acc, value);
            }
            WideOp::ExpSum {
                src,
                offset,
                out,
                acc,
            } => {
                let Some(routine) = exp_sum_routine(call.isa) else {
                    return Ok(false);
                };
                let xs = self.row_start(src)?;
                let c = self.factor(*offset)?;
                let row = match out {
                    Some(out) => self.slot_of(*out)?,
                    None => self.b.ins().iconst(ptr, 0),
                };
                let value = self.call_helper(
                    routine as usize,
                    &[ptr, types::F32, ptr, types::I64],
                    types::F32,
                    &[xs, c, row, len],
                );
                self.done.scalar.insert(*acc, value);
            }
            WideOp::Scale(row) => {
                let Some(routine) = scale_routine(row.div, row.exp.is_some(), call.isa) else {
                    return Ok(false);
                };
                let xs = self.row_start(&row.src)?;
                let first = first_point(&row.out_index);
                let out = self.element_pointer(row.out, &first)?;
                let below = self.b.ins().f32const(row.below);
                let zero = self.b.ins().f32const(row.zero);
                let k = self.factor(row.k)?;
                let c = self.factor(row.exp.unwrap_or(Factor::Const(0.0)))?;
                let f = types::F32;
                let sig = self.signature(&[ptr, f, f, f, f, ptr, types::I64], None);
                let callee = self.b.ins().iconst(ptr, routine as usize as i64);
                self.b
                    .ins()
                    .call_indirect(sig, callee, &[xs, c, below, zero, k, out, len]);
            }
            // Emitted with its stage (`emit_chain_stage`).
            WideOp::Chain(_) => return Ok(false),
            WideOp::Offset2 {
                src,
                a,
                b,
                out,
                out_index,
            } => {
                let Some(routine) = offset_routine(call.isa) else {
                    return Ok(false);
                };
                let xs = self.row_start(src)?;
                let dst = self.element_pointer(*out, &first_point(out_index))?;
                let (a, b) = (self.factor(*a)?, self.factor(*b)?);
                let sig = self.signature(&[ptr, types::F32, types::F32, ptr, types::I64], None);
                let callee = self.b.ins().iconst(ptr, routine as usize as i64);
                self.b
                    .ins()
                    .call_indirect(sig, callee, &[xs, a, b, dst, len]);
            }
        }
        Ok(true)
    }

    /// A row call's scalar, computed as the stage's own code computes it.
    fn factor(&mut self, k: Factor) -> Result<cranelift_codegen::ir::Value> {
        let acc =
            |e: &Self, a| {
                e.done.scalar.get(&a).copied().ok_or_else(|| {
                    Error::internal(format!("a row call reads {a} before it is known"))
                })
            };
        Ok(match k {
            Factor::Const(c) => self.b.ins().f32const(c),
            Factor::Acc(a) => acc(self, a)?,
            Factor::Reciprocal(a) => {
                let x = acc(self, a)?;
                let one = self.b.ins().f32const(1.0);
                self.b.ins().fdiv(one, x)
            }
            Factor::Log(a) => {
                let x = acc(self, a)?;
                let vm = self.target.vm;
                vm.log(self.b, x)
            }
        })
    }

    /// The stack slot of a scratch row.
    fn slot_of(&self, buffer: BufferId) -> Result<cranelift_codegen::ir::Value> {
        self.mem
            .ptrs
            .get(&buffer)
            .copied()
            .ok_or_else(|| Error::internal(format!("a wide call's row {buffer} has no slot")))
    }

    /// The address of a row call's first element: `src`'s index with the stage's loop
    /// variable at 0.
    fn row_start(&mut self, src: &Load) -> Result<cranelift_codegen::ir::Value> {
        self.element_pointer(src.buffer, &first_point(&src.index))
    }
}

/// A chain row call and its routine (summing when the chain has an accumulator), when
/// `call` is one and this CPU has its width.
fn chain_call(call: &WideCall) -> Option<(&ChainRow, ChainFn)> {
    match &call.op {
        WideOp::Chain(chain) => Some((chain, chain_routine(chain.acc.is_some(), call.isa)?)),
        _ => None,
    }
}

/// `index` at the first point of a stage's one loop (`r0` or `j0` at 0).
fn first_point(index: &IndexExpr) -> IndexExpr {
    substitute(index, &|v: Var| {
        (v == Var::reduce(0) || v == Var::store(0)).then_some(IndexExpr::Const(0))
    })
}

/// The plan of stage `index` of the kernel `schedule` belongs to.
fn stage_plan(schedule: &Schedule, index: usize) -> Result<&StagePlan> {
    schedule
        .stages
        .get(index)
        .ok_or_else(|| Error::internal(format!("stage {index} has no plan")))
}
