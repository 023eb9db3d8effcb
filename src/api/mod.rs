//! The library API, one concept per file:
//!
//! - `builder.rs`: [`Graph`](crate::Graph), the symbolic [`Var`](crate::Var) handle, operators, the
//!   poisoned-builder error model;
//! - `ops.rs`: a method for every op;
//! - `compose.rs`: conveniences built from the ops, named as PyTorch names them (`split`,
//!   `stack`, `tril`, `linear`, `scaled_dot_product_attention`, ...);
//! - `host.rs`: [`Tensor`](crate::Tensor), host data in and out;
//! - `ndarray.rs`: conversions between `Tensor` and `ndarray` arrays (the `ndarray` feature);
//! - `compile.rs`: [`Options`](crate::Options), [`Target`](crate::Target), [`compile`](crate::compile), [`Compiled`](crate::Compiled);
//! - `jit.rs`: [`jit`](crate::jit), tracing, the guard cache, eager mode;
//! - `dynamic.rs`: [`compile_dynamic`](crate::compile_dynamic), [`Dynamic`](crate::Dynamic): a
//!   graph with size symbols run at any binding: a row graph on one CPU program for every
//!   binding, any other specialized per binding through the jit's cache;
//! - `profile.rs`: [`ferrite::profile`](crate::profile), the profiler's reports, re-exported;
//! - `sim.rs`: [`ferrite::sim`](crate::sim), the simulator's machines and reports, re-exported;
//! - `files.rs`: [`ferrite::files`](crate::files), every file read, bounded;
//! - `memory.rs`: [`ferrite::memory`](crate::memory), the memory budget of a run;
//! - `onnx.rs`: [`ferrite::onnx`](crate::onnx): `.onnx` files in, external data read inside the model's folder;
//! - `weights.rs`: [`load`](crate::load) and [`save`](crate::save): `.fg` files with a
//!   safetensors weights file beside them (the only place that reads one);
//! - `train.rs`: [`TrainStep`](crate::TrainStep): forward, backward and optimizer update
//!   compiled as one program, run step after step;
//! - `partition.rs`: [`Partitioned`](crate::Partitioned): a joint graph split by the min-cut
//!   partitioner and compiled as a forward and a backward program;
//! - `error.rs`: [`Error`](crate::Error);
//! - `alloc.rs`: [`LargePages`](crate::alloc::LargePages), the global-allocator wrapper of the
//!   binary and the Python extension (huge pages for large blocks only).

pub mod alloc;
mod automatic;
pub mod builder;
pub mod compile;
pub mod compose;
pub mod dynamic;
pub mod error;
pub mod files;
pub mod host;
pub mod jit;
pub mod memory;
#[cfg(feature = "ndarray")]
mod ndarray;
pub mod onnx;
pub mod ops;
pub mod partition;
pub mod profile;
pub mod sim;
pub mod train;
pub mod weights;
