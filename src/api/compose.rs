//! Conveniences that models need, named and defined as PyTorch defines them, each built from
//! the IR's ops (`ops.rs`): nothing here adds an op, so decompose, the optimizer and fusion see
//! the pieces (a `tril` is an `arange` comparison and a `where`, which fuse into their consumer).
//!
//! Like the ops, a convenience never fails at the call: a bad argument (a chunk count of 0, a
//! split that does not cover the axis) records a build error naming the convenience and poisons
//! the result.

use super::builder::{detached_error, Graph, Operand, Var};
use super::ops::concat;
use ferrite_ir::op::Scalar;
use ferrite_ir::types::normalize_axis;
use ferrite_ir::{DType, TensorType};

impl Var {
    /// The type, or a poisoned handle standing for the graph's first error.
    fn typed(&self) -> Result<TensorType, Var> {
        self.ty().map_err(|_| self.clone())
    }

    /// Records a build error of the convenience `op` on this operand.
    #[track_caller]
    fn reject(&self, op: &str, message: String) -> Var {
        let operands = self.ty().into_iter().collect();
        self.graph().fail(op, operands, message)
    }

    /// The axis normalized for this tensor, or a poisoned handle.
    #[track_caller]
    fn axis_of(&self, op: &str, axis: i64, rank: usize) -> Result<usize, Var> {
        // A `match`, not `map_err`: a closure would hide the caller's location.
        match normalize_axis(axis, rank) {
            Ok(a) => Ok(a),
            Err(e) => Err(self.reject(op, e.to_string())),
        }
    }

    /// Pieces of `size` indices along `axis` (the last one smaller when `size` does not
    /// divide the extent), as PyTorch's `split(split_size, dim)`. An empty axis gives one
    /// empty piece.
    #[track_caller]
    pub fn split(&self, size: usize, axis: i64) -> Vec<Var> {
        let ty = match self.typed() {
            Ok(ty) => ty,
            Err(p) => return vec![p],
        };
        let a = match self.axis_of("split", axis, ty.rank()) {
            Ok(a) => a,
            Err(p) => return vec![p],
        };
        if size == 0 {
            return vec![self.reject("split", "the split size must be at least 1".into())];
        }
        let n = ty.shape[a];
        let sizes: Vec<usize> = if n == 0 {
            vec![0]
        } else {
            (0..n).step_by(size).map(|s| size.min(n - s)).collect()
        };
        self.split_sizes(&sizes, axis)
    }

    /// Pieces of the given sizes along `axis`, which must add up to its extent (PyTorch's
    /// `split` with a list of sizes).
    #[track_caller]
    pub fn split_sizes(&self, sizes: &[usize], axis: i64) -> Vec<Var> {
        let ty = match self.typed() {
            Ok(ty) => ty,
            Err(p) => return vec![p],
        };
        let a = match self.axis_of("split", axis, ty.rank()) {
            Ok(a) => a,
            Err(p) => return vec![p],
        };
        let total = sizes.iter().try_fold(0usize, |s, &n| s.checked_add(n));
        if total != Some(ty.shape[a]) {
            return vec![self.reject(
                "split",
                format!(
                    "the sizes {sizes:?} do not add up to the extent {} of axis {axis}",
                    ty.shape[a]
                ),
            )];
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&n| {
                let piece = self.slice(a as i64, start..start + n);
                start += n;
                piece
            })
            .collect()
    }

    /// At most `chunks` pieces of equal size along `axis` (the last one smaller), as
    /// PyTorch's `chunk`: the size is `ceil(extent / chunks)`, so fewer pieces may come back.
    #[track_caller]
    pub fn chunk(&self, chunks: usize, axis: i64) -> Vec<Var> {
        let ty = match self.typed() {
            Ok(ty) => ty,
            Err(p) => return vec![p],
        };
        let a = match self.axis_of("chunk", axis, ty.rank()) {
            Ok(a) => a,
            Err(p) => return vec![p],
        };
        if chunks == 0 {
            return vec![self.reject("chunk", "the number of chunks must be at least 1".into())];
        }
        let n = ty.shape[a];
        self.split(n.div_ceil(chunks).max(1), a as i64)
    }

