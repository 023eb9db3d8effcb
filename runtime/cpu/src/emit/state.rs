//! The emission state of one kernel function, in the pieces each part of the emitter
//! reads: the target, the buffers, the run-time checks, the loop nest being emitted,
//! the integer values of each block, the values of the current stage's nodes, and the
//! finished accumulators. Other files
//! add methods to [`Emitter`] (`expr.rs` nodes, `index.rs` indices, `stage.rs` loops,
//! `reduce.rs` accumulators, `kernel.rs` the outer loop).

use crate::error::{Error, Result};
use crate::plan::analysis::Levels;
use crate::plan::Lanes;
use crate::vmath::VMath;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{Block as ClifBlock, InstBuilder, SigRef, Type, Value};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, Variable};
use ferrite_ir::hash::{HashMap, HashSet};
use ferrite_ir::loops::{AccId, Block, Buffer, BufferId, Extents, IndexExpr, Var};

static EMPTY_BLOCK: Block = Block { nodes: Vec::new() };

/// The emission state of one kernel function (see the module docs).
pub(super) struct Emitter<'a, 'f> {
    pub(super) b: &'a mut FunctionBuilder<'f>,
    /// The machine: vector math, calling convention, helper signatures.
    pub(super) target: Target,
    /// Where the buffers are.
    pub(super) mem: Memory<'a>,
    /// The run-time checks and their exit.
    pub(super) exits: Exits,
    /// The loop nest of the stage being emitted.
    pub(super) nest: Nest,
    /// The integer constants and operations emitted in each block.
    pub(super) ints: Ints,
    /// The values of the current stage's nodes.
    pub(super) vals: Values<'a>,
    /// Finished accumulators of earlier stages.
    pub(super) done: Finished,
}

/// What the machine offers, and the helpers generated code calls.
pub(super) struct Target {
    pub(super) vm: VMath,
    pub(super) call_conv: CallConv,
    pub(super) ptr_type: Type,
    /// Whether the ISA has fused multiply-add (CLIF `fma` is then one instruction).
    pub(super) has_fma: bool,
    /// The signatures of the extern helpers and wide routines generated code calls
    /// (`dtypes.rs`'s `signature`), by parameter and result types, each imported once.
    pub(super) sigs: HashMap<(Vec<Type>, Option<Type>), SigRef>,
}

/// The buffers and where they are.
pub(super) struct Memory<'a> {
    pub(super) buffers: &'a [Buffer],
    /// Base pointer of every buffer the kernel touches (loaded once at entry; scratch
    /// buffers point into the stack frame).
    pub(super) ptrs: HashMap<BufferId, Value>,
    /// Buffers the kernel only reads (their loads may be marked read-only).
    pub(super) read_only: HashSet<BufferId>,
}

/// The run-time checks: check `k` returns code `k + 1` through the error block.
pub(super) struct Exits {
    /// The checks' messages.
    pub(super) checks: Vec<String>,
    /// Returns its `i32` parameter: where failed checks go.
    pub(super) err_block: ClifBlock,
}

/// The loop nest being emitted: the variables in scope and the loop levels.
#[derive(Default)]
pub(super) struct Nest {
    /// The current value of every loop variable in scope.
    pub(super) vars: HashMap<Var, Variable>,
    /// The values of the outer coordinates, fixed for all of the current point's stages.
    pub(super) fixed: HashMap<Var, Value>,
    /// The variable of each loop level of the stage (level `k` is `loop_vars[k - 1]`).
    pub(super) loop_vars: Vec<Var>,
    /// The loop levels of the stage's variables and nodes.
    pub(super) levels: Levels,
    /// The level of the stage's innermost loop (the one that may be vector code).
    pub(super) innermost: usize,
    /// Extents of the variables in scope, for index ranges.
    pub(super) ext: Extents,
    /// Index values emitted so far, with their levels.
    pub(super) index_memo: HashMap<IndexExpr, (Value, usize)>,
    /// How the guarded vector loads of the loop being emitted are read.
    pub(super) guards: GuardMode,
    /// In [`GuardMode::Row`], by node: the guarded loads whose row-fixed guards may fail.
    pub(super) row_loads: Vec<Option<RowLoad>>,
}

/// How a guarded vector load is emitted (`stage.rs`'s `guard_interval` peels a row).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(super) enum GuardMode {
    /// Each group tests its guards at its first and last lane (a window's edge).
    #[default]
    Test,
    /// Every guard holds (inside a peeled row's interval): plain vector loads.
    Hold,
    /// One group at a constant position (a row's first or last four), where the guards
    /// that move with the loop are constants: a load is its fill where they fail in every
    /// lane, else one vector load (with its fill in the lanes where they fail: the caller
    /// tested that those elements are in the buffer), behind one test of its guards that
    /// do not move.
    Masked,
    /// Inside the interval of a row where a guard that does not move with the loop fails
    /// (a padded window's first or last rows): the guards that move hold, so a load
    /// without a fixed guard is a plain vector load, and one with ([`Nest::row_loads`])
    /// is a vector load at an index kept in the buffer, with the fill in every lane
    /// where its fixed guard fails.
    Row,
}

/// A guarded load of a row in [`GuardMode::Row`]: its values fixed for the row.
#[derive(Clone, Copy)]
pub(super) struct RowLoad {
    /// The index's part fixed for the row: its own where the load's fixed guards hold,
    /// else clamped so that every element the row's vector groups read is in the buffer.
    pub(super) rest: Value,
    /// The index's coefficient of the loop variable (the load's lane stride).
    pub(super) step: i64,
    /// All ones (`i32x4`) where the load's fixed guards hold, else zeros.
    pub(super) mask: Value,
    /// The load's fill, splatted.
    pub(super) fill: Value,
}

