//! The op set of the graph IR: one enum, with typed attributes.
//!
//! Composite ops (`softmax`, `layer_norm`, `gelu`, ...) exist so that users and
//! importers can say what they mean; `decompose` rewrites them into primitives
//! ([`Op::is_primitive`]) and everything after it handles only those.

use crate::DType;
use std::fmt;

/// Elementwise ops of one operand.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `e^x`
    Exp,
    /// natural logarithm
    Log,
    /// square root
    Sqrt,
    /// `1 / sqrt(x)`
    Rsqrt,
    /// `1 / x`
    Reciprocal,
    /// sine
    Sin,
    /// cosine
    Cos,
    /// hyperbolic tangent
    Tanh,
    /// `1 / (1 + e^-x)` (composite)
    Sigmoid,
    /// `max(x, 0)` (composite)
    Relu,
    /// `x * Φ(x)`, erf form (composite)
    Gelu,
    /// `gelu(x, approximate="tanh")` (composite)
    GeluTanh,
    /// `x * sigmoid(x)` (composite)
    Silu,
    /// error function
    Erf,
    /// round toward -inf
    Floor,
    /// round toward +inf
    Ceil,
    /// -1, 0 or 1 (0 for ±0, NaN for NaN)
    Sign,
    /// logical not (result `bool`)
    Not,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 20] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Reciprocal,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Silu,
        UnaryOp::Erf,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Sign,
        UnaryOp::Not,
    ];

    /// The op name in `.fg` text (`GeluTanh` is `gelu` with `approximate="tanh"`).
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Reciprocal => "reciprocal",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::Gelu | UnaryOp::GeluTanh => "gelu",
            UnaryOp::Silu => "silu",
            UnaryOp::Erf => "erf",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Sign => "sign",
            UnaryOp::Not => "not",
        }
    }

    /// True for ops whose result is a float even for integer input (PyTorch:
    /// `torch.exp(int_tensor)` is `float32`).
    pub fn is_transcendental(self) -> bool {
        matches!(
            self,
            UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Sqrt
                | UnaryOp::Rsqrt
                | UnaryOp::Reciprocal
                | UnaryOp::Sin
                | UnaryOp::Cos
                | UnaryOp::Tanh
                | UnaryOp::Sigmoid
                | UnaryOp::Gelu
                | UnaryOp::GeluTanh
                | UnaryOp::Silu
                | UnaryOp::Erf
        )
    }

    /// Composite unary ops that `decompose` rewrites.
    pub fn is_composite(self) -> bool {
        matches!(
            self,
            UnaryOp::Sigmoid | UnaryOp::Relu | UnaryOp::Gelu | UnaryOp::GeluTanh | UnaryOp::Silu
        )
    }
}

/// Elementwise ops of two broadcasting operands.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// true division (`int / int` is a float, as in PyTorch)
    Div,
    /// `a ** b`
    Pow,
    /// elementwise maximum (NaN-propagating)
    Maximum,
    /// elementwise minimum (NaN-propagating)
    Minimum,
    /// `a == b` (bool)
    Eq,
    /// `a != b` (bool)
    Ne,
    /// `a < b` (bool)
    Lt,
    /// `a <= b` (bool)
    Le,
    /// `a > b` (bool)
    Gt,
    /// `a >= b` (bool)
    Ge,
    /// logical and (bool)
    And,
    /// logical or (bool)
    Or,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 15] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::And,
        BinaryOp::Or,
    ];

    /// The op name in `.fg` text.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
        }
    }

    /// Comparisons: the result is `bool`.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }

    /// Logical ops: operands are read as truth values, the result is `bool`.
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or)
    }
}

/// Reductions over a set of axes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ReduceOp {
    /// sum (integers and bools sum to `i64`)
    Sum,
    /// arithmetic mean (float only; composite)
    Mean,
    /// maximum
    Max,
    /// minimum
    Min,
    /// product (integers and bools to `i64`)
    Prod,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ];

    /// The op name in `.fg` text.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
        }
    }
}

/// Index-of-extremum reductions along one axis (result `i64`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ArgReduceOp {
    /// index of the first maximum
    ArgMax,
    /// index of the first minimum
    ArgMin,
}

impl ArgReduceOp {
    /// The op name in `.fg` text.
    pub fn name(self) -> &'static str {
        match self {
            ArgReduceOp::ArgMax => "argmax",
            ArgReduceOp::ArgMin => "argmin",
        }
    }
}

