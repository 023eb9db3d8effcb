//! The `ferrite.FerriteError` hierarchy: each library error becomes the Python
//! exception of its kind, with the message the `ferrite` CLI prints for it.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    ferrite,
    FerriteError,
    PyException,
    "The base of every error Ferrite raises; its message is the one the `ferrite` CLI prints."
);
create_exception!(
    ferrite,
    ParseError,
    FerriteError,
    "A mistake in `.fg` text (or its weights file): `file:line:col: error: ...` with the line and a caret."
);
create_exception!(
    ferrite,
    BuildError,
    FerriteError,
    "An op the typing rule rejects while building a graph, located at the Python line that built it; also a graph without outputs."
);
create_exception!(
    ferrite,
    InputError,
    FerriteError,
    "Inputs that do not fit the program: count, dtype, shape, names, or data that forms no tensor."
);
create_exception!(
    ferrite,
    OnnxError,
    FerriteError,
    "An ONNX model Ferrite cannot import: the message names the node, the op and the opset."
);
create_exception!(
    ferrite,
    CompileError,
    FerriteError,
    "A graph the compiler refuses (the message says which stage)."
);
create_exception!(
    ferrite,
    RunError,
    FerriteError,
    "An error while a program runs (an index out of range, an integer division by zero)."
);
create_exception!(
    ferrite,
    MemoryBudgetError,
    FerriteError,
    "A run that would need more memory than the budget (`memory_limit=` raises it)."
);
create_exception!(
    ferrite,
    FileError,
    FerriteError,
    "A file that cannot be read or written, or one over its size limit."
);
create_exception!(
    ferrite,
    OptionError,
    FerriteError,
    "An option out of range or for the wrong target (`threads=`, `target=`, profiling the interpreter)."
);
create_exception!(
    ferrite,
    InternalError,
    FerriteError,
    "A bug in Ferrite (the CLI exits with code 2 on these): please report it with its input."
);

/// Words (names, paths) longer than this are abbreviated, as the CLI does
/// (`ferrite::cli::LONG_WORD`).
const LONG_WORD: usize = 1024;

/// The line the CLI prints after an internal error's message.
const BUG: &str = "This is a bug in Ferrite; please report it with the input that caused it.";

/// `text` with every word over [`LONG_WORD`] chars abbreviated, as the CLI prints it.
pub fn short(text: &str) -> String {
    ferrite::ir::text::abbreviate_words(text.trim_end(), LONG_WORD)
}

/// The Python exception for a library error.
pub fn to_py(e: ferrite::Error) -> PyErr {
    use ferrite::Error as E;
    if e.is_internal() {
        // As the CLI words it: its own prefix instead of the library's.
        let detail = match &e {
            E::Run { message } | E::Compile { message, .. } | E::Internal { message } => {
                message.clone()
            }
            e => e.to_string(),
        };
        return InternalError::new_err(format!("internal error: {}\n{BUG}", short(&detail)));
    }
    let message = short(&e.to_string());
    match e {
        E::Parse { .. } => ParseError::new_err(message),
        E::Build { .. } | E::ForeignVar { .. } | E::NoOutputs { .. } | E::InvalidGraph { .. } => {
            BuildError::new_err(message)
        }
        E::UnknownInput { .. }
        | E::MissingInput { .. }
        | E::DuplicateInput { .. }
        | E::InputCount { .. }
        | E::OutputCount { .. }
        | E::OutputType { .. }
        | E::InputDType { .. }
        | E::InputShape { .. }
        | E::Data { .. }
        | E::Npy { .. } => InputError::new_err(message),
        E::Onnx { .. } => OnnxError::new_err(message),
        E::Compile { .. } => CompileError::new_err(message),
        E::Run { .. } => RunError::new_err(message),
        E::MemoryBudget { .. } => MemoryBudgetError::new_err(message),
        E::Io { .. } | E::FileTooLarge { .. } => FileError::new_err(message),
        E::UnknownTarget { .. }
        | E::InvalidOption { .. }
        | E::WrongTarget { .. }
        | E::Preset { .. } => OptionError::new_err(message),
        _ => FerriteError::new_err(message),
    }
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("FerriteError", py.get_type::<FerriteError>())?;
    m.add("ParseError", py.get_type::<ParseError>())?;
    m.add("BuildError", py.get_type::<BuildError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("OnnxError", py.get_type::<OnnxError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("RunError", py.get_type::<RunError>())?;
    m.add("MemoryBudgetError", py.get_type::<MemoryBudgetError>())?;
    m.add("FileError", py.get_type::<FileError>())?;
    m.add("OptionError", py.get_type::<OptionError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    Ok(())
}
