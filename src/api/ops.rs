//! One method per op of the graph IR (docs/graph-format.md), on [`Var`], and the creation ops on
//! [`Graph`].
//!
//! Names and argument orders follow PyTorch where it has the op (`index_select(axis,
//! index)`, `transpose(dim0, dim1)`, `sum(axes, keepdim)`); axes may be negative. Every
//! method records one op and never fails at the call: a rejected op poisons its result
//! (see [`builder`](super::builder)). Shapes and axis lists are anything [`Dims`]
//! accepts (`[2, -1]`, `&[b, s, d]` with `usize` extents, a `Vec`), and slices take
//! Rust ranges ([`AxisRange`]: `0..64`, `-3..`, `..`).

use super::builder::{binary, detached_error, Graph, Operand, Var};
use ferrite_ir::op::{ArgReduceOp, BagMode, BinaryOp, Op, ReduceOp, UnaryOp};
use ferrite_ir::DType;
use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

mod sealed {
    pub trait Sealed {}
}

/// An integer type usable as an extent or axis in [`Dims`]: `i32`, `i64`, `usize`.
pub trait DimInt: Copy + sealed::Sealed {
    /// The value as an `i64`, saturating (`usize` beyond `i64::MAX` becomes `i64::MAX`,
    /// which every op then rejects as too large).
    fn to_i64(self) -> i64;
}

impl sealed::Sealed for i32 {}
impl sealed::Sealed for i64 {}
impl sealed::Sealed for usize {}

impl DimInt for i32 {
    fn to_i64(self) -> i64 {
        self as i64
    }
}

impl DimInt for i64 {
    fn to_i64(self) -> i64 {
        self
    }
}

impl DimInt for usize {
    fn to_i64(self) -> i64 {
        i64::try_from(self).unwrap_or(i64::MAX)
    }
}

/// A list of extents or axes: arrays, slices and `Vec`s of `i32`, `i64` or `usize`.
/// Integer literals work as they are (`x.reshape([2, -1])`), and so do shapes computed
/// from [`Var::size`] (`x.reshape([b, s, heads, d / heads])`).
pub trait Dims {
    /// The entries as `i64`s.
    fn to_dims(&self) -> Vec<i64>;
}

impl<I: DimInt, const N: usize> Dims for [I; N] {
    fn to_dims(&self) -> Vec<i64> {
        self.iter().map(|d| d.to_i64()).collect()
    }
}

impl<I: DimInt, const N: usize> Dims for &[I; N] {
    fn to_dims(&self) -> Vec<i64> {
        self.iter().map(|d| d.to_i64()).collect()
    }
}

impl<I: DimInt> Dims for &[I] {
    fn to_dims(&self) -> Vec<i64> {
        self.iter().map(|d| d.to_i64()).collect()
    }
}

impl<I: DimInt> Dims for Vec<I> {
    fn to_dims(&self) -> Vec<i64> {
        self.iter().map(|d| d.to_i64()).collect()
    }
}

impl<I: DimInt> Dims for &Vec<I> {
    fn to_dims(&self) -> Vec<i64> {
        self.iter().map(|d| d.to_i64()).collect()
    }
}

/// A range of indices along one axis for [`Var::slice`], with Python's conventions:
/// negative bounds count from the end and bounds past the end are clamped.
pub trait AxisRange {
    /// `(start, end)`, `end` exclusive; `i64::MAX` means "to the end".
    fn bounds(&self) -> (i64, i64);
}

/// The exclusive end for an inclusive one: `..=-1` includes the last index.
fn after(end: i64) -> i64 {
    if end == -1 {
        i64::MAX
    } else {
        end.saturating_add(1)
    }
}

macro_rules! axis_range {
    ($($t:ty),*) => {$(
        impl AxisRange for Range<$t> {
            fn bounds(&self) -> (i64, i64) {
                (self.start.to_i64(), self.end.to_i64())
            }
        }
        impl AxisRange for RangeFrom<$t> {
            fn bounds(&self) -> (i64, i64) {
                (self.start.to_i64(), i64::MAX)
            }
        }
        impl AxisRange for RangeTo<$t> {
            fn bounds(&self) -> (i64, i64) {
                (0, self.end.to_i64())
            }
        }
        impl AxisRange for RangeInclusive<$t> {
            fn bounds(&self) -> (i64, i64) {
                (self.start().to_i64(), after(self.end().to_i64()))
            }
        }
        impl AxisRange for RangeToInclusive<$t> {
            fn bounds(&self) -> (i64, i64) {
                (0, after(self.end.to_i64()))
            }
        }
    )*};
}

