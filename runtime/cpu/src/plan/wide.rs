//! Full-width transcendentals inside fused loops: `exp`, `log`, `tanh`, `erf`, `erfc`
//! and `sigmoid` applied by the rustc-compiled AVX2 / AVX-512 routines of [`crate::wide`]
//! over an L1-resident block, between the vector code that computes their arguments and
//! the vector code that uses their results.
//!
//! Cranelift gives 128-bit vectors on x86-64, so a transcendental in JIT code runs four
//! lanes at a time; the wide routines run eight or sixteen, with the same bits. The
//! rewrite keeps fusion and stays loop IR:
//!
//! - A pointwise kernel (`for i in 0..n: out[i] = g(f(h(x[i])))`) is first cut into
//!   blocks of `B` elements of its row: the outer domain's last extent `n` becomes `n/B`
//!   and the store stage gets an inner loop `j0 < B`, with `i_last*B + j0` for `i_last`.
//!   `B` divides `n` (the whole row up to [`BLOCK`], else the largest divisor from
//!   [`MIN_BLOCK`] to `BLOCK`): every block is whole, and the loop IR, whose extents are
//!   static, says so. A row that no such block divides (a prime length over `BLOCK`)
//!   keeps the `f32x4` code. (Its tail cannot be a kernel of its own: a buffer is written
//!   by one kernel.)
//! - In a stage whose inner loop is vector code over `P` points (a block, a softmax row),
//!   each such function `f` evaluated per point is split out, innermost first: a store
//!   stage writes its argument into a scratch row of `P` floats (a stack slot, so each
//!   outer point and each thread has its own), an *apply* stage `s[j0] = f(s[j0])`
//!   computes `f` over the row in place, and the original stage reads `s` where it
//!   computed `f`. When the argument is itself the result of an earlier apply that
//!   nothing else reads (a sigmoid chain), the apply runs on that row again.
//!
//! The apply stage is ordinary loop IR (the evaluator runs the plan to the same bits),
//! and the schedule records, per stage, that it is a routine call ([`WideCall`]); the
//! emitter makes it one `call_indirect` of the routine for the ISA chosen here. Every
//! value stored is the node's own, rounded to `f32` as the reference rounds it, and the
//! routines give the bits of the `f32x4` code, so results are unchanged bit for bit.
//!
//! It pays where the function is evaluated per element of a long contiguous loop:
//! stages of fewer than [`MIN_POINTS`] points, stages that do not vectorize, and kernels
//! with lanes keep the `f32x4` code; so does everything when the ISA is SSE
//! (`FERRITE_CPU_ISA=sse`) or [`CodegenOptions::wide`](super::CodegenOptions) is `None`.

use super::analysis::{drop_dead_nodes, is_pointwise, node_indices, substitute};
use super::stash::{flat_index, load_from_scratch, to_store_vars, MAX_SCRATCH_BYTES};
use super::{Schedule, ScratchSlot};
use crate::vmath::UnaryFn;
use crate::wide::{Isa, RowReduce};
use ferrite_ir::loops::{
    AccId, Block, Buffer, BufferId, BufferKind, ExprNode, ExprOp, ExprRef, IndexExpr, Kernel, Load,
    Stage, StoreOp, Value, Var, VarKind,
};
use ferrite_ir::types::TensorType;
use ferrite_ir::{DType, UnaryOp};
use std::fmt;

/// Elements per block of a pointwise row: a few blocks (arguments, results, the
/// input and output lines) stay in a 32 KiB L1 data cache.
pub const BLOCK: usize = 1024;

/// The smallest block a row is cut into when `BLOCK` does not divide it.
pub const MIN_BLOCK: usize = 256;

/// Points a stage needs for a routine call to pay: measured, softmax and sigmoid rows
/// of 16 lose 15-35% with the call, rows of 32 gain a little, 64 and more 1.2-1.6x
/// (BENCHMARKS.md).
pub const MIN_POINTS: usize = 32;

