//! `decompose`: composite graph ops → the primitive op set.
//!
//! After this pass every node satisfies [`Op::is_primitive`], so later passes and
//! backends handle only elementwise ops, `sum`/`max`/`min`/`prod`, arg-reductions,
//! `matmul`, movement, indexing and creation. The pass also makes dtypes explicit:
//! every binary op and `where` gets operands of one dtype, with casts inserted where
//! the graph relied on implicit promotion.
//!
//! The rewrites, one line each (`c` is a literal of the operand's dtype):
//!
//! | op | primitives |
//! |---|---|
//! | `relu(x)` | `maximum(x, 0)` (int stays int) |
//! | `sigmoid(x)` | `e = exp(-abs(x))`; `where(x >= 0, 1, e) / (1 + e)` (never overflows) |
//! | `silu(x)` | `x * sigmoid(x)` |
//! | `gelu(x)` | `(x * 0.5) * where(x >= 0, 2 - e, e)`, `e = erfc(abs(x) * 1/√2)` (a rational-exp fit, see `erfc`) |
//! | `gelu(x, approximate="tanh")` | `x * sigmoid(2 * (x + x*x*x * 0.044715) * √(2/π))` (= `(x * 0.5) * (1 + tanh(..))`) |
//! | `mean(x, axes, keepdim)` | `sum(x, axes, keepdim) / count` (`0 / 0` is NaN for empty reductions, as in PyTorch) |
//! | `softmax(x, axis)` | `e = exp(x - max(x, axis, keepdim))`; `e / sum(e, axis, keepdim)` |
//! | `log_softmax(x, axis)` | `d = x - max(x, axis, keepdim)`; `d - log(sum(exp(d), axis, keepdim))` |
//! | `layer_norm(x, w, b, eps)` | `p = x[..., :1]`; `c = x - (p + sum(x * (1/n) - p * (1/n)))`; `c * rsqrt(mean(c*c) + eps) * w + b` (biased variance) |
//! | `rms_norm(x, w, eps)` | `x * rsqrt(mean(x*x) + eps) * w` |
//! | `transpose`, `squeeze`, `unsqueeze` | `permute`, `reshape`, `reshape` |
//! | `exp(int)` and other transcendental ops of ints | `exp(cast(x, f32))` |
//! | `add(i32, f32)` and other mixed-dtype binary ops, `where` | casts to the promoted dtype first |
//! | `div(int, int)` | `div(cast(a, f32), cast(b, f32))` (true division) |
//! | `conv`, `conv_transpose`, `max_pool`, `avg_pool` | the taps gathered from the padded input by a constant index (im2col), then one `matmul`, a `sum` (depthwise; of at most 25 taps a sum of `w[c, tap] * slice(pad(x))` instead), a `max` or a `sum / count` (`window.rs`) |
//! | `batch_norm(x, w, b, m, v, eps)` | `s = w * rsqrt(v + eps)`; `x * s + (b - m * s)` per channel |
//! | `clip(x, lo, hi)` | `minimum(maximum(x, lo), hi)` |
//! | `embedding_bag(t, i, o, w)` (sum, mean) | `index_add(zeros, seg, index_select(t, i) * w)` with `seg` from the offsets, `/ max(count, 1)` for mean (`bag.rs`) |
//!
//! Numerical choices, and why:
//!
//! - `softmax` and `log_softmax` subtract the row maximum, so `exp` never overflows
//!   (inputs of ±1000 are fine), and the `log` in `log_softmax` is of a sum that
//!   contains `exp(0) = 1`, never of a value rounded to zero. A row that is all `-inf`
//!   gives NaN (`-inf - -inf`), as in PyTorch.
//! - `mean` divides by the count instead of multiplying by its rounded reciprocal: one
//!   rounding instead of two, and an empty reduction gives `0 / 0 = NaN` with no special
//!   case. (The optimizer may strength-reduce the division by a constant.)
//! - Half precision (`f16`, `bf16`): `mean`, `softmax`, `log_softmax`, `layer_norm`,
//!   `rms_norm`, `sigmoid`, `silu` and `gelu` are computed in `f32` between a cast up
//!   and a cast down, as PyTorch does for reductions and its "opmath" elementwise
//!   kernels. This keeps sums from losing precision, keeps `x*x` in `rms_norm` from
//!   overflowing (65504² > f16 max) and rounds the result once to the half type.
//!   `relu` needs no upcast: it is exact in any dtype.
//! - A normalization (`softmax`, `layer_norm`, ...) whose result has no elements becomes
//!   `full(shape, 0)`: there is nothing to compute, and `max` over an empty tensor has
//!   no identity.
//!
//! - `layer_norm` uses the two-pass algorithm (center, then average the squares), so
//!   the variance is never a difference of large numbers. The mean is found about the
//!   row's first element `p = x[..., :1]` (the shifted-data algorithm): `mean = p +
//!   sum(x/n - p/n)`, `c = x - mean`, where `/n` is a multiplication by `1/n`. Where
//!   `x == p` the term is exactly 0, so a constant row's mean is exactly `p`, its `c`
//!   exactly 0 and its result `b`, as in PyTorch, in every dtype (the former `sum(x /
//!   n)` rounded each `x / n` into a large sum: an f16 row of 65504s became `±0.9 * w +
//!   b`, and an f32 constant row `±w + b` wherever a backend's summation order differed
//!   from the interpreter's, two fuzzer findings). No term overflows: `|x/n - p/n| <=
//!   2 max / n`, and the sum of the terms is the mean's distance from `p` (scaling
//!   before subtracting matters: `x - p` overflows for `x = -p = 3e38`, and a row of
//!   3e38s and small numbers would then be NaN where PyTorch gives `b`). The terms are
//!   deviations, so the sum does not accumulate the row's magnitude; the rounding of
//!   `x/n` costs at most an ulp of the mean. Half input is computed in f32.
//!   The variance `sum(c*c) / n` overflows exactly where PyTorch's sum of squared
//!   deviations does; `rsqrt(inf)` is then 0 and the row becomes `b`, as in PyTorch.
//! - Every intermediate is rounded to its dtype, and the reference interpreter
//!   evaluates these composites with exactly these formulas and roundings
//!   (`ferrite_ir::interp`, `composite.rs`), so f32 overflow in `rms_norm`'s `x*x` or
//!   `mean`'s sum happens in the oracle where it happens in PyTorch and the backends.
//!
//! Literals are cast by folding: a literal operand that needs another dtype becomes a
//! new literal of that dtype holding the value the old one had in its own dtype.

