//! Errors of the simulator. Every one names the kernel, and those raised while a
//! program runs name the program and the access; none is a panic.

use ferrite_ir::types::ShapeDisplay;
use std::fmt;

/// Why a launch or a device operation failed.
#[derive(Clone, PartialEq, Debug)]
pub enum SimError {
    /// The launch is invalid (grid, argument count or types); nothing ran.
    BadLaunch {
        /// The kernel launched.
        kernel: String,
        /// What is wrong.
        message: String,
    },
    /// A program's local buffers do not fit in a PE's local memory; nothing ran.
    LocalMemoryOverflow {
        /// The kernel launched.
        kernel: String,
        /// Bytes every program reserves.
        needed: u64,
        /// Bytes of local memory per PE.
        capacity: u64,
        /// The allocations, as `local_alloc(..) (N bytes) at file:line:col`.
        allocations: Vec<String>,
    },
    /// An unmasked lane of a load, store or DMA fell outside its buffer.
    OutOfBounds(Box<OutOfBounds>),
    /// A program broke a rule while running: a DMA hazard (reading a local buffer
    /// before `dma_wait`), an integer division by zero, a zero loop step.
    Program {
        /// The kernel launched.
        kernel: String,
        /// The faulting program's id along the three grid axes.
        program: [usize; 3],
        /// What went wrong, naming the statement.
        message: String,
    },
    /// A launch spent its simulation budget (`sim::launch_budget` of its grid, or the
    /// rest of `sim::MAX_WORK_PER_DEVICE`) and was stopped: the kernel does more work than
    /// the simulator runs in bounded time.
    Budget {
        /// The kernel launched.
        kernel: String,
        /// The budget, in work units.
        limit: u64,
    },
    /// A device operation failed: unknown buffer, capacity exceeded, wrong type.
    Device {
        /// What is wrong.
        message: String,
    },
}

/// The details of an out-of-bounds access.
#[derive(Clone, PartialEq, Debug)]
pub struct OutOfBounds {
    /// The kernel launched.
    pub kernel: String,
    /// The faulting program's id along the three grid axes.
    pub program: [usize; 3],
    /// The access, as written (`load(x + offs, mask)`).
    pub access: String,
    /// `file:line:col` of the access, when the kernel came from a file.
    pub location: Option<String>,
    /// The lane's index in the pointer tile.
    pub lane: Vec<usize>,
    /// The element offset the lane points at.
    pub offset: i64,
    /// The buffer's parameter name.
    pub buffer: String,
    /// The buffer's length in elements.
    pub len: usize,
    /// True for a write.
    pub write: bool,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let program = |p: &[usize; 3]| format!("program ({}, {}, {})", p[0], p[1], p[2]);
        match self {
            SimError::BadLaunch { kernel, message } => {
                write!(f, "kernel `{kernel}`: bad launch: {message}")
            }
            SimError::LocalMemoryOverflow {
                kernel,
                needed,
                capacity,
                allocations,
            } => {
                write!(
                    f,
                    "kernel `{kernel}`: local memory overflow: each program reserves {needed} \
                     bytes but a PE has {capacity}"
                )?;
                for a in allocations {
                    write!(f, "\n  {a}")?;
                }
                Ok(())
            }
            SimError::OutOfBounds(o) => {
                let OutOfBounds {
                    kernel,
                    program: p,
                    access,
                    location,
                    lane,
                    offset,
                    buffer,
                    len,
                    write,
                } = &**o;
                let at = location
                    .as_ref()
                    .map_or(String::new(), |l| format!(" at {l}"));
                write!(
                    f,
                    "kernel `{kernel}`, {}: out-of-bounds {}: `{access}`{at}: lane {} points at \
                     element {offset} of `{buffer}`, which has {len} elements (mask that lane off)",
                    program(p),
                    if *write { "write" } else { "read" },
                    ShapeDisplay(lane),
                )
            }
            SimError::Program {
                kernel,
                program: p,
                message,
            } => write!(f, "kernel `{kernel}`, {}: {message}", program(p)),
            SimError::Budget { kernel, limit } => write!(
                f,
                "kernel `{kernel}`: stopped after {limit} units of simulated work, the \
                 simulator's budget (per launch, or what was left of the device's; each element computed is one unit, each \
                 statement {} more, each program {}); use a smaller grid, larger blocks or \
                 fewer loop iterations",
                super::exec::STEP_COST,
                super::exec::PROGRAM_COST
            ),
            SimError::Device { message } => write!(f, "device: {message}"),
        }
    }
}

impl std::error::Error for SimError {}