/// The shortest rows run as chain calls (`rows.rs`): below, the call's fixed cost is more
/// than the `f32x4` loop it replaces. Measured at one thread on Zen 5: layer norms over rows
/// of 64 / 128 / 256 took 57 / 108 / 174 us as loops and 83 / 122 / 156 us as calls
/// (2048 rows); MobileNetV2's epilogues over 14x14 and 7x7 planes (rows of 196 and 49) lost
/// 15-30 us per layer as calls, where rows of 784 and more gained.
pub const MIN_CHAIN_ROW: usize = 256;

/// The most points of a stage split without blocking (a softmax row): its scratch row,
/// 16 KiB, stays in L1 with the input line.
pub const MAX_STAGE_POINTS: usize = 4096;

/// A stage run as one call of a wide routine (`rows.rs` adds the row calls).
#[derive(Clone, Debug, PartialEq)]
pub struct WideCall {
    /// What the call computes.
    pub op: WideOp,
    /// The width of the routine.
    pub isa: Isa,
    /// The floats of the row.
    pub len: usize,
}

/// What a [`WideCall`] computes, over the stage's one loop of `len` points.
#[derive(Clone, Debug, PartialEq)]
pub enum WideOp {
    /// `buffer[j] = f(buffer[j])` over a scratch row (a stack slot of the kernel), in
    /// place: an apply stage.
    Apply { f: UnaryFn, buffer: BufferId },
    /// `acc = reduce(src[base + r0])`: a reduce stage of one float sum, max or min of a
    /// unit-stride row; `src` is the stage's load.
    Reduce {
        kind: RowReduce,
        src: Load,
        acc: AccId,
    },
    /// `out[r0] = exp(src[base + r0] - offset)` and `acc = sum` of them: the middle of a
    /// softmax row, one reduce stage.
    ExpSum {
        src: Load,
        /// An accumulator (a row max) or a constant.
        offset: Factor,
        /// The row the exps are stored into; `None` when nothing reads them.
        out: Option<BufferId>,
        acc: AccId,
    },
    /// `out[j0] = (src[j0] - a) - b` over a store stage's one loop: a log-softmax row's
    /// last pass.
    Offset2 {
        src: Load,
        a: Factor,
        b: Factor,
        out: BufferId,
        out_index: IndexExpr,
    },
    /// A scaled copy of a row (see [`ScaleRow`]).
    Scale(ScaleRow),
    /// A chain of ops on a row (see [`ChainRow`]).
    Chain(ChainRow),
}

/// A stage whose value at each point of its one loop is a row `x[base + j]` taken through
/// a chain of `f32` ops, each with a scalar of the stage (a node fixed over the loop: an
/// accumulator, a constant, `rsqrt(var + eps)`) or the same point of another row as its
/// operand, some of the values stored into rows and (a reduce stage) the last one summed:
/// a layer or RMS norm's passes. One call of [`crate::wide::chain_routine`].
#[derive(Clone, Debug, PartialEq)]
pub struct ChainRow {
    /// The row the chain starts from.
    pub x: Load,
    pub steps: Vec<ChainLink>,
    /// The accumulator of a reduce stage: the sum of the last values, in the JIT's order.
    pub acc: Option<AccId>,
}

/// One step of a [`ChainRow`].
#[derive(Clone, Debug, PartialEq)]
pub struct ChainLink {
    pub op: crate::wide::ChainOp,
    pub operand: ChainOperand,
    /// The row the value after this step is stored into, and its index.
    pub out: Option<(BufferId, IndexExpr)>,
}

/// The operand of a [`ChainLink`].
#[derive(Clone, Debug, PartialEq)]
pub enum ChainOperand {
    /// None (a square).
    None,
    /// A node of the stage's body fixed over its loop, computed once as a scalar (and
    /// the node written out, for the plan's notes).
    Scalar { node: ExprRef, text: String },
    /// The same point of another unit-stride row.
    Row(Load),
}

