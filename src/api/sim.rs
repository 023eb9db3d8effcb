//! The simulated MTIA-like accelerator that [`Target::Sim`](crate::Target::Sim) runs
//! on: machine presets, the simulator's reports, and the tile kernel language for
//! running hand-written kernels (what `ferrite sim` does).
//!
//! A compiled program's run reports a [`DeviceReport`] (one [`SimReport`] per kernel
//! launch) through [`Execution::device_report`](crate::Execution::device_report). The
//! machine is [`Machine::mtia2i`] unless [`Options::machine`](crate::Options::machine)
//! names another, for instance one read from a preset file with [`read_preset`].
//!
//! ```
//! use ferrite::sim::Machine;
//! use ferrite::{Options, Target, Tensor};
//! let g = ferrite::Graph::new("double");
//! let x = g.input("x", ferrite::f32(&[1024]));
//! g.output(&(x * 2.0));
//! let machine = Machine::mtia2i();
//! let exe = ferrite::compile(&g, &Options::default().target(Target::Sim).machine(machine))?;
//! let run = exe.execute(&[Tensor::full(&[1024], 1.0f32)?])?;
//! let report: &ferrite::sim::DeviceReport = run.device_report().unwrap();
//! assert_eq!(report.launches.len(), 1);
//! assert!(report.cycles() > 0);
//! # Ok::<(), ferrite::Error>(())
//! ```

use super::error::{Error, Result};
use super::files::{read_bounded, DEFAULT_TEXT_LIMIT};
use std::path::Path;

pub use ferrite_accel::sim::{
    launch_budget, run, BufferId, Bytes, Device, DeviceArg, DeviceReport, KernelArg, Machine,
    OutOfBounds, Placement, PresetError, SimError, SimReport, MAX_DEVICE_HOST_BYTES,
    MAX_LOOP_TRIPS, MAX_PROGRAMS, MAX_WORK_PER_DEVICE, MAX_WORK_PER_LAUNCH, MAX_WORK_PER_PROGRAM,
};
pub use ferrite_accel::tile;
pub use ferrite_accel::tune;

/// The autotuner's cache directory: `$FERRITE_CACHE_DIR/autotune`, else
/// `$HOME/.cache/ferrite/autotune`; `None` when neither variable is set.
pub fn autotune_cache_dir() -> Option<std::path::PathBuf> {
    let base = match std::env::var_os("FERRITE_CACHE_DIR") {
        Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
        _ => std::path::PathBuf::from(std::env::var_os("HOME")?)
            .join(".cache")
            .join("ferrite"),
    };
    Some(base.join("autotune"))
}

/// Reads a machine preset file (`key = value` lines; `runtime/accel/presets/mtia2i.toml`
/// is the built-in machine's). A file that cannot be read (or is not a regular file)
/// is an [`Error::Io`], one over [`DEFAULT_TEXT_LIMIT`] an [`Error::FileTooLarge`],
/// one that is not a valid preset an [`Error::Preset`].
pub fn read_preset(path: impl AsRef<Path>) -> Result<Machine> {
    let path = path.as_ref();
    let io = |message: String| Error::Io {
        path: path.to_path_buf(),
        message,
    };
    let bytes = read_bounded(path, DEFAULT_TEXT_LIMIT, "a smaller preset")?;
    let text = String::from_utf8(bytes).map_err(|_| io("not UTF-8 text".into()))?;
    Machine::from_preset_str(&text).map_err(|error| Error::Preset {
        path: path.to_path_buf(),
        error,
    })
}