/// A scalar constant, as written in text (`2`, `0.5`, `true`).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Scalar {
    /// A literal written with a point or exponent.
    Float(f64),
    /// A literal written as an integer.
    Int(i64),
    /// `true` / `false`.
    Bool(bool),
}

impl Scalar {
    /// The value as an f64 (bools are 0 and 1).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Float(v) => v,
            Scalar::Int(v) => v as f64,
            Scalar::Bool(b) => b as u8 as f64,
        }
    }

    /// The dtype a literal takes next to a tensor of dtype `peer` (PyTorch:
    /// a scalar adopts the tensor's dtype unless its category is higher).
    /// With no peer, floats are `f32`, ints `i64`, bools `bool`.
    pub fn dtype_beside(self, peer: Option<DType>) -> DType {
        match (self, peer) {
            (Scalar::Float(_), Some(p)) if p.is_float() => p,
            (Scalar::Float(_), _) => DType::F32,
            (Scalar::Int(_), Some(p)) if p != DType::Bool => p,
            (Scalar::Int(_), _) => DType::I64,
            (Scalar::Bool(_), Some(p)) => p,
            (Scalar::Bool(_), None) => DType::Bool,
        }
    }
}

/// An attribute value, as it appears after `key=` in `.fg` text.
#[derive(Clone, PartialEq, Debug)]
pub enum AttrValue {
    /// `3`, `-1`
    Int(i64),
    /// `1e-5`, `0.5`
    Float(f64),
    /// `true` / `false`
    Bool(bool),
    /// `[0, 2, 1]`
    Ints(Vec<i64>),
    /// `f16`
    DType(DType),
    /// `"tanh"`
    Str(String),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => f.write_str(&format_float(*v)),
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::Ints(vs) => {
                f.write_str("[")?;
                for (i, v) in vs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            AttrValue::DType(d) => write!(f, "{d}"),
            AttrValue::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// Formats a float so that it reads back as a float with the same value
/// (`2.0`, `1e-5`, `inf`, `nan`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{v:?}")
    }
}

