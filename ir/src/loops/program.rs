//! Programs, buffers, kernels and stages: the structure of the loop IR.

use super::expr::{Block, ExprOp, Value};
use super::ids::{AccId, BufferId, ExprRef, KernelId};
use super::index::{Extents, IndexExpr, VarKind};
use crate::types::TensorType;
use crate::{DType, ValueId};

/// The role of a buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BufferKind {
    /// Holds graph parameter number `.0`; read-only.
    Input(usize),
    /// Holds graph output number `.0`; written by exactly one kernel.
    Output(usize),
    /// Holds [`Program::constants`]`[.0]`, a constant tensor of the graph (a weight):
    /// read-only like an input, but bound when the program is built rather than passed
    /// in. The memory plan does not place it; a backend keeps it with the program.
    Constant(usize),
    /// A temporary written by one kernel and read by later ones; the memory plan places it.
    Intermediate,
    /// Private to each outer point of the one kernel that writes and reads it: values an
    /// earlier stage stores at this point and a later stage loads back (a backend's
    /// stash). Each point writes what it reads, so nothing carries from one point to the
    /// next; a backend may keep one copy per thread (in its stack frame), and the memory
    /// plan does not place it.
    Scratch,
}

/// A dense, row-major tensor in memory.
#[derive(Clone, PartialEq, Debug)]
pub struct Buffer {
    /// Its id (equal to its position in [`Program::buffers`]).
    pub id: BufferId,
    /// Element type and shape.
    pub ty: TensorType,
    /// Input, output or intermediate.
    pub kind: BufferKind,
    /// The graph value it holds, for readers (`x`, `%7`).
    pub name: String,
}

/// The combining operation of a reduction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ReduceKind {
    /// Sum (identity 0).
    Sum,
    /// Product (identity 1).
    Prod,
    /// Maximum; NaN propagates.
    Max,
    /// Minimum; NaN propagates.
    Min,
    /// Position (row-major over the reduction domain) of the first maximum; a NaN counts as maximal.
    ArgMax,
    /// Position of the first minimum; a NaN counts as minimal.
    ArgMin,
}

impl ReduceKind {
    /// The identity of the reduction in dtype `d` (what an empty combination starts
    /// from, and what padding lanes take): 0, 1, or the dtype's lowest (max, argmax) or
    /// highest (min, argmin) value, infinities for floats.
    pub fn identity(self, d: DType) -> Value {
        let low = matches!(self, ReduceKind::Max | ReduceKind::ArgMax);
        match self {
            ReduceKind::Sum => Value::zero(d),
            ReduceKind::Prod if d.is_float() => Value::Float(1.0),
            ReduceKind::Prod => Value::Int(1),
            _ if d.is_float() => Value::Float(if low {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }),
            _ => Value::Int(match (d.int_range(), low) {
                (Some((lo, _)), true) => lo,
                (Some((_, hi)), false) => hi,
                (None, true) => i64::MIN as i128,
                (None, false) => i64::MAX as i128,
            }),
        }
    }

    /// The name used in printed kernels.
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum",
            ReduceKind::Prod => "prod",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::ArgMax => "argmax",
            ReduceKind::ArgMin => "argmin",
        }
    }

    /// True for argmax and argmin, whose accumulator is an `i64` position.
    pub fn is_arg(self) -> bool {
        matches!(self, ReduceKind::ArgMax | ReduceKind::ArgMin)
    }
}

/// One accumulator of a reduction stage.
#[derive(Clone, PartialEq, Debug)]
pub struct Reduction {
    /// The accumulator it defines.
    pub acc: AccId,
    /// How values combine.
    pub kind: ReduceKind,
    /// The accumulator's dtype: that of `value` for sum/prod/max/min (accumulated in
    /// f64 or wrapping i64 and rounded to it when read), `i64` for argmax/argmin.
    pub dtype: DType,
    /// The value combined at each point of the stage's domain.
    pub value: ExprRef,
    /// For a dot product (kind `Sum` only): the second factor. Each point then adds
    /// `value * rhs` computed exactly (in f64, or wrapping i64), so a matmul
    /// accumulates unrounded products as the reference interpreter and a GEMM with a
    /// wide accumulator do.
    pub rhs: Option<ExprRef>,
}

