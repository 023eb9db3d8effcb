//! The errors of `ferrite-onnx`. Every message names the place: the node (its name,
//! or its index when it has none), its op and the opset it was imported under.

use std::fmt;

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where in a model something went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    /// The node's index in the graph.
    pub index: usize,
    /// The node's name, when it has one.
    pub name: Option<String>,
    /// `Add`, `com.microsoft.Attention`, ...
    pub op_type: String,
    /// The opset version the node's domain was imported under.
    pub opset: i64,
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(n) => write!(f, "node `{n}`")?,
            None => write!(f, "node {}", self.index)?,
        }
        write!(f, " ({}, opset {})", self.op_type, self.opset)
    }
}

/// Everything that can go wrong importing a model.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes are not a protobuf `ModelProto` (or a `TensorProto`), or exceed a decoding bound.
    #[error("not a valid ONNX file: {0}")]
    Decode(String),
    /// The model is well-formed protobuf but breaks the ONNX spec or one of Ferrite's bounds.
    #[error("{0}")]
    Invalid(String),
    /// The model uses something Ferrite does not import (an op, a dtype, a sequence type, a subgraph).
    #[error("{0}")]
    Unsupported(String),
    /// A symbolic dimension that the user gave no value for.
    #[error(
        "input `{input}` has symbolic dimension `{dim}` (axis {axis}); give it a value with --dim {dim}=N"
    )]
    SymbolicDim {
        /// The graph input.
        input: String,
        /// Its axis.
        axis: usize,
        /// The dimension's name.
        dim: String,
    },
    /// An op needs an operand's value at import time (a shape, axes, pads) and it comes
    /// from a graph input. Giving that input's value at import time lets it fold.
    #[error("{node}: operand `{operand}` must be known at import time, but it is graph input `{input}`; give its value when importing")]
    NeedsValue {
        /// The node.
        node: NodeRef,
        /// The operand's role (`shape`, `axes`, ...).
        operand: String,
        /// The graph input it comes from.
        input: String,
    },
    /// External data that cannot be read: outside the model's folder, missing, short.
    #[error("external data of tensor `{tensor}`: {message}")]
    ExternalData {
        /// The initializer.
        tensor: String,
        /// What is wrong.
        message: String,
    },
    /// A node that failed to import, with the node it was.
    #[error("{node}: {message}")]
    Node {
        /// The node.
        node: NodeRef,
        /// What is wrong.
        message: String,
        /// True when the cause is something Ferrite does not support (rather than a malformed model).
        unsupported: bool,
    },
    /// A bug in the importer: the graph it built fails the IR's checks where the model was valid.
    #[error("internal error in the ONNX importer: {0}")]
    Internal(String),
}

impl Error {
    /// True for bugs in Ferrite, false for errors the input causes.
    pub fn is_internal(&self) -> bool {
        matches!(self, Error::Internal(_))
    }
}

/// An error inside a node, before the node is known; the importer adds the node.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum OpError {
    /// The model is malformed here.
    Invalid(String),
    /// Ferrite does not support this.
    Unsupported(String),
    /// An operand must be constant but comes from graph input `input`.
    NeedsValue { operand: String, input: String },
    /// Propagated as is (symbolic dims, external data).
    Other(Error),
}

impl From<ferrite_ir::Error> for OpError {
    fn from(e: ferrite_ir::Error) -> Self {
        // A typing or evaluation error of the IR on an imported node is the model's
        // fault (shapes that do not fit, an index out of range in a folded Gather).
        match e {
            ferrite_ir::Error::Internal(m) => OpError::Other(Error::Internal(m)),
            e => OpError::Invalid(e.to_string()),
        }
    }
}

impl From<ferrite_ir::TypeError> for OpError {
    fn from(e: ferrite_ir::TypeError) -> Self {
        OpError::Invalid(e.to_string())
    }
}

impl From<Error> for OpError {
    fn from(e: Error) -> Self {
        OpError::Other(e)
    }
}

/// `Err(OpError::Invalid(format!(..)))`.
macro_rules! invalid {
    ($($t:tt)*) => { return Err($crate::error::OpError::Invalid(format!($($t)*))) };
}

/// `Err(OpError::Unsupported(format!(..)))`.
macro_rules! unsupported {
    ($($t:tt)*) => { return Err($crate::error::OpError::Unsupported(format!($($t)*))) };
}

pub(crate) use {invalid, unsupported};

pub(crate) type OpResult<T> = std::result::Result<T, OpError>;