/// `out[j0] = (v < below ? zero : v) * k` (or `/ k`), `v = src[j0]` or `exp(src[j0] - c)`,
/// over a store stage's one loop: a softmax row's last pass. `below` is `-inf` where the
/// stage has no select.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleRow {
    pub src: Load,
    /// `Some(c)`: the row's value is `exp(src - c)` (a softmax row too long to keep its
    /// exps in a scratch row), computed here; `c` an accumulator or a constant.
    pub exp: Option<Factor>,
    pub below: f32,
    pub zero: f32,
    pub k: Factor,
    pub div: bool,
    pub out: BufferId,
    pub out_index: IndexExpr,
}

/// A scalar of a row call: what a [`ScaleRow`] multiplies or divides by, what an offset
/// row or an exp subtracts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Factor {
    Acc(AccId),
    /// `1 / acc`, rounded once as the JIT's `reciprocal`.
    Reciprocal(AccId),
    /// `log(acc)`, as the JIT's `log`.
    Log(AccId),
    Const(f32),
}

impl fmt::Display for Factor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Factor::Acc(a) => write!(f, "{a}"),
            Factor::Reciprocal(a) => write!(f, "reciprocal({a})"),
            Factor::Log(a) => write!(f, "log({a})"),
            Factor::Const(c) => write!(f, "{c:?}"),
        }
    }
}

impl fmt::Display for WideCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let isa = self.isa.name();
        let len = self.len;
        match &self.op {
            WideOp::Apply { f: func, buffer } => write!(
                f,
                "{isa} routine: {} over {buffer} ({len} f32) in place",
                func.name()
            ),
            WideOp::Reduce { kind, src, acc } => write!(
                f,
                "{isa} routine: {acc} = {} of {}[{}] ({len} f32)",
                kind.name(),
                src.buffer,
                src.index
            ),
            WideOp::ExpSum {
                src,
                offset,
                out,
                acc,
            } => {
                let e = format!("exp({}[{}] - {offset})", src.buffer, src.index);
                match out {
                    Some(out) => write!(
                        f,
                        "{isa} routine: {out} = {e} and {acc} = their sum ({len} f32)"
                    ),
                    None => write!(f, "{isa} routine: {acc} = sum of {e} ({len} f32)"),
                }
            }
            WideOp::Offset2 {
                src,
                a,
                b,
                out,
                out_index,
            } => write!(
                f,
                "{isa} routine: {out}[{out_index}] = {}[{}] - {a} - {b} ({len} f32)",
                src.buffer, src.index
            ),
            WideOp::Chain(c) => {
                // The value so far, and whether it needs parentheses as an operand.
                let mut v = format!("{}[{}]", c.x.buffer, c.x.index);
                let mut compound = false;
                let mut stored = Vec::new();
                for l in &c.steps {
                    let a = match &l.operand {
                        ChainOperand::None => String::new(),
                        ChainOperand::Scalar { text, .. } if text.contains(' ') => {
                            format!("({text})")
                        }
                        ChainOperand::Scalar { text, .. } => text.clone(),
                        ChainOperand::Row(ld) => format!("{}[{}]", ld.buffer, ld.index),
                    };
                    let call = l.op.function_form();
                    let operand = if compound && !call {
                        format!("({v})")
                    } else {
                        v
                    };
                    (v, compound) = (l.op.show(&operand, &a), !call);
                    if let Some((b, i)) = &l.out {
                        stored.push(format!("{b}[{i}]"));
                    }
                }
                write!(f, "{isa} routine: chain {v}")?;
                if !stored.is_empty() {
                    write!(f, ", stored into {}", stored.join(", "))?;
                }
                if let Some(acc) = c.acc {
                    write!(f, ", {acc} = sum of the last")?;
                }
                write!(f, " ({len} f32)")
            }
            WideOp::Scale(s) => {
                let x = format!("{}[{}]", s.src.buffer, s.src.index);
                let x = match s.exp {
                    Some(c) => format!("exp({x} - {c})"),
                    None => x,
                };
                let w = if s.below == f32::NEG_INFINITY {
                    x
                } else {
                    format!("where({x} < {:?}, {:?}, {x})", s.below, s.zero)
                };
                let op = if s.div { "/" } else { "*" };
                write!(
                    f,
                    "{isa} routine: {}[{}] = {w} {op} {} ({len} f32)",
                    s.out, s.out_index, s.k
                )
            }
        }
    }
}

