//! Ferrite's CPU backend: loop IR planned for the CPU, emitted as Cranelift IR, JIT'd,
//! and run on a thread pool.
//!
//! * [`plan`]: every rewrite and decision before emission, as named steps from loop IR to
//!   loop IR, each verified; the result ([`CpuPlan`]) prints as loop IR with its schedule.
//! * [`emit`]: a planned kernel to one Cranelift function (translation only).
//! * [`jit`]: host ISA, verify, compile and finalize Cranelift functions (with the CLIF
//!   pass that interleaves unrolled groups); owning, `Send + Sync` handles to the
//!   machine code, with CLIF and machine-code dumps.
//! * [`vmath`]: exp, log, tanh, erf, sigmoid, sin, cos, pow, maximum and minimum emitted
//!   as Cranelift IR on `f32x4` (or `f32`) values: polynomial approximations with range
//!   reduction, a few ulp from the correctly rounded result, no libm calls.
//! * [`wide`]: the same algorithms compiled by rustc for AVX2 and AVX-512, over slices,
//!   bit-identical to [`vmath`]'s; the width is chosen at run time (`FERRITE_CPU_ISA`).
//! * [`kernels`]: hand-built elementwise loops (`f32x4`, unrolled, scalar tail) with safe
//!   runners: the yardstick for tests and benchmarks, and a template for the emitter.
//! * [`pool`]: the process's persistent thread pool, which splits kernels' outer loops
//!   and GEMM blocks; programs run on a [`Team`] of its threads.
//! * [`denormals`]: the flush-to-zero / denormals-are-zero mode of a run.
//! * [`gemm`]: strided, batched matrix multiplication through the `gemm` crate, or
//!   through [`sgemm`], Ferrite's own `f32` kernel for few rows (B read in place).
//! * [`stencil`]: the direct stencil: a depthwise conv (any sum of shifted rows times
//!   per-plane coefficients) proved from the loop IR and run by an AVX-512 loop.
//! * [`attention`]: multi-head scaled dot-product attention over token rows, one
//!   hand-written kernel on [`sgemm`] and the [`wide`] `exp`, tasks on the pool.
//! * [`exec`]: [`CpuProgram`], a whole compiled program: kernels, storage, threads, run.
//!
//! Architecture Invariant: `plan` knows nothing of Cranelift and `emit` makes no
//! decisions; `emit` reads `plan`, never the other way. `unsafe` appears only where Rust
//! meets generated code (calling a finalized function), in the pool's hand-off of
//! borrowed tasks to workers, and at the `gemm` FFI-like boundary; each block states why
//! it holds.

pub mod attention;
pub mod denormals;
pub mod emit;
pub mod error;
pub mod exec;
pub mod gemm;
pub mod jit;
pub mod kernels;
pub mod plan;
pub mod pool;
pub mod row_order;
pub mod sgemm;
pub mod stencil;
pub mod taps;
pub mod vmath;
pub mod wide;

pub use denormals::FlushDenormals;
pub use emit::KernelInfo;
pub use error::{Error, Result};
pub use exec::{
    CpuOptions, CpuProgram, InputTensors, KernelTiming, OutputTensors, MAX_GENERATED_KERNELS,
};
pub use gemm::{
    gemm_nd, gemm_nd_then, plan_split, plan_split_for, AfterBlock, BatchAxes, GemmError,
    GemmScalar, GemmShape, GemmSplit, MatLayout, MatMut, MatRef, Parallelism, Scale,
};
pub use jit::{FunctionDump, Jit, JitCode, JitError, JitFunction, JitOptions, JitStats, OptLevel};
pub use kernels::{BinaryKernel, KernelError, UnaryKernel};
pub use plan::{plan_program, CodegenOptions, CpuPlan};
pub use pool::{
    default_thread_count, global_pool, split_range, threads_from_env, AwakeGuard, PoolError, Team,
    ThreadPool, MAX_STEAL_BLOCKS, MAX_THREADS, NUM_THREADS_VAR,
};
pub use vmath::{UnaryFn, VMath};
pub use wide::{
    ChainArgs, ChainFn, ChainOp, ExpSumFn, InPlaceFn, Isa, RowFn, RowReduce, WideFn, ISA_VAR,
};