    /// Axes `start_dim..=end_dim` merged into one (PyTorch's `flatten`; a rank-0 tensor
    /// becomes rank 1).
    #[track_caller]
    pub fn flatten(&self, start_dim: i64, end_dim: i64) -> Var {
        let ty = match self.typed() {
            Ok(ty) => ty,
            Err(p) => return p,
        };
        if ty.rank() == 0 {
            return self.reshape([1]);
        }
        let (s, e) = match (
            self.axis_of("flatten", start_dim, ty.rank()),
            self.axis_of("flatten", end_dim, ty.rank()),
        ) {
            (Ok(s), Ok(e)) => (s, e),
            (Err(p), _) | (_, Err(p)) => return p,
        };
        if s > e {
            return self.reject(
                "flatten",
                format!("start_dim {start_dim} comes after end_dim {end_dim}"),
            );
        }
        let mut shape: Vec<usize> = ty.shape[..s].to_vec();
        shape.push(ty.shape[s..=e].iter().product());
        shape.extend_from_slice(&ty.shape[e + 1..]);
        self.reshape(&shape)
    }

    /// The lower triangle of the last two axes: entries `(i, j)` with `j - i <= diagonal`
    /// kept, the rest 0 (PyTorch's `tril`).
    #[track_caller]
    pub fn tril(&self, diagonal: i64) -> Var {
        self.triangle("tril", diagonal, true)
    }

    /// The upper triangle of the last two axes: entries `(i, j)` with `j - i >= diagonal`
    /// kept, the rest 0 (PyTorch's `triu`).
    #[track_caller]
    pub fn triu(&self, diagonal: i64) -> Var {
        self.triangle("triu", diagonal, false)
    }

    #[track_caller]
    fn triangle(&self, op: &str, diagonal: i64, lower: bool) -> Var {
        let ty = match self.typed() {
            Ok(ty) => ty,
            Err(p) => return p,
        };
        if ty.rank() < 2 {
            return self.reject(op, format!("needs rank >= 2, not {}", ty.rank()));
        }
        let (m, n) = (ty.shape[ty.rank() - 2], ty.shape[ty.rank() - 1]);
        let keep = triangle_mask(&self.graph(), m, n, diagonal, lower);
        keep.where_(self, zero_of(ty.dtype))
    }

    /// `value` where the `bool` `mask` (broadcasting against this tensor) holds, this
    /// tensor elsewhere (PyTorch's `masked_fill`; the value takes this tensor's dtype).
    #[track_caller]
    pub fn masked_fill(&self, mask: &Var, value: impl Into<Operand>) -> Var {
        mask.where_(value, self)
    }

    /// Limits the values to `min..=max`, either bound optional (PyTorch's `clamp`:
    /// `minimum(maximum(x, min), max)`, so NaN stays NaN and `min > max` gives `max`
    /// everywhere). On an integer tensor a whole bound is an integer literal, so the result
    /// stays integer; a fractional one promotes to `f32`, as in PyTorch. With neither bound
    /// it is a build error, as in PyTorch.
    #[track_caller]
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Var {
        let int = !self.dtype().is_float() && self.dtype() != DType::Bool;
        let bound = |v: f64| {
            if int && v.fract() == 0.0 && v.abs() < 9.0e15 {
                Scalar::Int(v as i64)
            } else {
                Scalar::Float(v)
            }
        };
        match (min, max) {
            (None, None) => self.reject("clamp", "needs at least one of min and max".into()),
            (Some(lo), None) => self.maximum(bound(lo)),
            (None, Some(hi)) => self.minimum(bound(hi)),
            (Some(lo), Some(hi)) => self.maximum(bound(lo)).minimum(bound(hi)),
        }
    }

    /// PyTorch's `adaptive_avg_pool2d(x, output_size)` over the last two axes (any
    /// number of spatial axes, one entry of `output` each): output cell `i` of an axis
    /// of extent `n` averages `floor(i * n / out)..ceil((i + 1) * n / out)`: a `concat`
    /// of `mean`s of slices, axis by axis (so a cell's mean rounds once per axis).
    #[track_caller]
    pub fn adaptive_avg_pool2d(&self, output: impl super::ops::Dims) -> Var {
        let ty = match self.typed() {
            Ok(ty) => ty,
            Err(p) => return p,
        };
        let out = output.to_dims();
        let s = out.len();
        if ty.rank() < s + 1 || s == 0 || out.iter().any(|&o| o < 1) {
            return self.reject(
                "adaptive_avg_pool2d",
                format!("output size {out:?} does not fit the input {ty}"),
            );
        }
        let first = ty.rank() - s;
        let mut y = self.clone();
        for (i, &o) in out.iter().enumerate() {
            let axis = first + i;
            let (n, o) = (ty.shape[axis], o as usize);
            if n == o {
                continue;
            }
            let cells: Vec<Var> = (0..o)
                .map(|c| {
                    let (start, end) = (c * n / o, ((c + 1) * n).div_ceil(o));
                    y.slice(axis as i64, start as i64..end as i64)
                        .mean([axis as i64], true)
                })
                .collect();
            let refs: Vec<&Var> = cells.iter().collect();
            y = concat(&refs, axis as i64);
        }
        y
    }