/// The wide function of a node, if it is one evaluated on `f32`.
fn wide_fn(node: &ExprNode) -> Option<UnaryFn> {
    if node.dtype != DType::F32 {
        return None;
    }
    match node.op {
        ExprOp::Unary(UnaryOp::Exp, _) => Some(UnaryFn::Exp),
        ExprOp::Unary(UnaryOp::Log, _) => Some(UnaryFn::Log),
        ExprOp::Unary(UnaryOp::Tanh, _) => Some(UnaryFn::Tanh),
        ExprOp::Unary(UnaryOp::Erf, _) => Some(UnaryFn::Erf),
        ExprOp::Unary(UnaryOp::Erfc, _) => Some(UnaryFn::Erfc),
        ExprOp::Unary(UnaryOp::Sigmoid, _) => Some(UnaryFn::Sigmoid),
        _ => None,
    }
}

/// Per node: whether its value changes from one inner point of the stage to the next
/// (else it is computed once per outer point, and no block call helps).
fn varies(body: &Block) -> Vec<bool> {
    varies_with(body, &|x| x.kind != VarKind::Outer)
}

/// Per node: whether its value depends on a variable `moves` picks (through its indices
/// or its operands).
pub(super) fn varies_with(body: &Block, moves: &dyn Fn(Var) -> bool) -> Vec<bool> {
    let mut inner = vec![false; body.nodes.len()];
    for (i, n) in body.nodes.iter().enumerate() {
        let mut v = false;
        for e in node_indices(&n.op) {
            e.for_each_var(&mut |x| v |= moves(x));
        }
        n.for_each_operand(&mut |r| v |= inner.get(r.index()).copied().unwrap_or(false));
        inner[i] = v;
    }
    inner
}

/// The first live node of `stage` that a wide routine can compute per inner point (its
/// operands, earlier in the body, contain none: it is innermost).
fn first_wide(stage: &Stage) -> Option<(ExprRef, UnaryFn, ExprRef)> {
    let body = stage.body();
    let live = super::analysis::live_nodes(stage);
    let inner = varies(body);
    body.nodes.iter().enumerate().find_map(|(i, n)| {
        let f = wide_fn(n)?;
        let ExprOp::Unary(_, a) = n.op else {
            return None;
        };
        (live[i] && inner[i]).then_some((ExprRef(i as u32), f, a))
    })
}

/// Whether some stage of `kernel` evaluates a wide function per inner point (for a
/// pointwise kernel, per point of its row).
pub fn has_wide(kernel: &Kernel) -> bool {
    if is_pointwise(kernel) && !kernel.domain.is_empty() {
        return has_wide(&block_rows(kernel, 1));
    }
    kernel.stages.iter().any(|s| first_wide(s).is_some())
}

/// The block a pointwise row of `n` elements is cut into: the whole row when it is at
/// most [`BLOCK`], else the largest divisor of `n` from [`MIN_BLOCK`] to `BLOCK`.
pub fn block_for(n: usize) -> Option<usize> {
    if n <= BLOCK {
        return (n >= MIN_POINTS).then_some(n);
    }
    (MIN_BLOCK..=BLOCK).rev().find(|&b| n.is_multiple_of(b))
}

