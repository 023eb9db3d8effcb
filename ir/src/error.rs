//! The errors of `ferrite-ir`: one enum for the crate, with typed payloads where a
//! caller acts on the details (the parser locates an [`AttrError`] or a
//! [`TypeError`] at the attribute it names).
//!
//! Every message reads as a sentence that names what is wrong; the variant says
//! whose fault it is: [`Error::is_internal`] is true only for a bug in Ferrite.

use crate::op::AttrError;
use crate::text::Diagnostic;
use std::fmt;

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `ferrite-ir`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `.fg` text that does not lex, parse or type, located at a line and column.
    #[error(transparent)]
    Parse(#[from] Diagnostic),
    /// An op's `key=value` attributes are unknown, missing, repeated, ill-typed or out of range.
    #[error(transparent)]
    Attr(#[from] AttrError),
    /// Operands or a shape that an op's typing rule rejects (shapes that do not broadcast, an axis out of range, a size limit).
    #[error(transparent)]
    Type(#[from] TypeError),
    /// A graph that breaks an invariant of the graph IR (operand order, names, recorded types).
    #[error("{0}")]
    InvalidGraph(String),
    /// A loop program that breaks an invariant of the loop IR.
    #[error("{0}")]
    InvalidProgram(String),
    /// Values that do not fit where they are given: a graph's or program's parameters, an op's operands, a result type.
    #[error("{0}")]
    Input(String),
    /// Evaluation failed on the data itself (an index out of range, a negative integer power, a fill value that does not fit).
    #[error("{0}")]
    Eval(String),
    /// Bytes that are not a `.npy` file of a layout Ferrite reads.
    #[error("{0}")]
    Npy(String),
    /// A bug in Ferrite: an op's implementation disagrees with its typing rule, or a checked invariant does not hold.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// True for bugs in Ferrite, false for errors the input causes.
    ///
    /// A graph or program that fails its verifier is the input's fault here; a
    /// pass that verifies what it produced reports such a failure as its own bug.
    pub fn is_internal(&self) -> bool {
        matches!(self, Error::Internal(_))
    }

    /// The same error with `what: ` before its message (`kernel k3: ...`), keeping
    /// its variant. Located and attribute errors carry their own context and are
    /// returned unchanged.
    pub fn context(self, what: impl fmt::Display) -> Error {
        match self {
            Error::InvalidGraph(m) => Error::InvalidGraph(format!("{what}: {m}")),
            Error::InvalidProgram(m) => Error::InvalidProgram(format!("{what}: {m}")),
            Error::Input(m) => Error::Input(format!("{what}: {m}")),
            Error::Eval(m) => Error::Eval(format!("{what}: {m}")),
            Error::Npy(m) => Error::Npy(format!("{what}: {m}")),
            Error::Internal(m) => Error::Internal(format!("{what}: {m}")),
            Error::Type(t) => Error::Type(t.context(what)),
            e @ (Error::Parse(_) | Error::Attr(_)) => e,
        }
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

/// Operands (or a shape) that an op's typing rule rejects.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TypeError {
    /// What is wrong, as a sentence that usually starts with the op's name.
    pub message: String,
    /// The attribute whose value is at fault (`axis` for an axis out of range),
    /// when it is one rather than the operands.
    pub attribute: Option<&'static str>,
}

impl TypeError {
    /// An error about the operands.
    pub fn new(message: impl Into<String>) -> TypeError {
        TypeError {
            message: message.into(),
            attribute: None,
        }
    }

    /// The same error, blamed on `attribute`.
    pub fn on(self, attribute: &'static str) -> TypeError {
        TypeError {
            attribute: Some(attribute),
            ..self
        }
    }

    /// The same error with `what: ` before its message.
    pub fn context(self, what: impl fmt::Display) -> TypeError {
        TypeError {
            message: format!("{what}: {}", self.message),
            ..self
        }
    }
}

impl From<TypeError> for String {
    /// The message, for callers whose own errors are still strings.
    fn from(e: TypeError) -> String {
        e.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_keeps_the_variant_and_the_attribute() {
        let e = Error::Eval("index 5 out of range".into()).context("`rows` (index_select)");
        assert_eq!(
            e,
            Error::Eval("`rows` (index_select): index 5 out of range".into())
        );
        assert!(!e.is_internal());
        let e = Error::internal("add produced f32[2]").context("%3 (add)");
        assert!(e.is_internal());
        assert_eq!(e.to_string(), "%3 (add): add produced f32[2]");
        let t = TypeError::new("axis 3 is out of range")
            .on("axis")
            .context("softmax");
        assert_eq!(t.attribute, Some("axis"));
        let e = Error::from(t).context("%1");
        assert_eq!(e.to_string(), "%1: softmax: axis 3 is out of range");
    }
}
