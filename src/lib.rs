//! Ferrite: a compiler for tensor programs, in the spirit of TorchDynamo + TorchInductor.
//!
//! Write a model with symbolic tensors, either into a [`Graph`] with the builder or as
//! an ordinary closure traced by [`jit`]; Ferrite decomposes it into primitive ops,
//! optimizes it with e-graph rewrites, fuses it into loop kernels and compiles those
//! to native code with Cranelift ([`Target::Cpu`]) or to tile kernels for the simulated
//! MTIA-like accelerator ([`Target::Sim`]); the reference interpreter
//! ([`Target::Interp`]) and the loop-IR evaluator ([`Target::Loops`]) run the same
//! graphs plainly, as oracles.
//!
//! ```
//! use ferrite::{Options, Target, Tensor};
//!
//! // Build: inputs are typed, ops are methods and operators, nothing runs yet.
//! // `x`, `w` and `y` are symbolic (`Var`s): they name values of the graph, not data.
//! let g = ferrite::Graph::new("mlp");
//! let x = g.input("x", ferrite::f32(&[2, 3]));
//! let w = g.input("w", ferrite::f32(&[3, 2]));
//! let y = x.matmul(&w).relu() * 0.5;
//! g.output(&y);
//!
//! // Compile, then run on host tensors (data) as often as needed.
//! let exe = ferrite::compile(&g, &Options::default().target(Target::Cpu))?;
//! let x = Tensor::from_vec(&[2, 3], vec![1.0f32, 2.0, 3.0, -1.0, -2.0, -3.0])?;
//! let w = Tensor::from_vec(&[3, 2], vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0])?;
//! let out = exe.run(&[&x, &w])?;
//! assert_eq!(out[0].as_slice::<f32>(), Some(&[2.0, 2.5, 0.0, 0.0][..]));
//!
//! // Inputs by name, in any order: the same run.
//! assert_eq!(exe.input_names(), ["x", "w"]);
//! assert_eq!(exe.run_named(&[("w", &w), ("x", &x)])?, out);
//!
//! // Wrong inputs are typed errors, not panics.
//! let err = exe.run(&[&w, &x]).unwrap_err();
//! assert!(matches!(err, ferrite::Error::InputShape { index: 0, .. }));
//!
//! // The same model as a closure: traced and compiled per input signature, cached.
//! let mlp = ferrite::jit(|[x, w]| x.matmul(&w).relu() * 0.5);
//! assert_eq!(mlp.run(&[&x, &w])?, out);
//! assert_eq!(mlp.run_eager(&[&x, &w])?, out); // op by op on the interpreter
//! # Ok::<(), ferrite::Error>(())
//! ```
//!
//! # The pieces
//!
//! - [`Graph`] and [`Var`]: the builder and its symbolic values (a `Var` holds no
//!   data: it names a value of the graph being built). Every op of the
//!   IR is a method ([`Var::matmul`], [`Var::softmax`], [`Var::reshape`], ...);
//!   `+ - * /` (and `+=` ...) and unary `-` work between `Var`s and with scalars:
//!   `f32`, `f64`, `i32`, `i64` on the right, `f64` and `i64` on the left (one type per
//!   kind, so that a bare literal as in `1.0 - x` infers). An op that does not
//!   type-check does not panic: it poisons its result and [`compile`] reports the first
//!   such error, with the op, the operand types and the source location
//!   ([`api::builder`] explains why).
//! - [`compile`] / [`compile_ir`] with [`Options`] (target, fusion, optimizer, threads,
//!   simulated machine, dump directory) give a [`Compiled`] program, which is
//!   `Send + Sync`; it runs on inputs by position ([`Compiled::run`],
//!   [`Compiled::execute`]) or by name ([`Compiled::run_named`]), and profiles itself
//!   ([`Compiled::profile`], [`Compiled::profile_report`]).
//! - [`Tensor`]: host data in and out, from and to `Vec`s, slices and `.npy` (and
//!   `ndarray` arrays with the `ndarray` feature). It is the one data type of the API.
//! - [`jit`] and [`Jit`]: Dynamo-style capture with a guard cache and eager fallback
//!   ([`api::jit`] describes the policy; `FERRITE_LOG=1` logs every compile); [`eager`]
//!   runs a closure op by op.
//! - [`profile`]: profile reports and their table, JSON and Chrome-trace renderings.
//! - [`sim`]: the simulated accelerator: machine presets, its reports, tile kernels.
//! - [`Error`]: one typed error for the whole API; [`Error::is_internal`] tells a
//!   Ferrite bug from a user error.
//!
//! The graph IR is re-exported as [`ir`], with its text format ([`parse`], [`print()`]),
//! verifier and reference interpreter (on the IR's own host tensors,
//! [`ir::Tensor`], which [`Tensor`] wraps); the compiler passes as [`passes`], for the
//! types [`Compiled`]'s reports are made of. A user needs no other Ferrite crate.
//! This crate is also the only one that reads files and parses flags (in the
//! `ferrite` binary, built with the default `cli` feature).
//!
//! # Features
//!
//! - `cli` (default): the `ferrite` binary and its dependency on `clap`. The library
//!   itself does not need it: `ferrite = { default-features = false }` builds without.
//! - `ndarray`: conversions between [`Tensor`] and `ndarray` arrays.
#![warn(missing_docs)]

pub mod api;

pub use api::builder::{
    bf16, bool, f16, f32, i32, i64, tensor_type, Graph, Operand, ScalarValue, Var,
};
pub use api::compile::{compile, compile_ir, Compiled, Execution, Options, Target, MAX_THREADS};
pub use api::compose::{scaled_dot_product_attention, stack};
pub use api::dynamic::{compile_dynamic, Dynamic};
pub use api::error::{Error, Result};
pub use api::host::{Element, Tensor};
pub use api::jit::{
    eager, jit, IntoOutputs, Jit, JitEvent, JitStats, WhenFull, DEFAULT_CACHE_LIMIT,
};
pub use api::ops::{concat, where_, AxisRange, DimInt, Dims};
pub use api::partition::Partitioned;
pub use api::train::{Optimizer, TrainStep};
pub use api::weights::{load, load_parsed, save, MAX_WEIGHTS_BYTES};
pub use api::{alloc, files, memory, onnx, profile, sim};
/// The most kernels the CPU target compiles for one program (one function each).
pub use ferrite_cpu::MAX_GENERATED_KERNELS as MAX_CPU_KERNELS;

pub use ferrite_ir as ir;
pub use ferrite_ir::{
    parse, parse_bytes, print, verify, BagMode, DType, Diagnostic, Mismatch, Op, TensorType,
    ValueId,
};
pub use ferrite_passes as passes;
/// The `half` crate, for the `f16` and `bf16` element types of [`Tensor`].
pub use half;
/// The `ndarray` crate, whose arrays convert from and to [`Tensor`] (the `ndarray` feature).
#[cfg(feature = "ndarray")]
pub use ndarray;