/// An op of the graph IR with its attributes. Operands live in the node.
#[derive(Clone, PartialEq, Debug)]
pub enum Op {
    /// Graph parameter number `index` (an input; weights included).
    Param {
        /// Position in the parameter list.
        index: usize,
    },
    /// A rank-0 constant, printed inline at its use.
    Literal {
        /// The value as written.
        value: Scalar,
    },
    /// Elementwise op of one operand.
    Unary(UnaryOp),
    /// Elementwise op of two broadcasting operands.
    Binary(BinaryOp),
    /// `where(cond, a, b)`: `a` where `cond` is true, else `b` (all three broadcast).
    Where,
    /// `cast(x, to=f16)`.
    Cast {
        /// Target dtype.
        to: DType,
    },
    /// `sum|mean|max|min|prod(x, axes=[..], keepdim=false)`; no `axes` reduces all.
    Reduce {
        /// Which reduction.
        op: ReduceOp,
        /// Axes as written (may be negative); `None` means every axis.
        axes: Option<Vec<i64>>,
        /// Keep reduced axes with extent 1.
        keepdim: bool,
    },
    /// `argmax|argmin(x, axis=, keepdim=false)`; no `axis` searches the flattened tensor.
    ArgReduce {
        /// Which one.
        op: ArgReduceOp,
        /// Axis as written, or `None` for the flattened tensor.
        axis: Option<i64>,
        /// Keep the reduced axis with extent 1.
        keepdim: bool,
    },
    /// `softmax(x, axis=-1)` (composite).
    Softmax {
        /// Axis as written.
        axis: i64,
    },
    /// `log_softmax(x, axis=-1)` (composite).
    LogSoftmax {
        /// Axis as written.
        axis: i64,
    },
    /// `layer_norm(x, w, b, eps=1e-5)` over the last axis (composite).
    LayerNorm {
        /// Added to the variance.
        eps: f64,
    },
    /// `rms_norm(x, w, eps=1e-6)` over the last axis (composite).
    RmsNorm {
        /// Added to the mean square.
        eps: f64,
    },
    /// `matmul(a, b)` with numpy batch broadcasting and 1-D operands.
    MatMul,
    /// `reshape(x, shape=[..])` with at most one `-1`.
    Reshape {
        /// Target shape as written.
        shape: Vec<i64>,
    },
    /// `permute(x, dims=[..])`.
    Permute {
        /// A permutation of the axes, as written.
        dims: Vec<i64>,
    },
    /// `transpose(x, dim0=, dim1=)` (composite: a permute).
    Transpose {
        /// First axis.
        dim0: i64,
        /// Second axis.
        dim1: i64,
    },
    /// `expand(x, shape=[..])`: broadcast to a shape (`-1` keeps an extent).
    Expand {
        /// Target shape as written.
        shape: Vec<i64>,
    },
    /// `squeeze(x, axes=[..])`: drop extent-1 axes (all of them with no `axes`) (composite).
    Squeeze {
        /// Axes as written, or `None` for every extent-1 axis.
        axes: Option<Vec<i64>>,
    },
    /// `unsqueeze(x, axis=)`: insert an extent-1 axis (composite).
    Unsqueeze {
        /// Position of the new axis in the result.
        axis: i64,
    },
    /// `slice(x, axis=, start=, end=, step=1)` with Python clamping of `start`/`end`.
    Slice {
        /// Axis as written.
        axis: i64,
        /// First index (negative counts from the end).
        start: i64,
        /// One past the last index (negative counts from the end); `i64::MAX` is "to the end".
        end: i64,
        /// Stride, at least 1.
        step: i64,
    },
    /// `concat(a, b, .., axis=)`.
    Concat {
        /// Axis as written.
        axis: i64,
    },
    /// `pad(x, pads=[before0, after0, ..], value=0.0)`: one pair per axis, axis 0 first;
    /// negative amounts crop.
    Pad {
        /// `2 * rank` amounts.
        pads: Vec<i64>,
        /// Fill value.
        value: f64,
    },
    /// `index_select(x, index, axis=)`: rows of `x` picked by a 1-D integer index.
    IndexSelect {
        /// Axis as written.
        axis: i64,
    },
    /// `gather(x, index, axis=)` with `take_along_dim` semantics (index broadcasts against `x`
    /// on every axis but `axis`).
    Gather {
        /// Axis as written.
        axis: i64,
    },
    /// `full(shape=[..], value=, dtype=f32)`.
    Full {
        /// Result shape.
        shape: Vec<usize>,
        /// Fill value.
        value: f64,
        /// Result dtype.
        dtype: DType,
    },
    /// `arange(start=, end=, step=1, dtype=i64)`.
    Arange {
        /// First value.
        start: f64,
        /// Exclusive bound.
        end: f64,
        /// Increment (non-zero).
        step: f64,
        /// Result dtype.
        dtype: DType,
    },
}

