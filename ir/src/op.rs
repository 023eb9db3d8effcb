//! The op set of the graph IR: one enum, with typed attributes.
//!
//! Composite ops (`softmax`, `layer_norm`, `gelu`, ...) exist so that users and
//! importers can say what they mean; `decompose` rewrites them into primitives
//! ([`Op::is_primitive`]) and everything after it handles only those.

mod attrs;
mod table;

pub use attrs::{format_float, AttrError, AttrErrorKind, AttrValue};
pub use table::{Arity, AttrDefault, AttrSpec, AttrType, OpSpec, Rule, OPS};

use crate::{Constant, DType};
use table::Kind;

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
    /// `1 / (1 + e^-x)`, computed without overflow as `where(x >= 0, 1, e) / (1 + e)`
    /// with `e = e^-|x|`
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
    /// complementary error function `1 - erf(x)`, without the cancellation of that
    /// difference for large `x`
    Erfc,
    /// round toward -inf
    Floor,
    /// round toward +inf
    Ceil,
    /// -1, 0 or 1 (0 for ±0, NaN for NaN)
    Sign,
    /// logical not (result `bool`)
    Not,
    /// bitwise not of an integer (`~x`, two's complement), logical not of a bool
    BitwiseNot,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 22] = [
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
        UnaryOp::Erfc,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Sign,
        UnaryOp::Not,
        UnaryOp::BitwiseNot,
    ];

    /// The op name in `.fg` text (`GeluTanh` is `gelu` with `approximate="tanh"`).
    pub fn name(self) -> &'static str {
        Op::Unary(self).name()
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
                | UnaryOp::Erfc
        )
    }

    /// Composite unary ops that `decompose` rewrites.
    pub fn is_composite(self) -> bool {
        matches!(
            self,
            UnaryOp::Relu | UnaryOp::Gelu | UnaryOp::GeluTanh | UnaryOp::Silu
        )
    }
}

/// How `index_reduce` combines the slices an index sends to the same place.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum IndexReduceOp {
    /// Their product.
    Prod,
    /// Their mean (a composite: `decompose` writes it with `index_add`s).
    Mean,
    /// Their maximum (NaN wins).
    Amax,
    /// Their minimum (NaN wins).
    Amin,
}

impl IndexReduceOp {
    /// The `reduce` attribute's value (PyTorch's names).
    pub fn name(self) -> &'static str {
        match self {
            IndexReduceOp::Prod => "prod",
            IndexReduceOp::Mean => "mean",
            IndexReduceOp::Amax => "amax",
            IndexReduceOp::Amin => "amin",
        }
    }

    /// The elementwise op that combines two values (`None` for `mean`, a composite).
    pub fn combine(self) -> Option<BinaryOp> {
        match self {
            IndexReduceOp::Prod => Some(BinaryOp::Mul),
            IndexReduceOp::Mean => None,
            IndexReduceOp::Amax => Some(BinaryOp::Maximum),
            IndexReduceOp::Amin => Some(BinaryOp::Minimum),
        }
    }
}

/// How `embedding_bag` combines the rows of a bag.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BagMode {
    /// Their (weighted) sum.
    Sum,
    /// Their sum divided by the bag's size (rows at `padding_idx` not counted).
    Mean,
    /// Their elementwise maximum; the gradient goes to the first maximal row.
    Max,
}

