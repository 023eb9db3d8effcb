//! The library API, one concept per file:
//!
//! - `builder.rs`: [`Graph`](crate::Graph), the symbolic [`Var`](crate::Var) handle, operators, the
//!   poisoned-builder error model;
//! - `ops.rs`: a method for every op;
//! - `host.rs`: [`Tensor`](crate::Tensor), host data in and out;
//! - `ndarray.rs`: conversions between `Tensor` and `ndarray` arrays (the `ndarray` feature);
//! - `compile.rs`: [`Options`](crate::Options), [`Target`](crate::Target), [`compile`](crate::compile), [`Compiled`](crate::Compiled);
//! - `jit.rs`: [`jit`](crate::jit), tracing, the guard cache, eager mode;
//! - `profile.rs`: [`ferrite::profile`](crate::profile), the profiler's reports, re-exported;
//! - `sim.rs`: [`ferrite::sim`](crate::sim), the simulator's machines and reports, re-exported;
//! - `weights.rs`: [`load`](crate::load) and [`save`](crate::save): `.fg` files with a
//!   safetensors weights file beside them (the only place that reads one);
//! - `error.rs`: [`Error`](crate::Error).

pub mod builder;
pub mod compile;
pub mod error;
pub mod host;
pub mod jit;
#[cfg(feature = "ndarray")]
mod ndarray;
pub mod ops;
pub mod profile;
pub mod sim;
pub mod weights;