/// The pointwise `kernel` with its row cut into blocks of `b` elements (`b` divides the
/// last outer extent): the last outer axis counts blocks, and the store stage loops
/// `j0 < b` within one.
pub fn block_rows(kernel: &Kernel, b: usize) -> Kernel {
    let last = kernel.domain.len() - 1;
    let mut k = kernel.clone();
    k.domain[last] /= b;
    let v = Var::outer(last);
    let with =
        |x: Var| (x == v).then(|| IndexExpr::Var(v) * b as i64 + IndexExpr::Var(Var::store(0)));
    let map = |e: &IndexExpr| substitute(e, &with);
    if let Stage::Store {
        domain,
        body,
        stores,
    } = &mut k.stages[0]
    {
        *domain = vec![b];
        for n in &mut body.nodes {
            *n = n.map_indices(map);
        }
        for s in stores {
            s.index = map(&s.index);
        }
    }
    k
}

/// Whether a stage may be split: it reads no buffer it writes other than at the
/// element it writes (else moving its reads before its writes could change them).
fn reads_before_writes_safe(stage: &Stage, buffers: &[Buffer]) -> bool {
    let stores = stage.stores();
    stage.body().nodes.iter().all(|n| match &n.op {
        ExprOp::Load(l) => {
            let scratch = buffers
                .get(l.buffer.index())
                .is_some_and(|b| b.kind == BufferKind::Scratch);
            scratch
                || stores
                    .iter()
                    .filter(|s| s.buffer == l.buffer)
                    .all(|s| s.index == l.index && l.guard.is_empty())
        }
        _ => true,
    })
}

/// What splitting one stage made: the stages in its place, with the routine call of
/// each apply stage, and the scratch rows added.
pub struct Split {
    pub stages: Vec<(Stage, Option<WideCall>)>,
    pub scratch: Vec<Buffer>,
}

/// Splits the wide functions out of `stage` (see the module docs), with scratch rows
/// numbered from `first_id`; `None` when it has none.
pub fn split_stage(
    stage: &Stage,
    isa: Isa,
    first_id: usize,
    first_name: usize,
    buffers: &[Buffer],
) -> Option<Split> {
    let domain = stage.domain().to_vec();
    let points: usize = domain.iter().product();
    if domain.is_empty() || !(MIN_POINTS..=MAX_STAGE_POINTS).contains(&points) {
        return None;
    }
    if !reads_before_writes_safe(stage, buffers) {
        return None;
    }
    let kind = stage.var_kind();
    let at_point = flat_index(&domain, kind);
    let mut rest = stage.clone();
    let mut out = Split {
        stages: Vec::new(),
        scratch: Vec::new(),
    };
    while let Some((w, f, arg)) = first_wide(&rest) {
        let body = rest.body();
        let uses = body.use_counts(&rest.roots());
        // An argument that is a row this split made, read only here: apply in place.
        let reuse = match &body.nodes[arg.index()].op {
            ExprOp::Load(l)
                if out.scratch.iter().any(|b| b.id == l.buffer)
                    && l.index == at_point
                    && l.guard.is_empty()
                    && uses[arg.index()] == 1 =>
            {
                Some(l.buffer)
            }
            _ => None,
        };
        let row = match reuse {
            Some(b) => b,
            None => {
                let id = BufferId((first_id + out.scratch.len()) as u32);
                out.scratch.push(Buffer {
                    id,
                    ty: TensorType::new(DType::F32, vec![points]).ok()?,
                    kind: BufferKind::Scratch,
                    name: format!("wide{}", first_name + out.scratch.len()),
                });
                let mut body = body.clone();
                for n in &mut body.nodes {
                    *n = n.map_indices(to_store_vars);
                }
                let mut arg_stage = Stage::Store {
                    domain: domain.clone(),
                    body,
                    stores: vec![StoreOp {
                        buffer: id,
                        index: flat_index(&domain, VarKind::Store),
                        value: arg,
                    }],
                };
                drop_dead_nodes(&mut arg_stage);
                write_back_in_place(&mut arg_stage, stage.stores());
                out.stages.push((arg_stage, None));
                id
            }
        };
        out.stages.push((
            apply_stage(row, f, points),
            Some(WideCall {
                op: WideOp::Apply { f, buffer: row },
                isa,
                len: points,
            }),
        ));
        load_from_scratch(&mut rest, w, row);
        drop_dead_nodes(&mut rest);
    }
    if out.scratch.is_empty() {
        return None;
    }
    out.stages.push((rest, None));
    Some(out)
}

