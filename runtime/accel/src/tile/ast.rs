//! The syntax tree of a tile kernel, as written.
//!
//! The tree keeps what the author wrote (keyword arguments stay keyword arguments,
//! `range(n)` becomes `range(0, n)`, `x += 1` becomes `x = x + 1`, comments on
//! lines of their own stay), so the printer can reproduce it. Meaning (types, shapes, constant values) is the checker's job:
//! see [`check()`](super::check()).

use ferrite_ir::DType;

/// A byte range `start..end` in the source a node was parsed from.
///
/// Spans are where a node came from, not what it means: two spans always compare
/// equal, so a kernel parsed from its printed form equals the original kernel even
/// though every node moved. Kernels built in code use `Span::default()`.
#[derive(Clone, Copy, Debug, Default, Eq)]
pub struct Span {
    /// Byte offset of the first char.
    pub start: usize,
    /// Byte offset just past the last char.
    pub end: usize,
}

impl PartialEq for Span {
    fn eq(&self, _: &Span) -> bool {
        true
    }
}

impl Span {
    /// The span `start..end`.
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span covering `self` and `other`.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// A kernel: a name, parameters and a body run once per program of the launch grid.
#[derive(Clone, PartialEq, Debug)]
pub struct TileKernel {
    /// The comment lines above `kernel`, without their `#`.
    pub comments: Vec<String>,
    /// The kernel's name.
    pub name: String,
    /// Parameters, bound at launch to buffers (pointers) or scalars.
    pub params: Vec<Param>,
    /// The statements of the body.
    pub body: Vec<Stmt>,
    /// Where the kernel's name is.
    pub span: Span,
}

/// A kernel parameter: `x: *f32` (a pointer to a buffer) or `n: i32` (a scalar).
#[derive(Clone, PartialEq, Debug)]
pub struct Param {
    /// The parameter's name.
    pub name: String,
    /// What is bound to it at launch.
    pub ty: ParamType,
    /// Where the parameter is declared.
    pub span: Span,
}

/// The type of a kernel parameter.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ParamType {
    /// A pointer to the first element of a buffer of this dtype (`*f32`).
    Ptr(DType),
    /// A scalar of this dtype (`i32`), the same for every program.
    Scalar(DType),
}

/// A statement and its source span.
#[derive(Clone, PartialEq, Debug)]
pub struct Stmt {
    /// What the statement does.
    pub kind: StmtKind,
    /// Where it is written.
    pub span: Span,
}

/// The statements of the language.
#[derive(Clone, PartialEq, Debug)]
pub enum StmtKind {
    /// `const NAME = expr`: a compile-time integer, float or bool.
    Const {
        /// The constant's name.
        name: String,
        /// Its value, a constant expression.
        value: Expr,
    },
    /// `NAME = expr`: binds (or, inside a loop, updates) a runtime value.
    Assign {
        /// The name bound.
        name: String,
        /// The value.
        value: Expr,
    },
    /// `for VAR in range(start, end[, step]) { body }`.
    For {
        /// The loop variable, a scalar.
        var: String,
        /// First value of the loop variable.
        start: Expr,
        /// Bound the loop variable never reaches.
        end: Expr,
        /// Increment; `None` when written without one (it is then 1).
        step: Option<Expr>,
        /// The loop body.
        body: Vec<Stmt>,
    },
    /// A call whose result is not bound: `store(..)` and `dma_wait(..)`.
    Expr(Expr),
    /// A comment on a line of its own, without its `#` (comments after code on
    /// a line are dropped). It does nothing.
    Comment(String),
}

/// An expression and its source span.
#[derive(Clone, Debug)]
pub struct Expr {
    /// What the expression is.
    pub kind: ExprKind,
    /// Where it is written.
    pub span: Span,
}

impl PartialEq for Expr {
    fn eq(&self, other: &Expr) -> bool {
        self.kind == other.kind
    }
}

impl Expr {
    /// An expression without a source location (for kernels built in code).
    pub fn new(kind: ExprKind) -> Expr {
        Expr {
            kind,
            span: Span::default(),
        }
    }
}

/// The expressions of the language.
#[derive(Clone, Debug)]
pub enum ExprKind {
    /// An integer literal (negative literals are folded: `-3` is `Int(-3)`).
    Int(i64),
    /// A float literal, `inf` or `nan`.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
    /// A parameter, constant, variable or loop variable.
    Name(String),
    /// A dtype name used as an argument: `cast(x, f16)`.
    DType(DType),
    /// A parenthesized, comma-separated list, used for shapes: `(BM, BN)`.
    Tuple(Vec<Expr>),
    /// A prefix operator.
    Unary(UnaryOp, Box<Expr>),
    /// An infix operator.
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `x[:, None]`: keeps (`:`) or inserts (`None`) axes.
    Index(Box<Expr>, Vec<IndexItem>),
    /// A call of a builtin: positional arguments, then `key=value` arguments.
    Call {
        /// The function called.
        func: Builtin,
        /// Positional arguments.
        args: Vec<Expr>,
        /// Keyword arguments, in the order written.
        kwargs: Vec<(String, Expr)>,
    },
}

