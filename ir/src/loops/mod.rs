//! The loop IR: what a scheduled program is, after fusion and before any backend.
//!
//! A [`Program`] is a list of [`Buffer`]s (graph inputs, graph outputs and
//! intermediates, each dense and row-major) and [`Kernel`]s run in order. A kernel is
//! an outer, parallel iteration domain (`for i0 in 0..64, i1 in .. parallel`) and a
//! sequence of [`Stage`]s run at each outer point:
//!
//! - [`Stage::Reduce`] loops over an inner domain (`r0, r1, ..`) and combines values
//!   into accumulators (`acc0 = max(r0 in 0..512) ...`), which later stages read;
//! - [`Stage::Store`] loops over an inner domain (`j0, ..`, possibly empty) and writes
//!   buffer elements.
//!
//! So a row softmax is one kernel: outer `[rows]`, a max and a sum reduction over the
//! row, and a store over the row. Each stage's body is a [`Block`] of typed scalar
//! [`ExprNode`]s; buffers are addressed by [`IndexExpr`]s, affine in the loop
//! variables with floor division and modulo, so every movement op is indexing and
//! views never copy. Matmul kernels also carry a [`GemmInfo`] so that backends can call
//! an extern GEMM for the reduction stage and run the fused epilogue after it.
//!
//! Architecture invariant: the loop IR knows nothing of the graph passes that produce
//! it (only the graph's [`ValueId`](crate::ValueId)s, for readers) and nothing of any
//! backend. [`Program::verify`] states its invariants, [`evaluate`] runs it, the
//! `Display` impls print it, [`parse_program`] reads the printed text back, and
//! [`Liveness`] says when each buffer must exist (the one liveness that memory planning
//! and both backends' placement use).

mod eval;
mod expr;
mod ids;
mod index;
mod liveness;
mod print;
mod program;
mod read;
mod rows;
pub mod scalar;
mod verify;

pub use eval::evaluate;
pub use expr::{Block, Bound, ExprNode, ExprOp, Load, Value};
pub use ids::{AccId, BufferId, ExprRef, KernelId};
pub use index::{gcd, Extents, IndexExpr, Var, VarKind};
pub use liveness::{assign_slots, Interval, Liveness, Slot, Slots};
pub use program::{
    Buffer, BufferAccess, BufferKind, Donation, GemmInfo, GemmOperand, Kernel, Program, ReduceKind,
    Reduction, Stage, StoreOp,
};
pub use read::{parse_program, MAX_NESTING};
pub use rows::{parse_row_program, RowAxis, RowProgram, Rows};