/// A stash row (`stash.rs`) that a stage fills with a copy of a wide row (`t[p] = s[p]`:
/// the stashed value was the wide function's result) is not filled: its readers read the
/// wide row instead, which nothing overwrites after that stage. Returns the stash rows
/// no longer used, each with the wide row read in its place.
fn drop_copies(
    stages: &mut [Stage],
    mine: &[BufferId],
    buffers: &[Buffer],
) -> Vec<(BufferId, BufferId)> {
    let mut gone = Vec::new();
    for si in 0..stages.len() {
        let stage = &stages[si];
        let points: usize = stage.domain().iter().product();
        let body = stage.body();
        let mut renames: Vec<(BufferId, BufferId)> = Vec::new();
        for st in stage.stores() {
            let Some(target) = buffers.get(st.buffer.index()) else {
                continue;
            };
            if target.kind != BufferKind::Scratch
                || mine.contains(&st.buffer)
                || target.ty.numel() != points
            {
                continue;
            }
            if let Some(ExprNode {
                op: ExprOp::Load(l),
                ..
            }) = body.get(st.value)
            {
                if mine.contains(&l.buffer) && l.index == st.index && l.guard.is_empty() {
                    renames.push((st.buffer, l.buffer));
                }
            }
        }
        if renames.is_empty() {
            continue;
        }
        let read_before = stages[..si].iter().any(|st| {
            st.body().nodes.iter().any(
                |n| matches!(&n.op, ExprOp::Load(l) if renames.iter().any(|(t, _)| *t == l.buffer)),
            )
        });
        if read_before {
            continue;
        }
        match &mut stages[si] {
            Stage::Reduce { stores, .. } | Stage::Store { stores, .. } => {
                stores.retain(|st| !renames.iter().any(|(t, _)| *t == st.buffer));
            }
        }
        drop_dead_nodes(&mut stages[si]);
        for later in &mut stages[si + 1..] {
            let body = match later {
                Stage::Reduce { body, .. } | Stage::Store { body, .. } => body,
            };
            for n in &mut body.nodes {
                if let ExprOp::Load(l) = &mut n.op {
                    if let Some(&(_, s)) = renames.iter().find(|(t, _)| *t == l.buffer) {
                        l.buffer = s;
                    }
                }
            }
        }
        gone.extend(renames);
    }
    gone
}

/// An argument stage that reads an element the split stage updates in place (a GEMM
/// epilogue on its product) writes it back unchanged, so that it too is an in-place
/// update, which the loop-IR verifier accepts for a buffer another kernel wrote.
fn write_back_in_place(arg_stage: &mut Stage, updates: &[StoreOp]) {
    let Stage::Store { body, stores, .. } = arg_stage else {
        return;
    };
    for (i, n) in body.nodes.iter().enumerate() {
        let ExprOp::Load(l) = &n.op else { continue };
        let updated = updates.iter().any(|s| s.buffer == l.buffer);
        let written = stores
            .iter()
            .any(|s| s.buffer == l.buffer && s.index == l.index);
        if updated && !written {
            stores.push(StoreOp {
                buffer: l.buffer,
                index: l.index.clone(),
                value: ExprRef(i as u32),
            });
        }
    }
}

