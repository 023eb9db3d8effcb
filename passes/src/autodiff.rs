//! Reverse-mode automatic differentiation on the graph IR.
//!
//! [`grad`] turns a graph with a scalar loss into the joint forward + backward graph: the
//! original nodes, then one backward pass over them in reverse order that applies each
//! node's vector-Jacobian product (VJP) rule, summing the cotangents of values used more
//! than once. The result returns the original outputs followed by the gradient of the loss
//! with respect to each requested value. [`vjp`] does the same for any outputs, with one
//! cotangent parameter per output (`grad_<output>`), as AOTAutograd's joint graph does.
//!
//! Only floating-point values carry gradients; integer and bool values (indices, masks,
//! comparisons) stop them, as in PyTorch. Ops with a zero derivative almost everywhere
//! (`floor`, `ceil`, `sign`, the integer divisions) contribute nothing. Where PyTorch
//! defines a subgradient, the rule follows it: `relu` has 0 at 0, `abs` has `sign(x)`, ties
//! of `maximum`/`minimum` split the cotangent in halves, ties of a `max`/`min` reduction
//! share it evenly, `pow`'s exponent gradient is 0 where the base is 0 and the exponent is
//! not negative, and `prod` is exact when elements are zero.
//!
//! Composite ops get their own rules where those are cheaper than differentiating their
//! decomposition: `softmax`, `log_softmax`, `layer_norm` and `rms_norm` (recomputing their
//! statistics from the saved input), and `embedding_bag`. The gradient of `index_select`
//! and `gather` is an `index_add` (a scatter-add: `gather`'s through flat positions), and
//! `index_add`'s is an `index_select` of the cotangent.
//!
//! **Row-sparse gradients.** [`grad_sparse`] returns the gradient of a table read only by
//! `embedding_bag`s as a pair of values instead of a dense table-sized tensor: the row
//! indices `[P]` (i64) and the rows `[P, D]`, where row `j` of each bag's lookups is that
//! bag's output cotangent (times the per-sample weight, divided by the bag's size in mean
//! mode, zero at `padding_idx`). Duplicate indices are not coalesced: the dense gradient
//! is `index_add(zeros, 0, indices, rows)`, and an optimizer coalesces as it needs
//! ([`crate::train`]).
//!
//! The joint graph is an ordinary graph: it verifies, prints as `.fg`, and every pass and
//! backend takes it. Which forward values the backward reads (the saved activations) is
//! left to the later passes; nothing is rematerialized here.

use crate::error::{Error, Result};
use ferrite_ir::types::{broadcast_shapes, normalize_axis};
use ferrite_ir::{
    verify, BinaryOp as B, DType, Graph, Op, ReduceOp as R, Scalar, TensorType, UnaryOp as U,
    ValueId,
};
use std::collections::HashMap;

/// The joint graph of `g` for the scalar loss `g.outputs[loss]`: `g`'s outputs, then
/// `d loss / d v` for each `v` of `wrt` (with `v`'s type), named `grad_<name>` where
/// `v` has a name.
///
/// `wrt` holds float values of `g` (parameters, constants or any intermediate value). A
/// value the loss does not depend on gets a zero gradient.
pub fn grad(g: &Graph, loss: usize, wrt: &[ValueId]) -> Result<Graph> {
    Ok(grad_sparse(g, loss, wrt, &[])?.0)
}

/// The gradient of one `wrt` value in a joint graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gradient {
    /// A tensor of the value's type (one output, `grad_<name>`).
    Dense(ValueId),
    /// Rows of a 2-D table (two outputs, `grad_<name>.indices` then `grad_<name>.rows`):
    /// the dense gradient is `index_add(zeros, indices, rows, axis=0)`.
    RowSparse {
        /// `[P]` i64: the table row each gradient row belongs to (repeats allowed).
        indices: ValueId,
        /// `[P, D]`: the gradient rows.
        rows: ValueId,
    },
}

/// [`grad`], with the values of `row_sparse` (a subset of `wrt`: 2-D tables that only
/// `embedding_bag`s read) given row-sparse gradients: the joint graph then has two outputs
/// for each of them instead of one, and the second result says which outputs hold what.
/// A row-sparse value used in any other way is an error, since its gradient would not
/// be row-sparse.
pub fn grad_sparse(
    g: &Graph,
    loss: usize,
    wrt: &[ValueId],
    row_sparse: &[ValueId],
) -> Result<(Graph, Vec<Gradient>)> {
    verify(g).map_err(|e| Error::invalid_input("grad", e))?;
    for v in row_sparse {
        if !wrt.contains(v) {
            return Err(Error::InvalidGraph(format!(
                "grad: {} is asked for a row-sparse gradient but is not differentiated",
                describe(g, *v)
            )));
        }
        if g.ty(*v).rank() != 2 {
            return Err(Error::InvalidGraph(format!(
                "grad: {} is {}, but row-sparse gradients are of 2-D tables",
                describe(g, *v),
                g.ty(*v)
            )));
        }
    }
    let sparse_at: Vec<usize> = row_sparse
        .iter()
        .filter_map(|v| wrt.iter().position(|w| w == v))
        .collect();
    let (g, wrt) = &differentiable(g, wrt)?;
    let (g, wrt) = (g, &wrt[..]);
    let Some(&l) = g.outputs.get(loss) else {
        return Err(Error::InvalidGraph(format!(
            "grad: the graph has {} outputs, so output {loss} cannot be the loss",
            g.outputs.len()
        )));
    };
    let lt = g.ty(l).clone();
    if lt.rank() != 0 || !lt.dtype.is_float() {
        return Err(Error::InvalidGraph(format!(
            "grad: the loss (output {loss}) must be a float scalar, not {lt}; reduce it first \
             (e.g. `sum` or `mean`), or use vjp with a cotangent"
        )));
    }
    let mut out = g.clone();
    let one = out
        .add_literal(Scalar::Float(1.0), lt.dtype)
        .map_err(ir("grad"))?;
    let sparse: Vec<ValueId> = sparse_at.iter().map(|&i| wrt[i]).collect();
    let mut bw = Backward::new(&mut out, wrt)?;
    bw.row_sparse = sparse;
    let grads = bw.run(vec![(l, one)])?;
    finish(out, g, wrt, grads)
}

/// The joint graph of `g` for cotangents of its outputs: one new parameter
/// `grad_<output>` per float output (after `g`'s parameters, in output order), and
/// results `g`'s outputs followed by the vector-Jacobian product for each value of `wrt`.
pub fn vjp(g: &Graph, wrt: &[ValueId]) -> Result<Graph> {
    verify(g).map_err(|e| Error::invalid_input("vjp", e))?;
    let (g, wrt) = &differentiable(g, wrt)?;
    let (g, wrt) = (g, &wrt[..]);
    let mut out = g.clone();
    let mut seeds = Vec::new();
    for (i, &o) in g.outputs.iter().enumerate() {
        let ty = g.ty(o).clone();
        if !ty.dtype.is_float() {
            continue;
        }
        let name = fresh(&out, &format!("grad_{}", g.output_name(i)));
        let p = out.add_param(name, ty).map_err(ir("vjp"))?;
        seeds.push((o, p));
    }
    let grads = Backward::new(&mut out, wrt)?.run(seeds)?;
    Ok(finish(out, g, wrt, grads)?.0)
}

