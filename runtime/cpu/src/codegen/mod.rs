//! The CPU code generator: loop-IR kernels to Cranelift functions.
//!
//! Each [`Kernel`](ferrite_ir::loops::Kernel) becomes one function
//! `fn(slots: *const *mut u8, begin: i64, end: i64) -> i32` that runs the flat range
//! `begin..end` of the kernel's outer (parallel) domain, so [`crate::exec`] can split
//! the domain across the thread pool by ranges. The strategy, file by file:
//!
//! - `kernel.rs`: the outer loop (coordinates decomposed from `begin` once, then carried),
//!   the stages at each outer point (or, for a pointwise kernel, a loop over the rest of
//!   the row), loop nests over stage domains, accumulators in registers, stores, and the
//!   error exit for run-time checks. Every node is emitted at the outermost loop level
//!   where its inputs are fixed, so loop-invariant work is hoisted by construction.
//! - `index.rs`: index expressions as `i64` arithmetic; `rest + c*v` accesses compute
//!   `rest` outside the loop over `v` (strength reduction); floor division and modulo by
//!   constants become multiply-shift sequences in Cranelift.
//! - `expr.rs`: scalar and `f32x4`/`i32x4` emission of every node kind and dtype, with the
//!   reference evaluator's rounding rules; transcendentals from [`crate::vmath`].
//! - `vectorize.rs`: the SIMD decision for a stage's innermost loop (contiguous accesses,
//!   lane-wise ops) and why a loop stays scalar. Vector loops are unrolled (four `f32x4`
//!   groups, sixteen elements per iteration, by default), then a one-vector loop and a
//!   scalar tail finish the range.
//! - `lanes.rs`: kernels whose inner loops stride (reductions over a leading axis, a
//!   matmul without the extern GEMM) take four neighbouring outer points as the lanes
//!   instead, one accumulator per lane, with the scalar code's numerics.
//! - `convert.rs`: `f16`/`bf16` conversions and rounding as integer bit manipulation.
//! - `coalesce.rs`: a pointwise kernel's innermost outer axes merged where every index
//!   stays affine, so short rows still make long vector loops.
//! - `disjoint.rs`: whether outer points write disjoint elements (else the kernel runs on
//!   one thread).
//! - `stash.rs`: a transcendental that two stages of a kernel both compute (softmax's
//!   `exp(x - max)` in its sum and its store stage) computed once per outer point into a
//!   scratch row in the stack frame and read back by both.
//! - `tile.rs`: a pointwise kernel whose loads stride across rows (a transpose) walks its
//!   outer domain in 16x16 tiles, so each tile's lines stay in L1.
//! - `epilogue.rs`: GEMM kernels split into the extern product and a JIT'd epilogue.
//!
//! The lanes and tile rewrites apply only to kernels whose outer points write disjoint
//! elements, since they change the order of the points. The stage reports and `notes` of
//! [`KernelInfo`] say which rewrites ran (`ferrite compile --dump` shows them at the top of
//! `05-cpu.clif`).
//!
//! Safety by construction: before any access is emitted its index range is bounded with
//! [`IndexExpr::range`](ferrite_ir::loops::IndexExpr::range) over the loop extents; an
//! unguarded load or a store whose range is not inside its buffer fails the compile. A
//! guarded (padded) load whose index is not provably in bounds has its index clamped into
//! the buffer, since its value is discarded when the guard fails. Data-dependent indices
//! (gather, index_select) are checked at run time against their extent, and a failing
//! check returns its code from the kernel, which [`crate::exec`] turns into an
//! error. The generated code therefore cannot touch memory outside its buffers, provided
//! the caller passes buffers of the declared sizes, which `exec` guarantees.
//!
//! Numerics: every node rounds to its dtype as the reference does, so pointwise code
//! (scalar or vector) gives bit-identical results to the loop-IR evaluator for exact ops;
//! transcendentals are a few ulp away (vector math), and `sin`/`cos` arguments beyond the
//! vector math's range reduction take a cold path computed in `f64`. Scalar reductions
//! accumulate like the reference (`f64`, exact products for dot products, same order),
//! so they are bit-identical too. Two documented differences remain, both as in Inductor
//! and BLAS: a vectorized `f32` reduction accumulates in `f32` lanes (sixteen partial
//! results, then a tree; a sum folds its lanes into `f64` every 16 iterations, so no lane
//! chains more than 16 `f32` additions), and the extern GEMM accumulates in `f32`
//! (`f16` products too). Lanes across outer points (`lanes.rs`) accumulate sums in `f64`
//! and are bit-identical. The error of the others grows
//! with the magnitude of the terms rather than of the result: sums and softmax rows
//! match the reference within `1e-4` relative, and contractions within `2e-4` of the
//! output's magnitude (the tolerances the tests use).

mod coalesce;
mod convert;
mod disjoint;
pub mod epilogue;
mod expr;
mod index;
mod kernel;
mod lanes;
mod stash;
mod tile;
mod vectorize;

pub use disjoint::outer_points_write_disjoint;
pub use kernel::{define_kernel, kernel_function};

/// How kernels are compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodegenOptions {
    /// Emit SIMD code for innermost loops where possible.
    pub vectorize: bool,
    /// Vector groups per main-loop iteration (1 to 8; 4 keeps enough in flight).
    pub unroll: usize,
    /// Compute a transcendental that two stages of a kernel share once per point, into a
    /// stack scratch row, instead of in both stages (see `stash.rs`).
    pub stash: bool,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions {
            vectorize: true,
            unroll: 4,
            stash: true,
        }
    }
}

/// How one stage of a kernel was compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageReport {
    /// The stage's position in its kernel.
    pub stage: usize,
    /// `"reduce"` or `"store"`.
    pub kind: &'static str,
    /// The loop nest, outermost first (`j0 < 512`), empty for a single point.
    pub loops: String,
    /// The vector shape of the innermost loop (`f32x4x4`: four `f32x4` per iteration).
    pub vector: Option<String>,
    /// Why the innermost loop is scalar, when it has one and it is.
    pub scalar_reason: Option<String>,
}

impl std::fmt::Display for StageReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stage {} ({}", self.stage, self.kind)?;
        if !self.loops.is_empty() {
            write!(f, " over {}", self.loops)?;
        }
        write!(f, "): ")?;
        match (&self.vector, &self.scalar_reason) {
            (Some(v), _) => write!(f, "vector {v}"),
            (None, Some(why)) => write!(f, "scalar ({why})"),
            (None, None) => write!(f, "scalar"),
        }
    }
}

/// What the executor needs to know about a compiled kernel function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The function's name in the JIT module.
    pub function: String,
    /// The kernel's name in the program.
    pub kernel: String,
    /// `slots[s]` is the buffer whose base pointer goes in slot `s` of the call.
    pub slots: Vec<ferrite_ir::loops::BufferId>,
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