impl Op {
    /// The op's name in `.fg` text.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Param { .. } => "param",
            Op::Literal { .. } => "literal",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Where => "where",
            Op::Cast { .. } => "cast",
            Op::Reduce { op, .. } => op.name(),
            Op::ArgReduce { op, .. } => op.name(),
            Op::Softmax { .. } => "softmax",
            Op::LogSoftmax { .. } => "log_softmax",
            Op::LayerNorm { .. } => "layer_norm",
            Op::RmsNorm { .. } => "rms_norm",
            Op::MatMul => "matmul",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::Transpose { .. } => "transpose",
            Op::Expand { .. } => "expand",
            Op::Squeeze { .. } => "squeeze",
            Op::Unsqueeze { .. } => "unsqueeze",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Pad { .. } => "pad",
            Op::IndexSelect { .. } => "index_select",
            Op::Gather { .. } => "gather",
            Op::Full { .. } => "full",
            Op::Arange { .. } => "arange",
        }
    }

    /// True for ops that survive `decompose`: elementwise, reduce (sum/max/min/prod),
    /// arg-reduce, matmul, reshape/permute/expand/slice/concat/pad, index, creation.
    pub fn is_primitive(&self) -> bool {
        match self {
            Op::Unary(u) => !u.is_composite(),
            Op::Reduce { op, .. } => *op != ReduceOp::Mean,
            Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
            | Op::Transpose { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. } => false,
            _ => true,
        }
    }

    /// True for ops that only rearrange or replicate elements (views; never compute).
    pub fn is_movement(&self) -> bool {
        matches!(
            self,
            Op::Reshape { .. }
                | Op::Permute { .. }
                | Op::Transpose { .. }
                | Op::Expand { .. }
                | Op::Squeeze { .. }
                | Op::Unsqueeze { .. }
                | Op::Slice { .. }
                | Op::Concat { .. }
                | Op::Pad { .. }
        )
    }

    /// True for elementwise ops (unary, binary, where, cast).
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. }
        )
    }

    /// The attributes that the printer writes: required ones always, optional ones
    /// only when they differ from their default. Parsing these back yields the same op.
    pub fn attributes(&self) -> Vec<(&'static str, AttrValue)> {
        use AttrValue as A;
        let mut out = Vec::new();
        match self {
            Op::Param { .. } | Op::Literal { .. } | Op::Binary(_) | Op::Where | Op::MatMul => {}
            Op::Unary(u) => {
                if *u == UnaryOp::GeluTanh {
                    out.push(("approximate", A::Str("tanh".into())));
                }
            }
            Op::Cast { to } => out.push(("to", A::DType(*to))),
            Op::Reduce { axes, keepdim, .. } => {
                if let Some(axes) = axes {
                    out.push(("axes", A::Ints(axes.clone())));
                }
                if *keepdim {
                    out.push(("keepdim", A::Bool(true)));
                }
            }
            Op::ArgReduce { axis, keepdim, .. } => {
                if let Some(axis) = axis {
                    out.push(("axis", A::Int(*axis)));
                }
                if *keepdim {
                    out.push(("keepdim", A::Bool(true)));
                }
            }
            Op::Softmax { axis } | Op::LogSoftmax { axis } => {
                if *axis != -1 {
                    out.push(("axis", A::Int(*axis)));
                }
            }
            Op::LayerNorm { eps } => {
                if *eps != 1e-5 {
                    out.push(("eps", A::Float(*eps)));
                }
            }
            Op::RmsNorm { eps } => {
                if *eps != 1e-6 {
                    out.push(("eps", A::Float(*eps)));
                }
            }
            Op::Reshape { shape } => out.push(("shape", A::Ints(shape.clone()))),
            Op::Permute { dims } => out.push(("dims", A::Ints(dims.clone()))),
            Op::Transpose { dim0, dim1 } => {
                out.push(("dim0", A::Int(*dim0)));
                out.push(("dim1", A::Int(*dim1)));
            }
            Op::Expand { shape } => out.push(("shape", A::Ints(shape.clone()))),
            Op::Squeeze { axes } => {
                if let Some(axes) = axes {
                    out.push(("axes", A::Ints(axes.clone())));
                }
            }
            Op::Unsqueeze { axis } => out.push(("axis", A::Int(*axis))),
            Op::Slice {
                axis,
                start,
                end,
                step,
            } => {
                out.push(("axis", A::Int(*axis)));
                if *start != 0 {
                    out.push(("start", A::Int(*start)));
                }
                if *end != i64::MAX {
                    out.push(("end", A::Int(*end)));
                }
                if *step != 1 {
                    out.push(("step", A::Int(*step)));
                }
            }
            Op::Concat { axis } | Op::IndexSelect { axis } | Op::Gather { axis } => {
                out.push(("axis", A::Int(*axis)))
            }
            Op::Pad { pads, value } => {
                out.push(("pads", A::Ints(pads.clone())));
                if *value != 0.0 || value.is_sign_negative() {
                    out.push(("value", A::Float(*value)));
                }
            }
            Op::Full {
                shape,
                value,
                dtype,
            } => {
                out.push(("shape", A::Ints(shape.iter().map(|&d| d as i64).collect())));
                out.push(("value", A::Float(*value)));
                if *dtype != DType::F32 {
                    out.push(("dtype", A::DType(*dtype)));
                }
            }
            Op::Arange {
                start,
                end,
                step,
                dtype,
            } => {
                if *start != 0.0 || start.is_sign_negative() {
                    out.push(("start", A::Float(*start)));
                }
                out.push(("end", A::Float(*end)));
                if *step != 1.0 {
                    out.push(("step", A::Float(*step)));
                }
                if *dtype != DType::I64 {
                    out.push(("dtype", A::DType(*dtype)));
                }
            }
        }
        out
    }

    /// Builds an op from its text name and attributes (`key=value` pairs), checking
    /// that every attribute is known and well-typed and every required one is present.
    /// Returns `Ok(None)` if `name` is not an op.
    pub fn from_call(name: &str, attrs: &[(String, AttrValue)]) -> Result<Option<Op>, String> {
        let mut a = AttrReader::new(name, attrs);
        let op = if let Some(u) = UnaryOp::ALL
            .into_iter()
            .find(|u| u.name() == name && *u != UnaryOp::GeluTanh)
        {
            if u == UnaryOp::Gelu {
                match a.opt_str("approximate")?.as_deref() {
                    None | Some("none") => Op::Unary(UnaryOp::Gelu),
                    Some("tanh") => Op::Unary(UnaryOp::GeluTanh),
                    Some(other) => {
                        return Err(format!(
                            "gelu: approximate must be \"none\" or \"tanh\", not {other:?}"
                        ))
                    }
                }
            } else {
                Op::Unary(u)
            }
        } else if let Some(b) = BinaryOp::ALL.into_iter().find(|b| b.name() == name) {
            Op::Binary(b)
        } else if let Some(r) = ReduceOp::ALL.into_iter().find(|r| r.name() == name) {
            Op::Reduce {
                op: r,
                axes: a.opt_ints("axes")?,
                keepdim: a.opt_bool("keepdim")?.unwrap_or(false),
            }
        } else {
            match name {
                "where" => Op::Where,
                "cast" => Op::Cast {
                    to: a.req_dtype("to")?,
                },
                "argmax" | "argmin" => Op::ArgReduce {
                    op: if name == "argmax" {
                        ArgReduceOp::ArgMax
                    } else {
                        ArgReduceOp::ArgMin
                    },
                    axis: a.opt_int("axis")?,
                    keepdim: a.opt_bool("keepdim")?.unwrap_or(false),
                },
                "softmax" => Op::Softmax {
                    axis: a.opt_int("axis")?.unwrap_or(-1),
                },
                "log_softmax" => Op::LogSoftmax {
                    axis: a.opt_int("axis")?.unwrap_or(-1),
                },
                "layer_norm" => Op::LayerNorm {
                    eps: a.opt_float("eps")?.unwrap_or(1e-5),
                },
                "rms_norm" => Op::RmsNorm {
                    eps: a.opt_float("eps")?.unwrap_or(1e-6),
                },
                "matmul" => Op::MatMul,
                "reshape" => Op::Reshape {
                    shape: a.req_ints("shape")?,
                },
                "permute" => Op::Permute {
                    dims: a.req_ints("dims")?,
                },
                "transpose" => Op::Transpose {
                    dim0: a.req_int("dim0")?,
                    dim1: a.req_int("dim1")?,
                },
                "expand" => Op::Expand {
                    shape: a.req_ints("shape")?,
                },
                "squeeze" => Op::Squeeze {
                    axes: a.opt_ints("axes")?,
                },
                "unsqueeze" => Op::Unsqueeze {
                    axis: a.req_int("axis")?,
                },
                "slice" => {
                    let step = a.opt_int("step")?.unwrap_or(1);
                    if step < 1 {
                        return Err(format!("slice: step must be at least 1, not {step}"));
                    }
                    Op::Slice {
                        axis: a.req_int("axis")?,
                        start: a.opt_int("start")?.unwrap_or(0),
                        end: a.opt_int("end")?.unwrap_or(i64::MAX),
                        step,
                    }
                }
                "concat" => Op::Concat {
                    axis: a.req_int("axis")?,
                },
                "pad" => Op::Pad {
                    pads: a.req_ints("pads")?,
                    value: a.opt_float("value")?.unwrap_or(0.0),
                },
                "index_select" => Op::IndexSelect {
                    axis: a.req_int("axis")?,
                },
                "gather" => Op::Gather {
                    axis: a.req_int("axis")?,
                },
                "full" => {
                    let shape = a.req_ints("shape")?;
                    let mut dims = Vec::with_capacity(shape.len());
                    for d in shape {
                        if d < 0 {
                            return Err(format!("full: shape extents must be >= 0, not {d}"));
                        }
                        dims.push(d as usize);
                    }
                    Op::Full {
                        shape: dims,
                        value: a.req_float("value")?,
                        dtype: a.opt_dtype("dtype")?.unwrap_or(DType::F32),
                    }
                }
                "arange" => {
                    let step = a.opt_float("step")?.unwrap_or(1.0);
                    if step == 0.0 || !step.is_finite() {
                        return Err("arange: step must be finite and non-zero".into());
                    }
                    Op::Arange {
                        start: a.opt_float("start")?.unwrap_or(0.0),
                        end: a.req_float("end")?,
                        step,
                        dtype: a.opt_dtype("dtype")?.unwrap_or(DType::I64),
                    }
                }
                _ => return Ok(None),
            }
        };
        a.finish()?;
        Ok(Some(op))
    }

    /// The number of tensor operands the op takes, or `None` when variadic (`concat`).
    pub fn arity(&self) -> Option<usize> {
        Some(match self {
            Op::Param { .. } | Op::Literal { .. } | Op::Full { .. } | Op::Arange { .. } => 0,
            Op::Unary(_)
            | Op::Cast { .. }
            | Op::Reduce { .. }
            | Op::ArgReduce { .. }
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Transpose { .. }
            | Op::Expand { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::Slice { .. }
            | Op::Pad { .. } => 1,
            Op::Binary(_) | Op::MatMul | Op::IndexSelect { .. } | Op::Gather { .. } => 2,
            Op::RmsNorm { .. } => 2,
            Op::Where | Op::LayerNorm { .. } => 3,
            Op::Concat { .. } => return None,
        })
    }
}

