//! The accelerator backend: the tile kernel language and the simulator of an
//! MTIA-like chip it runs on.
//!
//! ```
//! use ferrite_accel::{sim, tile};
//! use ferrite_ir::Tensor;
//! let src = "kernel scale(x: *f32, n: i32) {
//!   const BLOCK = 128
//!   offs = program_id(0) * BLOCK + arange(0, BLOCK)
//!   mask = offs < n
//!   store(x + offs, load(x + offs, mask) * 3.0, mask)
//! }
//! ";
//! let kernel = tile::parse_and_check("scale.tile", src).unwrap();
//! let x = Tensor::from_f32(&[300], vec![1.0; 300]).unwrap();
//! let mut args = [sim::KernelArg::Buffer(x), sim::KernelArg::Int(300)];
//! let report = sim::run(&sim::Machine::mtia2i(), &kernel, [3, 1, 1], &mut args).unwrap();
//! let sim::KernelArg::Buffer(x) = &args[0] else { unreachable!() };
//! assert!(x.to_f64().iter().all(|&v| v == 3.0));
//! assert_eq!(report.bytes.lpddr(), 300 * 4 * 2);
//! println!("{report}");
//! ```
//!
//! Architecture invariant: this module knows nothing of the graph IR's ops or of
//! Cranelift; it takes kernels (parsed or built as [`tile::TileKernel`]) and
//! host [`ferrite_ir::Tensor`]s.

pub mod attention;
mod error;
pub mod lower;
pub mod program;
pub mod sim;
pub mod tile;
pub mod tune;

pub use error::{Error, Result};
