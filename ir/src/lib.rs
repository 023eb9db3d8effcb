//! `ferrite-ir`: what a Ferrite program is.
//!
//! The graph IR (a typed SSA DAG of tensor ops, named with their attributes in
//! one table, [`op::OPS`]), its `.fg` text format, the verifier, the reference
//! interpreter, the loop IR, and host tensors. Every fallible function returns
//! [`Error`], which tells a user's mistake from a bug in Ferrite. This crate
//! knows nothing of e-graphs, Cranelift or the accelerator.
#![warn(missing_docs)]

mod constant;
mod dtype;
mod error;
mod graph;
pub mod hash;
pub mod infer;
pub mod interp;
pub mod loops;
pub mod npy;
pub mod op;
pub mod parallel;
mod scalar_ops;
mod spelling;
pub mod sym;
mod tensor;
pub mod text;
pub mod types;
pub mod window;

pub use constant::{Constant, SMALL_CONSTANT};
pub use dtype::{promote, Category, DType};
pub use error::{Error, Result, TypeError};
pub use graph::{check_declared_outputs, is_valid_name, verify, Graph, Node, ValueId};
pub use interp::interpret;
pub use op::{
    ArgReduceOp, AttrError, AttrValue, BagMode, BinaryOp, IndexReduceOp, Op, OpSpec, ReduceOp,
    Scalar, UnaryOp,
};
pub use tensor::{i128_to_f64_round_odd, round_to_dtype, Data, Mismatch, SplitMix64, Tensor};
pub use text::{parse, parse_bytes, print, Diagnostic};
pub use types::{TensorType, MAX_ELEMENTS, MAX_RANK};