    /// The variance over `axes`, `sum((x - mean)^2) / max(0, N - correction)` where `N` is
    /// the number of elements reduced (PyTorch's `var`: `correction=1` is the unbiased
    /// estimate, 0 the population variance; `N <= correction` divides by 0). Floats only.
    #[track_caller]
    pub fn var(&self, axes: impl super::ops::Dims, correction: i64, keepdim: bool) -> Var {
        let ty = match self.typed() {
            Ok(ty) => ty,
            Err(p) => return p,
        };
        if !ty.dtype.is_float() {
            return self.reject("var", format!("needs a float tensor, not {}", ty.dtype));
        }
        let axes = axes.to_dims();
        let norm = match ferrite_ir::infer::unique_axes("var", &axes, ty.rank()) {
            Ok(a) => a,
            Err(e) => return self.reject("var", e.to_string()),
        };
        let count: usize = norm.iter().map(|&a| ty.shape[a]).product();
        let d = self - self.mean(&axes, true);
        let divisor = (count as i64).saturating_sub(correction).max(0);
        (&d * &d).sum(&axes, keepdim) / divisor as f64
    }

    /// The variance of all elements (rank 0), as [`Var::var`] over every axis.
    #[track_caller]
    pub fn var_all(&self, correction: i64) -> Var {
        let axes: Vec<i64> = (0..self.rank() as i64).collect();
        self.var(axes, correction, false)
    }

    /// The running sum along `axis` (PyTorch's `cumsum`; an integer or bool tensor sums
    /// in `i64`, as PyTorch does): element `i` is the sum of elements `0..=i`.
    #[track_caller]
    pub fn cumsum(&self, axis: i64) -> Var {
        self.cumsum_with("cumsum", axis, false, false)
    }

    /// [`Var::cumsum`] with ONNX `CumSum`'s options: `exclusive` leaves element `i` out of
    /// its own sum (the first sum is 0), `reverse` sums from the end (`i..` rather than
    /// `..=i`).
    ///
    /// Built as a sum over a triangle: `sum_j where(j <= i, x[j], 0)`, which adds the
    /// same terms in the same order as a sequential scan (plus zeros), so decompose,
    /// the optimizer and fusion see a `where` and a `sum` that fuse into one kernel. The
    /// work is quadratic in the axis's extent.
    #[track_caller]
    pub fn cumsum_ext(&self, axis: i64, exclusive: bool, reverse: bool) -> Var {
        self.cumsum_with("cumsum", axis, exclusive, reverse)
    }

    #[track_caller]
    fn cumsum_with(&self, op: &str, axis: i64, exclusive: bool, reverse: bool) -> Var {
        let ty = match self.typed() {
            Ok(ty) => ty,
            Err(p) => return p,
        };
        if ty.rank() == 0 {
            return self.reject(op, "needs rank >= 1".into());
        }
        let a = match self.axis_of(op, axis, ty.rank()) {
            Ok(a) => a,
            Err(p) => return p,
        };
        let n = ty.shape[a];
        // keep[i, j]: whether x[j] is in sum i.
        let keep = match (exclusive, reverse) {
            (false, false) => triangle_mask(&self.graph(), n, n, 0, true),
            (true, false) => triangle_mask(&self.graph(), n, n, -1, true),
            (false, true) => triangle_mask(&self.graph(), n, n, 0, false),
            (true, true) => triangle_mask(&self.graph(), n, n, 1, false),
        };
        let mut shape = vec![n as i64, n as i64];
        shape.extend(std::iter::repeat_n(1, ty.rank() - a - 1));
        let keep = keep.reshape(shape);
        let x = if ty.dtype.is_float() {
            self.clone()
        } else {
            self.cast(DType::I64)
        };
        let terms = keep.where_(x.unsqueeze(a as i64), zero_of(x.dtype()));
        terms.sum([a as i64 + 1], false)
    }