/// Whether the backward pass has a rule for `op` itself; other (composite) ops are
/// differentiated through their decomposition.
fn has_rule(op: &Op) -> bool {
    match op {
        Op::Param { .. }
        | Op::Literal { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Where
        | Op::Cast { .. }
        | Op::Reduce { .. }
        | Op::ArgReduce { .. }
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::MatMul
        | Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Expand { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Slice { .. }
        | Op::Concat { .. }
        | Op::Pad { .. }
        | Op::IndexSelect { .. }
        | Op::Gather { .. }
        | Op::IndexAdd { .. }
        | Op::EmbeddingBag { .. }
        | Op::Full { .. }
        | Op::Arange { .. }
        | Op::Constant(_) => true,
        Op::IndexReduce { reduce, .. } => *reduce != ferrite_ir::IndexReduceOp::Mean,
        Op::Conv { .. }
        | Op::ConvTranspose { .. }
        | Op::MaxPool { .. }
        | Op::AvgPool { .. }
        | Op::BatchNorm { .. }
        | Op::Clip { .. } => false,
    }
}

/// `g` itself when every op has a rule; otherwise its decomposition (composites without
/// a rule become primitives that have one), with `wrt` (which must then be parameters)
/// mapped onto it. The joint graph is built from what this returns.
pub fn differentiable(g: &Graph, wrt: &[ValueId]) -> Result<(Graph, Vec<ValueId>)> {
    if g.nodes.iter().all(|n| has_rule(&n.op)) {
        return Ok((g.clone(), wrt.to_vec()));
    }
    let mut positions = Vec::with_capacity(wrt.len());
    for &v in wrt {
        match g.params.iter().position(|&p| p == v) {
            Some(i) => positions.push(i),
            None => {
                let op = g
                    .nodes
                    .iter()
                    .find(|n| !has_rule(&n.op))
                    .map_or("", |n| n.op.name());
                return Err(Error::InvalidGraph(format!(
                    "grad: the graph has `{op}`, which is differentiated through its \
                     decomposition, so gradients are taken with respect to parameters only, \
                     and {} is not one",
                    describe(g, v)
                )));
            }
        }
    }
    let d = crate::decompose::decompose(g)?;
    if d.params.len() != g.params.len() || d.outputs.len() != g.outputs.len() {
        return Err(Error::internal(
            "grad: decompose changed the graph's parameters or outputs",
        ));
    }
    let wrt = positions.iter().map(|&i| d.params[i]).collect();
    Ok((d, wrt))
}

fn finish(
    mut out: Graph,
    g: &Graph,
    wrt: &[ValueId],
    grads: Vec<Gradient>,
) -> Result<(Graph, Vec<Gradient>)> {
    let name_output = |out: &mut Graph, v: ValueId, d: ValueId, suffix: &str| {
        if let Some(name) = &g.node(v).name {
            let name = format!("grad_{name}{suffix}");
            if out.node(d).name.is_none() && out.find(&name).is_none() {
                out.set_name(d, name).map_err(ir("grad"))?;
            }
        }
        out.outputs.push(d);
        Ok::<(), Error>(())
    };
    for (&v, &d) in wrt.iter().zip(&grads) {
        match d {
            Gradient::Dense(d) => name_output(&mut out, v, d, "")?,
            Gradient::RowSparse { indices, rows } => {
                name_output(&mut out, v, indices, ".indices")?;
                name_output(&mut out, v, rows, ".rows")?;
            }
        }
    }
    out.declared_outputs = None;
    verify(&out).map_err(|e| Error::internal(format!("grad produced an invalid graph: {e}")))?;
    Ok((out, grads))
}

/// A name like `base` (invalid chars replaced) that `g` does not bind yet.
pub(crate) fn fresh(g: &Graph, base: &str) -> String {
    let base: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if g.find(&base).is_none() {
        return base;
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| g.find(n).is_none())
        .unwrap()
}

fn ir(pass: &'static str) -> impl Fn(ferrite_ir::Error) -> Error {
    move |e| Error::internal(format!("{pass}: {e}"))
}

/// The backward pass over a graph being extended in place.
struct Backward<'g> {
    g: &'g mut Graph,
    /// Nodes of the forward graph (ids below this) that depend on a `wrt` value through
    /// float values: only they need cotangents.
    forward: usize,
    depends: Vec<bool>,
    wrt: Vec<ValueId>,
    adj: HashMap<ValueId, ValueId>,
    /// The `wrt` values whose gradients are row-sparse.
    row_sparse: Vec<ValueId>,
    /// Their (indices, rows) contributions, one per `embedding_bag` that reads them.
    sparse_adj: HashMap<ValueId, Vec<(ValueId, ValueId)>>,
}

impl<'g> Backward<'g> {
    fn new(g: &'g mut Graph, wrt: &[ValueId]) -> Result<Backward<'g>> {
        let forward = g.nodes.len();
        let mut depends = vec![false; forward];
        for &v in wrt {
            if v.index() >= forward {
                return Err(Error::InvalidGraph(format!(
                    "grad: {v} is not a value of the graph"
                )));
            }
            let ty = g.ty(v);
            if !ty.dtype.is_float() {
                return Err(Error::InvalidGraph(format!(
                    "grad: {} is {ty}; only float values have gradients",
                    describe(g, v)
                )));
            }
            depends[v.index()] = true;
        }
        for (i, n) in g.nodes.iter().enumerate() {
            if n.ty.dtype.is_float() && n.inputs.iter().any(|v| depends[v.index()]) {
                depends[i] = true;
            }
        }
        Ok(Backward {
            g,
            forward,
            depends,
            wrt: wrt.to_vec(),
            adj: HashMap::new(),
            row_sparse: Vec::new(),
            sparse_adj: HashMap::new(),
        })
    }

    fn run(mut self, seeds: Vec<(ValueId, ValueId)>) -> Result<Vec<Gradient>> {
        for (v, d) in seeds {
            self.accumulate(v, d)?;
        }
        for i in (0..self.forward).rev() {
            let v = ValueId(i as u32);
            let Some(&d) = self.adj.get(&v) else {
                continue;
            };
            // A wrt value's own inputs need nothing for it (it may be an intermediate).
            if !self.depends[i] || self.node_inputs_independent(i) {
                continue;
            }
            self.node(v, d).map_err(|e| {
                let name = self
                    .g
                    .node(v)
                    .name
                    .as_deref()
                    .map(|n| format!(" (`{n}`)"))
                    .unwrap_or_default();
                e.context(format!("grad of {v}{name}, {}", self.g.node(v).op.name()))
            })?;
        }
        let wrt = self.wrt.clone();
        let mut grads = Vec::with_capacity(wrt.len());
        for v in wrt {
            if self.row_sparse.contains(&v) {
                let parts = self.sparse_adj.remove(&v).unwrap_or_default();
                let ty = self.g.ty(v).clone();
                let (indices, rows) = match parts.len() {
                    0 => (
                        self.full(&[0], 0.0, DType::I64)?,
                        self.full(&[0, ty.shape[1]], 0.0, ty.dtype)?,
                    ),
                    1 => parts[0],
                    _ => {
                        let (is, rs): (Vec<ValueId>, Vec<ValueId>) = parts.into_iter().unzip();
                        (
                            self.add(Op::Concat { axis: 0 }, &is)?,
                            self.add(Op::Concat { axis: 0 }, &rs)?,
                        )
                    }
                };
                grads.push(Gradient::RowSparse { indices, rows });
                continue;
            }
            let d = match self.adj.get(&v) {
                Some(&d) => d,
                None => {
                    let ty = self.g.ty(v).clone();
                    self.full(&ty.shape, 0.0, ty.dtype)?
                }
            };
            grads.push(Gradient::Dense(d));
        }
        Ok(grads)
    }

    fn node_inputs_independent(&self, i: usize) -> bool {
        !self.g.nodes[i]
            .inputs
            .iter()
            .any(|v| self.depends[v.index()])
    }

    /// Whether operand `v` wants a cotangent.
    fn wants(&self, v: ValueId) -> bool {
        v.index() < self.forward && self.depends[v.index()]
    }

    fn accumulate(&mut self, v: ValueId, d: ValueId) -> Result<()> {
        if !self.wants(v) {
            return Ok(());
        }
        if self.row_sparse.contains(&v) {
            return Err(Error::InvalidGraph(format!(
                "{} is asked for a row-sparse gradient, but it is used other than as the \
                 table of an embedding_bag",
                describe(self.g, v)
            )));
        }
        let ty = self.g.ty(v).clone();
        let d = self.sum_to(d, &ty.shape)?;
        let d = self.cast(d, ty.dtype)?;
        let d = match self.adj.get(&v) {
            Some(&prev) => self.bin(B::Add, prev, d)?,
            None => d,
        };
        self.adj.insert(v, d);
        Ok(())
    }

    // Builders.

    fn add(&mut self, op: Op, inputs: &[ValueId]) -> Result<ValueId> {
        self.g.add(op, inputs, None).map_err(ir("grad"))
    }

    fn ty(&self, v: ValueId) -> TensorType {
        self.g.ty(v).clone()
    }

    fn shape(&self, v: ValueId) -> Vec<usize> {
        self.g.ty(v).shape.clone()
    }

    fn lit(&mut self, x: f64, dtype: DType) -> Result<ValueId> {
        self.g
            .add_literal(Scalar::Float(x), dtype)
            .map_err(ir("grad"))
    }

    fn full(&mut self, shape: &[usize], value: f64, dtype: DType) -> Result<ValueId> {
        self.add(
            Op::Full {
                shape: shape.to_vec(),
                value,
                dtype,
            },
            &[],
        )
    }

    fn un(&mut self, u: U, x: ValueId) -> Result<ValueId> {
        self.add(Op::Unary(u), &[x])
    }

    fn bin(&mut self, b: B, x: ValueId, y: ValueId) -> Result<ValueId> {
        self.add(Op::Binary(b), &[x, y])
    }

    /// `x <b> c`, `c` a literal of `x`'s dtype.
    fn bin_s(&mut self, b: B, x: ValueId, c: f64) -> Result<ValueId> {
        let dt = self.ty(x).dtype;
        let c = self.lit(c, dt)?;
        self.bin(b, x, c)
    }

    fn mul(&mut self, x: ValueId, y: ValueId) -> Result<ValueId> {
        self.bin(B::Mul, x, y)
    }

    fn sub(&mut self, x: ValueId, y: ValueId) -> Result<ValueId> {
        self.bin(B::Sub, x, y)
    }

    fn neg(&mut self, x: ValueId) -> Result<ValueId> {
        self.un(U::Neg, x)
    }

    fn select(&mut self, c: ValueId, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.add(Op::Where, &[c, a, b])
    }

    /// `where(c, d, 0)`.
    fn keep(&mut self, c: ValueId, d: ValueId) -> Result<ValueId> {
        let z = self.lit(0.0, self.ty(d).dtype)?;
        self.select(c, d, z)
    }

    fn cast(&mut self, x: ValueId, to: DType) -> Result<ValueId> {
        if self.ty(x).dtype == to {
            return Ok(x);
        }
        self.add(Op::Cast { to }, &[x])
    }

    fn reshape(&mut self, x: ValueId, shape: &[usize]) -> Result<ValueId> {
        if self.shape(x) == shape {
            return Ok(x);
        }
        let shape = shape.iter().map(|&d| d as i64).collect();
        self.add(Op::Reshape { shape }, &[x])
    }

    fn expand(&mut self, x: ValueId, shape: &[usize]) -> Result<ValueId> {
        if self.shape(x) == shape {
            return Ok(x);
        }
        let shape = shape.iter().map(|&d| d as i64).collect();
        self.add(Op::Expand { shape }, &[x])
    }

    fn sum(&mut self, x: ValueId, axes: &[usize], keepdim: bool) -> Result<ValueId> {
        self.reduce(R::Sum, x, axes, keepdim)
    }

    fn reduce(&mut self, r: R, x: ValueId, axes: &[usize], keepdim: bool) -> Result<ValueId> {
        let dt = self.ty(x).dtype;
        let axes = Some(axes.iter().map(|&a| a as i64).collect());
        let y = self.add(
            Op::Reduce {
                op: r,
                axes,
                keepdim,
            },
            &[x],
        )?;
        self.cast(y, dt)
    }

    fn mean_last(&mut self, x: ValueId) -> Result<ValueId> {
        let last = self.ty(x).rank() - 1;
        self.reduce(R::Mean, x, &[last], true)
    }

    fn matmul(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.add(Op::MatMul, &[a, b])
    }

    /// The last two axes swapped.
    fn mt(&mut self, x: ValueId) -> Result<ValueId> {
        self.add(Op::Transpose { dim0: -2, dim1: -1 }, &[x])
    }

    fn pad(&mut self, x: ValueId, pads: Vec<i64>) -> Result<ValueId> {
        if pads.iter().all(|&p| p == 0) {
            return Ok(x);
        }
        self.add(Op::Pad { pads, value: 0.0 }, &[x])
    }

    fn slice(&mut self, x: ValueId, axis: usize, start: usize, len: usize) -> Result<ValueId> {
        if start == 0 && self.shape(x)[axis] == len {
            return Ok(x);
        }
        self.add(
            Op::Slice {
                axis: axis as i64,
                start: start as i64,
                end: (start + len) as i64,
                step: 1,
            },
            &[x],
        )
    }

    /// `d` summed over the axes that broadcasting added or stretched, to `shape`.
    fn sum_to(&mut self, d: ValueId, shape: &[usize]) -> Result<ValueId> {
        let ds = self.shape(d);
        if ds == shape {
            return Ok(d);
        }
        if ds.len() < shape.len() {
            // A cotangent of lower rank than its value (a literal seed): broadcast it.
            return self.expand(d, shape);
        }
        let lead = ds.len() - shape.len();
        let mut axes: Vec<usize> = (0..lead).collect();
        for (i, &t) in shape.iter().enumerate() {
            if t == 1 && ds[lead + i] != 1 {
                axes.push(lead + i);
            } else if t != ds[lead + i] {
                if ds[lead + i] == 1 {
                    // Stretch instead (the value broadcast against a smaller cotangent).
                    let full = broadcast_shapes(&ds, shape)
                        .map_err(|e| Error::internal(format!("grad: cotangent shape: {e}")))?;
                    let e = self.expand(d, &full)?;
                    return self.sum_to(e, shape);
                }
                return Err(Error::internal(format!(
                    "grad: a cotangent of shape {ds:?} does not reduce to {shape:?}"
                )));
            }
        }
        let s = if axes.is_empty() {
            d
        } else {
            self.sum(d, &axes, true)?
        };
        self.reshape(s, shape)
    }

    /// The cotangents of one node's operands, given its result's `d`.
    fn node(&mut self, v: ValueId, d: ValueId) -> Result<()> {
        let node = self.g.node(v).clone();
        let xs = node.inputs.clone();
        let dt = node.ty.dtype;
        match &node.op {
            Op::Param { .. }
            | Op::Literal { .. }
            | Op::Full { .. }
            | Op::Arange { .. }
            | Op::Constant(_)
            | Op::ArgReduce { .. } => Ok(()),
            // Differentiated through their decomposition (see `differentiable`).
            Op::Conv { .. }
            | Op::ConvTranspose { .. }
            | Op::MaxPool { .. }
            | Op::AvgPool { .. }
            | Op::BatchNorm { .. }
            | Op::Clip { .. } => Err(Error::internal(format!(
                "grad: {} has no rule of its own and should have been decomposed",
                node.op.name()
            ))),
            Op::Unary(u) => {
                let x = xs[0];
                let dx = match u {
                    U::Neg => Some(self.neg(d)?),
                    U::Abs => {
                        let s = self.un(U::Sign, x)?;
                        Some(self.mul(d, s)?)
                    }
                    U::Exp => Some(self.mul(d, v)?),
                    U::Log => Some(self.bin(B::Div, d, x)?),
                    U::Sqrt => {
                        let two_y = self.bin_s(B::Mul, v, 2.0)?;
                        Some(self.bin(B::Div, d, two_y)?)
                    }
                    U::Rsqrt => {
                        // d/dx x^-1/2 = -1/2 y^3
                        let y2 = self.mul(v, v)?;
                        let y3 = self.mul(y2, v)?;
                        let k = self.bin_s(B::Mul, y3, -0.5)?;
                        Some(self.mul(d, k)?)
                    }
                    U::Reciprocal => {
                        let y2 = self.mul(v, v)?;
                        let k = self.mul(d, y2)?;
                        Some(self.neg(k)?)
                    }
                    U::Sin => {
                        let c = self.un(U::Cos, x)?;
                        Some(self.mul(d, c)?)
                    }
                    U::Cos => {
                        let s = self.un(U::Sin, x)?;
                        let k = self.mul(d, s)?;
                        Some(self.neg(k)?)
                    }
                    U::Tanh => {
                        let y2 = self.mul(v, v)?;
                        let one = self.lit(1.0, dt)?;
                        let k = self.sub(one, y2)?;
                        Some(self.mul(d, k)?)
                    }
                    U::Sigmoid => {
                        let one = self.lit(1.0, dt)?;
                        let om = self.sub(one, v)?;
                        let k = self.mul(v, om)?;
                        Some(self.mul(d, k)?)
                    }
                    U::Relu => {
                        let pos = self.bin_s(B::Gt, x, 0.0)?;
                        Some(self.keep(pos, d)?)
                    }
                    U::Gelu => {
                        // Phi(x) + x phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 (no cancellation
                        // for x << 0)
                        let xs2 = self.bin_s(B::Mul, x, -std::f64::consts::FRAC_1_SQRT_2)?;
                        let e = self.un(U::Erfc, xs2)?;
                        let cdf = self.bin_s(B::Mul, e, 0.5)?;
                        let x2 = self.mul(x, x)?;
                        let h = self.bin_s(B::Mul, x2, -0.5)?;
                        let ex = self.un(U::Exp, h)?;
                        let pdf = self.bin_s(
                            B::Mul,
                            ex,
                            0.5 * std::f64::consts::FRAC_2_SQRT_PI
                                * std::f64::consts::FRAC_1_SQRT_2,
                        )?;
                        let xp = self.mul(x, pdf)?;
                        let k = self.bin(B::Add, cdf, xp)?;
                        Some(self.mul(d, k)?)
                    }
                    U::GeluTanh => {
                        // y = x/2 (1 + tanh(u)), u = c (x + 0.044715 x^3), c = sqrt(2/pi)
                        let c = (2.0 / std::f64::consts::PI).sqrt();
                        let x2 = self.mul(x, x)?;
                        let x3 = self.mul(x2, x)?;
                        let t3 = self.bin_s(B::Mul, x3, 0.044715)?;
                        let inner = self.bin(B::Add, x, t3)?;
                        let u = self.bin_s(B::Mul, inner, c)?;
                        let t = self.un(U::Tanh, u)?;
                        let t1 = self.bin_s(B::Add, t, 1.0)?;
                        let left = self.bin_s(B::Mul, t1, 0.5)?;
                        let t2 = self.mul(t, t)?;
                        let one = self.lit(1.0, dt)?;
                        let sech2 = self.sub(one, t2)?;
                        let dx2 = self.bin_s(B::Mul, x2, 3.0 * 0.044715)?;
                        let du = self.bin_s(B::Add, dx2, 1.0)?;
                        let du = self.bin_s(B::Mul, du, c)?;
                        let hx = self.bin_s(B::Mul, x, 0.5)?;
                        let r = self.mul(hx, sech2)?;
                        let r = self.mul(r, du)?;
                        let k = self.bin(B::Add, left, r)?;
                        Some(self.mul(d, k)?)
                    }
                    U::Silu => {
                        // s (1 + x (1 - s))
                        let s = self.un(U::Sigmoid, x)?;
                        let one = self.lit(1.0, dt)?;
                        let om = self.sub(one, s)?;
                        let xo = self.mul(x, om)?;
                        let k = self.bin_s(B::Add, xo, 1.0)?;
                        let k = self.mul(s, k)?;
                        Some(self.mul(d, k)?)
                    }
                    U::Erf => {
                        let x2 = self.mul(x, x)?;
                        let n = self.neg(x2)?;
                        let e = self.un(U::Exp, n)?;
                        let k = self.bin_s(B::Mul, e, std::f64::consts::FRAC_2_SQRT_PI)?;
                        Some(self.mul(d, k)?)
                    }
                    U::Erfc => {
                        let x2 = self.mul(x, x)?;
                        let n = self.neg(x2)?;
                        let e = self.un(U::Exp, n)?;
                        let k = self.bin_s(B::Mul, e, -std::f64::consts::FRAC_2_SQRT_PI)?;
                        Some(self.mul(d, k)?)
                    }
                    U::Floor | U::Ceil | U::Sign | U::Not | U::BitwiseNot => None,
                };
                if let Some(dx) = dx {
                    self.accumulate(x, dx)?;
                }
                Ok(())
            }
            Op::Binary(b) => {
                let (a, c) = (xs[0], xs[1]);
                let (da, db) = match b {
                    B::Add => (Some(d), Some(d)),
                    B::Sub => (Some(d), Some(self.neg(d)?)),
                    B::Mul => (
                        self.wants(a).then(|| self.mul(d, c)).transpose()?,
                        self.wants(c).then(|| self.mul(d, a)).transpose()?,
                    ),
                    B::Div => {
                        let da = self.wants(a).then(|| self.bin(B::Div, d, c)).transpose()?;
                        let db = if self.wants(c) {
                            // -a/b^2 = -y/b
                            let q = self.bin(B::Div, v, c)?;
                            let k = self.mul(d, q)?;
                            Some(self.neg(k)?)
                        } else {
                            None
                        };
                        (da, db)
                    }
                    B::Pow => {
                        // Operands may be of other dtypes (promotion): work in the result's.
                        let (af, cf) = (self.cast(a, dt)?, self.cast(c, dt)?);
                        let da = if self.wants(a) {
                            let e1 = self.bin_s(B::Sub, cf, 1.0)?;
                            let p = self.bin(B::Pow, af, e1)?;
                            let k = self.mul(cf, p)?;
                            Some(self.mul(d, k)?)
                        } else {
                            None
                        };
                        let db = if self.wants(c) {
                            let l = self.un(U::Log, af)?;
                            let k = self.mul(v, l)?;
                            let k = self.mul(d, k)?;
                            // 0 where the base is 0 and the exponent is not negative.
                            let z = self.bin_s(B::Eq, af, 0.0)?;
                            let nn = self.bin_s(B::Ge, cf, 0.0)?;
                            let m = self.bin(B::And, z, nn)?;
                            let zero = self.lit(0.0, self.ty(k).dtype)?;
                            Some(self.select(m, zero, k)?)
                        } else {
                            None
                        };
                        (da, db)
                    }
                    B::Remainder | B::Fmod => {
                        let db = if self.wants(c) {
                            let q = if *b == B::Remainder {
                                B::FloorDivide
                            } else {
                                B::TruncDivide
                            };
                            let q = self.bin(q, a, c)?;
                            let k = self.mul(d, q)?;
                            Some(self.neg(k)?)
                        } else {
                            None
                        };
                        (Some(d), db)
                    }
                    B::Maximum | B::Minimum => {
                        let wins = if *b == B::Maximum { B::Gt } else { B::Lt };
                        let half = self.bin_s(B::Mul, d, 0.5)?;
                        let tie = self.bin(B::Eq, a, c)?;
                        let a_wins = self.bin(wins, a, c)?;
                        let c_wins = self.bin(wins, c, a)?;
                        let da = self.keep(a_wins, d)?;
                        let da = self.select(tie, half, da)?;
                        let db = self.keep(c_wins, d)?;
                        let db = self.select(tie, half, db)?;
                        (Some(da), Some(db))
                    }
                    B::FloorDivide
                    | B::TruncDivide
                    | B::Eq
                    | B::Ne
                    | B::Lt
                    | B::Le
                    | B::Gt
                    | B::Ge
                    | B::And
                    | B::Or
                    | B::BitwiseAnd
                    | B::BitwiseOr
                    | B::BitwiseXor
                    | B::LeftShift
                    | B::RightShift => (None, None),
                };
                if let Some(da) = da {
                    self.accumulate(a, da)?;
                }
                if let Some(db) = db {
                    self.accumulate(c, db)?;
                }
                Ok(())
            }
            Op::Where => {
                let (cond, a, b) = (xs[0], xs[1], xs[2]);
                if self.wants(a) {
                    let da = self.keep(cond, d)?;
                    self.accumulate(a, da)?;
                }
                if self.wants(b) {
                    let z = self.lit(0.0, dt)?;
                    let db = self.select(cond, z, d)?;
                    self.accumulate(b, db)?;
                }
                Ok(())
            }
            Op::Cast { .. } => {
                let x = xs[0];
                let from = self.ty(x).dtype;
                if from.is_float() {
                    let dx = self.cast(d, from)?;
                    self.accumulate(x, dx)?;
                }
                Ok(())
            }
            Op::Reduce { op, axes, keepdim } => {
                let x = xs[0];
                let xt = self.ty(x);
                let rank = xt.rank();
                let axes: Vec<usize> = match axes {
                    None => (0..rank).collect(),
                    Some(list) => list
                        .iter()
                        .map(|&a| normalize_axis(a, rank))
                        .collect::<std::result::Result<_, _>>()
                        .map_err(|e| Error::internal(format!("grad: {e}")))?,
                };
                // A rank-0 operand accepts axis 0 or -1 and reduces nothing.
                let axes: Vec<usize> = axes.into_iter().filter(|&a| a < rank).collect();
                let mut kshape = xt.shape.clone();
                for &a in &axes {
                    kshape[a] = 1;
                }
                let dk = if *keepdim {
                    d
                } else {
                    self.reshape(d, &kshape)?
                };
                let dx = match op {
                    R::Sum => self.expand(dk, &xt.shape)?,
                    R::Mean => {
                        let count: usize = axes.iter().map(|&a| xt.shape[a]).product();
                        let e = self.expand(dk, &xt.shape)?;
                        self.bin_s(B::Div, e, count.max(1) as f64)?
                    }
                    R::Max | R::Min => {
                        // Ties share the cotangent evenly.
                        let yk = if *keepdim {
                            v
                        } else {
                            self.reshape(v, &kshape)?
                        };
                        let hit = self.bin(B::Eq, x, yk)?;
                        let m = self.cast(hit, xt.dtype)?;
                        let n = self.sum(m, &axes, true)?;
                        let share = self.bin(B::Div, dk, n)?;
                        self.mul(m, share)?
                    }
                    R::Prod => {
                        // Exact with zeros: the product of the other elements.
                        let z = self.bin_s(B::Eq, x, 0.0)?;
                        let zf = self.cast(z, xt.dtype)?;
                        let nz = self.sum(zf, &axes, true)?;
                        let one = self.lit(1.0, xt.dtype)?;
                        let x1 = self.select(z, one, x)?;
                        let p1 = self.reduce(R::Prod, x1, &axes, true)?;
                        let none = self.bin_s(B::Eq, nz, 0.0)?;
                        let single = self.bin_s(B::Eq, nz, 1.0)?;
                        let at_zero = self.bin(B::And, single, z)?;
                        let others = self.bin(B::Div, p1, x1)?;
                        let k = self.keep(at_zero, p1)?;
                        let k = self.select(none, others, k)?;
                        self.mul(dk, k)?
                    }
                };
                self.accumulate(x, dx)
            }
            Op::Softmax { axis } => {
                let a = normalize_axis(*axis, node.ty.rank())
                    .map_err(|e| Error::internal(format!("grad: {e}")))?;
                let gy = self.mul(d, v)?;
                let s = self.sum(gy, &[a], true)?;
                let c = self.sub(d, s)?;
                let dx = self.mul(v, c)?;
                self.accumulate(xs[0], dx)
            }
            Op::LogSoftmax { axis } => {
                let a = normalize_axis(*axis, node.ty.rank())
                    .map_err(|e| Error::internal(format!("grad: {e}")))?;
                let p = self.un(U::Exp, v)?;
                let s = self.sum(d, &[a], true)?;
                let ps = self.mul(p, s)?;
                let dx = self.sub(d, ps)?;
                self.accumulate(xs[0], dx)
            }
            Op::LayerNorm { eps } | Op::RmsNorm { eps } => {
                let layer = matches!(node.op, Op::LayerNorm { .. });
                let (x, w) = (xs[0], xs[1]);
                let xd = self.ty(x).dtype;
                let xc = if layer {
                    let mu = self.mean_last(x)?;
                    self.sub(x, mu)?
                } else {
                    x
                };
                let sq = self.mul(xc, xc)?;
                let var = self.mean_last(sq)?;
                let ve = self.bin_s(B::Add, var, *eps)?;
                let r = self.un(U::Rsqrt, ve)?;
                let xh = self.mul(xc, r)?;
                if self.wants(x) {
                    let dxh = self.mul(d, w)?;
                    let dxh = self.cast(dxh, xd)?;
                    let p = self.mul(dxh, xh)?;
                    let mp = self.mean_last(p)?;
                    let t = self.mul(xh, mp)?;
                    let mut inner = self.sub(dxh, t)?;
                    if layer {
                        let md = self.mean_last(dxh)?;
                        inner = self.sub(inner, md)?;
                    }
                    let dx = self.mul(r, inner)?;
                    self.accumulate(x, dx)?;
                }
                if self.wants(w) {
                    let dw = self.mul(d, xh)?;
                    self.accumulate(w, dw)?;
                }
                if layer && self.wants(xs[2]) {
                    self.accumulate(xs[2], d)?;
                }
                Ok(())
            }
            Op::MatMul => {
                let (a, b) = (xs[0], xs[1]);
                let (ar, br) = (self.ty(a).rank(), self.ty(b).rank());
                match (ar, br) {
                    (1, 1) => {
                        if self.wants(a) {
                            let da = self.mul(d, b)?;
                            self.accumulate(a, da)?;
                        }
                        if self.wants(b) {
                            let db = self.mul(d, a)?;
                            self.accumulate(b, db)?;
                        }
                    }
                    _ => {
                        // Lift 1-D operands to matrices, as numpy does, and the cotangent with them.
                        let a2 = if ar == 1 {
                            let k = self.shape(a)[0];
                            self.reshape(a, &[1, k])?
                        } else {
                            a
                        };
                        let b2 = if br == 1 {
                            let k = self.shape(b)[0];
                            self.reshape(b, &[k, 1])?
                        } else {
                            b
                        };
                        let mut ds = self.shape(d);
                        if ar == 1 {
                            ds.insert(ds.len() - 1, 1);
                        }
                        if br == 1 {
                            ds.push(1);
                        }
                        let d2 = self.reshape(d, &ds)?;
                        if self.wants(a) {
                            let bt = self.mt(b2)?;
                            let da = self.matmul(d2, bt)?;
                            let s = self.shape(a2);
                            let da = self.sum_to(da, &s)?;
                            let s = self.shape(a);
                            let da = self.reshape(da, &s)?;
                            self.accumulate(a, da)?;
                        }
                        if self.wants(b) {
                            let at = self.mt(a2)?;
                            let db = self.matmul(at, d2)?;
                            let s = self.shape(b2);
                            let db = self.sum_to(db, &s)?;
                            let s = self.shape(b);
                            let db = self.reshape(db, &s)?;
                            self.accumulate(b, db)?;
                        }
                    }
                }
                Ok(())
            }
            Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
                let s = self.shape(xs[0]);
                let dx = self.reshape(d, &s)?;
                self.accumulate(xs[0], dx)
            }
            Op::Permute { dims } => {
                let rank = dims.len();
                let mut inv = vec![0i64; rank];
                for (i, &p) in dims.iter().enumerate() {
                    let p = normalize_axis(p, rank)
                        .map_err(|e| Error::internal(format!("grad: {e}")))?;
                    inv[p] = i as i64;
                }
                let dx = self.add(Op::Permute { dims: inv }, &[d])?;
                self.accumulate(xs[0], dx)
            }
            Op::Transpose { dim0, dim1 } => {
                let dx = self.add(
                    Op::Transpose {
                        dim0: *dim0,
                        dim1: *dim1,
                    },
                    &[d],
                )?;
                self.accumulate(xs[0], dx)
            }
            Op::Expand { .. } => self.accumulate(xs[0], d),
            Op::Slice {
                axis, start, step, ..
            } => {
                let x = xs[0];
                let xshape = self.shape(x);
                let rank = xshape.len();
                let a = normalize_axis(*axis, rank)
                    .map_err(|e| Error::internal(format!("grad: {e}")))?;
                let n = xshape[a] as i64;
                let len = node.ty.shape[a];
                if len == 0 {
                    return Ok(());
                }
                let s0 = if *start < 0 { *start + n } else { *start }.clamp(0, n);
                let step = *step as usize;
                // Spread the cotangent to every step-th position: [.., len, step, ..] merged.
                let spread = if step > 1 {
                    let u = self.add(Op::Unsqueeze { axis: a as i64 + 1 }, &[d])?;
                    let mut pads = vec![0i64; 2 * (rank + 1)];
                    pads[2 * (a + 1) + 1] = step as i64 - 1;
                    let p = self.pad(u, pads)?;
                    let mut s = node.ty.shape.clone();
                    s[a] = len * step;
                    self.reshape(p, &s)?
                } else {
                    d
                };
                let spread_len = (len * step) as i64;
                let mut pads = vec![0i64; 2 * rank];
                pads[2 * a] = s0;
                pads[2 * a + 1] = n - s0 - spread_len;
                let dx = self.pad(spread, pads)?;
                self.accumulate(x, dx)
            }
            Op::Concat { axis } => {
                let rank = node.ty.rank();
                let a = normalize_axis(*axis, rank)
                    .map_err(|e| Error::internal(format!("grad: {e}")))?;
                let mut off = 0;
                for &x in &xs {
                    let len = self.shape(x)[a];
                    if self.wants(x) {
                        let dx = self.slice(d, a, off, len)?;
                        self.accumulate(x, dx)?;
                    }
                    off += len;
                }
                Ok(())
            }
            Op::Pad { pads, .. } => {
                let neg: Vec<i64> = pads.iter().map(|&p| -p).collect();
                let dx = self.pad(d, neg)?;
                self.accumulate(xs[0], dx)
            }
            Op::IndexSelect { axis } => {
                let (x, idx) = (xs[0], xs[1]);
                let xshape = self.shape(x);
                let a = normalize_axis(*axis, xshape.len())
                    .map_err(|e| Error::internal(format!("grad: {e}")))?;
                let p: usize = self.shape(idx).iter().product();
                // dx = index_add(0, idx, d) with d's index axes flattened into one.
                let flat = self.reshape(idx, &[p])?;
                let mut ds = xshape.clone();
                ds[a] = p;
                let d = self.reshape(d, &ds)?;
                let zero = self.full(&xshape, 0.0, dt)?;
                let dx = self.add(Op::IndexAdd { axis: a as i64 }, &[zero, flat, d])?;
                self.accumulate(x, dx)
            }
            Op::Gather { axis } => {
                let (x, idx) = (xs[0], xs[1]);
                let xshape = self.shape(x);
                let oshape = node.ty.shape.clone();
                let rank = xshape.len();
                let a = normalize_axis(*axis, rank)
                    .map_err(|e| Error::internal(format!("grad: {e}")))?;
                // Output element c read x at flat position sum_k c'_k * stride_k, with
                // c'_a = idx[c] and c'_k = 0 where x broadcast: scatter-add d there.
                let strides = ferrite_ir::types::contiguous_strides(&xshape);
                let iv = self.cast(idx, DType::I64)?;
                let sa = self.int(strides[a] as i64)?;
                let mut lin = self.bin(B::Mul, iv, sa)?;
                for k in (0..rank).filter(|&k| k != a && xshape[k] > 1) {
                    let ar = self.iota(oshape[k])?;
                    let mut s = vec![1usize; rank];
                    s[k] = oshape[k];
                    let ar = self.reshape(ar, &s)?;
                    let sk = self.int(strides[k] as i64)?;
                    let c = self.bin(B::Mul, ar, sk)?;
                    lin = self.bin(B::Add, lin, c)?;
                }
                let n: usize = oshape.iter().product();
                let lin = self.expand(lin, &oshape)?;
                let lin = self.reshape(lin, &[n])?;
                let d = self.reshape(d, &[n])?;
                let numel: usize = xshape.iter().product();
                let zero = self.full(&[numel], 0.0, dt)?;
                let dx = self.add(Op::IndexAdd { axis: 0 }, &[zero, lin, d])?;
                let dx = self.reshape(dx, &xshape)?;
                self.accumulate(x, dx)
            }
            Op::IndexAdd { axis } => {
                let (base, idx, src) = (xs[0], xs[1], xs[2]);
                self.accumulate(base, d)?;
                if self.wants(src) {
                    let ds = self.add(Op::IndexSelect { axis: *axis }, &[d, idx])?;
                    self.accumulate(src, ds)?;
                }
                Ok(())
            }
            Op::IndexReduce {
                axis,
                reduce,
                include_self,
            } => self.index_reduce(*axis, *reduce, *include_self, v, &xs, d),
            Op::EmbeddingBag { .. } => self.embedding_bag(&node.op, &xs, d),
        }
    }

    /// `index_reduce`'s rule for `amax`/`amin` (PyTorch's): the cotangent of each result
    /// element is split evenly among the values equal to it, the base's (when it took
    /// part) and the sources sent there. `prod` has no rule (its zeros need exclusive
    /// products); `mean` is differentiated through its decomposition.
    fn index_reduce(
        &mut self,
        axis: i64,
        reduce: ferrite_ir::IndexReduceOp,
        include_self: bool,
        v: ValueId,
        xs: &[ValueId],
        d: ValueId,
    ) -> Result<()> {
        use ferrite_ir::IndexReduceOp as R;
        if !matches!(reduce, R::Amax | R::Amin) {
            return Err(Error::InvalidGraph(format!(
                "index_reduce with reduce=\"{}\" has no gradient rule",
                reduce.name()
            )));
        }
        let (base, idx, src) = (xs[0], xs[1], xs[2]);
        if !self.wants(base) && !self.wants(src) {
            return Ok(());
        }
        let dt = self.ty(v).dtype;
        let picked = self.add(Op::IndexSelect { axis }, &[v, idx])?;
        let src_is = self.bin(B::Eq, src, picked)?;
        let src_is = self.cast(src_is, dt)?;
        let self_is = self.bin(B::Eq, base, v)?;
        let mut self_is = self.cast(self_is, dt)?;
        if !include_self {
            // The base's value took part only where no index points.
            let zeros = self.full(&self.shape(base), 0.0, dt)?;
            let ones = self.full(&self.shape(src), 1.0, dt)?;
            let hits = self.add(Op::IndexAdd { axis }, &[zeros, idx, ones])?;
            let zero = self.lit(0.0, dt)?;
            let untouched = self.bin(B::Eq, hits, zero)?;
            let untouched = self.cast(untouched, dt)?;
            self_is = self.mul(self_is, untouched)?;
        }
        let ties = self.add(Op::IndexAdd { axis }, &[self_is, idx, src_is])?;
        let share = self.bin(B::Div, d, ties)?;
        if self.wants(base) {
            let db = self.mul(self_is, share)?;
            self.accumulate(base, db)?;
        }
        if self.wants(src) {
            let ds = self.add(Op::IndexSelect { axis }, &[share, idx])?;
            let ds = self.mul(src_is, ds)?;
            self.accumulate(src, ds)?;
        }
        Ok(())
    }

    /// `embedding_bag`'s rule: each lookup's row gets its bag's cotangent, times its
    /// factor (weight, padding mask, 1/count), added into the table by `index_add`, or
    /// kept as (indices, rows) for a row-sparse table; each weight gets the dot product
    /// of its bag's cotangent with its row. In max mode each element of a bag's
    /// cotangent goes to the first lookup whose row attains the maximum there (PyTorch's
    /// rule), found by an `index_reduce(amin)` of the positions that attain it.
    fn embedding_bag(&mut self, op: &Op, xs: &[ValueId], d: ValueId) -> Result<()> {
        use crate::decompose::bag::{bag_parts, BagAttrs};
        let attrs = BagAttrs::of(op).ok_or_else(|| Error::internal("not an embedding_bag"))?;
        if attrs.mode == ferrite_ir::BagMode::Max {
            return self.embedding_bag_max(attrs, xs, d);
        }
        let (table, idx) = (xs[0], xs[1]);
        let weights = xs.get(3).copied().filter(|&w| self.wants(w));
        if !self.wants(table) && weights.is_none() {
            return Ok(());
        }
        let tt = self.ty(table);
        let parts = bag_parts(self.g, attrs, xs).map_err(ir("grad"))?;
        let dc = self.cast(d, parts.compute)?;
        let per_lookup = self.add(Op::IndexSelect { axis: 0 }, &[dc, parts.seg])?;
        if let Some(w) = weights {
            let rows = self.add(Op::IndexSelect { axis: 0 }, &[table, idx])?;
            let rows = self.cast(rows, parts.compute)?;
            let prod = self.mul(per_lookup, rows)?;
            let mut dw = self.sum(prod, &[1], false)?;
            if let Some(p) = attrs.padding_idx {
                let p = if p < 0 { p + tt.shape[0] as i64 } else { p };
                let iv = self.cast(idx, DType::I64)?;
                let p = self.int(p)?;
                let keep = self.bin(B::Ne, iv, p)?;
                dw = self.keep(keep, dw)?;
            }
            self.accumulate(w, dw)?;
        }
        if !self.wants(table) {
            return Ok(());
        }
        let mut rows = per_lookup;
        if let Some(f) = parts.factor {
            rows = self.mul(rows, f)?;
        }
        if let Some(c) = parts.denom {
            let c = self.add(Op::IndexSelect { axis: 0 }, &[c, parts.seg])?;
            let n = self.shape(c)[0];
            let c = self.reshape(c, &[n, 1])?;
            rows = self.bin(B::Div, rows, c)?;
        }
        self.table_cotangent(table, idx, rows)
    }

    /// The table's cotangent from each lookup's row of it: kept as (indices, rows) for a
    /// row-sparse table, else added into zeros by `index_add`.
    fn table_cotangent(&mut self, table: ValueId, idx: ValueId, rows: ValueId) -> Result<()> {
        let tt = self.ty(table);
        let rows = self.cast(rows, tt.dtype)?;
        if self.row_sparse.contains(&table) {
            let iv = self.cast(idx, DType::I64)?;
            self.sparse_adj.entry(table).or_default().push((iv, rows));
            return Ok(());
        }
        let zero = self.full(&tt.shape, 0.0, tt.dtype)?;
        let dx = self.add(Op::IndexAdd { axis: 0 }, &[zero, idx, rows])?;
        self.accumulate(table, dx)
    }

    /// `embedding_bag(mode="max")`'s rule (see [`Backward::embedding_bag`]).
    fn embedding_bag_max(
        &mut self,
        attrs: crate::decompose::bag::BagAttrs,
        xs: &[ValueId],
        d: ValueId,
    ) -> Result<()> {
        use crate::decompose::bag::{bag_parts, max_segments};
        use ferrite_ir::IndexReduceOp;
        let (table, idx) = (xs[0], xs[1]);
        if !self.wants(table) {
            return Ok(());
        }
        let tt = self.ty(table);
        let parts = bag_parts(self.g, attrs, xs).map_err(ir("grad"))?;
        let seg = max_segments(self.g, attrs, &parts, idx, tt.shape[0]).map_err(ir("grad"))?;
        // Padding rows go to a bag past the real ones, whose cotangent is 0.
        let bags = parts.bags + usize::from(attrs.padding_idx.is_some());
        let (n, dim) = (self.shape(idx)[0], tt.shape[1]);
        let rows = self.add(Op::IndexSelect { axis: 0 }, &[table, idx])?;
        let rows = self.cast(rows, parts.compute)?;
        let reduce = |reduce| Op::IndexReduce {
            axis: 0,
            reduce,
            include_self: reduce == IndexReduceOp::Amin,
        };
        let zeros = self.full(&[bags, dim], 0.0, parts.compute)?;
        let maxes = self.add(reduce(IndexReduceOp::Amax), &[zeros, seg, rows])?;
        let best = self.add(Op::IndexSelect { axis: 0 }, &[maxes, seg])?;
        let attains = self.bin(B::Eq, rows, best)?;
        let pos = self.iota(n)?;
        let pos = self.reshape(pos, &[n, 1])?;
        let none = self.int(n as i64)?;
        let cand = self.select(attains, pos, none)?;
        let start = self.full(&[bags, dim], n as f64, DType::I64)?;
        let first = self.add(reduce(IndexReduceOp::Amin), &[start, seg, cand])?;
        let first = self.add(Op::IndexSelect { axis: 0 }, &[first, seg])?;
        let is_first = self.bin(B::Eq, cand, first)?;
        // A NaN attains nothing: no row of its bag gets that element.
        let is_first = self.bin(B::And, is_first, attains)?;
        let mut dc = self.cast(d, parts.compute)?;
        if bags > parts.bags {
            let pad = self.full(&[1, dim], 0.0, parts.compute)?;
            dc = self.add(Op::Concat { axis: 0 }, &[dc, pad])?;
        }
        let per_lookup = self.add(Op::IndexSelect { axis: 0 }, &[dc, seg])?;
        let zero = self.lit(0.0, parts.compute)?;
        let rows = self.select(is_first, per_lookup, zero)?;
        self.table_cotangent(table, idx, rows)
    }

    /// An `i64` literal.
    fn int(&mut self, v: i64) -> Result<ValueId> {
        self.g
            .add_literal(Scalar::Int(v), DType::I64)
            .map_err(ir("grad"))
    }

    /// `arange(m)` as `i64`: the positions an index is compared against.
    fn iota(&mut self, m: usize) -> Result<ValueId> {
        self.add(
            Op::Arange {
                start: 0.0,
                end: m as f64,
                step: 1.0,
                dtype: DType::I64,
            },
            &[],
        )
    }
}

fn describe(g: &Graph, v: ValueId) -> String {
    match &g.node(v).name {
        Some(n) => format!("`{n}`"),
        None => format!("{v}"),
    }
}

/// What the backward pass of a joint graph reads from the forward pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedForBackward {
    /// Forward values computed by ops (activations) that backward nodes read.
    pub activations: Vec<ValueId>,
    /// Their size in bytes: what must stay alive from the forward pass to the backward
    /// one if the two ran as separate programs (as AOTAutograd's partition would).
    pub activation_bytes: usize,
    /// Parameters and constants that backward nodes read (alive anyway).
    pub inputs: Vec<ValueId>,
}

/// The forward values that the backward part of `joint` (made by [`grad`] or [`vjp`]
/// from `original`) reads.
pub fn saved_for_backward(original: &Graph, joint: &Graph) -> SavedForBackward {
    // The joint graph extends the graph `differentiable` made of `original`.
    let forward = match differentiable(original, &[]) {
        Ok((d, _)) => d.nodes.len(),
        Err(_) => original.nodes.len(),
    };
    let mut read = vec![false; forward];
    for n in &joint.nodes[forward.min(joint.nodes.len())..] {
        for x in &n.inputs {
            if x.index() < forward {
                read[x.index()] = true;
            }
        }
    }
    let (mut activations, mut inputs) = (Vec::new(), Vec::new());
    let mut activation_bytes = 0;
    for (i, &r) in read.iter().enumerate() {
        if !r {
            continue;
        }
        let v = ValueId(i as u32);
        match joint.node(v).op {
            Op::Param { .. } | Op::Constant(_) => inputs.push(v),
            Op::Literal { .. } => {}
            _ => {
                activation_bytes += joint.ty(v).size_bytes();
                activations.push(v);
            }
        }
    }
    SavedForBackward {
        activations,
        activation_bytes,
        inputs,
    }
}