axis_range!(i32, i64, usize);

impl AxisRange for RangeFull {
    fn bounds(&self) -> (i64, i64) {
        (0, i64::MAX)
    }
}

/// Defines unary methods: `name => UnaryOp`, each with a doc line.
macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(&self) -> Var {
            self.unary(UnaryOp::$op)
        }
    )*};
}

/// Defines binary methods taking a tensor or a scalar: `name => BinaryOp`.
macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(&self, other: impl Into<Operand>) -> Var {
            binary(BinaryOp::$op, self.into(), other.into())
        }
    )*};
}

/// Defines reductions over axes and over everything: `name, name_all => ReduceOp`.
macro_rules! reduce_methods {
    ($($what:literal $name:ident $all:ident => $op:ident;)*) => {$(
        #[doc = concat!("The ", $what, " over `axes`; `keepdim` keeps them with extent 1.")]
        #[track_caller]
        pub fn $name(&self, axes: impl Dims, keepdim: bool) -> Var {
            self.record(Op::Reduce { op: ReduceOp::$op, axes: Some(axes.to_dims()), keepdim })
        }

        #[doc = concat!("The ", $what, " of all elements (rank 0).")]
        #[track_caller]
        pub fn $all(&self) -> Var {
            self.record(Op::Reduce { op: ReduceOp::$op, axes: None, keepdim: false })
        }
    )*};
}

impl Var {
    #[track_caller]
    fn record(&self, op: Op) -> Var {
        self.graph().record(op, &[self.into()])
    }

    #[track_caller]
    fn unary(&self, op: UnaryOp) -> Var {
        self.record(Op::Unary(op))
    }

    unary_methods! {
        /// `-x`.
        neg => Neg;
        /// `|x|`.
        abs => Abs;
        /// `e^x` (integers give `f32`).
        exp => Exp;
        /// The natural logarithm.
        log => Log;
        /// The square root.
        sqrt => Sqrt;
        /// `1 / sqrt(x)`.
        rsqrt => Rsqrt;
        /// `1 / x`.
        reciprocal => Reciprocal;
        /// The sine.
        sin => Sin;
        /// The cosine.
        cos => Cos;
        /// The hyperbolic tangent.
        tanh => Tanh;
        /// `1 / (1 + e^-x)`.
        sigmoid => Sigmoid;
        /// `max(x, 0)`.
        relu => Relu;
        /// `x * Φ(x)` with the exact (erf) normal CDF.
        gelu => Gelu;
        /// GELU with the tanh approximation (`approximate="tanh"`).
        gelu_tanh => GeluTanh;
        /// `x * sigmoid(x)` (SiLU, swish).
        silu => Silu;
        /// The error function.
        erf => Erf;
        /// The complementary error function `1 - erf(x)`, accurate where that difference
        /// cancels.
        erfc => Erfc;
        /// Rounds toward -inf.
        floor => Floor;
        /// Rounds toward +inf.
        ceil => Ceil;
        /// -1, 0 or 1.
        sign => Sign;
        /// Logical not: `true` where `x` is zero (result `bool`).
        logical_not => Not;
        /// Bitwise not of integers, logical not of bools (also the `!` operator;
        /// PyTorch's `~`).
        bitwise_not => BitwiseNot;
    }

