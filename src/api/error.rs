//! The typed errors of the library API.
//!
//! Every fallible function of the facade returns [`Result`]. Errors carry what a
//! user needs to fix the problem: the op and operand types for a build error, the
//! parameter name and both types for a bad input, the path for an I/O failure.

use ferrite_ir::types::ShapeDisplay;
use ferrite_ir::{DType, TensorType};
use std::fmt;
use std::path::PathBuf;

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the library API.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// An op was given operands its typing rule rejects (shapes that do not broadcast, an axis out of range, ...).
    Build {
        /// The op, as named in `.fg` text (`matmul`, `add`, `input`, ...).
        op: String,
        /// The types of the tensor operands (scalars are shown as rank-0 types).
        operands: Vec<TensorType>,
        /// What is wrong, as the typing rule says it.
        message: String,
        /// The `file:line:col` of the user code that built the op.
        location: String,
    },
    /// Tensors of two different graphs were combined in one op.
    ForeignTensor {
        /// The op that received them.
        op: String,
        /// The `file:line:col` of the user code that built the op.
        location: String,
    },
    /// The graph was compiled or exported without any output (`Graph::output` was never called).
    NoOutputs {
        /// The graph's name.
        graph: String,
    },
    /// `run` got a different number of inputs than the graph has parameters.
    InputCount {
        /// The number of parameters.
        expected: usize,
        /// The number of inputs given.
        got: usize,
    },
    /// An input's dtype differs from its parameter's.
    InputDType {
        /// Position of the input.
        index: usize,
        /// The parameter's name.
        name: String,
        /// The parameter's dtype.
        expected: DType,
        /// The input's dtype.
        got: DType,
    },
    /// An input's shape differs from its parameter's.
    InputShape {
        /// Position of the input.
        index: usize,
        /// The parameter's name.
        name: String,
        /// The parameter's shape.
        expected: Vec<usize>,
        /// The input's shape.
        got: Vec<usize>,
    },
    /// Host data that does not form a tensor (value count versus shape, wrong element type, size limits).
    Data {
        /// What is wrong.
        message: String,
    },
    /// `.npy` bytes that cannot be decoded.
    Npy {
        /// What is wrong with them.
        message: String,
    },
    /// Reading or writing a file failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// An `ir::Graph` given to [`compile_ir`](crate::compile_ir) fails the verifier.
    InvalidGraph {
        /// The verifier's message.
        message: String,
    },
    /// The compiler pipeline or a backend's code generator failed (a bug in Ferrite or a resource limit).
    Compile {
        /// The pipeline's or backend's message, naming the stage.
        message: String,
    },
    /// Running a compiled program failed (an out-of-range gather index, ...).
    Run {
        /// The executor's message, naming the kernel or node.
        message: String,
    },
}

impl Error {
    /// An [`Error::Data`] from a message.
    pub(crate) fn data(message: impl Into<String>) -> Error {
        Error::Data {
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Build {
                op,
                operands,
                message,
                location,
            } => {
                write!(f, "{location}: {op}(")?;
                for (i, t) in operands.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                write!(f, "): {message}")
            }
            Error::ForeignTensor { op, location } => write!(
                f,
                "{location}: {op}: the operands belong to different graphs"
            ),
            Error::NoOutputs { graph } => write!(
                f,
                "graph `{graph}` has no outputs (call `Graph::output` before compiling)"
            ),
            Error::InputCount { expected, got } => write!(
                f,
                "expected {expected} input{}, got {got}",
                if *expected == 1 { "" } else { "s" }
            ),
            Error::InputDType {
                index,
                name,
                expected,
                got,
            } => write!(
                f,
                "input {index} (`{name}`) has dtype {got} but the parameter is {expected}"
            ),
            Error::InputShape {
                index,
                name,
                expected,
                got,
            } => write!(
                f,
                "input {index} (`{name}`) has shape {} but the parameter is {}",
                ShapeDisplay(got),
                ShapeDisplay(expected)
            ),
            Error::Data { message } => write!(f, "invalid tensor data: {message}"),
            Error::Npy { message } => write!(f, "invalid .npy data: {message}"),
            Error::Io { path, message } => write!(f, "{}: {message}", path.display()),
            Error::InvalidGraph { message } => write!(f, "invalid graph: {message}"),
            Error::Compile { message } => write!(f, "compilation failed: {message}"),
            Error::Run { message } => write!(f, "execution failed: {message}"),
        }
    }
}

impl std::error::Error for Error {}