/// `row[j0] = f(row[j0])` over `points` floats.
fn apply_stage(row: BufferId, f: UnaryFn, points: usize) -> Stage {
    let j = IndexExpr::Var(Var::store(0));
    let op = match f {
        UnaryFn::Exp => UnaryOp::Exp,
        UnaryFn::Log => UnaryOp::Log,
        UnaryFn::Tanh => UnaryOp::Tanh,
        UnaryFn::Erf => UnaryOp::Erf,
        UnaryFn::Erfc => UnaryOp::Erfc,
        UnaryFn::Sigmoid => UnaryOp::Sigmoid,
        UnaryFn::Sin => UnaryOp::Sin,
        UnaryFn::Cos => UnaryOp::Cos,
    };
    let mut body = Block { nodes: Vec::new() };
    let x = body.push(ExprNode {
        dtype: DType::F32,
        op: ExprOp::Load(Load {
            buffer: row,
            index: j.clone(),
            guard: vec![],
            other: Value::Float(0.0),
        }),
    });
    let y = body.push(ExprNode {
        dtype: DType::F32,
        op: ExprOp::Unary(op, x),
    });
    Stage::Store {
        domain: vec![points],
        body,
        stores: vec![StoreOp {
            buffer: row,
            index: j,
            value: y,
        }],
    }
}

/// The chain call of a pointwise `kernel` whose store stage, along its last axis, is a
/// chain row ([`super::rows::chain_along`]): an epilogue's bias, residual and clamp. The
/// kernel stays as it is (a GEMM or a stencil may run it on each block it computes);
/// generated code makes one call per segment of a row that it runs. `None` when it is
/// not one, or its rows are shorter than [`MIN_CHAIN_ROW`].
fn chain_pointwise(kernel: &Kernel, buffers: &[Buffer], isa: Isa) -> Option<WideCall> {
    let n = kernel.domain.len();
    let row = *kernel.domain.last()?;
    if row < MIN_CHAIN_ROW || kernel.stages.len() != 1 {
        return None;
    }
    let chain = super::rows::chain_along(&kernel.stages[0], Var::outer(n - 1), buffers)?;
    Some(WideCall {
        op: WideOp::Chain(chain),
        isa,
        len: row,
    })
}

/// The `wide` kernel step (see the module docs): `kernel` rewritten with its wide
/// functions applied by routine calls and its row reductions made row calls (`rows.rs`),
/// the calls and scratch slots recorded in `schedule`; `None` when nothing pays.
/// `vectorizes(kernel, stage)` says whether a stage's innermost loop would be vector code;
/// `unroll` is the vector loops' (the row calls follow the order of four groups). New
/// scratch buffers are appended to `buffers`.
pub fn apply_wide(
    kernel: &Kernel,
    schedule: &mut Schedule,
    buffers: &mut Vec<Buffer>,
    isa: Isa,
    unroll: usize,
    row_bound: Option<usize>,
    vectorizes: &dyn Fn(&Kernel, usize, &[Buffer]) -> bool,
) -> Option<Kernel> {
    if isa == Isa::Sse || schedule.lanes.is_some() || kernel.gemm.is_some() {
        return None;
    }
    if kernel.domain.contains(&0) {
        return None;
    }
    let split = if has_wide(kernel) {
        split_kernel(kernel, schedule, buffers, isa, row_bound, vectorizes)
    } else {
        None
    };
    let split_any = split.is_some();
    let (mut k, mut calls, mut moved) = split.unwrap_or_else(|| {
        let n = kernel.stages.len();
        (kernel.clone(), vec![None; n], (0..n).collect())
    });
    let mut rows_any = false;
    if !split_any && unroll == 4 && is_pointwise(kernel) {
        // A pointwise kernel without wide functions whose store stage is a chain (an
        // epilogue's bias and clamp): one call per segment of a row.
        if let Some(call) = chain_pointwise(kernel, buffers, isa) {
            calls = vec![Some(call)];
            rows_any = true;
        }
    }
    if unroll == 4 && !is_pointwise(kernel) {
        if let Some(map) = super::rows::merge_exp_sums(&mut k, &mut calls, isa, buffers) {
            for m in &mut moved {
                *m = map[*m];
            }
            rows_any = true;
        }
        rows_any |= super::rows::mark_row_calls(&k, &mut calls, isa, buffers, vectorizes);
    }
    if !split_any && !rows_any {
        return None;
    }
    let renumbered: Vec<String> = moved
        .iter()
        .enumerate()
        .filter(|&(old, &new)| old != new)
        .map(|(old, new)| format!("{old} -> {new}"))
        .collect();
    if !renumbered.is_empty() && schedule.notes.iter().any(|n| n.contains("stage ")) {
        // Before this step's own notes: they name the new numbers.
        let at = schedule
            .notes
            .iter()
            .position(|n| n.starts_with("wide:"))
            .unwrap_or(schedule.notes.len());
        schedule.notes.insert(
            at,
            format!(
                "wide: the stages the notes above name are now: {}",
                renumbered.join(", ")
            ),
        );
    }
    for (si, c) in calls.iter().enumerate() {
        if let Some(c) = c {
            schedule.notes.push(format!("wide: stage {si} is the {c}"));
        }
    }
    schedule.wide = calls;
    Some(k)
}