    binary_methods! {
        /// `self + other`, broadcasting (also the `+` operator).
        add => Add;
        /// `self - other`, broadcasting (also the `-` operator).
        sub => Sub;
        /// `self * other`, broadcasting (also the `*` operator).
        mul => Mul;
        /// True division, broadcasting (also the `/` operator; integers give `f32`).
        div => Div;
        /// `self ** other`.
        pow => Pow;
        /// Division rounded toward -inf (`torch.floor_divide`, Python `//`); an integer
        /// division by zero is a run-time error.
        floor_divide => FloorDivide;
        /// Division rounded toward zero (`torch.div(rounding_mode="trunc")`).
        trunc_divide => TruncDivide;
        /// The remainder with the sign of the divisor (`torch.remainder`, Python `%`).
        remainder => Remainder;
        /// The remainder with the sign of the dividend (`torch.fmod`, C `fmod`).
        fmod => Fmod;
        /// The elementwise maximum (NaN-propagating).
        maximum => Maximum;
        /// The elementwise minimum (NaN-propagating).
        minimum => Minimum;
        /// `self == other` (`bool`).
        eq => Eq;
        /// `self != other` (`bool`).
        ne => Ne;
        /// `self < other` (`bool`).
        lt => Lt;
        /// `self <= other` (`bool`).
        le => Le;
        /// `self > other` (`bool`).
        gt => Gt;
        /// `self >= other` (`bool`).
        ge => Ge;
        /// Logical and of truth values (`bool`).
        logical_and => And;
        /// Logical or of truth values (`bool`).
        logical_or => Or;
        /// Bitwise and of integers, logical and of bools (also the `&` operator).
        bitwise_and => BitwiseAnd;
        /// Bitwise or of integers, logical or of bools (also the `|` operator).
        bitwise_or => BitwiseOr;
        /// Bitwise exclusive or of integers, logical of bools (also the `^` operator).
        bitwise_xor => BitwiseXor;
        /// `self << other` of integers (also the `<<` operator); a shift outside
        /// `[0, bits)` gives 0.
        bitwise_left_shift => LeftShift;
        /// `self >> other` of integers, arithmetic for signed ones (also the `>>`
        /// operator); a shift outside `[0, bits)` gives 0, or -1 for a negative signed
        /// value.
        bitwise_right_shift => RightShift;
    }

    /// `where(self, a, b)`: `a` where this `bool` condition holds, else `b`; all three
    /// broadcast, and `a`/`b` may be scalars. (The condition is `self`, unlike PyTorch's
    /// `Var.where`; see also the free function [`where_`].)
    #[track_caller]
    pub fn where_(&self, a: impl Into<Operand>, b: impl Into<Operand>) -> Var {
        self.graph()
            .record(Op::Where, &[self.into(), a.into(), b.into()])
    }

    /// The same values as another dtype (floats to integers truncate toward zero).
    #[track_caller]
    pub fn cast(&self, to: DType) -> Var {
        self.record(Op::Cast { to })
    }

    reduce_methods! {
        "sum" sum sum_all => Sum;
        "mean" mean mean_all => Mean;
        "maximum" max max_all => Max;
        "minimum" min min_all => Min;
        "product" prod prod_all => Prod;
    }

    /// The index of the first maximum along `axis` (`i64`).
    #[track_caller]
    pub fn argmax(&self, axis: i64, keepdim: bool) -> Var {
        self.record(Op::ArgReduce {
            op: ArgReduceOp::ArgMax,
            axis: Some(axis),
            keepdim,
        })
    }

    /// The index of the first minimum along `axis` (`i64`).
    #[track_caller]
    pub fn argmin(&self, axis: i64, keepdim: bool) -> Var {
        self.record(Op::ArgReduce {
            op: ArgReduceOp::ArgMin,
            axis: Some(axis),
            keepdim,
        })
    }

    /// The flat index of the first maximum (rank 0, `i64`).
    #[track_caller]
    pub fn argmax_all(&self) -> Var {
        self.record(Op::ArgReduce {
            op: ArgReduceOp::ArgMax,
            axis: None,
            keepdim: false,
        })
    }

    /// The flat index of the first minimum (rank 0, `i64`).
    #[track_caller]
    pub fn argmin_all(&self) -> Var {
        self.record(Op::ArgReduce {
            op: ArgReduceOp::ArgMin,
            axis: None,
            keepdim: false,
        })
    }

    /// Softmax along `axis`.
    #[track_caller]
    pub fn softmax(&self, axis: i64) -> Var {
        self.record(Op::Softmax { axis })
    }

    /// Log-softmax along `axis`.
    #[track_caller]
    pub fn log_softmax(&self, axis: i64) -> Var {
        self.record(Op::LogSoftmax { axis })
    }

    /// Layer normalization over the last axis with weight and bias of that extent.
    #[track_caller]
    pub fn layer_norm(&self, weight: &Var, bias: &Var, eps: f64) -> Var {
        self.graph().record(
            Op::LayerNorm { eps },
            &[self.into(), weight.into(), bias.into()],
        )
    }

    /// RMS normalization over the last axis with a weight of that extent.
    #[track_caller]
    pub fn rms_norm(&self, weight: &Var, eps: f64) -> Var {
        self.graph()
            .record(Op::RmsNorm { eps }, &[self.into(), weight.into()])
    }

    /// Matrix product with numpy/PyTorch batch broadcasting (1-D operands too).
    #[track_caller]
    pub fn matmul(&self, other: &Var) -> Var {
        self.graph()
            .record(Op::MatMul, &[self.into(), other.into()])
    }

