//! The simulator of an MTIA-like accelerator: functional execution of tile kernels
//! (whole tiles at a time) and a documented timing model.
//!
//! - [`machine`]: the machine's figures, from a preset file;
//! - [`Device`]: buffers in device memory and launches over them; [`run`] for one launch;
//! - the timing model (`timing.rs`): per-program instruction stream and memory port,
//!   programs dealt round-robin to PEs, bandwidth shared within a wave;
//! - global memory (`memory.rs`): LPDDR or SRAM placement, the SRAM read cache;
//! - [`SimReport`]: cycles, time, bytes per level, flops, per-PE utilization.
//!
//! `docs/tile-language.md` ("Timing model") states the model in full.

mod device;
mod error;
mod exec;
pub mod machine;
mod memory;
mod report;
mod timing;
mod value;

pub use device::{
    run, BufferId, Device, DeviceArg, KernelArg, MAX_DEVICE_HOST_BYTES, MAX_PROGRAMS,
};
pub use error::{OutOfBounds, SimError};
pub use exec::{
    launch_budget, MAX_LOOP_TRIPS, MAX_WORK_PER_DEVICE, MAX_WORK_PER_LAUNCH, MAX_WORK_PER_PROGRAM,
    PROGRAM_COST, STEP_COST,
};
pub use machine::{Machine, PresetError};
pub use memory::Placement;
pub use report::{Bytes, DeviceReport, SimReport};
