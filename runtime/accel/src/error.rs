//! The errors of `ferrite-accel`: one enum for the crate. The simulator's
//! [`SimError`], a preset's [`PresetError`] and the tile checker's located
//! errors stay typed where they arise and are carried here as payloads.
//!
//! [`Error::is_internal`] tells the caller's mistakes (a program or inputs that
//! do not fit, a kernel the tile language cannot express, a machine too small
//! for a kernel) from Ferrite's bugs.

use crate::sim::{PresetError, SimError};
use std::fmt;

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong lowering a program to tile kernels and running it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The loop-IR program given to the lowering fails the loop IR's verifier.
    #[error("{0}")]
    InvalidProgram(String),
    /// A kernel the tile language cannot express: an op on a dtype it has no operation for, an index it cannot bound, a constant that does not evaluate.
    #[error("{0}")]
    Unsupported(String),
    /// Inputs that do not match the program's parameters (their count or types).
    #[error("{0}")]
    Input(String),
    /// The simulator stopped: a kernel that does not fit the machine, an access out of bounds (an index outside its axis), a device error.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A machine preset that does not parse or leaves out a figure.
    #[error(transparent)]
    Preset(#[from] PresetError),
    /// A bug in Ferrite: a lowered kernel that does not check, a value used before the lowering computed it.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// True for bugs in Ferrite, false for errors the program, the inputs or the
    /// machine cause.
    pub fn is_internal(&self) -> bool {
        matches!(self, Error::Internal(_))
    }

    /// The same error with `what: ` before its message (`kernel k3: ...`),
    /// keeping its variant. The simulator's and a preset's errors name what they
    /// concern themselves and are returned unchanged.
    pub fn context(self, what: impl fmt::Display) -> Error {
        match self {
            Error::InvalidProgram(m) => Error::InvalidProgram(format!("{what}: {m}")),
            Error::Unsupported(m) => Error::Unsupported(format!("{what}: {m}")),
            Error::Input(m) => Error::Input(format!("{what}: {m}")),
            Error::Internal(m) => Error::Internal(format!("{what}: {m}")),
            e @ (Error::Sim(_) | Error::Preset(_)) => e,
        }
    }

    /// An [`Error::Internal`] from a message.
    pub(crate) fn internal(message: impl Into<String>) -> Error {
        Error::Internal(message.into())
    }

    /// An [`Error::Unsupported`] from a message.
    pub(crate) fn unsupported(message: impl Into<String>) -> Error {
        Error::Unsupported(message.into())
    }
}
