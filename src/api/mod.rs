//! The library API, one concept per file:
//!
//! - `builder.rs`: [`Graph`](crate::Graph), the symbolic [`Tensor`](crate::Tensor) handle, operators, the
//!   poisoned-builder error model;
//! - `ops.rs`: a method for every op;
//! - `host.rs`: [`Array`](crate::Array), host data in and out;
//! - `compile.rs`: [`Options`](crate::Options), [`Target`](crate::Target), [`compile`](crate::compile), [`Compiled`](crate::Compiled);
//! - `jit.rs`: [`jit`](crate::jit), tracing, the guard cache, eager mode;
//! - `error.rs`: [`Error`](crate::Error).

pub mod builder;
pub mod compile;
pub mod error;
pub mod host;
pub mod jit;
pub mod ops;
