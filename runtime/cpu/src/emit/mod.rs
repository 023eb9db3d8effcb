//! Emission: a planned kernel (see [`crate::plan`]) to one Cranelift function.
//!
//! Each kernel becomes one function `fn(slots: *const *mut u8, begin: i64, end: i64) ->
//! i32` that runs the flat range `begin..end` of the kernel's outer domain, so
//! [`crate::exec`] can split the domain across the thread pool by ranges. Every decision
//! (what is vector code, which points run as lanes, where scratch lives) is the plan's;
//! this module translates. File by file:
//!
//! - `kernel.rs`: the function: slot pointers, stack scratch, the outer loop (coordinates
//!   decomposed from `begin` once, then carried), the lanes step when the plan has one,
//!   the stages at each outer point (or, for a pointwise kernel, a loop over the rest of
//!   the row), and the error exit for run-time checks.
//! - `stage.rs`: one stage, in one path for a point at a time and a lanes step: its loop
//!   nest, every node at the outermost level where its inputs are fixed (hoisting by
//!   construction), vector loops unrolled (four `f32x4` groups, sixteen elements per
//!   iteration, by default) then a one-vector loop and a scalar tail, stores.
//! - `reduce.rs`: accumulators in registers: scalar, per unrolled vector group, per lane.
//! - `state.rs`: the emission state, in pieces (target, memory, checks, nest, values).
//! - `index.rs`: index expressions as `i64` arithmetic; `rest + c*v` accesses compute
//!   `rest` outside the loop over `v` (strength reduction); floor division and modulo by
//!   constants become multiply-shift sequences in Cranelift.
//! - `expr.rs`: scalar and `f32x4`/`i32x4` emission of every node kind and dtype, with the
//!   reference evaluator's rounding rules; transcendentals from [`crate::vmath`].
//! - `dtypes.rs`: scalar code of `f64`, the narrow and unsigned integers, every cast, and
//!   the integer divisions (with their run-time check of the divisor).
//! - `convert.rs`: `f16`/`bf16` conversions and rounding as integer bit manipulation.
//!
//! Safety by construction: before any access is emitted the plan bounds its index range
//! with [`IndexExpr::range`](ferrite_ir::loops::IndexExpr::range) over the loop extents;
//! an unguarded load or a store whose range is not inside its buffer fails the compile. A
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
//! (`f16` products too; `f64` products in `f64`). Lanes across outer points (the plan's `lanes.rs`) accumulate sums in
//! `f64`
//! and are bit-identical. The error of the others grows
//! with the magnitude of the terms rather than of the result: sums and softmax rows
//! match the reference within `1e-4` relative, and contractions within `2e-4` of the
//! output's magnitude (the tolerances the tests use).

mod convert;
mod dtypes;
mod expr;
mod index;
mod kernel;
mod reduce;
mod stage;
mod state;

pub use kernel::{function, twin_key, KernelInfo};

use crate::error::{Error, Result};
use crate::jit::Jit;
use crate::plan::{plan_kernel, CodegenOptions, Run};
use cranelift_codegen::ir::Function;
use ferrite_ir::loops::{Buffer, Kernel};

/// Plans `kernel` on its own (whose buffers are `buffers`; see
/// [`plan_kernel`](crate::plan::plan_kernel)) and builds, without compiling, the
/// Cranelift function `name` computing it, for the ISA of `jit`.
pub fn kernel_function(
    jit: &Jit,
    name: &str,
    buffers: &[Buffer],
    kernel: &Kernel,
    opts: &CodegenOptions,
) -> Result<(Function, KernelInfo)> {
    let plan = plan_kernel(kernel, buffers, opts)?;
    let Some(Run::Generated(schedule)) = plan.kernels.first().map(|k| &k.run) else {
        return Err(Error::internal(
            "a kernel planned alone is not generated code",
        ));
    };
    function(
        jit.isa(),
        name,
        &plan.program.buffers,
        &plan.program.kernels[0],
        schedule,
    )
}

/// [`kernel_function`], then verifies and compiles the function into `jit`.
pub fn define_kernel(
    jit: &mut Jit,
    name: &str,
    buffers: &[Buffer],
    kernel: &Kernel,
    opts: &CodegenOptions,
) -> Result<KernelInfo> {
    let (func, info) = kernel_function(jit, name, buffers, kernel, opts)?;
    jit.define(name, func)?;
    Ok(info)
}
