//! Attention in row graphs: the one op family that mixes the rows of a sequence.
//!
//! A transformer is a row graph (see [`super::rows`]) except for its attention: the scores
//! `q @ k^T` of a sequence's `T` tokens mix its rows, and their shapes (`[B, H, T, T]`)
//! have `T` past the leading axes. [`SymGraph::attention_sites`] finds each attention
//! written out in the usual form, as Inductor's attention pattern matcher does before it
//! calls one scaled-dot-product kernel:
//!
//! ```text
//! q4 = permute(reshape(Q, [B, T, H, D]), [0, 2, 1, 3])      Q: f32[B, T, H*D], a row value
//! k4 = ... K ...   (or k^T directly: permute(reshape(K, ..), [0, 2, 3, 1]); with fewer
//!                   heads than q, repeated: reshape(expand(unsqueeze(k4, 2), ..), ..))
//! v4 = ... V ...
//! s  = matmul(q4, transpose(k4, -2, -1)) [* c | / c]
//! m  = where(j <= i, s, -inf)                               optional: the causal mask
//!      (or s + where(j <= i, 0, -inf), an additive one)
//! o  = matmul(softmax(m, axis=-1), v4)
//! O  = reshape(permute(o, [0, 2, 1, 3]), [B, T, H*Dv])       a row value again
//! ```
//!
//! The causal mask must be built from `arange(T)` compared along the two axes (`le(pos_j,
//! pos_i)`, `ge(pos_i, pos_j)` or `le(pos_j - pos_i, 0)` and its equivalents, the
//! positions reshaped to `[1, T]` and `[T, 1]`); any
//! other mask (a window, padding) is not matched, so the graph is specialized per binding
//! instead of computing something else. The values between `Q`, `K`, `V` and `O` must have
//! no other use. [`super::segments`] then cuts the graph at the sites into row graphs.

use super::{Expr, SymGraph};
use crate::op::{BinaryOp, Op};
use crate::types::normalize_axis;
use crate::{DType, ValueId};

/// One attention found in a symbolic graph (see the [module docs](self)).
#[derive(Clone, PartialEq, Debug)]
pub struct AttentionSite {
    /// The queries: a row value `L ++ [H*D]` (or `L ++ [H, D]`).
    pub q: ValueId,
    /// The keys, laid out as the queries.
    pub k: ValueId,
    /// The values: `L ++ [H*Dv]` (or `L ++ [H, Dv]`).
    pub v: ValueId,
    /// The result: `L ++ [H*Dv]` (or `L ++ [H, Dv]`), the same layout.
    pub out: ValueId,
    /// Heads of the queries and the result.
    pub heads: usize,
    /// Heads of the keys and values: `heads` for multi-head attention, fewer for
    /// grouped-query attention (query head `h` reads key/value head `h / (heads /
    /// kv_heads)`, as `repeat_kv` repeats them).
    pub kv_heads: usize,
    /// Elements per head of the queries and keys.
    pub head_dim: usize,
    /// Elements per head of the values and the result.
    pub value_dim: usize,
    /// Whether query `i` sees only keys `j <= i`.
    pub causal: bool,
    /// The factor applied to the scores `q . k`.
    pub scale: f64,
    /// The nodes the site computes, `out` included (none of them but `out` is used
    /// elsewhere).
    pub nodes: Vec<ValueId>,
}

