//! Value generation: the value of a graph value at index expressions, built into the
//! expression block of the stage being generated (`KernelBuilder::value_at`).
//! Elementwise ops recurse into their operands at broadcast coordinates, movement ops
//! rewrite the coordinates, reductions of the group are read as accumulators (only at
//! the current outer point), and values from elsewhere are loads.

use super::domain::{coords_of, reduction_shape, squeeze};
use super::plan::{Layout, Plan, Role};
use super::refusal::{LowerError, Refusal};
use crate::error::{Error, Result};
use ferrite_ir::hash::{HashMap, HashSet};
use ferrite_ir::infer::{permutation, slice_bounds};
use ferrite_ir::loops::{
    scalar, AccId, Block, Bound, ExprNode, ExprOp, ExprRef, Extents, GemmInfo, IndexExpr, Kernel,
    KernelId, Load, Reduction, Stage, StoreOp, Value, Var,
};
use ferrite_ir::types::{contiguous_strides, normalize_axis};
use ferrite_ir::{promote, BinaryOp, DType, Op, Scalar, ValueId};
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;

/// Code generation gives up on expressions nested deeper than this (fusion then
/// refuses the group with `expression-too-deep`).
const MAX_DEPTH: usize = 400;

/// Failure inside value generation.
pub(super) enum Fail {
    Lower(LowerError),
    /// The value needs an accumulator of the stage being built: start a new stage.
    Pending,
}

impl From<Refusal> for Fail {
    fn from(r: Refusal) -> Fail {
        Fail::Lower(LowerError::Refused(r))
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Lower(LowerError::Failed(e))
    }
}

/// A failure of value generation that is a bug (the graph was verified).
pub(super) fn bug(msg: impl Into<String>) -> Fail {
    Error::internal(msg).into()
}

/// The stage being generated.
#[derive(Default)]
pub(super) struct StageState {
    pub(super) block: Block,
    pub(super) ext: Extents,
    /// Keyed by whole expression and index trees, so hashed with Fx rather than SipHash
    /// (the lookups were a tenth of scheduling a model).
    pub(super) cse: FxHashMap<ExprNode, ExprRef>,
    pub(super) memo: FxHashMap<(ValueId, Vec<IndexExpr>, Vec<Bound>), ExprRef>,
    /// Reductions whose accumulators this (reduction) stage defines.
    pub(super) pending: Vec<ValueId>,
}

/// Generates one kernel from a group of scheduled nodes.
pub(super) struct KernelBuilder<'a> {
    pub(super) plan: &'a Plan<'a>,
    pub(super) layout: &'a Layout,
    /// The group's scheduled nodes, sorted (a lookup by binary search: a flag per
    /// scheduled node of the plan would make building each kernel cost the whole graph).
    pub(super) in_group: Vec<usize>,
    /// Outer domain of the kernel.
    pub(super) outer: Vec<usize>,
    /// Accumulators of finished stages.
    pub(super) ready: HashMap<ValueId, (AccId, DType)>,
    pub(super) next_acc: u32,
    pub(super) cur: StageState,
    pub(super) depth: usize,
    pub(super) touched: HashSet<ValueId>,
}

impl<'a> KernelBuilder<'a> {
    /// A builder for a kernel of `v` alone over `outer` (an `index_add`'s, a `pad`'s),
    /// its stages made by the caller.
    pub(super) fn alone(
        plan: &'a Plan<'a>,
        layout: &'a Layout,
        outer: Vec<usize>,
        v: ValueId,
    ) -> Self {
        KernelBuilder {
            plan,
            layout,
            in_group: Vec::new(),
            outer,
            ready: HashMap::default(),
            next_acc: 0,
            cur: StageState::default(),
            depth: 0,
            touched: HashSet::from_iter([v]),
        }
    }
}

pub(super) fn fail_to_error(f: Fail) -> LowerError {
    match f {
        Fail::Lower(e) => e,
        Fail::Pending => Error::internal("a value needs an accumulator of its own stage").into(),
    }
}

