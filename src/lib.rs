//! Ferrite: a compiler for tensor programs, in the spirit of TorchDynamo + TorchInductor.
//!
//! A program is a typed SSA graph of tensor ops ([`Graph`]), written by hand in the
//! `.fg` text format or built through the API. Today the crate provides the graph IR,
//! its text format and verifier, the reference interpreter, `.npy` I/O and the
//! `ferrite` command-line tool; the compiler stages (decomposition, e-graph
//! optimization, fusion, the Cranelift CPU backend and the accelerator simulator)
//! live in `ferrite-passes` and `ferrite-runtime` and are being built.
//!
//! This crate is the facade: it re-exports the IR ([`ir`]) and, as the compiler
//! stages land, wires them into one pipeline. It is also the only crate that reads
//! files and parses flags (in the `ferrite` binary).
//!
//! ```
//! use ferrite::{interpret, parse, Tensor};
//!
//! let g = parse("scale.fg", "
//!     graph scale(x: f32[2, 2]) {
//!       y = relu(mul(x, 2.0))
//!       return y
//!     }")?;
//! let x = Tensor::from_f32(&[2, 2], vec![1.0, -1.0, 0.5, 3.0])?;
//! let y = interpret(&g, &[x])?;
//! assert_eq!(y[0], Tensor::from_f32(&[2, 2], vec![2.0, 0.0, 1.0, 6.0])?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

pub use ferrite_ir as ir;
pub use ferrite_ir::npy;
pub use ferrite_ir::{
    interpret, parse, parse_bytes, print, verify, DType, Data, Diagnostic, Graph, Op, Tensor,
    TensorType, ValueId,
};