/// Float literals compare by bits (so `-0.0 != 0.0`), and every NaN equals every
/// other (the text has one `nan`): equality of trees means "prints the same",
/// which is what a round trip needs.
impl PartialEq for ExprKind {
    fn eq(&self, other: &ExprKind) -> bool {
        use ExprKind::*;
        match (self, other) {
            (Int(a), Int(b)) => a == b,
            (Float(a), Float(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            (Bool(a), Bool(b)) => a == b,
            (Name(a), Name(b)) => a == b,
            (DType(a), DType(b)) => a == b,
            (Tuple(a), Tuple(b)) => a == b,
            (Unary(o, a), Unary(p, b)) => o == p && a == b,
            (Binary(o, a, b), Binary(p, c, d)) => o == p && a == c && b == d,
            (Index(a, i), Index(b, j)) => a == b && i == j,
            (
                Call {
                    func: f,
                    args: a,
                    kwargs: k,
                },
                Call {
                    func: g,
                    args: b,
                    kwargs: l,
                },
            ) => f == g && a == b && k == l,
            _ => false,
        }
    }
}

/// Prefix operators.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum UnaryOp {
    /// `-x`: negation of a number.
    Neg,
    /// `!x`: logical not of a bool, bitwise not of an integer (as in Rust).
    Not,
}

/// Infix operators, loosest binding first: `|`, `^`, `&`, comparisons, `<< >>`, `+ -`,
/// `* / %`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BinaryOp {
    /// `|`: logical or of bools, bitwise or of integers.
    Or,
    /// `&`: logical and of bools, bitwise and of integers.
    And,
    /// `^`: logical exclusive or of bools, bitwise exclusive or of integers.
    Xor,
    /// `<<`: shift left of integers (a shift outside `[0, bits)` gives 0).
    Shl,
    /// `>>`: shift right of integers, arithmetic for signed ones (a shift outside
    /// `[0, bits)` gives the sign fill).
    Shr,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+` (also pointer + integer offset).
    Add,
    /// `-` (also pointer - integer offset).
    Sub,
    /// `*`
    Mul,
    /// `/`: true division of floats, division truncating toward zero of integers.
    Div,
    /// `%`: remainder with the sign of the dividend (C, not Python).
    Rem,
}

impl BinaryOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Or => "|",
            BinaryOp::And => "&",
            BinaryOp::Xor => "^",
            BinaryOp::Shl => "<<",
            BinaryOp::Shr => ">>",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
        }
    }

    /// Binding strength: higher binds tighter. Operators of one level associate to
    /// the left, except comparisons, which do not chain.
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Or => 1,
            BinaryOp::Xor => 2,
            BinaryOp::And => 3,
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => 4,
            BinaryOp::Shl | BinaryOp::Shr => 5,
            BinaryOp::Add | BinaryOp::Sub => 6,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => 7,
        }
    }

    /// True for the six comparisons.
    pub fn is_comparison(self) -> bool {
        self.precedence() == 4
    }
}

/// One entry of an index expression.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum IndexItem {
    /// `:` keeps the next axis of the operand.
    Full,
    /// `None` inserts an axis of extent 1.
    NewAxis,
}

macro_rules! builtins {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal ($($param:literal $req:literal),*) ),* $(,)?) => {
        /// The functions a kernel can call. Each has fixed parameter names, so any
        /// argument can also be passed as `name=value`.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        pub enum Builtin {
            $( $(#[$doc])* $variant, )*
        }

        impl Builtin {
            /// Every builtin.
            pub const ALL: &'static [Builtin] = &[$(Builtin::$variant),*];

            /// The name a kernel calls it by.
            pub fn name(self) -> &'static str {
                match self { $(Builtin::$variant => $name,)* }
            }

            /// Its parameters in order, each with whether it must be given.
            pub fn params(self) -> &'static [(&'static str, bool)] {
                match self { $(Builtin::$variant => &[$(($param, $req)),*],)* }
            }
        }
    };
}

builtins! {
    /// `program_id(axis)`: this program's index along grid axis 0, 1 or 2 (an i32 scalar).
    ProgramId = "program_id"("axis" true),
    /// `num_programs(axis)`: the grid's extent along an axis (an i32 scalar).
    NumPrograms = "num_programs"("axis" true),
    /// `arange(start, end)`: the i32 tile `[start, start+1, .., end-1]` (constant bounds).
    Arange = "arange"("start" true, "end" true),
    /// `zeros(shape, dtype=f32)`: a tile of zeros.
    Zeros = "zeros"("shape" true, "dtype" false),
    /// `full(shape, value, dtype=f32)`: a tile filled with a scalar.
    Full = "full"("shape" true, "value" true, "dtype" false),
    /// `load(ptr, mask, other=0)`: gathers a tile from global memory.
    Load = "load"("ptr" true, "mask" false, "other" false),
    /// `store(ptr, value, mask)`: scatters a tile to global memory.
    Store = "store"("ptr" true, "value" true, "mask" false),
    /// `dot(a, b, acc)`: `a @ b (+ acc)` of 2-D tiles, accumulated in f32.
    Dot = "dot"("a" true, "b" true, "acc" false),
    /// `sum(x, axis)`: sum along an axis (all axes without one).
    Sum = "sum"("x" true, "axis" false),
    /// `max(x, axis)`: maximum along an axis (all axes without one).
    Max = "max"("x" true, "axis" false),
    /// `min(x, axis)`: minimum along an axis (all axes without one).
    Min = "min"("x" true, "axis" false),
    /// `where(cond, x, y)`: elementwise select.
    Where = "where"("cond" true, "x" true, "y" true),
    /// `cast(x, dtype)`: elementwise conversion.
    Cast = "cast"("x" true, "dtype" true),
    /// `trans(x)`: transpose of a 2-D tile.
    Trans = "trans"("x" true),
    /// `broadcast_to(x, shape)`: explicit broadcast.
    BroadcastTo = "broadcast_to"("x" true, "shape" true),
    /// `exp(x)`
    Exp = "exp"("x" true),
    /// `log(x)`: natural logarithm.
    Log = "log"("x" true),
    /// `sqrt(x)`
    Sqrt = "sqrt"("x" true),
    /// `rsqrt(x)`: `1 / sqrt(x)`.
    Rsqrt = "rsqrt"("x" true),
    /// `tanh(x)`
    Tanh = "tanh"("x" true),
    /// `erf(x)`: the error function.
    Erf = "erf"("x" true),
    /// `erfc(x)`: the complementary error function `1 - erf(x)`.
    Erfc = "erfc"("x" true),
    /// `sigmoid(x)`: `1 / (1 + exp(-x))`.
    Sigmoid = "sigmoid"("x" true),
    /// `sin(x)`
    Sin = "sin"("x" true),
    /// `cos(x)`
    Cos = "cos"("x" true),
    /// `floor(x)`
    Floor = "floor"("x" true),
    /// `ceil(x)`
    Ceil = "ceil"("x" true),
    /// `abs(x)`
    Abs = "abs"("x" true),
    /// `neg(x)`: the same as `-x`.
    Neg = "neg"("x" true),
    /// `relu(x)`: `maximum(x, 0)`.
    Relu = "relu"("x" true),
    /// `maximum(x, y)`: elementwise maximum (NaN wins).
    Maximum = "maximum"("x" true, "y" true),
    /// `minimum(x, y)`: elementwise minimum (NaN wins).
    Minimum = "minimum"("x" true, "y" true),
    /// `local_alloc(shape, dtype=f32)`: a buffer in the PE's local memory.
    LocalAlloc = "local_alloc"("shape" true, "dtype" false),
    /// `dma_async(buf, ptr, mask, other=0)`: starts a global -> local copy; returns a token.
    DmaAsync = "dma_async"("buf" true, "ptr" true, "mask" false, "other" false),
    /// `dma_wait(token)`: waits until that copy has landed.
    DmaWait = "dma_wait"("token" true),
    /// `local_load(buf)`: reads a local buffer as a tile.
    LocalLoad = "local_load"("buf" true),
    /// `check(cond, mask)`: stops the program with an error naming the check when
    /// `cond` is false in a lane the mask leaves on (a run-time check of the data).
    Check = "check"("cond" true, "mask" false),
    /// `pow(x, y)`: elementwise `x ** y` of float tiles, with C99/IEEE special values.
    Pow = "pow"("x" true, "y" true),
}

impl Builtin {
    /// The builtin called `name`, if any.
    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL.iter().copied().find(|b| b.name() == name)
    }
}

/// Words that cannot name parameters, constants or variables.
pub const KEYWORDS: &[&str] = &[
    "kernel", "const", "for", "in", "range", "None", "true", "false", "inf", "nan",
];