    /// `self @ weight^T + bias`, with `weight` of shape `[out, in]` and an optional `bias`
    /// of shape `[out]` (PyTorch's `nn.functional.linear`).
    #[track_caller]
    pub fn linear(&self, weight: &Var, bias: Option<&Var>) -> Var {
        let y = self.matmul(&weight.transpose(-2, -1));
        match bias {
            Some(b) => y + b,
            None => y,
        }
    }
}

/// Joins tensors of one shape along a new axis `axis` of the result (PyTorch's `stack`:
/// `axis` is in `-(rank + 1)..=rank`).
#[track_caller]
pub fn stack(tensors: &[&Var], axis: i64) -> Var {
    let Some(first) = tensors.first() else {
        return detached_error("stack", "needs at least one operand".into());
    };
    let rank = first.rank() as i64;
    if !(-(rank + 1)..=rank).contains(&axis) {
        return first.reject(
            "stack",
            format!(
                "axis {axis} is out of range for a result of rank {}",
                rank + 1
            ),
        );
    }
    let a = if axis < 0 { axis + rank + 1 } else { axis };
    let parts: Vec<Var> = tensors.iter().map(|t| t.unsqueeze(a)).collect();
    let refs: Vec<&Var> = parts.iter().collect();
    concat(&refs, a)
}

/// Attention as PyTorch's `nn.functional.scaled_dot_product_attention` computes it, decomposed
/// so that fusion sees it: `softmax(q @ k^T * scale + mask) @ v` over the last two axes, with
/// `q: [.., L, E]`, `k: [.., S, E]`, `v: [.., S, Ev]` (batch axes broadcast).
///
/// - `mask`: a `bool` mask (`true` attends; the others get `-inf`) or a float mask added to the
///   scores, broadcasting against `[.., L, S]`;
/// - `causal`: position `i` attends to positions `j <= i` only (the top-left aligned lower
///   triangle, as PyTorch's `is_causal`); not together with `mask`, as in PyTorch;
/// - `scale`: defaults to `1 / sqrt(E)`.
///
/// A row that attends to nothing is NaN, as in PyTorch.
#[track_caller]
pub fn scaled_dot_product_attention(
    q: &Var,
    k: &Var,
    v: &Var,
    mask: Option<&Var>,
    causal: bool,
    scale: Option<f64>,
) -> Var {
    const OP: &str = "scaled_dot_product_attention";
    let (qt, kt) = match (q.typed(), k.typed()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(p), _) | (_, Err(p)) => return p,
    };
    if qt.rank() < 2 || kt.rank() < 2 {
        return q.reject(OP, "q and k need rank >= 2".into());
    }
    if causal && mask.is_some() {
        return q.reject(OP, "takes a mask or causal, not both".into());
    }
    let e = qt.shape[qt.rank() - 1];
    let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
    let mut scores = q.matmul(&k.transpose(-2, -1)) * scale;
    let (l, s) = (qt.shape[qt.rank() - 2], kt.shape[kt.rank() - 2]);
    if causal {
        let keep = triangle_mask(&q.graph(), l, s, 0, true);
        scores = keep.where_(&scores, f64::NEG_INFINITY);
    }
    if let Some(m) = mask {
        scores = if m.dtype() == DType::Bool {
            m.where_(&scores, f64::NEG_INFINITY)
        } else {
            scores + m
        };
    }
    scores.softmax(-1).matmul(v)
}

/// `[m, n]` bool: `j - i <= diagonal` (lower) or `j - i >= diagonal` (upper), from two
/// `arange`s, which lower to index arithmetic.
#[track_caller]
fn triangle_mask(g: &Graph, m: usize, n: usize, diagonal: i64, lower: bool) -> Var {
    let rows = g
        .arange(0.0, m as f64, 1.0, DType::I64)
        .reshape([m as i64, 1]);
    let cols = g
        .arange(0.0, n as f64, 1.0, DType::I64)
        .reshape([1, n as i64]);
    let offset = cols - rows;
    if lower {
        offset.le(diagonal)
    } else {
        offset.ge(diagonal)
    }
}

/// The zero of `dtype` as a literal that keeps it (`false` for `bool`).
fn zero_of(dtype: DType) -> Scalar {
    if dtype == DType::Bool {
        Scalar::Bool(false)
    } else if dtype.is_float() {
        Scalar::Float(0.0)
    } else {
        Scalar::Int(0)
    }
}