/// The split of every wide function out of `kernel`'s vector stages: the kernel, the
/// call of each stage, and where each old stage went; its notes and scratch slots are
/// added to `schedule`. `None` when no stage splits.
fn split_kernel(
    kernel: &Kernel,
    schedule: &mut Schedule,
    buffers: &mut Vec<Buffer>,
    isa: Isa,
    row_bound: Option<usize>,
    vectorizes: &dyn Fn(&Kernel, usize, &[Buffer]) -> bool,
) -> Option<(Kernel, Vec<Option<WideCall>>, Vec<usize>)> {
    let mut k = kernel.clone();
    let mut note = None;
    if is_pointwise(kernel) {
        let n = kernel.domain.len();
        if n == 0 || !schedule.parallel {
            return None;
        }
        let row = kernel.domain[n - 1];
        // In a row program whose rows this merged axis holds, blocks stay within a row.
        let b = match row_bound.filter(|&m| m > 1 && row.is_multiple_of(m)) {
            Some(m) => block_for(row / m)?,
            None => block_for(row)?,
        };
        k = block_rows(kernel, b);
        note = Some(format!(
            "wide: rows cut into blocks of {b} (i{} = i{}*{b} + j0)",
            n - 1,
            n - 1
        ));
    }
    let mut used: usize = schedule.scratch.iter().map(|s| s.bytes).sum();
    let mut stages = Vec::with_capacity(k.stages.len());
    let mut calls = Vec::new();
    let mut slots = Vec::new();
    let mut any = false;
    // Where each stage of `k` is now (the stage a split ends with: the original's rest).
    let mut moved = Vec::with_capacity(k.stages.len());
    for si in 0..k.stages.len() {
        let stage = &k.stages[si];
        let split = if vectorizes(&k, si, buffers) {
            split_stage(stage, isa, buffers.len(), slots.len(), buffers)
        } else {
            None
        };
        let bytes = split
            .as_ref()
            .map_or(0, |s| s.scratch.iter().map(|b| b.ty.size_bytes()).sum());
        match split {
            Some(split) if used + bytes <= MAX_SCRATCH_BYTES => {
                used += bytes;
                any = true;
                for b in &split.scratch {
                    slots.push(ScratchSlot {
                        buffer: b.id,
                        bytes: b.ty.size_bytes(),
                    });
                }
                buffers.extend(split.scratch);
                for (st, call) in split.stages {
                    stages.push(st);
                    calls.push(call);
                }
            }
            _ => {
                stages.push(stage.clone());
                calls.push(None);
            }
        }
        moved.push(stages.len() - 1);
    }
    if !any {
        return None;
    }
    let mine: Vec<BufferId> = slots.iter().map(|s| s.buffer).collect();
    let aliased = drop_copies(&mut stages, &mine, buffers);
    schedule
        .scratch
        .retain(|s| !aliased.iter().any(|(t, _)| *t == s.buffer));
    schedule.notes.extend(note);
    for (t, s) in &aliased {
        schedule.notes.push(format!(
            "wide: {t} is not filled: its readers read {s}, which holds the same values"
        ));
    }
    schedule.scratch.extend(slots);
    k.stages = stages;
    Some((k, calls, moved))
}