/// Reads `key=value` attributes for one op, rejecting unknown and ill-typed ones.
struct AttrReader<'a> {
    op: &'a str,
    attrs: &'a [(String, AttrValue)],
    used: Vec<bool>,
}

impl<'a> AttrReader<'a> {
    fn new(op: &'a str, attrs: &'a [(String, AttrValue)]) -> Self {
        AttrReader {
            op,
            attrs,
            used: vec![false; attrs.len()],
        }
    }

    fn take(&mut self, key: &str) -> Option<&'a AttrValue> {
        let i = self.attrs.iter().position(|(k, _)| k == key)?;
        self.used[i] = true;
        Some(&self.attrs[i].1)
    }

    fn wrong(&self, key: &str, want: &str, got: &AttrValue) -> String {
        format!("{}: attribute `{key}` must be {want}, not `{got}`", self.op)
    }

    fn missing(&self, key: &str) -> String {
        format!("{}: missing required attribute `{key}`", self.op)
    }

    fn opt_int(&mut self, key: &str) -> Result<Option<i64>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(AttrValue::Int(v)) => Ok(Some(*v)),
            Some(v) => Err(self.wrong(key, "an integer", v)),
        }
    }

    fn req_int(&mut self, key: &str) -> Result<i64, String> {
        self.opt_int(key)?.ok_or_else(|| self.missing(key))
    }

    fn opt_float(&mut self, key: &str) -> Result<Option<f64>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(AttrValue::Float(v)) => Ok(Some(*v)),
            Some(AttrValue::Int(v)) => Ok(Some(*v as f64)),
            Some(v) => Err(self.wrong(key, "a number", v)),
        }
    }

    fn req_float(&mut self, key: &str) -> Result<f64, String> {
        self.opt_float(key)?.ok_or_else(|| self.missing(key))
    }

    fn opt_bool(&mut self, key: &str) -> Result<Option<bool>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(AttrValue::Bool(v)) => Ok(Some(*v)),
            Some(v) => Err(self.wrong(key, "true or false", v)),
        }
    }

    fn opt_ints(&mut self, key: &str) -> Result<Option<Vec<i64>>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(AttrValue::Ints(v)) => Ok(Some(v.clone())),
            Some(v) => Err(self.wrong(key, "a list of integers", v)),
        }
    }

    fn req_ints(&mut self, key: &str) -> Result<Vec<i64>, String> {
        self.opt_ints(key)?.ok_or_else(|| self.missing(key))
    }

    fn opt_dtype(&mut self, key: &str) -> Result<Option<DType>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(AttrValue::DType(d)) => Ok(Some(*d)),
            Some(v) => Err(self.wrong(key, "a dtype (f32, f16, bf16, i32, i64, bool)", v)),
        }
    }

    fn req_dtype(&mut self, key: &str) -> Result<DType, String> {
        self.opt_dtype(key)?.ok_or_else(|| self.missing(key))
    }

    fn opt_str(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(AttrValue::Str(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.wrong(key, "a string", v)),
        }
    }

    fn finish(self) -> Result<(), String> {
        for (i, (k, _)) in self.attrs.iter().enumerate() {
            if self.attrs[..i].iter().any(|(k2, _)| k2 == k) {
                return Err(format!("{}: attribute `{k}` given twice", self.op));
            }
            if !self.used[i] {
                return Err(format!("{}: unknown attribute `{k}`", self.op));
            }
        }
        Ok(())
    }
}