impl KernelBuilder<'_> {
    /// The kernel of `stages` over the builder's outer domain, with the nodes it
    /// computed and its accesses.
    pub(super) fn finish(
        self,
        id: KernelId,
        name: String,
        stages: Vec<Stage>,
        gemm: Option<GemmInfo>,
    ) -> Kernel {
        let mut nodes: Vec<ValueId> = self.touched.into_iter().collect();
        nodes.sort();
        let mut k = Kernel {
            id,
            name,
            nodes,
            domain: self.outer,
            stages,
            gemm,
            reads: vec![],
            writes: vec![],
        };
        (k.reads, k.writes) = k.compute_accesses(&self.layout.buffers);
        k
    }

    pub(super) fn open_stage(&mut self, ext: Extents) {
        self.cur = StageState {
            ext,
            ..StageState::default()
        };
    }

    pub(super) fn close_reduce_stage(
        &mut self,
        stages: &mut Vec<Stage>,
        reductions: &mut Vec<Reduction>,
        open: &mut Option<Vec<usize>>,
    ) {
        if reductions.is_empty() {
            return;
        }
        let mut body = std::mem::take(&mut self.cur.block);
        let roots: Vec<ExprRef> = reductions
            .iter()
            .flat_map(|r| std::iter::once(r.value).chain(r.rhs))
            .collect();
        let map = body.retain_live(&roots);
        let m = |r: ExprRef| map.get(r.index()).copied().flatten().unwrap_or(r);
        let mut reductions = std::mem::take(reductions);
        for r in &mut reductions {
            r.value = m(r.value);
            r.rhs = r.rhs.map(m);
        }
        for (v, r) in self.cur.pending.drain(..).zip(&reductions) {
            self.ready.insert(v, (r.acc, r.dtype));
        }
        stages.push(Stage::Reduce {
            domain: self.cur.ext.reduce.clone(),
            body,
            reductions,
            stores: Vec::new(),
        });
        *open = None;
        self.cur = StageState::default();
    }

    pub(super) fn close_store_stage(
        &mut self,
        domain: Vec<usize>,
        mut stores: Vec<StoreOp>,
    ) -> Stage {
        let mut body = std::mem::take(&mut self.cur.block);
        let mut roots = Vec::new();
        for s in &stores {
            roots.push(s.value);
            s.index.for_each_ref(&mut |r| roots.push(r));
        }
        let map = body.retain_live(&roots);
        let m = |r: ExprRef| map.get(r.index()).copied().flatten().unwrap_or(r);
        for s in &mut stores {
            s.value = m(s.value);
            s.index = s.index.map_refs(&m);
        }
        self.cur = StageState::default();
        Stage::Store {
            domain,
            body,
            stores,
        }
    }

    /// The inner domain of reduction `r` (reduced extents, 1s dropped).
    pub(super) fn reduction_domain(&self, r: ValueId) -> Vec<usize> {
        let g = self.plan.g;
        match reduction_shape(g, r) {
            Some(rs) => rs
                .axes
                .iter()
                .map(|&a| rs.input[a])
                .filter(|&d| d != 1)
                .collect(),
            None => {
                // matmul: the contracted extent.
                let a = g.ty(g.node(r).inputs[0]);
                squeeze(&[*a.shape.last().unwrap_or(&1)])
            }
        }
    }

    /// The value combined by reduction `r` at the current point (inside its stage),
    /// and for a matmul the second factor of the dot product.
    pub(super) fn reduction_body(
        &mut self,
        r: ValueId,
    ) -> Result<(ExprRef, Option<ExprRef>), Fail> {
        let g = self.plan.g;
        let node = g.node(r);
        if let Some(rs) = reduction_shape(g, r) {
            let mut next_outer = 0;
            let mut next_inner = 0;
            let coords: Vec<IndexExpr> = rs
                .input
                .iter()
                .enumerate()
                .map(|(k, &d)| {
                    if d == 1 {
                        IndexExpr::Const(0)
                    } else if rs.axes.contains(&k) {
                        next_inner += 1;
                        IndexExpr::Var(Var::reduce(next_inner - 1))
                    } else {
                        next_outer += 1;
                        IndexExpr::Var(Var::outer(next_outer - 1))
                    }
                })
                .collect();
            let x = self.value_at(node.inputs[0], &coords, &[])?;
            let want = if rs.kind.is_arg() {
                self.dtype(x)
            } else {
                node.ty.dtype
            };
            return Ok((self.cast(x, want), None));
        }
        // matmul: lhs[batch.., m, k] * rhs[batch.., k, n] summed over k.
        let (a, bv) = (node.inputs[0], node.inputs[1]);
        let (ash, bsh) = (&g.ty(a).shape, &g.ty(bv).shape);
        let out = &node.ty.shape;
        let oc = coords_of(out, Var::outer);
        let k_extent = *ash.last().unwrap_or(&1);
        let k = if k_extent == 1 {
            IndexExpr::Const(0)
        } else {
            IndexExpr::Var(Var::reduce(0))
        };
        let nb = out.len() - (ash.len() >= 2) as usize - (bsh.len() >= 2) as usize;
        // Right-aligned broadcasting of the operand's batch axes against the output's.
        let batch_coords = |own: &[usize]| Self::broadcast(&oc[..nb], own, &out[..nb]);
        let m = if ash.len() >= 2 {
            oc[nb].clone()
        } else {
            IndexExpr::Const(0)
        };
        let n = if bsh.len() >= 2 {
            oc[out.len() - 1].clone()
        } else {
            IndexExpr::Const(0)
        };
        let ac: Vec<IndexExpr> = if ash.len() >= 2 {
            let mut c = batch_coords(&ash[..ash.len() - 2]);
            c.push(m);
            c.push(k.clone());
            c
        } else {
            vec![k.clone()]
        };
        let bc: Vec<IndexExpr> = if bsh.len() >= 2 {
            let mut c = batch_coords(&bsh[..bsh.len() - 2]);
            c.push(k);
            c.push(n);
            c
        } else {
            vec![k]
        };
        let x = self.value_at(a, &ac, &[])?;
        let y = self.value_at(bv, &bc, &[])?;
        Ok((x, Some(y)))
    }

    fn dtype(&self, r: ExprRef) -> DType {
        self.cur.block.get(r).map_or(DType::F32, |n| n.dtype)
    }

    /// Appends a node, reusing an identical existing one.
    pub(super) fn push(&mut self, dtype: DType, op: ExprOp) -> ExprRef {
        let node = ExprNode { dtype, op };
        // One lookup: an expression node hashes its index trees.
        match self.cur.cse.entry(node) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                let r = self.cur.block.push(e.key().clone());
                e.insert(r);
                r
            }
        }
    }

    fn cast(&mut self, r: ExprRef, to: DType) -> ExprRef {
        if self.dtype(r) == to {
            return r;
        }
        // Fold casts of constants.
        if let Some(ExprNode {
            op: ExprOp::Const(v),
            ..
        }) = self.cur.block.get(r)
        {
            let v = scalar::cast(*v, to);
            return self.push(to, ExprOp::Const(v));
        }
        self.push(to, ExprOp::Cast(r))
    }

    fn constant(&mut self, v: Value, dtype: DType) -> ExprRef {
        self.push(dtype, ExprOp::Const(v))
    }

    /// The fill value of a `pad` as a constant of `dtype`.
    pub(super) fn fill(&mut self, value: f64, dtype: DType) -> Result<ExprRef> {
        let v = fill_value(value, dtype, "pad")?;
        Ok(self.constant(v, dtype))
    }

    fn simplify(&self, e: &IndexExpr) -> IndexExpr {
        e.simplify(&self.cur.ext)
    }

    /// Row-major offset of `coords` in a tensor of `shape`, simplified.
    pub(super) fn flat(&self, coords: &[IndexExpr], shape: &[usize]) -> IndexExpr {
        let strides: Vec<i64> = contiguous_strides(shape)
            .into_iter()
            .map(|s| s as i64)
            .collect();
        IndexExpr::simplified_dot(coords, &strides, &self.cur.ext)
    }

    /// Bounds among `candidates` that the loop ranges do not already prove.
    fn needed_bounds(&self, candidates: Vec<Bound>) -> Vec<Bound> {
        candidates
            .into_iter()
            .filter(|b| match b.expr.range(&self.cur.ext) {
                Some((lo, hi)) => !(lo >= b.lo && hi < b.hi),
                None => true,
            })
            .collect()
    }

    fn load(&mut self, v: ValueId, coords: &[IndexExpr], guard: &[Bound]) -> Result<ExprRef, Fail> {
        let g = self.plan.g;
        let buffer = self.layout.of_value[v.index()]
            .ok_or_else(|| bug(format!("%{} is loaded but has no buffer", v.0)))?;
        let ty = g.ty(v);
        let index = self.flat(coords, &ty.shape);
        Ok(self.push(
            ty.dtype,
            ExprOp::Load(Load {
                buffer,
                index,
                guard: guard.to_vec(),
                other: Value::zero(ty.dtype),
            }),
        ))
    }

    /// The value of graph value `v` at coordinates `coords` (one per axis of `v`),
    /// computing only where every bound of `guard` holds.
    pub(super) fn value_at(
        &mut self,
        v: ValueId,
        coords: &[IndexExpr],
        guard: &[Bound],
    ) -> Result<ExprRef, Fail> {
        let coords: Vec<IndexExpr> = coords.iter().map(|c| self.simplify(c)).collect();
        // The key owns the coordinates; the computation borrows them from it.
        let key = (v, coords, guard.to_vec());
        if let Some(&r) = self.cur.memo.get(&key) {
            return Ok(r);
        }
        if self.depth > MAX_DEPTH {
            return Err(Refusal::new(
                "expression-too-deep",
                format!("expressions nest deeper than {MAX_DEPTH} levels"),
            )
            .into());
        }
        self.depth += 1;
        let result = self.value_at_uncached(v, &key.1, guard);
        self.depth -= 1;
        let r = result?;
        self.cur.memo.insert(key, r);
        Ok(r)
    }

    fn value_at_uncached(
        &mut self,
        v: ValueId,
        coords: &[IndexExpr],
        guard: &[Bound],
    ) -> Result<ExprRef, Fail> {
        let g = self.plan.g;
        let node = g.node(v);
        let role = self.plan.role[v.index()];
        // An empty value (an extent 0 anywhere) has no element to read: every point that
        // reads it is guarded out (pad, concat) or lies in a loop of extent 0 (a reduction
        // over an empty axis, the kernel that stores it). Its value is never used, so it is
        // a constant; computing it would build index arithmetic over extent-0 shapes
        // (a reshape's `i // 0`) that no backend can bound (F03). An accumulator of this
        // kernel is still read as one, so its stage is built.
        let own_accumulator = matches!(
            node.op,
            Op::Reduce { .. } | Op::ArgReduce { .. } | Op::MatMul
        ) && match role {
            Role::Scheduled(s) => self.in_group.binary_search(&s).is_ok(),
            Role::View | Role::Inline => true,
            Role::Dead | Role::Param(_) | Role::Constant(_) | Role::Literal => false,
        };
        if node.ty.numel() == 0 && role != Role::Dead && !own_accumulator {
            return Ok(self.constant(Value::zero(node.ty.dtype), node.ty.dtype));
        }
        match role {
            Role::Dead => Err(bug(format!("%{} is dead", v.0))),
            Role::Param(_) | Role::Constant(_) => self.load(v, coords, guard),
            Role::Scheduled(s) if self.in_group.binary_search(&s).is_err() => {
                self.load(v, coords, guard)
            }
            Role::Literal => {
                let Op::Literal { value } = node.op else {
                    return Err(bug(format!(
                        "%{} is planned as a literal but is not one",
                        v.0
                    )));
                };
                let c = literal_value(value, node.ty.dtype);
                Ok(self.constant(c, node.ty.dtype))
            }
            Role::View | Role::Inline | Role::Scheduled(_) => {
                self.touched.insert(v);
                self.compute(v, coords, guard)
            }
        }
    }

    /// Operand coordinates under broadcasting from the result shape `out`.
    fn broadcast(coords: &[IndexExpr], own: &[usize], out: &[usize]) -> Vec<IndexExpr> {
        let lead = out.len() - own.len();
        own.iter()
            .enumerate()
            .map(|(i, &d)| {
                if d == 1 {
                    IndexExpr::Const(0)
                } else {
                    coords[lead + i].clone()
                }
            })
            .collect()
    }

    fn operand(
        &mut self,
        x: ValueId,
        coords: &[IndexExpr],
        out: &[usize],
        guard: &[Bound],
    ) -> Result<ExprRef, Fail> {
        let g = self.plan.g;
        let c = Self::broadcast(coords, &g.ty(x).shape, out);
        self.value_at(x, &c, guard)
    }

    fn compute(
        &mut self,
        v: ValueId,
        coords: &[IndexExpr],
        guard: &[Bound],
    ) -> Result<ExprRef, Fail> {
        let g = self.plan.g;
        let node = g.node(v);
        let ty = &node.ty;
        let out = ty.shape.as_slice();
        let ins = &node.inputs;
        match &node.op {
            Op::Unary(u) => {
                let x = self.operand(ins[0], coords, out, guard)?;
                if *u == ferrite_ir::UnaryOp::Not {
                    return Ok(self.push(DType::Bool, ExprOp::Unary(*u, x)));
                }
                let x = self.cast(x, ty.dtype);
                Ok(self.push(ty.dtype, ExprOp::Unary(*u, x)))
            }
            Op::Binary(bop) => {
                let compute = if bop.is_comparison() || bop.is_logical() {
                    promote(g.ty(ins[0]).dtype, g.ty(ins[1]).dtype)
                } else {
                    ty.dtype
                };
                let x = self.operand(ins[0], coords, out, guard)?;
                let y = self.operand(ins[1], coords, out, guard)?;
                let (x, y) = (self.cast(x, compute), self.cast(y, compute));
                Ok(self.push(ty.dtype, ExprOp::Binary(*bop, x, y)))
            }
            Op::Where => {
                let c = self.operand(ins[0], coords, out, guard)?;
                let a = self.operand(ins[1], coords, out, guard)?;
                let b = self.operand(ins[2], coords, out, guard)?;
                let c = self.cast(c, DType::Bool);
                let (a, b) = (self.cast(a, ty.dtype), self.cast(b, ty.dtype));
                Ok(self.push(ty.dtype, ExprOp::Where(c, a, b)))
            }
            Op::Cast { to } => {
                let x = self.value_at(ins[0], coords, guard)?;
                Ok(self.cast(x, *to))
            }
            Op::Reduce { .. } | Op::ArgReduce { .. } | Op::MatMul => {
                let canonical: Vec<IndexExpr> = coords_of(out, Var::outer)
                    .iter()
                    .map(|c| self.simplify(c))
                    .collect();
                if coords != canonical.as_slice() {
                    return Err(Refusal::new(
                        "reduction-read-elsewhere",
                        format!(
                            "%{} is read at [{}], not at the kernel's current point",
                            v.0,
                            coords
                                .iter()
                                .map(|c| c.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                    .into());
                }
                if let Some(&(acc, dtype)) = self.ready.get(&v) {
                    return Ok(self.push(dtype, ExprOp::Acc(acc)));
                }
                if self.cur.pending.contains(&v) {
                    return Err(Fail::Pending);
                }
                Err(bug(format!("%{} is read before its reduction", v.0)))
            }
            Op::Reshape { .. } => {
                let src_shape = &g.ty(ins[0]).shape;
                let flat = self.flat(coords, out);
                let strides = contiguous_strides(src_shape);
                let src: Vec<IndexExpr> = src_shape
                    .iter()
                    .zip(&strides)
                    .map(|(&d, &s)| {
                        flat.clone()
                            .floor_div(s.max(1) as i64)
                            .modulo(d.max(1) as i64)
                    })
                    .collect();
                self.value_at(ins[0], &src, guard)
            }
            Op::Permute { dims } => {
                let perm = permutation("permute", dims, out.len()).map_err(bug)?;
                let mut src = vec![IndexExpr::Const(0); out.len()];
                for (k, &p) in perm.iter().enumerate() {
                    src[p] = coords[k].clone();
                }
                self.value_at(ins[0], &src, guard)
            }
            Op::Expand { .. } => {
                let src = Self::broadcast(coords, &g.ty(ins[0]).shape, out);
                self.value_at(ins[0], &src, guard)
            }
            Op::Slice {
                axis,
                start,
                end,
                step,
            } => {
                let own = g.ty(ins[0]).shape.clone();
                let a = normalize_axis(*axis, own.len()).map_err(bug)?;
                let (lo, _) = slice_bounds(own[a], *start, *end);
                let mut src = coords.to_vec();
                src[a] = coords[a].clone() * *step + IndexExpr::Const(lo as i64);
                self.value_at(ins[0], &src, guard)
            }
            Op::Pad { pads, value } => {
                let own = g.ty(ins[0]).shape.clone();
                let fill = fill_value(*value, ty.dtype, "pad")?;
                let src: Vec<IndexExpr> = coords
                    .iter()
                    .enumerate()
                    .map(|(k, c)| self.simplify(&(c.clone() + IndexExpr::Const(-pads[2 * k]))))
                    .collect();
                let bounds = self.needed_bounds(
                    src.iter()
                        .zip(&own)
                        .map(|(e, &d)| Bound {
                            expr: e.clone(),
                            lo: 0,
                            hi: d as i64,
                        })
                        .collect(),
                );
                self.guarded(ins[0], &src, guard, bounds, fill, ty.dtype)
            }
            Op::Concat { axis } => {
                let a = normalize_axis(*axis, out.len()).map_err(bug)?;
                let c = coords[a].clone();
                let (lo, hi) = c.range(&self.cur.ext).unwrap_or((i64::MIN, i64::MAX));
                // (operand, offset, length) of the operands the coordinate can reach.
                let mut parts = Vec::new();
                let mut off: i64 = 0;
                for &x in ins {
                    let len = g.ty(x).shape[a] as i64;
                    if len > 0 && off <= hi && off + len > lo {
                        parts.push((x, off, len));
                    }
                    off += len;
                }
                let mut result: Option<ExprRef> = None;
                for &(x, off, len) in parts.iter().rev() {
                    let mut src = coords.to_vec();
                    src[a] = self.simplify(&(c.clone() + IndexExpr::Const(-off)));
                    let bounds = self.needed_bounds(vec![Bound {
                        expr: src[a].clone(),
                        lo: 0,
                        hi: len,
                    }]);
                    let zero = Value::zero(ty.dtype);
                    let part = self.guarded(x, &src, guard, bounds, zero, ty.dtype)?;
                    result = Some(match result {
                        None => part,
                        Some(rest) => {
                            let at = self.push(DType::I64, ExprOp::Index(c.clone()));
                            let end = self.constant(Value::Int((off + len) as i128), DType::I64);
                            let cond =
                                self.push(DType::Bool, ExprOp::Binary(BinaryOp::Lt, at, end));
                            self.push(ty.dtype, ExprOp::Where(cond, part, rest))
                        }
                    });
                }
                match result {
                    Some(r) => Ok(r),
                    // No operand is reachable: the output is empty along the axis.
                    None => Ok(self.constant(Value::zero(ty.dtype), ty.dtype)),
                }
            }
            Op::IndexSelect { axis } => {
                // Output axes a..a+r are the index's; the rest are x's around axis a.
                let own = g.ty(ins[0]).shape.clone();
                let r = g.ty(ins[1]).rank();
                let a = normalize_axis(*axis, own.len()).map_err(bug)?;
                let iv = self.value_at(ins[1], &coords[a..a + r], guard)?;
                let dynamic = self.checked_index(iv, own[a], guard);
                if let Some(r) = empty_axis_check(&dynamic, own[a]) {
                    return Ok(self.cast(r, ty.dtype));
                }
                let mut src = coords[..a].to_vec();
                src.push(dynamic);
                src.extend_from_slice(&coords[a + r..]);
                self.value_at(ins[0], &src, guard)
            }
            Op::Gather { axis } => {
                let own = g.ty(ins[0]).shape.clone();
                let ishape = g.ty(ins[1]).shape.clone();
                let a = normalize_axis(*axis, own.len()).map_err(bug)?;
                let ic: Vec<IndexExpr> = ishape
                    .iter()
                    .enumerate()
                    .map(|(k, &d)| {
                        if k != a && d == 1 {
                            IndexExpr::Const(0)
                        } else {
                            coords[k].clone()
                        }
                    })
                    .collect();
                let iv = self.value_at(ins[1], &ic, guard)?;
                let dynamic = self.checked_index(iv, own[a], guard);
                if let Some(r) = empty_axis_check(&dynamic, own[a]) {
                    return Ok(self.cast(r, ty.dtype));
                }
                let src: Vec<IndexExpr> = own
                    .iter()
                    .enumerate()
                    .map(|(k, &d)| {
                        if k == a {
                            dynamic.clone()
                        } else if d == 1 {
                            IndexExpr::Const(0)
                        } else {
                            coords[k].clone()
                        }
                    })
                    .collect();
                self.value_at(ins[0], &src, guard)
            }
            Op::Full { value, dtype, .. } => {
                let fill = fill_value(*value, *dtype, "full")?;
                Ok(self.constant(fill, *dtype))
            }
            Op::Arange {
                start, step, dtype, ..
            } => {
                let i = coords.first().cloned().unwrap_or(IndexExpr::Const(0));
                let integral = |x: f64| x.fract() == 0.0 && x.abs() < 9.0e15;
                if !dtype.is_float() || (integral(*start) && integral(*step)) {
                    // PyTorch truncates start and step for integer dtypes and computes in i64.
                    let e = self.simplify(&(i * *step as i64 + IndexExpr::Const(*start as i64)));
                    let r = self.push(DType::I64, ExprOp::Index(e));
                    Ok(self.cast(r, *dtype))
                } else {
                    // start + i*step in the float dtype (the interpreter uses f64: within rounding).
                    let r = self.push(DType::I64, ExprOp::Index(i));
                    let r = self.cast(r, *dtype);
                    let s = self.constant(scalar::round_to(Value::Float(*step), *dtype), *dtype);
                    let o = self.constant(scalar::round_to(Value::Float(*start), *dtype), *dtype);
                    let m = self.push(*dtype, ExprOp::Binary(BinaryOp::Mul, r, s));
                    Ok(self.push(*dtype, ExprOp::Binary(BinaryOp::Add, m, o)))
                }
            }
            Op::Param { .. } | Op::Literal { .. } | Op::Constant(_) => Err(bug(format!(
                "%{} is a parameter, literal or constant, not computed",
                v.0
            ))),
            other => Err(Error::InvalidGraph(format!(
                "`{}` is not a primitive op; run decompose first",
                other.name()
            ))
            .into()),
        }
    }

    /// The index expression for a data-dependent index value: the value itself when it
    /// is index arithmetic provably in `0..extent` (an `arange`), else a checked index.
    pub(super) fn checked_index(
        &mut self,
        iv: ExprRef,
        extent: usize,
        guard: &[Bound],
    ) -> IndexExpr {
        let mut at = iv;
        // Look through a cast of index arithmetic (an i32 arange).
        if let Some(ExprNode {
            op: ExprOp::Cast(inner),
            ..
        }) = self.cur.block.get(at)
        {
            at = *inner;
        }
        let known = match self.cur.block.get(at).map(|n| &n.op) {
            Some(ExprOp::Index(e)) => Some(e.clone()),
            Some(ExprOp::Const(Value::Int(c))) => i64::try_from(*c).ok().map(IndexExpr::Const),
            _ => None,
        };
        if let Some(e) = known {
            if let Some((lo, hi)) = e.range(&self.cur.ext) {
                if lo >= 0 && (hi as i128) < extent as i128 && hi <= i32::MAX as i64 {
                    return e;
                }
            }
        }
        let r = self.push(
            DType::I64,
            ExprOp::CheckedIndex {
                value: iv,
                extent: extent as u64,
                guard: guard.to_vec(),
            },
        );
        IndexExpr::Dynamic {
            value: r,
            extent: extent as u64,
        }
    }

    /// `x` at `src` where `bounds` hold (and the enclosing `guard`), else `fill`.
    fn guarded(
        &mut self,
        x: ValueId,
        src: &[IndexExpr],
        guard: &[Bound],
        bounds: Vec<Bound>,
        fill: Value,
        dtype: DType,
    ) -> Result<ExprRef, Fail> {
        if bounds.is_empty() {
            return self.value_at(x, src, guard);
        }
        let mut all = guard.to_vec();
        all.extend(bounds.iter().cloned());
        let inner = self.value_at(x, src, &all)?;
        // A load guarded by exactly these bounds can yield the fill value itself.
        if let Some(ExprNode {
            op: ExprOp::Load(l),
            ..
        }) = self.cur.block.get(inner)
        {
            if l.guard == all {
                let l = Load {
                    other: fill,
                    ..l.clone()
                };
                return Ok(self.push(dtype, ExprOp::Load(l)));
            }
        }
        let mut cond: Option<ExprRef> = None;
        for b in &bounds {
            let at = self.push(DType::I64, ExprOp::Index(b.expr.clone()));
            let lo = self.constant(Value::Int(b.lo as i128), DType::I64);
            let hi = self.constant(Value::Int(b.hi as i128), DType::I64);
            let ge = self.push(DType::Bool, ExprOp::Binary(BinaryOp::Ge, at, lo));
            let lt = self.push(DType::Bool, ExprOp::Binary(BinaryOp::Lt, at, hi));
            let both = self.push(DType::Bool, ExprOp::Binary(BinaryOp::And, ge, lt));
            cond = Some(match cond {
                None => both,
                Some(c) => self.push(DType::Bool, ExprOp::Binary(BinaryOp::And, c, both)),
            });
        }
        let c = cond.unwrap_or(inner);
        let f = self.constant(fill, dtype);
        let inner = self.cast(inner, dtype);
        Ok(self.push(dtype, ExprOp::Where(c, inner, f)))
    }
}

/// A literal's value in `dtype` (integer literals wrap into `i32`, as the interpreter does).
fn literal_value(value: Scalar, dtype: DType) -> Value {
    match value {
        Scalar::Float(v) => scalar::round_to(Value::Float(v), dtype),
        Scalar::Int(v) => scalar::cast(Value::Int(v as i128), dtype),
        Scalar::Bool(b) => scalar::cast(Value::Bool(b), dtype),
    }
}

/// A `full`/`pad` fill value in `dtype`; values that do not fit are errors, as in the
/// interpreter (integers out of range, finite floats that overflow).
fn fill_value(value: f64, dtype: DType, op: &str) -> Result<Value> {
    let fits = match dtype {
        DType::I32 => value.fract() == 0.0 && value >= i32::MIN as f64 && value <= i32::MAX as f64,
        DType::I64 => value.fract() == 0.0 && value >= -(2f64.powi(63)) && value < 2f64.powi(63),
        DType::Bool => true,
        _ => {
            !value.is_finite()
                || scalar::round_to(Value::Float(value), dtype)
                    .as_f64()
                    .is_finite()
        }
    };
    if !fits {
        return Err(Error::Unrepresentable(format!(
            "{op}: value {value} cannot be converted to {dtype} without overflow"
        )));
    }
    Ok(scalar::cast(Value::Float(value), dtype))
}

/// For an index into an axis of extent 0: the checked-index node, which fails for every
/// value, so it stands for the result (cast to the result's dtype): the check runs
/// wherever the value is needed, and the empty operand is never read.
fn empty_axis_check(dynamic: &IndexExpr, extent: usize) -> Option<ExprRef> {
    match dynamic {
        IndexExpr::Dynamic { value, .. } if extent == 0 => Some(*value),
        _ => None,
    }
}