/// One element write of a store stage.
#[derive(Clone, PartialEq, Debug)]
pub struct StoreOp {
    /// The buffer written.
    pub buffer: BufferId,
    /// Element offset (row-major) of the write.
    pub index: IndexExpr,
    /// The value written; its dtype is the buffer's.
    pub value: ExprRef,
}

/// A stage runs once per point of its kernel's outer domain.
#[derive(Clone, PartialEq, Debug)]
pub enum Stage {
    /// Loops over `domain` (variables `r0, r1, ..`) evaluating `body` and combining
    /// values into the accumulators, which later stages read with `Acc`.
    Reduce {
        /// Extents of the reduction loops (may be empty: a single point).
        domain: Vec<usize>,
        /// The per-point computation.
        body: Block,
        /// The accumulators, all over the same loop (horizontal fusion of reductions).
        reductions: Vec<Reduction>,
        /// Writes made at each point besides accumulating, in the same loop: a value
        /// computed once and kept in a [`BufferKind::Scratch`] buffer for a later stage.
        /// Empty in the programs fusion makes; a backend's plan adds them.
        stores: Vec<StoreOp>,
    },
    /// Loops over `domain` (variables `j0, j1, ..`; empty for one write per outer
    /// point) evaluating `body` and writing elements.
    Store {
        /// Extents of the store loops.
        domain: Vec<usize>,
        /// The per-point computation.
        body: Block,
        /// The writes, all over the same loop.
        stores: Vec<StoreOp>,
    },
}

impl Stage {
    /// The stage's inner loop extents.
    pub fn domain(&self) -> &[usize] {
        match self {
            Stage::Reduce { domain, .. } | Stage::Store { domain, .. } => domain,
        }
    }

    /// The stage's body.
    pub fn body(&self) -> &Block {
        match self {
            Stage::Reduce { body, .. } | Stage::Store { body, .. } => body,
        }
    }

    /// The stage's element writes (for a reduction stage, those besides accumulating).
    pub fn stores(&self) -> &[StoreOp] {
        match self {
            Stage::Reduce { stores, .. } | Stage::Store { stores, .. } => stores,
        }
    }

    /// The kind of the stage's inner loop variables (`r` or `j`).
    pub fn var_kind(&self) -> VarKind {
        match self {
            Stage::Reduce { .. } => VarKind::Reduce,
            Stage::Store { .. } => VarKind::Store,
        }
    }

    /// The variable extents in scope inside this stage of a kernel with outer domain `outer`.
    pub fn extents(&self, outer: &[usize]) -> Extents {
        match self {
            Stage::Reduce { domain, .. } => Extents {
                outer: outer.to_vec(),
                reduce: domain.clone(),
                store: vec![],
            },
            Stage::Store { domain, .. } => Extents {
                outer: outer.to_vec(),
                reduce: vec![],
                store: domain.clone(),
            },
        }
    }

    /// The nodes that the stage's results are taken from (reduced values, stored values
    /// and the dynamic parts of store indices).
    pub fn roots(&self) -> Vec<ExprRef> {
        let mut roots = Vec::new();
        if let Stage::Reduce { reductions, .. } = self {
            for r in reductions {
                roots.push(r.value);
                roots.extend(r.rhs);
            }
        }
        for s in self.stores() {
            roots.push(s.value);
            s.index.for_each_ref(&mut |r| roots.push(r));
        }
        roots
    }
}

/// How one GEMM operand is laid out in its buffer: element `(batch.., row, col)` is at
/// `offset + Σ batch_strides[b] * batch[b] + row * row_stride + col * col_stride`.
/// Strides are in elements and may be 0 (broadcast) or describe a transposed view.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GemmOperand {
    /// The buffer holding the operand.
    pub buffer: BufferId,
    /// Element offset of the first element.
    pub offset: i64,
    /// One stride per batch axis of the product.
    pub batch_strides: Vec<i64>,
    /// Stride between rows (along M for the left operand, K for the right).
    pub row_stride: i64,
    /// Stride between columns (along K for the left operand, N for the right).
    pub col_stride: i64,
}