pub mod bag;
mod window;

pub use window::constant_bytes;

use crate::error::{Error, Result};
use ferrite_ir::infer::reduced_axes;
use ferrite_ir::types::normalize_axis;
use ferrite_ir::{
    promote, verify, BinaryOp, DType, Graph, IndexReduceOp, Op, ReduceOp, Scalar, Tensor,
    TensorType, UnaryOp, ValueId,
};
use std::collections::HashMap;
use std::f64::consts::FRAC_1_SQRT_2;

/// `sqrt(2 / pi)`, the scale inside tanh-approximated GELU.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// The cubic coefficient of tanh-approximated GELU.
const GELU_TANH_CUBIC: f64 = 0.044715;

/// Rewrites every composite op of `g` into primitive ops and makes mixed-dtype
/// operands explicit with casts.
///
/// Returns a new graph with the same name, the same parameters in the same order, and
/// the same outputs in the same order with the same types; each named node's name
/// (outputs' included) is kept on the node that now produces its value. Nodes that no
/// output depends on are dropped (parameters are always kept). The result is checked
/// with [`verify`]; an invalid input graph is an error, never a panic.
pub fn decompose(g: &Graph) -> Result<Graph> {
    verify(g).map_err(|e| Error::invalid_input("decompose", e))?;
    decompose_verified(g)
}

/// [`decompose`] of a graph that its caller has just verified (the pipeline's input), which
/// is not verified again; its result is.
pub(crate) fn decompose_verified(g: &Graph) -> Result<Graph> {
    let mut d = Decomposer::new(&g.name);
    for (i, node) in g.nodes.iter().enumerate() {
        let start = d.out.nodes.len();
        let v = d.decompose_node(g, i).map_err(|e| {
            let name = node
                .name
                .as_deref()
                .map(|n| format!(" (`{n}`)"))
                .unwrap_or_default();
            e.context(format_args!("decompose: %{i}{name} ({})", node.op.name()))
        })?;
        let v = match &node.name {
            Some(name) if !matches!(node.op, Op::Param { .. }) => d.bind_name(v, start, name)?,
            _ => v,
        };
        d.map.push(v);
    }
    let mut out = d.out;
    out.outputs = g.outputs.iter().map(|o| d.map[o.index()]).collect();
    out.declared_outputs = g.declared_outputs.clone();
    // Dead source nodes were decomposed along with the rest (so errors name source ids),
    // and rewrites such as `full` for empty results can leave operands unused.
    let out = out.without_dead_nodes();
    check_result(g, &out)?;
    Ok(out)
}

