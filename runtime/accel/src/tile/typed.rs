//! The checked form of a kernel: what the checker resolves a [`TileKernel`] into
//! and the simulator runs. Every expression carries its type; names are slots;
//! constants are folded; implicit conversions are explicit casts.

use super::ast::{Span, TileKernel};
use ferrite_ir::types::ShapeDisplay;
use ferrite_ir::{DType, Diagnostic};
use std::fmt;

/// The type of a runtime value.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) enum Ty {
    /// A tile of values (rank 0 is a scalar).
    Tile(DType, Vec<usize>),
    /// A tile of pointers into a buffer of this dtype (rank 0: one pointer).
    Ptr(DType, Vec<usize>),
    /// The token of an asynchronous copy.
    Token,
    /// A buffer in local memory.
    Local(DType, Vec<usize>),
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Tile(d, s) if s.is_empty() => write!(f, "{d} scalar"),
            Ty::Tile(d, s) => write!(f, "{d}{}", ShapeDisplay(s)),
            Ty::Ptr(d, s) if s.is_empty() => write!(f, "pointer *{d}"),
            Ty::Ptr(d, s) => write!(f, "pointer tile *{d}{}", ShapeDisplay(s)),
            Ty::Token => f.write_str("DMA token"),
            Ty::Local(d, s) => write!(f, "local buffer {d}{}", ShapeDisplay(s)),
        }
    }
}

/// A literal, already converted to the dtype of the expression holding it.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Lit {
    /// For float dtypes (rounded to the dtype when materialized).
    F(f64),
    /// For integer dtypes (already in range).
    I(i64),
    /// For bool.
    B(bool),
}

/// Elementwise functions of one operand.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum UnOp {
    Neg,
    Not,
    Abs,
    Relu,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Erf,
    Erfc,
    Sigmoid,
    Sin,
    Cos,
    Floor,
    Ceil,
}

/// Elementwise functions of two operands of one dtype.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Max,
    Min,
    Pow,
}

/// Reductions along an axis.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ReduceOp {
    Sum,
    Max,
    Min,
}

/// A checked expression: what to compute and the type of the result.
#[derive(Clone, Debug)]
pub(crate) struct CExpr {
    pub kind: CKind,
    pub ty: Ty,
}

/// Checked expressions. Operands already have the dtypes the operation needs.
#[derive(Clone, Debug)]
pub(crate) enum CKind {
    /// A scalar literal of `ty`'s dtype.
    Lit(Lit),
    /// The current value of a variable slot.
    Slot(usize),
    ProgramId(usize),
    NumPrograms(usize),
    /// `start, start+1, ..` (length from the type).
    Arange(i64),
    /// A scalar or tile broadcast to the type's shape.
    Broadcast(Box<CExpr>),
    Unary(UnOp, Box<CExpr>),
    /// Operands of one dtype; broadcast to the result shape.
    Binary(BinOp, Box<CExpr>, Box<CExpr>),
    /// Pointer plus (or, with `negate`, minus) integer offsets.
    PtrOffset(Box<CExpr>, Box<CExpr>, bool),
    /// Conversion to the type's dtype.
    Cast(Box<CExpr>),
    /// Same elements, the type's shape (axes of extent 1 added).
    Reshape(Box<CExpr>),
    Trans(Box<CExpr>),
    Reduce(ReduceOp, Box<CExpr>, Option<usize>),
    Dot(Box<CExpr>, Box<CExpr>, Option<Box<CExpr>>),
    Where(Box<CExpr>, Box<CExpr>, Box<CExpr>),
    Load {
        ptr: Box<CExpr>,
        mask: Option<Box<CExpr>>,
        other: Option<Box<CExpr>>,
        site: usize,
    },
    /// The buffer of an allocation site.
    LocalAlloc(usize),
    DmaAsync {
        buf: Box<CExpr>,
        ptr: Box<CExpr>,
        mask: Option<Box<CExpr>>,
        other: Option<Box<CExpr>>,
        site: usize,
    },
    LocalLoad {
        buf: Box<CExpr>,
        site: usize,
    },
}

/// Checked statements.
#[derive(Clone, Debug)]
pub(crate) enum CStmt {
    Assign(usize, CExpr),
    For {
        var: usize,
        start: CExpr,
        end: CExpr,
        step: CExpr,
        body: Vec<CStmt>,
    },
    Store {
        ptr: CExpr,
        value: CExpr,
        mask: Option<CExpr>,
        site: usize,
    },
    DmaWait(CExpr),
    /// `check(cond, mask)`: a run-time check; `site` names it in the error, with the
    /// comment right above it as the reason.
    Check {
        cond: CExpr,
        mask: Option<CExpr>,
        site: usize,
        reason: Option<String>,
    },
}

/// A memory access in the source, named in runtime errors.
#[derive(Clone, Debug)]
pub(crate) struct Site {
    /// The call as printed, e.g. `load(x + offs, mask)`.
    pub text: String,
    /// Where it is written.
    pub span: Span,
    /// `file:line:col` when the kernel was parsed from a file.
    pub location: Option<String>,
}

/// A `local_alloc` call: one buffer per program, reserved for the whole program.
#[derive(Clone, Debug)]
pub(crate) struct Alloc {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub site: Site,
}

impl Alloc {
    /// Bytes of local memory the buffer takes.
    pub fn bytes(&self) -> u64 {
        (self.shape.iter().product::<usize>() * self.dtype.size_bytes()) as u64
    }
}

/// A kernel that passed the checker, ready to run on the simulator.
#[derive(Clone, Debug)]
pub struct CheckedKernel {
    pub(crate) kernel: TileKernel,
    pub(crate) body: Vec<CStmt>,
    /// Number of variable slots; parameter `i` is slot `i`.
    pub(crate) slots: usize,
    pub(crate) sites: Vec<Site>,
    pub(crate) allocs: Vec<Alloc>,
}

impl CheckedKernel {
    /// The kernel as written.
    pub fn kernel(&self) -> &TileKernel {
        &self.kernel
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.kernel.name
    }

    /// Local memory each program reserves: the sum of its `local_alloc` buffers.
    pub fn local_memory_bytes(&self) -> u64 {
        self.allocs.iter().map(Alloc::bytes).sum()
    }

    /// Records `file:line:col` of every memory access, so runtime errors can point
    /// at the source.
    pub(crate) fn locate(&mut self, file: &str, src: &str) {
        let sites = self
            .sites
            .iter_mut()
            .chain(self.allocs.iter_mut().map(|a| &mut a.site));
        for site in sites {
            let d = Diagnostic::at(file, src, site.span.start, "");
            site.location = Some(format!("{}:{}:{}", d.file, d.line, d.col));
        }
    }
}