/// The integer constants and operations (index and address arithmetic) emitted so far,
/// by the block they are in: a value defined earlier in the current block dominates the
/// rest of it, so an equal constant or operation there is that value again (`index.rs`).
#[derive(Default)]
pub(super) struct Ints {
    pub(super) consts: HashMap<(ClifBlock, Type, i64), Value>,
    pub(super) ops: HashMap<(ClifBlock, IntOp, Value, Value), Value>,
}

/// The integer operations [`Ints`] numbers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum IntOp {
    Add,
    Sub,
    Mul,
    Shl,
    And,
    Min,
    Max,
}

/// The values of the current stage's nodes at the current position.
pub(super) struct Values<'a> {
    /// The stage's body.
    pub(super) body: &'a Block,
    /// Guarded loads whose index is clamped into the buffer (not provably in bounds).
    pub(super) clamped: Vec<bool>,
    /// Lane forms of the nodes used by vector code.
    pub(super) lanes: Vec<Option<Lanes>>,
    /// Loads of vector code whose index moves by more than one element per lane, with
    /// that stride (the plan's `VectorPlan::strided`).
    pub(super) strided: Vec<(usize, i64)>,
    /// Scalar values.
    pub(super) scalar: Vec<Option<Value>>,
    /// Vector values, one per unrolled group.
    pub(super) vector: Vec<Option<Vec<Value>>>,
    /// Splats of fixed nodes used by vector code.
    pub(super) splat: Vec<Option<Value>>,
}

impl Values<'_> {
    pub(super) fn new() -> Values<'static> {
        Values {
            body: &EMPTY_BLOCK,
            clamped: Vec::new(),
            lanes: Vec::new(),
            strided: Vec::new(),
            scalar: Vec::new(),
            vector: Vec::new(),
            splat: Vec::new(),
        }
    }
}

/// Accumulators finished by earlier stages of the kernel.
#[derive(Default)]
pub(super) struct Finished {
    /// In the register form of their dtype.
    pub(super) scalar: HashMap<AccId, Value>,
    /// In a lanes step: one `f32x4` per group.
    pub(super) lanes: HashMap<AccId, Vec<Value>>,
}

/// One loop of a stage's nest.
#[derive(Clone, Copy)]
pub(super) struct LoopSpec {
    pub(super) var: Var,
    /// The loop's full extent (the bounds are `start..end`).
    pub(super) extent: usize,
    /// The bounds are `0..extent`, known here: loops that would run no iteration are not
    /// emitted at all (see `emit_vector_loops`).
    pub(super) whole: bool,
    pub(super) start: Value,
    pub(super) end: Value,
}

/// The blocks of a counted loop being emitted.
pub(super) struct LoopBlocks {
    body: ClifBlock,
    exit: ClifBlock,
    end: Value,
}

impl Emitter<'_, '_> {
    /// The level of node `i` of the current stage.
    pub(super) fn node_level(&self, i: usize) -> usize {
        self.nest.levels.nodes[i]
    }

    /// The variable of loop level `level` (1-based).
    pub(super) fn level_var(&self, level: usize) -> Var {
        self.nest.loop_vars[level - 1]
    }

    /// The current value of loop variable `v`.
    pub(super) fn var_value(&mut self, v: Var) -> Result<Value> {
        if let Some(&x) = self.nest.fixed.get(&v) {
            return Ok(x);
        }
        let var = *self
            .nest
            .vars
            .get(&v)
            .ok_or_else(|| Error::internal(format!("variable {v} is not in scope")))?;
        Ok(self.b.use_var(var))
    }

    /// A new variable of type `ty` holding `init`.
    pub(super) fn new_var(&mut self, ty: Type, init: Value) -> Variable {
        let var = self.b.declare_var(ty);
        self.b.def_var(var, init);
        var
    }

    /// Forgets the values computed inside loops of `level` and deeper (they do not
    /// dominate the code after the loop).
    pub(super) fn forget_from(&mut self, level: usize) {
        for i in 0..self.vals.scalar.len() {
            if self.node_level(i) >= level {
                self.vals.scalar[i] = None;
                self.vals.vector[i] = None;
            }
        }
        self.nest.index_memo.retain(|_, (_, l)| *l < level);
    }

    /// Enters a counted loop `while var < end` (tested once before the first iteration,
    /// unless both are constants, then at the bottom of each, so an iteration costs one
    /// branch) and positions the builder in its body.
    pub(super) fn begin_loop(&mut self, var: Variable, end: Value) -> LoopBlocks {
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let v = self.b.use_var(var);
        match (self.known_i64(v), self.known_i64(end)) {
            (Some(from), Some(to)) if from < to => {
                self.b.ins().jump(body, &[]);
            }
            _ => {
                let more = self.b.ins().icmp(IntCC::SignedLessThan, v, end);
                self.b.ins().brif(more, body, &[], exit, &[]);
            }
        }
        self.b.switch_to_block(body);
        LoopBlocks { body, exit, end }
    }

    /// Steps the loop variable, branches back while it is below the end, and positions
    /// the builder after the loop.
    pub(super) fn end_loop(&mut self, var: Variable, step: i64, lp: LoopBlocks) {
        let v = self.b.use_var(var);
        let next = self.int_op_imm(IntOp::Add, v, step);
        self.b.def_var(var, next);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, next, lp.end);
        self.b.ins().brif(more, lp.body, &[], lp.exit, &[]);
        self.b.seal_block(lp.body);
        self.b.switch_to_block(lp.exit);
        self.b.seal_block(lp.exit);
    }
}
