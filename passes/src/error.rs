//! The errors of `ferrite-passes`: one enum for the crate.
//!
//! Every message reads as a sentence that names what is wrong (and usually the pass
//! and the node); the variant says whose fault it is: [`Error::is_internal`] is true
//! only for a bug in Ferrite. A graph the verifier accepts never causes an internal
//! error; each pass verifies what it produces and reports a failure as its own bug.

use std::fmt;

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `ferrite-passes`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A graph that fails the graph verifier, or that the pass cannot take (`schedule` needs primitive ops).
    #[error("{0}")]
    InvalidGraph(String),
    /// A value of the graph that has no representation in its dtype (a `full` or `pad` value that overflows).
    #[error("{0}")]
    Unrepresentable(String),
    /// An optimizer rule asked for by a name that no rule has.
    #[error("{0}")]
    UnknownRule(String),
    /// A bug in Ferrite: a pass produced an invalid result or found one of its own invariants broken.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// True for bugs in Ferrite, false for errors the input causes.
    pub fn is_internal(&self) -> bool {
        matches!(self, Error::Internal(_))
    }

    /// The same error with `what: ` before its message (`schedule: ...`), keeping its
    /// variant.
    pub fn context(self, what: impl fmt::Display) -> Error {
        match self {
            Error::InvalidGraph(m) => Error::InvalidGraph(format!("{what}: {m}")),
            Error::Unrepresentable(m) => Error::Unrepresentable(format!("{what}: {m}")),
            Error::UnknownRule(m) => Error::UnknownRule(format!("{what}: {m}")),
            Error::Internal(m) => Error::Internal(format!("{what}: {m}")),
        }
    }

    /// An [`Error::InvalidGraph`]: `pass` was given a graph the verifier rejects.
    pub(crate) fn invalid_input(pass: &str, why: impl fmt::Display) -> Error {
        Error::InvalidGraph(format!("{pass}: the input graph is invalid: {why}"))
    }

    /// An [`Error::Internal`] from a message.
    pub(crate) fn internal(message: impl Into<String>) -> Error {
        Error::Internal(message.into())
    }
}

impl From<Error> for String {
    /// The message, for callers whose own errors are still strings.
    fn from(e: Error) -> String {
        e.to_string()
    }
}