    /// The same elements in another shape; one extent may be `-1`.
    #[track_caller]
    pub fn reshape(&self, shape: impl Dims) -> Var {
        self.record(Op::Reshape {
            shape: shape.to_dims(),
        })
    }

    /// Reorders the axes: result axis `i` is input axis `dims[i]`.
    #[track_caller]
    pub fn permute(&self, dims: impl Dims) -> Var {
        self.record(Op::Permute {
            dims: dims.to_dims(),
        })
    }

    /// Swaps two axes.
    #[track_caller]
    pub fn transpose(&self, dim0: i64, dim1: i64) -> Var {
        self.record(Op::Transpose { dim0, dim1 })
    }

    /// Broadcasts to `shape` (`-1` keeps an extent).
    #[track_caller]
    pub fn expand(&self, shape: impl Dims) -> Var {
        self.record(Op::Expand {
            shape: shape.to_dims(),
        })
    }

    /// Drops the given axes, which must have extent 1.
    #[track_caller]
    pub fn squeeze(&self, axes: impl Dims) -> Var {
        self.record(Op::Squeeze {
            axes: Some(axes.to_dims()),
        })
    }

    /// Drops every axis of extent 1.
    #[track_caller]
    pub fn squeeze_all(&self) -> Var {
        self.record(Op::Squeeze { axes: None })
    }

    /// Inserts an axis of extent 1 at position `axis` of the result.
    #[track_caller]
    pub fn unsqueeze(&self, axis: i64) -> Var {
        self.record(Op::Unsqueeze { axis })
    }

    /// The indices `range` along `axis` (`x.slice(-1, ..64)`, `x.slice(0, 2..)`).
    #[track_caller]
    pub fn slice(&self, axis: i64, range: impl AxisRange) -> Var {
        self.slice_step(axis, range, 1)
    }

    /// Every `step`-th index of `range` along `axis` (`step >= 1`).
    #[track_caller]
    pub fn slice_step(&self, axis: i64, range: impl AxisRange, step: i64) -> Var {
        let (start, end) = range.bounds();
        self.record(Op::Slice {
            axis,
            start,
            end,
            step,
        })
    }

    /// Pads with `value`: `pads` holds `[before, after]` for each axis, axis 0 first;
    /// negative amounts crop.
    #[track_caller]
    pub fn pad(&self, pads: impl Dims, value: f64) -> Var {
        self.record(Op::Pad {
            pads: pads.to_dims(),
            value,
        })
    }

    /// The slices of `self` along `axis` at the positions in the integer `index`, which
    /// may have any rank: the result's shape is `shape[..axis] + index.shape +
    /// shape[axis + 1..]` (numpy's `take`; an embedding lookup with `[batch, seq]` ids is
    /// `table.index_select(0, &ids)`). An index out of range, negative included, is an
    /// error when the program runs.
    #[track_caller]
    pub fn index_select(&self, axis: i64, index: &Var) -> Var {
        self.graph()
            .record(Op::IndexSelect { axis }, &[self.into(), index.into()])
    }

    /// Picks along `axis` with an index of the same rank (PyTorch's `take_along_dim`:
    /// the other axes of `index` broadcast against `self`).
    #[track_caller]
    pub fn gather(&self, axis: i64, index: &Var) -> Var {
        self.graph()
            .record(Op::Gather { axis }, &[self.into(), index.into()])
    }

    /// PyTorch's `index_add(self, axis, index, source)` as a new value: slice `j` of
    /// `source` along `axis` is added to slice `index[j]` of `self`, for every `j` in
    /// order (duplicate indices accumulate). `index` is 1-D; `source` has `self`'s shape
    /// with the index's length on `axis`. An index out of range is an error when the
    /// program runs.
    #[track_caller]
    pub fn index_add(&self, axis: i64, index: &Var, source: &Var) -> Var {
        self.graph().record(
            Op::IndexAdd { axis },
            &[self.into(), index.into(), source.into()],
        )
    }

    /// PyTorch's `index_reduce(self, axis, index, source, reduce, include_self=)` as a new
    /// value: slice `j` of `source` along `axis` is combined into slice `index[j]` of
    /// `self` by `reduce` (`prod`, `mean`, `amax`, `amin`), for every `j` in order; with
    /// `include_self` false the indexed slices of `self` take no part. `index` is 1-D;
    /// `source` has `self`'s shape with the index's length on `axis`. An index out of
    /// range is an error when the program runs.
    #[track_caller]
    pub fn index_reduce(
        &self,
        axis: i64,
        index: &Var,
        source: &Var,
        reduce: crate::ir::IndexReduceOp,
        include_self: bool,
    ) -> Var {
        self.graph().record(
            Op::IndexReduce {
                axis,
                reduce,
                include_self,
            },
            &[self.into(), index.into(), source.into()],
        )
    }

