//! The errors of the CPU backend.
//!
//! The programs the backend compiles come from the scheduler, so a program that breaks
//! the loop IR's invariants, a plan step whose output does not verify, an access that
//! cannot be proved in bounds or a function Cranelift rejects are Ferrite bugs
//! ([`Error::is_internal`]). What a caller can get wrong is the options, the inputs of a
//! run and the data (an out-of-range gather index); the machine can refuse threads.

use crate::gemm::GemmError;
use crate::jit::JitError;
use crate::pool::PoolError;
use ferrite_ir::DType;

/// Everything that can go wrong compiling or running a program on the CPU.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The loop IR given to the backend breaks its invariants (the verifier's message).
    #[error("{message}")]
    InvalidProgram {
        /// What is wrong, naming the kernel, stage and node.
        message: String,
    },
    /// A plan step produced loop IR that does not verify.
    #[error("plan step `{step}` made invalid loop IR: {message}")]
    PlanStep {
        /// The step's name (see the pipeline in `plan`).
        step: &'static str,
        /// The verifier's message.
        message: String,
    },
    /// An access whose index the code generator cannot prove in bounds.
    #[error("{message}")]
    Unprovable {
        /// The access and the range of its index.
        message: String,
    },
    /// Cranelift rejected a generated function or could not compile it.
    #[error(transparent)]
    Jit(#[from] JitError),
    /// The extern GEMM refused a product.
    #[error(transparent)]
    Gemm(#[from] GemmError),
    /// The thread pool could not start or lost a worker.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// Options that cannot work (no threads).
    #[error("{message}")]
    Options {
        /// Which option and why.
        message: String,
    },
    /// A run got the wrong number of inputs.
    #[error("program `{program}` takes {expected} inputs, got {got}")]
    InputCount {
        /// The program's name.
        program: String,
        /// Inputs it takes.
        expected: usize,
        /// Inputs given.
        got: usize,
    },
    /// A run got an input of the wrong type.
    #[error("input {index} (`{name}`) has type {got} but the program expects {expected}")]
    InputType {
        /// The input's position.
        index: usize,
        /// The input buffer's name.
        name: String,
        /// The type given (`f32[3]`; a mismatched data length reads as the type).
        got: String,
        /// The type expected.
        expected: String,
    },
    /// A run into caller-owned outputs got the wrong number of them.
    #[error("program `{program}` has {expected} outputs, {got} output tensors were given")]
    OutputCount {
        /// The program's name.
        program: String,
        /// Outputs it has.
        expected: usize,
        /// Output tensors given.
        got: usize,
    },
    /// A run into caller-owned outputs got an output tensor of the wrong type.
    #[error("output {index} (`{name}`) has type {got} but the program writes {expected}")]
    OutputType {
        /// The output's position.
        index: usize,
        /// The output buffer's name.
        name: String,
        /// The type given.
        got: String,
        /// The type the program writes.
        expected: String,
    },
    /// A run-time check of a kernel failed: the data is out of range (a gather index
    /// past its axis, a negative integer power). A run reports it in the context of
    /// its kernel ([`Error::In`]).
    #[error("{message}")]
    Check {
        /// The check's message.
        message: String,
    },
    /// A GEMM operand or product of a dtype the extern GEMM does not take.
    #[error("GEMM operands have unsupported or mismatched dtypes ({dtype})")]
    GemmDType {
        /// The product's dtype.
        dtype: DType,
    },
    /// A program with more kernels than the backend compiles
    /// ([`crate::exec::MAX_GENERATED_KERNELS`]): each is a Cranelift function, so
    /// compiling them all would take minutes.
    #[error(
        "program `{program}` has {kernels} kernels; the CPU backend compiles at most {limit} \
         (each is a function of its own): fuse them (without --no-fuse) or split the graph"
    )]
    TooManyKernels {
        /// The program's name.
        program: String,
        /// Its kernels.
        kernels: usize,
        /// The limit.
        limit: usize,
    },
    /// A broken invariant of the backend itself.
    #[error("internal error: {0}")]
    Internal(String),
    /// `context` around an error of a kernel (its name, or the stage that failed).
    #[error("{context}: {source}")]
    In {
        /// Where the error happened (`kernel k3_add`).
        context: String,
        /// The error.
        source: Box<Error>,
    },
}

/// The result type of the CPU backend.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True only for Ferrite bugs (the CLI exits with code 2); user-caused errors exit 1.
    pub fn is_internal(&self) -> bool {
        match self {
            Error::InvalidProgram { .. }
            | Error::PlanStep { .. }
            | Error::Unprovable { .. }
            | Error::Jit(_)
            | Error::Gemm(_)
            | Error::GemmDType { .. }
            | Error::Internal(_) => true,
            Error::Pool(_)
            | Error::Options { .. }
            | Error::InputCount { .. }
            | Error::InputType { .. }
            | Error::OutputCount { .. }
            | Error::OutputType { .. }
            | Error::Check { .. }
            | Error::TooManyKernels { .. } => false,
            Error::In { source, .. } => source.is_internal(),
        }
    }

    /// This error, said to have happened in `context` (`kernel k3_add`).
    pub fn context(self, context: impl Into<String>) -> Error {
        Error::In {
            context: context.into(),
            source: Box::new(self),
        }
    }

    /// A broken invariant of the backend.
    pub(crate) fn internal(message: impl Into<String>) -> Error {
        Error::Internal(message.into())
    }
}