/// Checks the postconditions of [`decompose`]: primitive ops only, one operand dtype per
/// binary op and `where`, a verifier-clean graph, and the original signature.
fn check_result(g: &Graph, out: &Graph) -> Result<()> {
    let bug =
        |what: String| Error::Internal(format!("decompose produced an invalid graph: {what}"));
    verify(out).map_err(|e| bug(e.to_string()))?;
    if g.outputs.len() != out.outputs.len() {
        return Err(bug("the number of outputs changed".into()));
    }
    for (i, n) in out.nodes.iter().enumerate() {
        if !n.op.is_primitive() {
            return Err(bug(format!("%{i} ({}) is not primitive", n.op.name())));
        }
        let operands = match n.op {
            Op::Binary(_) => &n.inputs[..],
            Op::Where => &n.inputs[1..],
            _ => &[],
        };
        if operands
            .windows(2)
            .any(|w| out.ty(w[0]).dtype != out.ty(w[1]).dtype)
        {
            return Err(bug(format!("%{i} ({}) mixes dtypes", n.op.name())));
        }
    }
    if out.param_types() != g.param_types() {
        return Err(bug("the parameter types changed".into()));
    }
    for (i, (&a, &b)) in g.outputs.iter().zip(&out.outputs).enumerate() {
        if g.ty(a) != out.ty(b) || g.output_name(i) != out.output_name(i) {
            return Err(bug(format!(
                "output {i} `{}`: {} became `{}`: {}",
                g.output_name(i),
                g.ty(a),
                out.output_name(i),
                out.ty(b)
            )));
        }
    }
    Ok(())
}

/// The graph under construction, with the value map from the source graph.
struct Decomposer {
    /// The primitive graph being built.
    out: Graph,
    /// `map[i]` is the value in `out` that holds source value `%i`.
    map: Vec<ValueId>,
    /// Casts already emitted, so a value promoted for several uses is cast once.
    casts: HashMap<(ValueId, DType), ValueId>,
}

impl Decomposer {
    fn new(name: &str) -> Decomposer {
        Decomposer {
            out: Graph::new(name),
            map: Vec::new(),
            casts: HashMap::new(),
        }
    }