impl BagMode {
    /// The `mode` attribute's value.
    pub fn name(self) -> &'static str {
        match self {
            BagMode::Sum => "sum",
            BagMode::Mean => "mean",
            BagMode::Max => "max",
        }
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
    /// division rounded toward negative infinity (`torch.floor_divide`, Python `//`)
    FloorDivide,
    /// division rounded toward zero (`torch.div(rounding_mode="trunc")`, C `/` on integers)
    TruncDivide,
    /// the remainder of `floor_divide`, with the sign of the divisor (`torch.remainder`,
    /// Python `%`)
    Remainder,
    /// the remainder of `trunc_divide`, with the sign of the dividend (`torch.fmod`, C
    /// `fmod` and `%`)
    Fmod,
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
    /// bitwise and of integers, logical and of bools
    BitwiseAnd,
    /// bitwise or of integers, logical or of bools
    BitwiseOr,
    /// bitwise exclusive or of integers, logical exclusive or of bools
    BitwiseXor,
    /// `a << b` on integers; a shift outside `[0, bits)` gives 0
    LeftShift,
    /// `a >> b` on integers, arithmetic for signed dtypes; a shift outside `[0, bits)`
    /// gives the sign fill (0, or -1 for a negative signed `a`)
    RightShift,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 24] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::FloorDivide,
        BinaryOp::TruncDivide,
        BinaryOp::Remainder,
        BinaryOp::Fmod,
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
        BinaryOp::BitwiseAnd,
        BinaryOp::BitwiseOr,
        BinaryOp::BitwiseXor,
        BinaryOp::LeftShift,
        BinaryOp::RightShift,
    ];

    /// The op name in `.fg` text.
    pub fn name(self) -> &'static str {
        OpSpec::of(Kind::Binary(self)).name
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

    /// The bitwise ops (`bitwise_and`, `bitwise_or`, `bitwise_xor`) and the shifts:
    /// defined on integers only (and the first three on bools), never on floats.
    pub fn is_bitwise(self) -> bool {
        matches!(
            self,
            BinaryOp::BitwiseAnd
                | BinaryOp::BitwiseOr
                | BinaryOp::BitwiseXor
                | BinaryOp::LeftShift
                | BinaryOp::RightShift
        )
    }

    /// The shifts: defined on integers only.
    pub fn is_shift(self) -> bool {
        matches!(self, BinaryOp::LeftShift | BinaryOp::RightShift)
    }

    /// The rounding divisions and their remainders: on integers, a zero divisor is a
    /// run-time error.
    pub fn is_integer_division(self) -> bool {
        matches!(
            self,
            BinaryOp::FloorDivide | BinaryOp::TruncDivide | BinaryOp::Remainder | BinaryOp::Fmod
        )
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
        OpSpec::of(Kind::Reduce(self)).name
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
        OpSpec::of(Kind::ArgReduce(self)).name
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
    /// True if the literal keeps its value (up to rounding) as a `dtype` scalar. As in
    /// PyTorch's parser of literals, an integer too large for an `i32` tensor or a finite
    /// number that overflows an `f16` is an error rather than a silent wrap or infinity.
    /// (Whether a float may be an integer at all is the caller's rule.)
    pub fn fits(self, dtype: DType) -> bool {
        let v = self.as_f64();
        match dtype {
            DType::F16 => !v.is_finite() || half::f16::from_f64(v).is_finite(),
            DType::Bf16 => !v.is_finite() || half::bf16::from_f64(v).is_finite(),
            DType::F32 => !v.is_finite() || (v as f32).is_finite(),
            DType::F64 | DType::Bool => true,
            // An integer outside an integer tensor's range (`300` beside a `u8`, `-1`
            // beside a `u32`) is an error rather than a silent wrap.
            _ => match (self, dtype.int_range()) {
                (Scalar::Int(i), Some((lo, hi))) => (lo..=hi).contains(&(i as i128)),
                _ => true,
            },
        }
    }

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
    /// `index_select(x, index, axis=)`: slices of `x` along `axis` picked by an integer
    /// index of any rank (numpy `take`); the result's shape is
    /// `x.shape[:axis] + index.shape + x.shape[axis+1:]`. Out-of-range indices, negative
    /// ones included, are an error.
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
    /// `index_add(base, index, source, axis=)`: PyTorch's `index_add` as a new tensor:
    /// the result is `base` with slice `j` of `source` along `axis` added to slice
    /// `index[j]`, for every `j` in order (duplicates accumulate). `index` is 1-D
    /// integer of length `p`; `source` has `base`'s shape with `p` on `axis`.
    /// Out-of-range indices, negative ones included, are an error.
    IndexAdd {
        /// Axis as written.
        axis: i64,
    },
    /// `index_reduce(base, index, source, axis=, reduce=, include_self=true)`: PyTorch's
    /// `index_reduce` as a new tensor: slice `index[j]` of the result along `axis` is
    /// reduced (`reduce`: `prod`, `mean`, `amax`, `amin`) with slice `j` of `source`, for
    /// every `j` in order; with `include_self` false the base's values at indexed slices
    /// are left out (slices no index picks keep the base's). `amax`/`amin` propagate NaN
    /// (as `maximum`/`minimum`); `mean` of integers rounds down, as PyTorch does.
    /// Operands as for `index_add`; out-of-range indices are an error.
    IndexReduce {
        /// Axis as written.
        axis: i64,
        /// How the slices combine.
        reduce: IndexReduceOp,
        /// Whether the base's values at indexed slices take part.
        include_self: bool,
    },
    /// `embedding_bag(table, indices, offsets[, per_sample_weights], mode="sum",
    /// include_last_offset=false, padding_idx=)`: PyTorch's `embedding_bag` over a 2-D
    /// `table`, 1-D `indices` and 1-D `offsets` (composite: `decompose` makes it
    /// `index_select` + segment ids + `index_add`).
    EmbeddingBag {
        /// How a bag's rows combine.
        mode: BagMode,
        /// `offsets` has one entry more than there are bags, the last one the end.
        include_last_offset: bool,
        /// Rows of this index are left out of every bag (and of mean's counts).
        padding_idx: Option<i64>,
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
    /// `conv(x, w, stride=, padding=, dilation=, groups=1)`: cross-correlation of an
    /// `[N, C, *spatial]` input with a `[C_out, C / groups, *kernel]` weight over 1 to 3
    /// spatial axes (PyTorch's `conv1d`/`conv2d`/`conv3d` without bias; add the bias
    /// after). Composite: `decompose` makes it im2col slices and one `matmul`.
    Conv {
        /// Per axis, default 1.
        stride: Option<Vec<i64>>,
        /// Per axis (both sides) or begins then ends, default 0.
        padding: Option<Vec<i64>>,
        /// Per axis, default 1.
        dilation: Option<Vec<i64>>,
        /// Channel groups (`C_in` for depthwise).
        groups: i64,
    },
    /// `conv_transpose(x, w, stride=, padding=, output_padding=, dilation=, groups=1)`:
    /// the gradient of `conv` with respect to its input, with a `[C, C_out / groups,
    /// *kernel]` weight (PyTorch's `conv_transpose2d` without bias). Composite.
    ConvTranspose {
        /// Per axis, default 1.
        stride: Option<Vec<i64>>,
        /// Per axis (both sides) or begins then ends, default 0: cropped from the result.
        padding: Option<Vec<i64>>,
        /// Per axis, default 0: added to the end of each spatial extent.
        output_padding: Option<Vec<i64>>,
        /// Per axis, default 1.
        dilation: Option<Vec<i64>>,
        /// Channel groups.
        groups: i64,
    },
    /// `max_pool(x, kernel=[..], stride=, padding=, dilation=, ceil_mode=false)` over the
    /// spatial axes of `[N, C, *spatial]` (padding never wins). Composite.
    MaxPool {
        /// Window extents.
        kernel: Vec<i64>,
        /// Per axis, default the kernel.
        stride: Option<Vec<i64>>,
        /// Per axis (both sides) or begins then ends, default 0.
        padding: Option<Vec<i64>>,
        /// Per axis, default 1.
        dilation: Option<Vec<i64>>,
        /// Round output extents up.
        ceil_mode: bool,
    },
    /// `avg_pool(x, kernel=[..], stride=, padding=, dilation=, ceil_mode=false,
    /// count_include_pad=true)`. Composite.
    AvgPool {
        /// Window extents.
        kernel: Vec<i64>,
        /// Per axis, default the kernel.
        stride: Option<Vec<i64>>,
        /// Per axis (both sides) or begins then ends, default 0.
        padding: Option<Vec<i64>>,
        /// Per axis, default 1.
        dilation: Option<Vec<i64>>,
        /// Round output extents up.
        ceil_mode: bool,
        /// Count the padding's taps in the divisor.
        count_include_pad: bool,
    },
    /// `batch_norm(x, weight, bias, running_mean, running_var, eps=1e-5)` in inference
    /// form over axis 1 of `[N, C, ...]` (composite: a per-channel scale and shift).
    BatchNorm {
        /// Added to the variance.
        eps: f64,
    },
    /// `clip(x, min=, max=)`: `minimum(maximum(x, min), max)`; either bound may be left
    /// out (composite).
    Clip {
        /// Lower bound.
        min: Option<f64>,
        /// Upper bound.
        max: Option<f64>,
    },
    /// A constant tensor (a weight), shared rather than copied when the graph is:
    /// `constant(name="fc1.weight")` from the graph's weights file, or
    /// `constant(values=[..], dtype=.., shape=[..])` inline. Like a parameter it takes
    /// no operands and is typed by its tensor; unlike one, its value is part of the graph.
    Constant(Constant),
}

impl Op {
    /// The op's entry in the [op table](OPS); `None` for params, literals and
    /// constants, which are declarations rather than computations.
    pub fn spec(&self) -> Option<&'static OpSpec> {
        let kind = match self {
            Op::Param { .. } | Op::Literal { .. } | Op::Constant(_) => return None,
            Op::Unary(UnaryOp::GeluTanh) => Kind::Unary(UnaryOp::Gelu),
            Op::Unary(u) => Kind::Unary(*u),
            Op::Binary(b) => Kind::Binary(*b),
            Op::Where => Kind::Where,
            Op::Cast { .. } => Kind::Cast,
            Op::Reduce { op, .. } => Kind::Reduce(*op),
            Op::ArgReduce { op, .. } => Kind::ArgReduce(*op),
            Op::Softmax { .. } => Kind::Softmax,
            Op::LogSoftmax { .. } => Kind::LogSoftmax,
            Op::LayerNorm { .. } => Kind::LayerNorm,
            Op::RmsNorm { .. } => Kind::RmsNorm,
            Op::MatMul => Kind::MatMul,
            Op::Reshape { .. } => Kind::Reshape,
            Op::Permute { .. } => Kind::Permute,
            Op::Transpose { .. } => Kind::Transpose,
            Op::Expand { .. } => Kind::Expand,
            Op::Squeeze { .. } => Kind::Squeeze,
            Op::Unsqueeze { .. } => Kind::Unsqueeze,
            Op::Slice { .. } => Kind::Slice,
            Op::Concat { .. } => Kind::Concat,
            Op::Pad { .. } => Kind::Pad,
            Op::IndexSelect { .. } => Kind::IndexSelect,
            Op::Gather { .. } => Kind::Gather,
            Op::IndexAdd { .. } => Kind::IndexAdd,
            Op::IndexReduce { .. } => Kind::IndexReduce,
            Op::EmbeddingBag { .. } => Kind::EmbeddingBag,
            Op::Full { .. } => Kind::Full,
            Op::Arange { .. } => Kind::Arange,
            Op::Conv { .. } => Kind::Conv,
            Op::ConvTranspose { .. } => Kind::ConvTranspose,
            Op::MaxPool { .. } => Kind::MaxPool,
            Op::AvgPool { .. } => Kind::AvgPool,
            Op::BatchNorm { .. } => Kind::BatchNorm,
            Op::Clip { .. } => Kind::Clip,
        };
        Some(OpSpec::of(kind))
    }

    /// The op's name in `.fg` text.
    pub fn name(&self) -> &'static str {
        match (self, self.spec()) {
            (_, Some(spec)) => spec.name,
            (Op::Param { .. }, None) => "param",
            (Op::Constant(_), None) => "constant",
            (_, None) => "literal",
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
            | Op::Unsqueeze { .. }
            | Op::Conv { .. }
            | Op::ConvTranspose { .. }
            | Op::MaxPool { .. }
            | Op::AvgPool { .. }
            | Op::BatchNorm { .. }
            | Op::Clip { .. }
            | Op::EmbeddingBag { .. } => false,
            _ => true,
        }
    }

    /// The constant tensor this op holds, if it is [`Op::Constant`].
    pub fn constant(&self) -> Option<&Constant> {
        match self {
            Op::Constant(c) => Some(c),
            _ => None,
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
        attrs::written(self)
    }

    /// Builds an op from its text name and attributes (`key=value` pairs), checking
    /// them against the [op table](OPS): every attribute known and well-typed, every
    /// required one present, defaults filled in. Returns `Ok(None)` if `name` is not an op.
    pub fn from_call(name: &str, attrs: &[(String, AttrValue)]) -> Result<Option<Op>, AttrError> {
        match OpSpec::find(name) {
            Some(spec) => attrs::read(spec, attrs).map(Some),
            None => Ok(None),
        }
    }

    /// The number of tensor operands the op takes, or `None` when variadic (`concat`).
    pub fn arity(&self) -> Option<usize> {
        match self.spec().map(|s| s.arity) {
            None => Some(0),
            Some(Arity::Exactly(n)) => Some(n),
            Some(Arity::AtLeast(_)) => None,
        }
    }
}
