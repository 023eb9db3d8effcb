//! The errors of `ferrite-profile`: one enum for the crate. A profile runs
//! programs the caller compiled, so most failures are the backends'; the
//! profiler's own are bugs.

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong profiling a compiled program.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CPU program failed to run (its inputs do not fit it, or the backend failed).
    #[error(transparent)]
    Cpu(#[from] ferrite_cpu::Error),
    /// The simulated program failed to run.
    #[error(transparent)]
    Sim(#[from] ferrite_accel::Error),
    /// A bug in Ferrite: a run timed other kernels than the program has, or the simulator reported launches the program does not make.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// True for bugs in Ferrite (the simulator's are its own to say), false for
    /// errors the program or its inputs cause.
    pub fn is_internal(&self) -> bool {
        match self {
            Error::Internal(_) => true,
            Error::Sim(e) => e.is_internal(),
            Error::Cpu(e) => e.is_internal(),
        }
    }
}