    /// Emits the primitives for source node `i` and returns the value holding its result.
    fn decompose_node(&mut self, src: &Graph, i: usize) -> Result<ValueId> {
        let node = &src.nodes[i];
        let ins: Vec<ValueId> = node.inputs.iter().map(|x| self.map[x.index()]).collect();
        match &node.op {
            Op::Param { .. } => {
                let name = node
                    .name
                    .clone()
                    .ok_or_else(|| Error::internal("a parameter has no name"))?;
                self.out
                    .add_param(name, node.ty.clone())
                    .map_err(Error::internal)
            }
            Op::Literal { value } => self
                .out
                .add_literal(*value, node.ty.dtype)
                .map_err(Error::internal),
            // The tensor is shared, not copied.
            Op::Constant(c) => self
                .out
                .add_constant(c.clone(), None)
                .map_err(Error::internal),
            Op::Unary(u) => self.unary(*u, ins[0]),
            Op::Binary(b) => self.binary(*b, ins[0], ins[1]),
            Op::Where => {
                let common = promote(self.dtype(ins[1]), self.dtype(ins[2]));
                let a = self.cast(ins[1], common)?;
                let b = self.cast(ins[2], common)?;
                self.emit(Op::Where, &[ins[0], a, b])
            }
            Op::Reduce {
                op: ReduceOp::Mean,
                axes,
                keepdim,
            } => {
                let axes = axes.clone();
                self.in_f32(&ins, |l, v| l.mean(v[0], axes, *keepdim))
            }
            Op::Softmax { axis } => self.softmax(ins[0], *axis, false, &node.ty),
            Op::LogSoftmax { axis } => self.softmax(ins[0], *axis, true, &node.ty),
            Op::LayerNorm { eps } => self.norm(&ins, *eps, true, &node.ty),
            Op::RmsNorm { eps } => self.norm(&ins, *eps, false, &node.ty),
            Op::Transpose { dim0, dim1 } => {
                let rank = self.out.ty(ins[0]).rank();
                let mut dims: Vec<i64> = (0..rank as i64).collect();
                if rank > 0 {
                    let a = normalize_axis(*dim0, rank).map_err(Error::internal)?;
                    let b = normalize_axis(*dim1, rank).map_err(Error::internal)?;
                    dims.swap(a, b);
                }
                self.emit(Op::Permute { dims }, &ins)
            }
            // Both only insert or drop extent-1 axes, so the result shape is the whole story.
            Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
                let shape = node.ty.shape.iter().map(|&d| d as i64).collect();
                self.emit(Op::Reshape { shape }, &ins)
            }
            op @ Op::Conv { .. } => self.conv(op, ins[0], ins[1], &node.ty),
            op @ Op::ConvTranspose { .. } => self.conv_transpose(op, ins[0], ins[1], &node.ty),
            op @ (Op::MaxPool { .. } | Op::AvgPool { .. }) => self.pool(op, ins[0], &node.ty),
            Op::BatchNorm { eps } => self.batch_norm(&ins, *eps),
            Op::Clip { min, max } => self.clip(ins[0], *min, *max),
            op @ Op::EmbeddingBag { .. } => {
                let attrs = bag::BagAttrs::of(op).ok_or_else(|| Error::internal("not a bag"))?;
                bag::embedding_bag(&mut self.out, attrs, &ins).map_err(Error::internal)
            }
            Op::IndexReduce {
                axis,
                reduce: IndexReduceOp::Mean,
                include_self,
            } => {
                bag::index_mean(&mut self.out, *axis, *include_self, &ins).map_err(Error::internal)
            }
            // Primitive ops are copied. Listed one by one so that a new op added to `Op`
            // has to be classified here.
            op @ (Op::Cast { .. }
            | Op::Reduce { .. }
            | Op::ArgReduce { .. }
            | Op::MatMul
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Expand { .. }
            | Op::Slice { .. }
            | Op::Concat { .. }
            | Op::Pad { .. }
            | Op::IndexSelect { .. }
            | Op::Gather { .. }
            | Op::IndexAdd { .. }
            | Op::IndexReduce { .. }
            | Op::Full { .. }
            | Op::Arange { .. }) => self.emit(op.clone(), &ins),
        }
    }

    /// Gives `name` to the value `v` that decomposing a named node produced. A rewrite
    /// that is an identity (a max pool of one tap at stride 1 without padding) returns an
    /// existing value, which has a name of its own or belongs to an earlier node; the name
    /// then goes on a reshape of that value to its own shape, a new node the optimizer
    /// removes as it does any no-op reshape.
    fn bind_name(&mut self, v: ValueId, start: usize, name: &str) -> Result<ValueId> {
        let v = if v.index() < start || self.out.node(v).name.is_some() {
            let shape = self.out.ty(v).shape.iter().map(|&d| d as i64).collect();
            self.emit(Op::Reshape { shape }, &[v])?
        } else {
            v
        };
        self.out
            .set_name(v, name)
            .map_err(|e| Error::Internal(format!("decompose: naming {v}: {e}")))?;
        Ok(v)
    }

    fn dtype(&self, v: ValueId) -> DType {
        self.out.ty(v).dtype
    }

    /// Appends one primitive node.
    fn emit(&mut self, op: Op, inputs: &[ValueId]) -> Result<ValueId> {
        self.out.add(op, inputs, None).map_err(Error::internal)
    }

    /// A literal of `dtype` holding `v` (an integer, or a float for float dtypes).
    fn literal(&mut self, v: f64, dtype: DType) -> Result<ValueId> {
        let value = if dtype.is_float() {
            Scalar::Float(v)
        } else if dtype == DType::Bool {
            Scalar::Bool(v != 0.0)
        } else {
            Scalar::Int(v as i64)
        };
        self.out.add_literal(value, dtype).map_err(Error::internal)
    }

    /// `v` converted to `to`: `v` itself when it already has that dtype, a folded literal
    /// when `v` is a literal, otherwise a (shared) `cast` node.
    fn cast(&mut self, v: ValueId, to: DType) -> Result<ValueId> {
        let from = self.dtype(v);
        if from == to {
            return Ok(v);
        }
        if let Some(&c) = self.casts.get(&(v, to)) {
            return Ok(c);
        }
        let c = match self.out.node(v).op {
            Op::Literal { value } => self
                .out
                .add_literal(cast_scalar(value, from, to), to)
                .map_err(Error::internal)?,
            _ => self.emit(Op::Cast { to }, &[v])?,
        };
        self.casts.insert((v, to), c);
        Ok(c)
    }

    /// A binary op whose operands are first cast to one dtype: the promoted one, or
    /// `f32` for the true division of integers.
    fn binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId> {
        let mut common = promote(self.dtype(a), self.dtype(b));
        if op == BinaryOp::Div && !common.is_float() {
            common = DType::F32;
        }
        let a = self.cast(a, common)?;
        let b = self.cast(b, common)?;
        self.emit(Op::Binary(op), &[a, b])
    }

    /// `op(x, c)` for a constant `c` of `x`'s dtype.
    fn binary_const(&mut self, op: BinaryOp, x: ValueId, c: f64) -> Result<ValueId> {
        let c = self.literal(c, self.dtype(x))?;
        self.binary(op, x, c)
    }

    fn reduce(
        &mut self,
        op: ReduceOp,
        x: ValueId,
        axes: Option<Vec<i64>>,
        keepdim: bool,
    ) -> Result<ValueId> {
        self.emit(Op::Reduce { op, axes, keepdim }, &[x])
    }

    fn unary(&mut self, u: UnaryOp, x: ValueId) -> Result<ValueId> {
        // PyTorch: `exp(int_tensor)` is f32; making the cast explicit keeps every
        // remaining transcendental op float-in, float-out.
        let x = if u.is_transcendental() && !self.dtype(x).is_float() {
            self.cast(x, DType::F32)?
        } else {
            x
        };
        match u {
            UnaryOp::Relu => self.binary_const(BinaryOp::Maximum, x, 0.0),
            // A primitive computed in f32 (the backends have vector forms of it).
            UnaryOp::Sigmoid => self.in_f32(&[x], |l, v| l.sigmoid(v[0])),
            UnaryOp::Silu => self.in_f32(&[x], |l, v| {
                let s = l.sigmoid(v[0])?;
                l.binary(BinaryOp::Mul, v[0], s)
            }),
            UnaryOp::Gelu => self.in_f32(&[x], |l, v| {
                // 0.5 * x * erfc(-x / sqrt 2): erfc does not cancel for x << 0, where
                // 1 + erf(x / sqrt 2) loses every digit (GELU of x < -3 through 1 + erf was
                // a few ulps of 1, 4% off at -5 and -0 below -5.9: fuzzer findings).
                // In f32 an erfc below 2^-126 (x < -13) counts as 0, as in softmax: a
                // multiplication of a subnormal costs x86 a ~100-cycle assist, and the
                // product would be below 2^-122 anyway.
                let x = v[0];
                let z = l.binary_const(BinaryOp::Mul, x, -FRAC_1_SQRT_2)?;
                let e = l.emit(Op::Unary(UnaryOp::Erfc), &[z])?;
                let e = l.zero_if_subnormal(e)?;
                let half = l.binary_const(BinaryOp::Mul, x, 0.5)?;
                l.binary(BinaryOp::Mul, half, e)
            }),
            UnaryOp::GeluTanh => self.in_f32(&[x], |l, v| {
                let x = v[0];
                let x2 = l.binary(BinaryOp::Mul, x, x)?;
                let x3 = l.binary(BinaryOp::Mul, x2, x)?;
                let cubic = l.binary_const(BinaryOp::Mul, x3, GELU_TANH_CUBIC)?;
                let inner = l.binary(BinaryOp::Add, x, cubic)?;
                let scaled = l.binary_const(BinaryOp::Mul, inner, SQRT_2_OVER_PI)?;
                // (x * 0.5) * (1 + tanh(u)) = x * sigmoid(2u): no cancellation of
                // 1 + tanh(u) for u << 0.
                let twice = l.binary_const(BinaryOp::Mul, scaled, 2.0)?;
                let s = l.sigmoid(twice)?;
                l.binary(BinaryOp::Mul, x, s)
            }),
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Exp
            | UnaryOp::Log
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Reciprocal
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Tanh
            | UnaryOp::Erf
            | UnaryOp::Erfc
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Sign
            | UnaryOp::Not
            | UnaryOp::BitwiseNot => self.emit(Op::Unary(u), &[x]),
        }
    }

    /// `sigmoid(x)` of a float `x`: the primitive, which every backend computes as
    /// `where(x >= 0, 1, e) / (1 + e)` with `e = exp(-|x|)` (nothing overflows).
    fn sigmoid(&mut self, x: ValueId) -> Result<ValueId> {
        self.emit(Op::Unary(UnaryOp::Sigmoid), &[x])
    }

    /// `where(x < 2^-126, 0, x)` for an f32 `x` (the non-negative results of `exp` and
    /// `erfc`; NaN is kept, `lt` being false), `x` itself in other dtypes: what softmax and
    /// gelu multiply by, so that no multiplication meets a subnormal (an x86 assist).
    fn zero_if_subnormal(&mut self, x: ValueId) -> Result<ValueId> {
        if self.dtype(x) != DType::F32 {
            return Ok(x);
        }
        let tiny = self.binary_const(BinaryOp::Lt, x, f32::MIN_POSITIVE as f64)?;
        let zero = self.literal(0.0, DType::F32)?;
        self.emit(Op::Where, &[tiny, zero, x])
    }

    /// `sum(x, axes, keepdim) / count` for a float `x`.
    fn mean(&mut self, x: ValueId, axes: Option<Vec<i64>>, keepdim: bool) -> Result<ValueId> {
        let ty = self.out.ty(x).clone();
        let reduced = reduced_axes("mean", axes.as_deref(), ty.rank()).map_err(Error::internal)?;
        let count: usize = reduced.iter().map(|&a| ty.shape[a]).product();
        let sum = self.reduce(ReduceOp::Sum, x, axes, keepdim)?;
        self.binary_const(BinaryOp::Div, sum, count as f64)
    }

    /// `softmax` (or `log_softmax` when `log`) of `x` along `axis`.
    fn softmax(&mut self, x: ValueId, axis: i64, log: bool, ty: &TensorType) -> Result<ValueId> {
        if ty.numel() == 0 {
            return self.empty(ty);
        }
        self.in_f32(&[x], |l, v| {
            let x = v[0];
            let axes = Some(vec![axis]);
            let max = l.reduce(ReduceOp::Max, x, axes.clone(), true)?;
            let shifted = l.binary(BinaryOp::Sub, x, max)?;
            let e = l.emit(Op::Unary(UnaryOp::Exp), &[shifted])?;
            // The sum includes exp(0) = 1 from the maximum, so it is >= 1 (or NaN).
            let sum = l.reduce(ReduceOp::Sum, e, axes, true)?;
            if log {
                let log_sum = l.emit(Op::Unary(UnaryOp::Log), &[sum])?;
                l.binary(BinaryOp::Sub, shifted, log_sum)
            } else if l.dtype(e) == DType::F32 {
                // e * (1 / sum), as PyTorch's CPU kernel computes it: one division per row
                // instead of one per element. A subnormal e counts as 0 (its probability is
                // below 2^-126 anyway): on x86 each multiplication or division of a
                // subnormal takes a ~100-cycle assist, which made a softmax of widely spread
                // scores 6x slower. NaN is kept (`lt` is false).
                let kept = l.zero_if_subnormal(e)?;
                let r = l.emit(Op::Unary(UnaryOp::Reciprocal), &[sum])?;
                l.binary(BinaryOp::Mul, kept, r)
            } else {
                l.binary(BinaryOp::Div, e, sum)
            }
        })
    }

    /// `layer_norm(x, w, b, eps)` (when `centered`) or `rms_norm(x, w, eps)` over the
    /// last axis; `ins` are the decomposed operands.
    fn norm(
        &mut self,
        ins: &[ValueId],
        eps: f64,
        centered: bool,
        ty: &TensorType,
    ) -> Result<ValueId> {
        if ty.numel() == 0 {
            return self.empty(ty);
        }
        self.in_f32(ins, |l, v| {
            let last = Some(vec![-1]);
            let x = if centered {
                // d = x/n - x[..., :1]/n; c = x - (x[..., :1] + sum(d)): the mean is
                // found about the row's first element, so a constant row's is exactly
                // that element and its c exactly 0 (see the module docs).
                let n = l.out.ty(v[0]).shape.last().copied().unwrap_or(1);
                let pivot = l.emit(
                    Op::Slice {
                        axis: -1,
                        start: 0,
                        end: 1,
                        step: 1,
                    },
                    &[v[0]],
                )?;
                let scale = 1.0 / n as f64;
                let xs = l.binary_const(BinaryOp::Mul, v[0], scale)?;
                let ps = l.binary_const(BinaryOp::Mul, pivot, scale)?;
                let d = l.binary(BinaryOp::Sub, xs, ps)?;
                let shift = l.reduce(ReduceOp::Sum, d, last.clone(), true)?;
                let mean = l.binary(BinaryOp::Add, pivot, shift)?;
                l.binary(BinaryOp::Sub, v[0], mean)?
            } else {
                v[0]
            };
            let square = l.binary(BinaryOp::Mul, x, x)?;
            // For layer_norm this is the biased variance, as PyTorch uses.
            let mean_square = l.mean(square, last, true)?;
            let shifted = l.binary_const(BinaryOp::Add, mean_square, eps)?;
            let inv = l.emit(Op::Unary(UnaryOp::Rsqrt), &[shifted])?;
            let normed = l.binary(BinaryOp::Mul, x, inv)?;
            let scaled = l.binary(BinaryOp::Mul, normed, v[1])?;
            if centered {
                l.binary(BinaryOp::Add, scaled, v[2])
            } else {
                Ok(scaled)
            }
        })
    }

    /// `full(shape, 0)` of `ty`: the value of an op whose result has no elements.
    fn empty(&mut self, ty: &TensorType) -> Result<ValueId> {
        let op = Op::Full {
            shape: ty.shape.clone(),
            value: 0.0,
            dtype: ty.dtype,
        };
        self.emit(op, &[])
    }

    /// Runs `body` on `ins` in `f32` when `ins[0]` is `f16` or `bf16` (casting every
    /// operand up and the result back down), else on `ins` unchanged.
    fn in_f32(
        &mut self,
        ins: &[ValueId],
        body: impl FnOnce(&mut Decomposer, &[ValueId]) -> Result<ValueId>,
    ) -> Result<ValueId> {
        let dt = self.dtype(ins[0]);
        if !matches!(dt, DType::F16 | DType::Bf16) {
            return body(self, ins);
        }
        let up = ins
            .iter()
            .map(|&v| self.cast(v, DType::F32))
            .collect::<Result<Vec<_>>>()?;
        let y = body(self, &up)?;
        self.cast(y, dt)
    }
}

