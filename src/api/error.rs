//! The typed errors of the library API.
//!
//! Every fallible function of the facade returns [`Result`]. Errors carry what a
//! user needs to fix the problem: the op and operand types for a build error, the
//! parameter name and both types for a bad input, the path for an I/O failure.
//! [`Error::is_internal`] tells the user's mistakes from Ferrite's bugs; the `ferrite`
//! binary's exit code (1 or 2) is derived from it.

use super::compile::Target;
use ferrite_accel::sim::PresetError;
use ferrite_ir::types::ShapeDisplay;
use ferrite_ir::{DType, Mismatch, TensorType};
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
    ForeignVar {
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
    /// `run_named` was given a name that is not an input of the program.
    UnknownInput {
        /// The name given.
        name: String,
        /// The program's input names, in order.
        inputs: Vec<String>,
    },
    /// `run_named` was not given a value for this input.
    MissingInput {
        /// The input's name.
        name: String,
    },
    /// `run_named` was given this input more than once.
    DuplicateInput {
        /// The input's name.
        name: String,
    },
    /// `run` got a different number of inputs than the graph has parameters.
    InputCount {
        /// The number of parameters.
        expected: usize,
        /// The number of inputs given.
        got: usize,
    },
    /// `run_into` got a different number of output tensors than the graph has outputs.
    OutputCount {
        /// The number of outputs.
        expected: usize,
        /// The number of output tensors given.
        got: usize,
    },
    /// An output tensor given to `run_into` differs in type from its output.
    OutputType {
        /// Position of the output.
        index: usize,
        /// The output's type.
        expected: TensorType,
        /// The tensor's type.
        got: TensorType,
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
    /// Size symbols that the inputs (or the values given beside them) do not bind, bind
    /// inconsistently, or bind to values that break a range or a constraint of the graph.
    Binding {
        /// The symbols, their values and what needs them, with the place in the file.
        message: String,
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
    /// `.fg` text (or its weights file) with a mistake: the rendered, located diagnostic.
    Parse {
        /// `file:line:col: error: ...` with the line and a caret.
        message: String,
    },
    /// Reading or writing a file failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// A machine preset that does not describe a machine.
    Preset {
        /// The preset file.
        path: PathBuf,
        /// What is wrong, and on which line.
        error: PresetError,
    },
    /// Two tensors that should be close are not ([`Tensor::check_close`](crate::Tensor::check_close)).
    NotClose(Mismatch),
    /// A target name that is not one of `cpu`, `sim`, `interp`, `loops`.
    UnknownTarget {
        /// The name given.
        name: String,
    },
    /// An [`Options`](crate::Options) value out of its range.
    InvalidOption {
        /// The option (`threads`, ...).
        option: &'static str,
        /// What is wrong with its value.
        message: String,
    },
    /// The program was compiled for a target that cannot do what was asked (profiling
    /// the interpreter, ...).
    WrongTarget {
        /// What was asked, as a noun (`profiling`, `the unfused baseline`).
        operation: &'static str,
        /// The program's target.
        target: Target,
        /// The targets that can do it.
        supported: &'static [Target],
    },
    /// An `ir::Graph` given to [`compile_ir`](crate::compile_ir) fails the verifier.
    InvalidGraph {
        /// The verifier's message.
        message: String,
    },
    /// The compiler pipeline or a backend's code generator failed: a bug in Ferrite, or
    /// something the user caused (an op a backend cannot run, a kernel that does not fit
    /// the machine), as the failing crate's own error said.
    Compile {
        /// The pipeline's or backend's message, naming the stage.
        message: String,
        /// Whether the failing crate called it a bug (its error's `is_internal()`).
        internal: bool,
    },
    /// Running a compiled program failed (an out-of-range gather index, ...).
    Run {
        /// The executor's message, naming the kernel or node.
        message: String,
    },
    /// A broken invariant of the facade itself (a backend returned a tensor that does
    /// not match its type, ...): a bug in Ferrite.
    Internal {
        /// What broke.
        message: String,
    },
    /// A file larger than the limit for reading it whole (see [`crate::files`]).
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
        /// The limit in bytes.
        limit: u64,
        /// The flag or option that raises the limit (`--max-text-size`).
        raise: &'static str,
    },
    /// Running, or reading an input, would need more memory than the budget
    /// ([`Options::memory_limit`](crate::Options::memory_limit); checked before
    /// anything is allocated).
    MemoryBudget {
        /// What needs the memory (`running graph `g` on cpu`, `reading `x.npy``).
        what: String,
        /// The bytes it needs, as estimated.
        needs: u64,
        /// The budget in bytes.
        limit: u64,
    },
    /// An ONNX model (or `.pb` tensor) that cannot be imported, with the file it came from.
    Onnx {
        /// The `.onnx` or `.pb` file, when there is one.
        path: Option<PathBuf>,
        /// The importer's error, naming the node, op and opset where it has them.
        error: Box<ferrite_onnx::Error>,
    },
}

impl Error {
    /// True when the error is a bug in Ferrite rather than something the user can fix;
    /// the `ferrite` binary exits with 2 for these and with 1 for the others.
    ///
    /// This is the one place that decides. [`Error::Compile`] carries the verdict of the
    /// crate that failed (each crate's error enum has its own `is_internal()`).
    pub fn is_internal(&self) -> bool {
        match self {
            Error::Compile { internal, .. } => *internal,
            Error::Internal { .. } => true,
            Error::Onnx { error, .. } => error.is_internal(),
            Error::Build { .. }
            | Error::ForeignVar { .. }
            | Error::NoOutputs { .. }
            | Error::UnknownInput { .. }
            | Error::MissingInput { .. }
            | Error::DuplicateInput { .. }
            | Error::InputCount { .. }
            | Error::OutputCount { .. }
            | Error::OutputType { .. }
            | Error::InputDType { .. }
            | Error::InputShape { .. }
            | Error::Binding { .. }
            | Error::Data { .. }
            | Error::Npy { .. }
            | Error::Io { .. }
            | Error::Parse { .. }
            | Error::Preset { .. }
            | Error::NotClose(_)
            | Error::UnknownTarget { .. }
            | Error::InvalidOption { .. }
            | Error::WrongTarget { .. }
            | Error::InvalidGraph { .. }
            | Error::Run { .. }
            | Error::FileTooLarge { .. }
            | Error::MemoryBudget { .. } => false,
        }
    }

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
            Error::ForeignVar { op, location } => write!(
                f,
                "{location}: {op}: the operands belong to different graphs"
            ),
            Error::NoOutputs { graph } => write!(
                f,
                "graph `{graph}` has no outputs (call `Graph::output` before compiling)"
            ),
            Error::UnknownInput { name, inputs } => write!(
                f,
                "the program has no input `{name}` (its inputs: {})",
                if inputs.is_empty() {
                    "none".to_string()
                } else {
                    inputs.join(", ")
                }
            ),
            Error::MissingInput { name } => write!(f, "input `{name}` is not given"),
            Error::DuplicateInput { name } => write!(f, "input `{name}` is given twice"),
            Error::OutputCount { expected, got } => write!(
                f,
                "the graph has {expected} outputs, {got} output tensors were given"
            ),
            Error::OutputType {
                index,
                expected,
                got,
            } => write!(f, "output {index} is {expected}, the tensor given is {got}"),
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
            Error::Binding { message } => f.write_str(message),
            Error::Data { message } => write!(f, "invalid tensor data: {message}"),
            Error::Npy { message } => write!(f, "invalid .npy data: {message}"),
            Error::Io { path, message } => write!(f, "{}: {message}", path.display()),
            Error::Parse { message } => f.write_str(message),
            Error::Preset { path, error } => write!(f, "`{}`: {error}", path.display()),
            Error::NotClose(m) => write!(f, "tensors differ: {m}"),
            Error::UnknownTarget { name } => write!(
                f,
                "unknown target `{name}` (expected cpu, sim, interp or loops)"
            ),
            Error::InvalidOption { option, message } => write!(f, "option `{option}`: {message}"),
            Error::WrongTarget {
                operation,
                target,
                supported,
            } => {
                write!(f, "{operation} needs the ")?;
                for (i, t) in supported.iter().enumerate() {
                    let sep = match i {
                        0 => "",
                        i if i + 1 == supported.len() => " or ",
                        _ => ", ",
                    };
                    write!(f, "{sep}{t}")?;
                }
                write!(f, " target; this program is compiled for {target}")
            }
            Error::InvalidGraph { message } => write!(f, "invalid graph: {message}"),
            Error::Compile { message, .. } => write!(f, "compilation failed: {message}"),
            Error::Run { message } => write!(f, "execution failed: {message}"),
            Error::Internal { message } => write!(f, "internal error: {message}"),
            Error::FileTooLarge {
                path,
                size,
                limit,
                raise,
            } => write!(
                f,
                "`{}` is {size} bytes, over the limit of {limit} bytes for a file read whole \
                 (raise it with {raise})",
                path.display()
            ),
            Error::MemoryBudget { what, needs, limit } => write!(
                f,
                "{what} needs {needs} bytes, over the memory budget of {limit} bytes \
                 (raise it with --memory-limit, or Options::memory_limit in the library)"
            ),
            Error::Onnx {
                path: Some(p),
                error,
            } => write!(f, "{}: {error}", p.display()),
            Error::Onnx { path: None, error } => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<Mismatch> for Error {
    fn from(m: Mismatch) -> Error {
        Error::NotClose(m)
    }
}