/// The matrix product behind a matmul kernel, for backends that call an extern GEMM
/// or a dot engine instead of running the reduction stage as loops.
///
/// The kernel's outer domain enumerates the product's `(batch.., m, n)` points (axes
/// of extent 1 dropped) and reduction stage `stage` computes accumulator `acc` as the
/// sum over `k` of `lhs * rhs`; later stages (the fused epilogue) read `acc`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GemmInfo {
    /// Extents of the broadcast batch axes.
    pub batch: Vec<usize>,
    /// Rows of the product.
    pub m: usize,
    /// Columns of the product.
    pub n: usize,
    /// The contracted extent.
    pub k: usize,
    /// The `[batch.., m, k]` operand.
    pub lhs: GemmOperand,
    /// The `[batch.., k, n]` operand.
    pub rhs: GemmOperand,
    /// The index of the reduction stage the GEMM replaces.
    pub stage: usize,
    /// The accumulator holding the product.
    pub acc: AccId,
    /// For each of `batch.., m, n`, the outer-domain axis that enumerates it (`None`
    /// for an axis of extent 1, which the domain drops).
    pub outer_axes: Vec<Option<usize>>,
}

/// Bytes a kernel moves to or from one buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BufferAccess {
    /// The buffer.
    pub buffer: BufferId,
    /// Bytes touched: at most the buffer's size, less when only part of it is
    /// addressed (a slice); each element is counted once however often it is used.
    pub bytes: usize,
}

/// One kernel: an outer, parallel iteration domain and the stages run at each point.
#[derive(Clone, PartialEq, Debug)]
pub struct Kernel {
    /// Its id (equal to its position in [`Program::kernels`]).
    pub id: KernelId,
    /// A descriptive name (`k3_add_relu`).
    pub name: String,
    /// The graph nodes it computes (views and recomputed constants included).
    pub nodes: Vec<ValueId>,
    /// Extents of the outer loops `i0, i1, ..` (may be empty: one point).
    pub domain: Vec<usize>,
    /// The stages, in order.
    pub stages: Vec<Stage>,
    /// Set for matmul kernels.
    pub gemm: Option<GemmInfo>,
    /// Buffers read, each once, in id order (see [`Kernel::compute_accesses`]).
    pub reads: Vec<BufferAccess>,
    /// Buffers written, each once, in id order.
    pub writes: Vec<BufferAccess>,
}