    /// PyTorch's `embedding_bag(indices, self, offsets, mode=, per_sample_weights=,
    /// include_last_offset=, padding_idx=)` over this `[rows, D]` table: bag `b` holds
    /// `indices[offsets[b]..offsets[b + 1]]` (to the end for the last bag), and the
    /// result is `[bags, D]`, each bag's rows summed (times their weights), averaged or
    /// maximized; an empty bag gives zeros. Gradients of the table can be row-sparse
    /// (`TrainStep::with_sparse`).
    #[track_caller]
    pub fn embedding_bag(
        &self,
        indices: &Var,
        offsets: &Var,
        mode: BagMode,
        per_sample_weights: Option<&Var>,
        include_last_offset: bool,
        padding_idx: Option<i64>,
    ) -> Var {
        let mut operands = vec![self.into(), indices.into(), offsets.into()];
        if let Some(w) = per_sample_weights {
            operands.push(w.into());
        }
        self.graph().record(
            Op::EmbeddingBag {
                mode,
                include_last_offset,
                padding_idx,
            },
            &operands,
        )
    }

    /// PyTorch's `conv2d(x, weight, bias, stride, padding, dilation, groups)` over an
    /// `[N, C, H, W]` input and a `[C_out, C / groups, kH, kW]` weight (`groups = C` is
    /// depthwise); `padding` is `[pH, pW]` on both sides, or `[top, left, bottom,
    /// right]`. The bias (`[C_out]`) is added after the `conv` op. The same method
    /// serves 1-D and 3-D inputs: the lists then have one or three entries.
    #[track_caller]
    pub fn conv2d(
        &self,
        weight: &Var,
        bias: Option<&Var>,
        stride: impl Dims,
        padding: impl Dims,
        dilation: impl Dims,
        groups: i64,
    ) -> Var {
        let op = Op::Conv {
            stride: Some(stride.to_dims()),
            padding: Some(padding.to_dims()),
            dilation: Some(dilation.to_dims()),
            groups,
        };
        let y = self.graph().record(op, &[self.into(), weight.into()]);
        y.plus_channel_bias(bias)
    }

    /// PyTorch's `conv_transpose2d(x, weight, bias, stride, padding, output_padding,
    /// groups, dilation)` with a `[C, C_out / groups, kH, kW]` weight (1-D and 3-D too).
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn conv_transpose2d(
        &self,
        weight: &Var,
        bias: Option<&Var>,
        stride: impl Dims,
        padding: impl Dims,
        output_padding: impl Dims,
        groups: i64,
        dilation: impl Dims,
    ) -> Var {
        let op = Op::ConvTranspose {
            stride: Some(stride.to_dims()),
            padding: Some(padding.to_dims()),
            output_padding: Some(output_padding.to_dims()),
            dilation: Some(dilation.to_dims()),
            groups,
        };
        let y = self.graph().record(op, &[self.into(), weight.into()]);
        y.plus_channel_bias(bias)
    }

    /// `self + bias.reshape([C, 1, ..])` for an `[N, C, ...]` result, or `self`.
    #[track_caller]
    fn plus_channel_bias(&self, bias: Option<&Var>) -> Var {
        let Some(b) = bias else {
            return self.clone();
        };
        match self.ty() {
            Ok(ty) if ty.rank() >= 2 => {
                let mut shape = vec![1i64; ty.rank() - 1];
                shape[0] = -1;
                self.add(b.reshape(shape))
            }
            _ => self.clone(),
        }
    }

    /// PyTorch's `max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)`;
    /// an empty `stride` is the kernel (1-D and 3-D too).
    #[track_caller]
    pub fn max_pool2d(
        &self,
        kernel: impl Dims,
        stride: impl Dims,
        padding: impl Dims,
        dilation: impl Dims,
        ceil_mode: bool,
    ) -> Var {
        let stride = stride.to_dims();
        self.record(Op::MaxPool {
            kernel: kernel.to_dims(),
            stride: (!stride.is_empty()).then_some(stride),
            padding: Some(padding.to_dims()),
            dilation: Some(dilation.to_dims()),
            ceil_mode,
        })
    }