impl SymGraph {
    /// The leading size symbols of the graph's row values: those leading the first
    /// parameter that has any symbol (`[B, T]` for `x: f32[B, T, 256]`).
    pub(crate) fn lead(&self) -> Vec<Expr> {
        self.params()
            .iter()
            .find(|(_, t)| t.shape.iter().any(|d| !d.is_const()))
            .map(|(_, t)| {
                t.shape
                    .iter()
                    .take_while(|d| d.as_symbol().is_some())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every attention written in the usual form (see the [module docs](self)) whose
    /// sequence axis is the last leading symbol, in graph order.
    pub fn attention_sites(&self) -> Vec<AttentionSite> {
        let lead = self.lead();
        if lead.is_empty() {
            return Vec::new();
        }
        // Each value's users; a returned value has a user outside every site.
        let mut users: Vec<Vec<Option<ValueId>>> = vec![Vec::new(); self.skeleton.nodes.len()];
        for (i, node) in self.skeleton.nodes.iter().enumerate() {
            for x in &node.inputs {
                users[x.index()].push(Some(ValueId(i as u32)));
            }
        }
        for o in &self.skeleton.outputs {
            users[o.index()].push(None);
        }
        let m = Matcher {
            g: self,
            lead: &lead,
            users: &users,
        };
        let sites: Vec<AttentionSite> = (0..self.skeleton.nodes.len())
            .filter_map(|i| m.site(ValueId(i as u32)))
            .collect();
        // A permuted result is a site, and so is its reshape: keep the larger one.
        sites
            .iter()
            .filter(|s| {
                !sites
                    .iter()
                    .any(|t| t.out != s.out && t.nodes.binary_search(&s.out).is_ok())
            })
            .cloned()
            .collect()
    }
}

struct Matcher<'a> {
    g: &'a SymGraph,
    lead: &'a [Expr],
    users: &'a [Vec<Option<ValueId>>],
}

/// What one projection (`q`, `k` or `v`) looks like inside the site.
struct Heads {
    /// The row value.
    rows: ValueId,
    /// Heads of the row value.
    heads: usize,
    dim: usize,
    /// Each head used by this many consecutive query heads (grouped-query attention's
    /// repeated keys and values); 1 otherwise.
    repeat: usize,
    /// The nodes from the row value to the per-head view.
    nodes: Vec<ValueId>,
}

impl Matcher<'_> {
    fn op(&self, v: ValueId) -> &Op {
        &self.g.skeleton.node(v).op
    }

    fn ins(&self, v: ValueId) -> &[ValueId] {
        &self.g.skeleton.node(v).inputs
    }

    fn shape(&self, v: ValueId) -> &[Expr] {
        &self.g.types[v.index()].shape
    }

    fn dtype(&self, v: ValueId) -> DType {
        self.g.skeleton.node(v).ty.dtype
    }

    /// Whether every use of each of `nodes` but `out` is one of `nodes`: the values
    /// between the row values and the result are used by the attention alone.
    fn closed(&self, nodes: &[ValueId], out: ValueId) -> bool {
        nodes.iter().filter(|&&v| v != out).all(|v| {
            self.users[v.index()]
                .iter()
                .all(|u| u.is_some_and(|u| nodes.binary_search(&u).is_ok()))
        })
    }

    fn k(&self) -> usize {
        self.lead.len()
    }

    /// `L[..k-1] ++ [H, T, X]` shapes: the per-head view of a row value, with the
    /// heads before the sequence.
    fn per_head(&self, shape: &[Expr]) -> Option<(usize, usize)> {
        let k = self.k();
        if shape.len() != k + 2
            || shape[..k - 1] != self.lead[..k - 1]
            || shape[k] != self.lead[k - 1]
        {
            return None;
        }
        Some((const_size(&shape[k - 1])?, const_size(&shape[k + 1])?))
    }

    /// `perm` swaps the sequence axis `k-1` with the heads axis `k` and keeps the rest.
    fn swaps_heads(&self, dims: &[i64], rank: usize) -> bool {
        let k = self.k();
        is_permutation(dims, rank, |j| match j {
            _ if j == k - 1 => k,
            _ if j == k => k - 1,
            _ => j,
        })
    }

    /// `L ++ [H, X]` from a row value `L ++ [H*X]` (a reshape) or itself.
    fn split_heads(&self, v: ValueId) -> Option<(ValueId, usize, usize, Vec<ValueId>)> {
        let k = self.k();
        let shape = self.shape(v);
        if shape.len() != k + 2 || shape[..k] != self.lead[..] {
            return None;
        }
        let (h, x) = (const_size(&shape[k])?, const_size(&shape[k + 1])?);
        if let Op::Reshape { .. } = self.op(v) {
            let src = self.ins(v)[0];
            let s = self.shape(src);
            if s.len() == k + 1 && s[..k] == self.lead[..] && const_size(&s[k]) == Some(h * x) {
                return Some((src, h, x, vec![v]));
            }
        }
        Some((v, h, x, vec![]))
    }

    /// `permute(split_heads(rows), swap)`: `[.., H, T, X]`.
    fn heads(&self, v: ValueId) -> Option<Heads> {
        if let Some(h) = self.repeated(v) {
            return Some(h);
        }
        let Op::Permute { dims } = self.op(v) else {
            return None;
        };
        let (h, x) = self.per_head(self.shape(v))?;
        if !self.swaps_heads(dims, self.k() + 2) {
            return None;
        }
        self.view(v).filter(|view| (view.heads, view.dim) == (h, x))
    }

    /// The per-head view `v` (a permute) of the `f32` row value its operand splits.
    fn view(&self, v: ValueId) -> Option<Heads> {
        let (rows, heads, dim, mut nodes) = self.split_heads(self.ins(v)[0])?;
        if self.dtype(rows) != DType::F32 {
            return None;
        }
        nodes.push(v);
        Some(Heads {
            rows,
            heads,
            dim,
            repeat: 1,
            nodes,
        })
    }

    /// Grouped-query attention's repeated heads, `[.., Hkv*r, T, X]` from a per-head view
    /// `[.., Hkv, T, X]`: `reshape(expand(unsqueeze(view, axis=k), [.., Hkv, r, T, X]))`,
    /// as `repeat_kv` writes it (each head used by `r` consecutive query heads).
    fn repeated(&self, v: ValueId) -> Option<Heads> {
        let k = self.k();
        let Op::Reshape { .. } = self.op(v) else {
            return None;
        };
        let e = self.ins(v)[0];
        let Op::Expand { .. } = self.op(e) else {
            return None;
        };
        let u = self.ins(e)[0];
        let Op::Unsqueeze { axis } = self.op(u) else {
            return None;
        };
        let (us, es) = (self.shape(u), self.shape(e));
        if normalize_axis(*axis, k + 3).ok() != Some(k)
            || us.len() != k + 3
            || es.len() != k + 3
            || us[k].as_const() != Some(1)
            || (0..k + 3).any(|j| j != k && us[j] != es[j])
        {
            return None;
        }
        let r = const_size(&es[k])?;
        let mut inner = self.heads(self.ins(u)[0])?;
        if inner.repeat != 1 {
            return None;
        }
        let (h, x) = self.per_head(self.shape(v))?;
        if h != inner.heads * r || x != inner.dim {
            return None;
        }
        inner.repeat = r;
        inner.nodes.extend([u, e, v]);
        Some(inner)
    }

    /// The keys transposed, `[.., H, D, T]`: `transpose(heads, -2, -1)`, or one permute
    /// of the split row value.
    fn keys_t(&self, v: ValueId) -> Option<Heads> {
        let k = self.k();
        let rank = k + 2;
        match self.op(v) {
            Op::Transpose { dim0, dim1 } => {
                let (a, b) = (
                    normalize_axis(*dim0, rank).ok()?,
                    normalize_axis(*dim1, rank).ok()?,
                );
                if (a.min(b), a.max(b)) != (rank - 2, rank - 1) {
                    return None;
                }
                let mut h = self.heads(self.ins(v)[0])?;
                h.nodes.push(v);
                Some(h)
            }
            Op::Permute { dims } => {
                // [L[..k-1], H, X, T] from [L, H, X]: axes (.., k, k+1, k-1).
                let keys_last = |j: usize| match j {
                    _ if j < k - 1 => j,
                    _ if j == k - 1 => k,
                    _ if j == k => k + 1,
                    _ => k - 1,
                };
                if !is_permutation(dims, rank, keys_last) {
                    return None;
                }
                self.view(v)
            }
            _ => None,
        }
    }

    /// A rank-0 (or all-ones) constant's value.
    fn scalar(&self, v: ValueId) -> Option<f64> {
        match self.op(v) {
            Op::Literal { value } => Some(value.as_f64()),
            Op::Full { value, .. } if self.shape(v).iter().all(|d| d.as_const() == Some(1)) => {
                Some(*value)
            }
            _ => None,
        }
    }

    /// `arange(0, T, 1)` reshaped so that its one non-unit axis is `from_end` axes
    /// from the end (0: the key axis `j`, 1: the query axis `i`).
    fn positions(&self, v: ValueId) -> Option<usize> {
        let t = self.lead.last()?;
        let (mut x, mut reshaped) = (v, false);
        while let Op::Reshape { .. } = self.op(x) {
            x = self.ins(x)[0];
            reshaped = true;
        }
        let Op::Arange { start, step, .. } = self.op(x) else {
            return None;
        };
        if *start != 0.0 || *step != 1.0 || self.shape(x) != [t.clone()] {
            return None;
        }
        let shape = if reshaped {
            self.shape(v)
        } else {
            self.shape(x)
        };
        let mut long = shape
            .iter()
            .enumerate()
            .filter(|(_, d)| d.as_const() != Some(1));
        let (axis, d) = long.next()?;
        if long.next().is_some() || d != t {
            return None;
        }
        Some(shape.len() - 1 - axis)
    }

    /// Which triangle `mask` is over the last two axes: `Some(true)` for the causal
    /// `j <= i` (`le(pos_j, pos_i)`, `ge(pos_i, pos_j)`, or against the main diagonal as
    /// the builder's `scaled_dot_product_attention` writes it: `le(pos_j - pos_i, 0)`,
    /// `ge(pos_i - pos_j, 0)`, `lt(pos_j - pos_i, 1)`, `gt(pos_i - pos_j, -1)`),
    /// `Some(false)` for its complement `j > i` (the same comparisons the other way
    /// round), `None` for anything else.
    fn triangle(&self, mask: ValueId) -> Option<bool> {
        let Op::Binary(op) = self.op(mask) else {
            return None;
        };
        let ins = self.ins(mask);
        match (op, self.positions(ins[0]), self.positions(ins[1])) {
            (BinaryOp::Le, Some(0), Some(1)) | (BinaryOp::Ge, Some(1), Some(0)) => {
                return Some(true)
            }
            (BinaryOp::Gt, Some(0), Some(1)) | (BinaryOp::Lt, Some(1), Some(0)) => {
                return Some(false)
            }
            _ => {}
        }
        // `d = pos_j - pos_i` (`Some(true)`) or `pos_i - pos_j` (`Some(false)`).
        let diff = |v: ValueId| -> Option<bool> {
            let Op::Binary(BinaryOp::Sub) = self.op(v) else {
                return None;
            };
            let x = self.ins(v);
            match (self.positions(x[0]), self.positions(x[1])) {
                (Some(0), Some(1)) => Some(true),
                (Some(1), Some(0)) => Some(false),
                _ => None,
            }
        };
        let (j_minus_i, c) = (diff(ins[0])?, self.scalar(ins[1])?);
        match (op, j_minus_i, c) {
            (BinaryOp::Le, true, 0.0)
            | (BinaryOp::Lt, true, 1.0)
            | (BinaryOp::Ge, false, 0.0)
            | (BinaryOp::Gt, false, -1.0) => Some(true),
            (BinaryOp::Gt, true, 0.0)
            | (BinaryOp::Ge, true, 1.0)
            | (BinaryOp::Lt, false, 0.0)
            | (BinaryOp::Le, false, -1.0) => Some(false),
            _ => None,
        }
    }

    /// Whether `bias` is an additive causal mask: `where(j <= i, 0, -inf)` or `where(j > i,
    /// -inf, 0)` (a fill of -1e30 or less, as models write `finfo.min`).
    fn causal_bias(&self, bias: ValueId) -> bool {
        let Op::Where = self.op(bias) else {
            return false;
        };
        let ins = self.ins(bias);
        match (self.scalar(ins[1]), self.scalar(ins[2])) {
            (Some(a), Some(b)) if a == 0.0 && b <= -1e30 => self.triangle(ins[0]) == Some(true),
            (Some(a), Some(b)) if a <= -1e30 && b == 0.0 => self.triangle(ins[0]) == Some(false),
            _ => false,
        }
    }

    /// The attention whose result (after the last reshape, if any) is `out`.
    fn site(&self, out: ValueId) -> Option<AttentionSite> {
        let k = self.k();
        let mut nodes = vec![out];
        // O = reshape(permute(o)) or permute(o).
        let shape = self.shape(out);
        let perm = match self.op(out) {
            Op::Reshape { .. } if shape.len() == k + 1 && shape[..k] == self.lead[..] => {
                let p = self.ins(out)[0];
                nodes.push(p);
                p
            }
            Op::Permute { .. } => out,
            _ => return None,
        };
        let Op::Permute { dims } = self.op(perm) else {
            return None;
        };
        let ps = self.shape(perm);
        if ps.len() != k + 2 || ps[..k] != self.lead[..] || !self.swaps_heads(dims, k + 2) {
            return None;
        }
        let o = self.ins(perm)[0];
        if !matches!(self.op(o), Op::MatMul) {
            return None;
        }
        nodes.push(o);
        let (w, v4) = (self.ins(o)[0], self.ins(o)[1]);
        let Op::Softmax { axis } = self.op(w) else {
            return None;
        };
        if normalize_axis(*axis, k + 2).ok() != Some(k + 1) {
            return None;
        }
        nodes.push(w);
        let mut m = self.ins(w)[0];
        let mut causal = false;
        match self.op(m) {
            Op::Where => {
                let ins = self.ins(m);
                let fill = self.scalar(ins[2])?;
                if fill > -1e30 || self.triangle(ins[0]) != Some(true) {
                    return None;
                }
                causal = true;
                nodes.push(m);
                m = ins[1];
            }
            Op::Binary(BinaryOp::Add) => {
                // An additive mask, which models often build once for every layer.
                let ins = self.ins(m);
                let scores = if self.causal_bias(ins[1]) {
                    ins[0]
                } else if self.causal_bias(ins[0]) {
                    ins[1]
                } else {
                    return None;
                };
                causal = true;
                nodes.push(m);
                m = scores;
            }
            _ => {}
        }
        let mut scale = 1.0;
        let mut mm = m;
        if let Op::Binary(op @ (BinaryOp::Mul | BinaryOp::Div)) = self.op(m) {
            let ins = self.ins(m);
            let (x, c) = match (self.scalar(ins[0]), self.scalar(ins[1])) {
                (_, Some(c)) => (ins[0], c),
                (Some(c), None) if *op == BinaryOp::Mul => (ins[1], c),
                _ => return None,
            };
            if !c.is_finite() || c == 0.0 {
                return None;
            }
            scale = if *op == BinaryOp::Div { 1.0 / c } else { c };
            nodes.push(m);
            mm = x;
        }
        if !matches!(self.op(mm), Op::MatMul) {
            return None;
        }
        nodes.push(mm);
        let q = self.heads(self.ins(mm)[0])?;
        let kt = self.keys_t(self.ins(mm)[1])?;
        let v = self.heads(v4)?;
        // Query heads; key and value heads, each read by `repeat` query heads.
        if q.repeat != 1
            || (kt.heads, kt.repeat) != (v.heads, v.repeat)
            || kt.heads * kt.repeat != q.heads
            || q.dim != kt.dim
        {
            return None;
        }
        // The result's layout: `L ++ [H*Dv]` after the reshape, `L ++ [H, Dv]` without.
        let ok_out = if perm == out {
            shape.len() == k + 2
                && const_size(&shape[k]) == Some(q.heads)
                && const_size(&shape[k + 1]) == Some(v.dim)
        } else {
            const_size(&shape[k]) == Some(q.heads * v.dim)
        };
        if !ok_out {
            return None;
        }
        for h in [&q, &kt, &v] {
            nodes.extend(&h.nodes);
        }
        nodes.sort();
        nodes.dedup();
        if !self.closed(&nodes, out) {
            return None;
        }
        Some(AttentionSite {
            q: q.rows,
            k: kt.rows,
            v: v.rows,
            out,
            heads: q.heads,
            kv_heads: kt.heads,
            head_dim: q.dim,
            value_dim: v.dim,
            causal,
            scale,
            nodes,
        })
    }
}

/// Whether `dims` (a permute's, of a rank-`rank` value) takes result axis `j` from
/// operand axis `want(j)` for every `j`.
fn is_permutation(dims: &[i64], rank: usize, want: impl Fn(usize) -> usize) -> bool {
    dims.len() == rank
        && dims
            .iter()
            .enumerate()
            .all(|(j, &d)| normalize_axis(d, rank).ok() == Some(want(j)))
}

fn const_size(e: &Expr) -> Option<usize> {
    e.as_const().and_then(|c| usize::try_from(c).ok())
}
