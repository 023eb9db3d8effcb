//! The CPU backend's building blocks: JIT, vector math, threads, GEMM.
//!
//! These are the parts of the Cranelift backend that do not depend on the loop IR; the
//! loop-IR code generator is written on top of them.
//!
//! * [`jit`]: host ISA, verify, compile and finalize Cranelift functions; owning,
//!   `Send + Sync` handles to the machine code, with CLIF and machine-code dumps.
//! * [`vmath`]: exp, log, tanh, erf, sigmoid, sin, cos, pow, maximum and minimum emitted
//!   as Cranelift IR on `f32x4` (or `f32`) values: polynomial approximations with range
//!   reduction, a few ulp from the correctly rounded result, no libm calls.
//! * [`kernels`]: hand-built elementwise loops (`f32x4`, unrolled, scalar tail) with safe
//!   runners: the yardstick for tests and benchmarks, and a template for the codegen.
//! * [`pool`]: a persistent thread pool for splitting a kernel's outer loop.
//! * [`gemm`]: strided, batched matrix multiplication through the `gemm` crate.
//! * [`codegen`]: the loop-IR code generator: one kernel to one Cranelift function.
//! * [`exec`]: [`CpuProgram`], a whole compiled program: kernels, storage, threads, run.
//!
//! Architecture Invariant: `unsafe` appears only where Rust meets generated code (calling
//! a finalized function), in the pool's hand-off of borrowed tasks to workers, and at the
//! `gemm` FFI-like boundary; each block states why it holds.

pub mod codegen;
pub mod exec;
pub mod gemm;
pub mod jit;
pub mod kernels;
pub mod pool;
pub mod vmath;

pub use exec::{CpuOptions, CpuProgram, KernelTiming};
pub use gemm::{GemmError, GemmScalar, GemmShape, MatLayout, MatMut, MatRef, Parallelism, Scale};
pub use jit::{FunctionDump, Jit, JitCode, JitError, JitFunction, JitOptions, OptLevel};
pub use kernels::{BinaryKernel, KernelError, UnaryKernel};
pub use pool::{default_thread_count, split_range, PoolError, ThreadPool};
pub use vmath::{UnaryFn, VMath};