    /// PyTorch's `avg_pool2d(x, kernel_size, stride, padding, ceil_mode,
    /// count_include_pad)`; an empty `stride` is the kernel (1-D and 3-D too).
    #[track_caller]
    pub fn avg_pool2d(
        &self,
        kernel: impl Dims,
        stride: impl Dims,
        padding: impl Dims,
        ceil_mode: bool,
        count_include_pad: bool,
    ) -> Var {
        let stride = stride.to_dims();
        self.record(Op::AvgPool {
            kernel: kernel.to_dims(),
            stride: (!stride.is_empty()).then_some(stride),
            padding: Some(padding.to_dims()),
            dilation: None,
            ceil_mode,
            count_include_pad,
        })
    }

    /// PyTorch's `batch_norm(x, running_mean, running_var, weight, bias,
    /// training=False, eps=eps)` over axis 1 (note the IR's operand order: weight and
    /// bias first).
    #[track_caller]
    pub fn batch_norm(
        &self,
        running_mean: &Var,
        running_var: &Var,
        weight: &Var,
        bias: &Var,
        eps: f64,
    ) -> Var {
        let operands = [
            self.into(),
            weight.into(),
            bias.into(),
            running_mean.into(),
            running_var.into(),
        ];
        self.graph().record(Op::BatchNorm { eps }, &operands)
    }

    /// The `clip` op: `minimum(maximum(x, min), max)` in the dtype of `x`, either bound
    /// optional (ONNX `Clip`; [`Var::clamp`] is PyTorch's, which promotes).
    #[track_caller]
    pub fn clip(&self, min: Option<f64>, max: Option<f64>) -> Var {
        self.record(Op::Clip { min, max })
    }

    /// `clip(x, 0, 6)`, PyTorch's `relu6`.
    #[track_caller]
    pub fn relu6(&self) -> Var {
        self.clip(Some(0.0), Some(6.0))
    }

    /// A tensor of this shape and dtype filled with `value`.
    #[track_caller]
    pub fn full_like(&self, value: f64) -> Var {
        match self.ty() {
            Ok(ty) => self.graph().full(&ty.shape, value, ty.dtype),
            Err(_) => self.clone(),
        }
    }

    /// Zeros of this shape and dtype.
    #[track_caller]
    pub fn zeros_like(&self) -> Var {
        self.full_like(0.0)
    }

    /// Ones of this shape and dtype.
    #[track_caller]
    pub fn ones_like(&self) -> Var {
        self.full_like(1.0)
    }
}

/// `where(cond, a, b)`: `a` where `cond` holds, else `b` (see [`Var::where_`]).
#[track_caller]
pub fn where_(cond: &Var, a: impl Into<Operand>, b: impl Into<Operand>) -> Var {
    cond.where_(a, b)
}

/// Joins tensors of the same dtype along `axis`; the other extents must agree.
#[track_caller]
pub fn concat(tensors: &[&Var], axis: i64) -> Var {
    match tensors.first() {
        Some(first) => {
            let operands: Vec<Operand> = tensors.iter().map(|&t| t.into()).collect();
            first.graph().record(Op::Concat { axis }, &operands)
        }
        None => detached_error("concat", "needs at least one operand".into()),
    }
}

impl Graph {
    /// A tensor of `shape` filled with `value` (which must fit `dtype`).
    #[track_caller]
    pub fn full(&self, shape: impl Dims, value: f64, dtype: DType) -> Var {
        let dims = shape.to_dims();
        let mut extents = Vec::with_capacity(dims.len());
        for d in dims {
            match usize::try_from(d) {
                Ok(d) => extents.push(d),
                Err(_) => {
                    return self.fail("full", vec![], format!("extent {d} is negative"));
                }
            }
        }
        self.record(
            Op::Full {
                shape: extents,
                value,
                dtype,
            },
            &[],
        )
    }

    /// Zeros of `shape` and `dtype`.
    #[track_caller]
    pub fn zeros(&self, shape: impl Dims, dtype: DType) -> Var {
        self.full(shape, 0.0, dtype)
    }

    /// Ones of `shape` and `dtype`.
    #[track_caller]
    pub fn ones(&self, shape: impl Dims, dtype: DType) -> Var {
        self.full(shape, 1.0, dtype)
    }

    /// `start, start + step, ..` up to `end` exclusive, as a 1-D tensor of `dtype`.
    #[track_caller]
    pub fn arange(&self, start: f64, end: f64, step: f64, dtype: DType) -> Var {
        self.record(
            Op::Arange {
                start,
                end,
                step,
                dtype,
            },
            &[],
        )
    }
}