impl Kernel {
    /// Computes [`Kernel::reads`] and [`Kernel::writes`] from the stages, bounding
    /// each buffer's touched bytes by the range of its index expressions.
    pub fn compute_accesses(&self, buffers: &[Buffer]) -> (Vec<BufferAccess>, Vec<BufferAccess>) {
        // buffer -> (lowest, highest) element index, or None when unbounded.
        let mut reads: Vec<(BufferId, Option<(i64, i64)>)> = Vec::new();
        let mut writes: Vec<(BufferId, Option<(i64, i64)>)> = Vec::new();
        fn note(
            list: &mut Vec<(BufferId, Option<(i64, i64)>)>,
            b: BufferId,
            r: Option<(i64, i64)>,
        ) {
            match list.iter_mut().find(|(x, _)| *x == b) {
                Some((_, cur)) => {
                    *cur = match (*cur, r) {
                        (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
                        _ => None,
                    }
                }
                None => list.push((b, r)),
            }
        }
        for stage in &self.stages {
            let ext = stage.extents(&self.domain);
            for node in &stage.body().nodes {
                if let ExprOp::Load(l) = &node.op {
                    note(&mut reads, l.buffer, l.index.range(&ext));
                }
            }
            for s in stage.stores() {
                note(&mut writes, s.buffer, s.index.range(&ext));
            }
        }
        let bytes = |list: Vec<(BufferId, Option<(i64, i64)>)>| -> Vec<BufferAccess> {
            let mut out: Vec<BufferAccess> = list
                .into_iter()
                .map(|(b, r)| {
                    let (numel, elem) = buffers
                        .get(b.index())
                        .map_or((0, 0), |buf| (buf.ty.numel(), buf.ty.dtype.size_bytes()));
                    let span = match r {
                        Some((lo, hi)) => {
                            let lo = lo.max(0) as usize;
                            let hi = (hi.max(-1) + 1) as usize;
                            hi.min(numel).saturating_sub(lo)
                        }
                        None => numel,
                    };
                    BufferAccess {
                        buffer: b,
                        bytes: span.min(numel) * elem,
                    }
                })
                .collect();
            out.sort_by_key(|a| a.buffer);
            out
        };
        (bytes(reads), bytes(writes))
    }

    /// Total bytes read plus written.
    pub fn bytes_moved(&self) -> usize {
        self.reads.iter().chain(&self.writes).map(|a| a.bytes).sum()
    }

    /// The number of scalar operations the kernel performs, saturating: every computing
    /// node at every point of its stage, except that a node that does not change along
    /// the stage's own loops (it reads only the outer variables and earlier stages'
    /// accumulators: a row's `rsqrt(mean + eps)`) counts once per outer point, as
    /// backends compute it (hoisted out of the loop). Loads, constants and index
    /// arithmetic are free. Fusion compares this before and after to bound recomputation.
    pub fn op_count(&self) -> u64 {
        let outer: u64 = self.domain.iter().map(|&d| d as u64).product();
        let mut per_point: u64 = 0;
        for stage in &self.stages {
            let points: u64 = stage.domain().iter().map(|&d| d as u64).product();
            let body = stage.body();
            let mut varies = vec![false; body.nodes.len()];
            let (mut inner_ops, mut once_ops) = (0u64, 0u64);
            for (i, n) in body.nodes.iter().enumerate() {
                let mut v = false;
                let mut inner_var = |x: super::Var| v |= x.kind != super::VarKind::Outer;
                match &n.op {
                    ExprOp::Load(l) => {
                        l.index.for_each_var(&mut inner_var);
                        for g in &l.guard {
                            g.expr.for_each_var(&mut inner_var);
                        }
                    }
                    ExprOp::Index(e) => e.for_each_var(&mut inner_var),
                    ExprOp::CheckedIndex { guard, .. } => {
                        for g in guard {
                            g.expr.for_each_var(&mut inner_var);
                        }
                    }
                    _ => {}
                }
                n.for_each_operand(&mut |r| v |= varies.get(r.index()).copied().unwrap_or(true));
                varies[i] = v;
                if matches!(
                    n.op,
                    ExprOp::Unary(..) | ExprOp::Binary(..) | ExprOp::Where(..) | ExprOp::Cast(_)
                ) {
                    if v {
                        inner_ops += 1;
                    } else {
                        once_ops += 1;
                    }
                }
            }
            let extra = match stage {
                Stage::Reduce { reductions, .. } => reductions.len() as u64,
                Stage::Store { .. } => 0,
            };
            per_point = per_point
                .saturating_add(points.saturating_mul(inner_ops + extra))
                .saturating_add(once_ops);
        }
        outer.saturating_mul(per_point)
    }
}

/// An output written in place of an input (a donated buffer, [`Program::donated`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Donation {
    /// The graph parameter whose value the output's buffer holds when the program starts.
    pub input: usize,
    /// The graph output written there.
    pub output: usize,
}

/// A whole scheduled graph: buffers and the kernels that run in order.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Program {
    /// The graph's name.
    pub name: String,
    /// Every buffer; `buffers[i].id == BufferId(i)`.
    pub buffers: Vec<Buffer>,
    /// The input buffer of each graph parameter, in order.
    pub inputs: Vec<BufferId>,
    /// The output buffer of each graph output, in order.
    pub outputs: Vec<BufferId>,
    /// The kernels in execution order.
    pub kernels: Vec<Kernel>,
    /// The constant tensors that [`BufferKind::Constant`] buffers hold, shared with the
    /// graph (never copied).
    pub constants: Vec<crate::Constant>,
    /// Outputs written in place of inputs: each output's buffer holds its input's value
    /// when the program starts (whoever runs the program puts it there), kernels read it
    /// there instead of the input's buffer, which nothing reads, and only the elements
    /// that change are written (`passes::donate` makes these).
    pub donated: Vec<Donation>,
}

impl Program {
    /// The buffer `id`, if it exists.
    pub fn buffer(&self, id: BufferId) -> Option<&Buffer> {
        self.buffers.get(id.index())
    }

    /// Total bytes moved by all kernels (the static memory-traffic estimate).
    pub fn bytes_moved(&self) -> usize {
        self.kernels.iter().map(Kernel::bytes_moved).sum()
    }
}