/// The literal that `cast(literal(value): from, to)` evaluates to: the value as stored
/// in `from` (so an `f16` literal keeps its `f16` rounding), converted as `cast` converts.
fn cast_scalar(value: Scalar, from: DType, to: DType) -> Scalar {
    let stored = match value {
        Scalar::Float(v) => Tensor::from_f64(&TensorType::scalar(from), &[v]),
        Scalar::Int(v) => Tensor::from_i64(&TensorType::scalar(from), &[v]),
        Scalar::Bool(b) => Tensor::from_i64(&TensorType::scalar(from), &[b as i64]),
    };
    let target = TensorType::scalar(to);
    if from.is_float() {
        // Floats to integers truncate and saturate; anything to bool is `!= 0`.
        let converted = Tensor::from_f64(&target, &stored.to_f64());
        return scalar_of(&converted);
    }
    let v = stored.to_i64()[0];
    if to.is_float() {
        // An integer literal of a float dtype rounds once, straight from the integer
        // (going through f64 first could round twice beyond 2^53); one too large for the
        // dtype is its infinity, as the cast computes it (a literal must fit its dtype).
        match Scalar::Int(v) {
            s if s.fits(to) => s,
            _ => Scalar::Float(if v < 0 {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }),
        }
    } else {
        scalar_of(&Tensor::from_i64(&target, &[v]))
    }
}

/// The single element of a rank-0 tensor as a literal of the tensor's dtype.
fn scalar_of(t: &Tensor) -> Scalar {
    match t.ty.dtype {
        DType::Bool => Scalar::Bool(t.to_i64()[0] != 0),
        d if d.is_float() => Scalar::Float(t.to_f64()[0]),
        _ => Scalar::Int(t.to_i64()[0]),
    }
}
