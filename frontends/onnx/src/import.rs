//! `ModelProto` to `ferrite_ir::Graph`: the value table, constant folding, names.
//!
//! Every ONNX value is either a constant known at import time ([`Val::Const`]:
//! initializers, `Constant` nodes, shapes, and the result of any op whose operands
//! are all constants) or a value of the graph being built ([`Val::Ir`]). [`Ctx::op`]
//! is the one place an IR op is applied: with constant operands it evaluates the op
//! with the reference interpreter's [`eval_node`] (so folding and running agree by
//! construction), otherwise it adds a node to the graph.

use crate::error::{invalid, unsupported, Error, NodeRef, OpError, OpResult, Result};
use crate::proto::{
    attribute_proto::AttributeType, type_proto, AttributeProto, ModelProto, NodeProto,
};
use crate::tensor::{dtype_of, to_tensor, ExternalData};
use ferrite_ir::interp::eval_node;
use ferrite_ir::{
    infer::infer, Constant, DType, Data, Graph, Op, Scalar, Tensor, TensorType, ValueId,
};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The oldest default-domain opset Ferrite imports.
pub const MIN_OPSET: i64 = 7;
/// The newest default-domain opset Ferrite imports (the newest in onnx 1.22's node tests).
pub const MAX_OPSET: i64 = 27;
/// At most this many nodes in a graph.
pub const MAX_NODES: usize = 1 << 20;
/// At most this many initializers, inputs or outputs of a graph.
pub const MAX_VALUES: usize = 1 << 20;
/// At most this many attributes, inputs or outputs of one node.
pub const MAX_NODE_ARITY: usize = 1 << 12;
/// Constant results up to this many elements are folded at import; larger ones become graph ops.
pub const FOLD_LIMIT: usize = 1 << 24;
/// At most this many bytes of constants are made by folding during one import (the
/// interpreter's working copies of one fold are bounded by [`FOLD_LIMIT`]); past it, nodes
/// become graph ops, which the run's memory budget then bounds.
pub const FOLD_BUDGET: u64 = 2 << 30;

/// What the importer needs from the user.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Values of symbolic dimensions (`batch` -> 1).
    pub dims: HashMap<String, usize>,
    /// Graph inputs whose values are known at import time (a `Reshape`'s shape fed
    /// as an input): they become constants instead of parameters.
    pub values: HashMap<String, Tensor>,
    /// Bytes of constants folding may make (default [`FOLD_BUDGET`]).
    pub fold_budget: Option<u64>,
}

/// A graph value under its two names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The name in the ONNX model.
    pub onnx: String,
    /// The name in the Ferrite graph (the ONNX name when it is a valid Ferrite name).
    pub name: String,
}

/// An imported model.
#[derive(Clone, Debug)]
pub struct Model {
    /// The graph: one parameter per non-initializer input, one output per ONNX output.
    pub graph: Graph,
    /// The parameters, in order.
    pub inputs: Vec<Binding>,
    /// The outputs, in order.
    pub outputs: Vec<Binding>,
    /// The default-domain opset the model was imported under.
    pub opset: i64,
}

/// A value during import.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    /// Known at import time.
    Const(Arc<Tensor>),
    /// Computed by the graph.
    Ir(ValueId),
}

/// The graph being built.
pub(crate) struct Ctx {
    pub g: Graph,
    /// Parameter values and their ONNX input names, for `NeedsValue` errors.
    params: HashMap<ValueId, String>,
    /// Bytes of constants folding has made so far, and how many it may make.
    folded: u64,
    fold_budget: u64,
    /// ONNX nodes imported so far, counting each unrolled copy of a subgraph's nodes:
    /// bounded by [`MAX_NODES`] so that unrolling cannot grow without limit.
    pub imported: usize,
}

impl Ctx {
    pub fn ty(&self, v: &Val) -> TensorType {
        match v {
            Val::Const(t) => t.ty.clone(),
            Val::Ir(id) => self.g.ty(*id).clone(),
        }
    }

    pub fn shape(&self, v: &Val) -> Vec<usize> {
        self.ty(v).shape
    }

    /// The extent of axis `a` of `v`, or an error naming the axis when `v` has no such axis
    /// (a model whose operand has a smaller rank than the op needs).
    pub fn dim(&self, v: &Val, a: usize) -> OpResult<usize> {
        let shape = self.shape(v);
        match shape.get(a) {
            Some(&d) => Ok(d),
            None => Err(crate::error::OpError::Invalid(format!(
                "an operand of rank {} has no axis {a}",
                shape.len()
            ))),
        }
    }

    pub fn dtype(&self, v: &Val) -> DType {
        self.ty(v).dtype
    }

    pub fn rank(&self, v: &Val) -> usize {
        self.ty(v).rank()
    }

    /// Applies an IR op: evaluated now when every operand is a constant (and the result
    /// is small enough to keep), added to the graph otherwise.
    pub fn op(&mut self, op: Op, args: &[&Val]) -> OpResult<Val> {
        let tys: Vec<TensorType> = args.iter().map(|a| self.ty(a)).collect();
        let refs: Vec<&TensorType> = tys.iter().collect();
        let out = infer(&op, &refs)?;
        let bytes = (out.numel() as u64).saturating_mul(out.dtype.size_bytes() as u64);
        if out.numel() <= FOLD_LIMIT && self.folded.saturating_add(bytes) <= self.fold_budget {
            let consts: Option<Vec<&Tensor>> = args
                .iter()
                .map(|a| match a {
                    Val::Const(t) => Some(t.as_ref()),
                    Val::Ir(_) => None,
                })
                .collect();
            if let Some(consts) = consts {
                self.folded += bytes;
                return Ok(Val::Const(Arc::new(eval_node(&op, &consts, &out)?)));
            }
        }
        let ids = args
            .iter()
            .map(|a| self.ir(a))
            .collect::<OpResult<Vec<_>>>()?;
        Ok(Val::Ir(self.g.add(op, &ids, None)?))
    }

    /// The graph value of `v`: constants become literals (rank 0), `full` (one value
    /// repeated, or no values) or constant tensors.
    pub fn ir(&mut self, v: &Val) -> OpResult<ValueId> {
        let t = match v {
            Val::Ir(id) => return Ok(*id),
            Val::Const(t) => t,
        };
        let dtype = t.ty.dtype;
        let first = first_value(t);
        if t.ty.rank() == 0 {
            if let Some(s) = first {
                return Ok(self.g.add_literal(s, dtype)?);
            }
        }
        let first = first.or(Some(Scalar::Int(0)).filter(|_| t.is_empty()));
        if let Some(s) = first.filter(|_| is_splat(t)) {
            let value = s.as_f64();
            let exact = match s {
                Scalar::Int(i) => value as i64 == i,
                _ => true,
            };
            if exact {
                let op = Op::Full {
                    shape: t.ty.shape.clone(),
                    value,
                    dtype,
                };
                return Ok(self.g.add(op, &[], None)?);
            }
        }
        Ok(self.g.add_constant(Constant::new(t.clone()), None)?)
    }

    /// A rank-0 constant of `dtype`.
    pub fn scalar(&self, v: f64, dtype: DType) -> Val {
        let ty = TensorType::scalar(dtype);
        Val::Const(Arc::new(if dtype.is_float() {
            Tensor::from_f64(&ty, &[v])
        } else {
            Tensor::from_i64(&ty, &[v as i64])
        }))
    }

    /// The constant value of `v`, or why it is not known at import time.
    pub fn constant(&self, v: &Val, role: &str) -> OpResult<Arc<Tensor>> {
        match v {
            Val::Const(t) => Ok(t.clone()),
            Val::Ir(id) => match self.params.get(id) {
                Some(input) => Err(OpError::NeedsValue {
                    operand: role.to_string(),
                    input: input.clone(),
                }),
                None => match self.input_behind(*id) {
                    // Computed from a graph input only: with that input's value it folds.
                    Some(input) => Err(OpError::NeedsValue {
                        operand: role.to_string(),
                        input,
                    }),
                    None => unsupported!(
                        "operand `{role}` is computed by the graph, but Ferrite needs it at import time (shapes are static)"
                    ),
                },
            },
        }
    }

    /// The first graph input (in graph order) that `id` is computed from, if any. A
    /// value needed at import time that depends on inputs folds once they are given,
    /// one at a time (`Range(0, Size(x) - 1)` with `x`'s value).
    fn input_behind(&self, id: ValueId) -> Option<String> {
        let mut seen = vec![false; self.g.nodes.len()];
        let mut stack = vec![id];
        let mut found: Option<ValueId> = None;
        while let Some(v) = stack.pop() {
            if std::mem::replace(&mut seen[v.index()], true) {
                continue;
            }
            if self.params.contains_key(&v) {
                found = Some(found.map_or(v, |f| f.min(v)));
            }
            stack.extend(self.g.node(v).inputs.iter().copied());
        }
        found.and_then(|v| self.params.get(&v).cloned())
    }

    /// The integer values of a constant operand (shapes, axes, pads).
    pub fn ints(&self, v: &Val, role: &str) -> OpResult<Vec<i64>> {
        let t = self.constant(v, role)?;
        if !matches!(t.ty.dtype, DType::I32 | DType::I64) {
            invalid!("operand `{role}` must be an integer tensor, not {}", t.ty);
        }
        Ok(t.to_i64())
    }

    /// The one number of a constant scalar (or one-element) operand.
    pub fn number(&self, v: &Val, role: &str) -> OpResult<f64> {
        let t = self.constant(v, role)?;
        if t.len() != 1 {
            invalid!("operand `{role}` must hold one value, not {}", t.ty);
        }
        Ok(t.to_f64()[0])
    }
}

fn first_value(t: &Tensor) -> Option<Scalar> {
    Some(match &t.data {
        Data::F32(v) => Scalar::Float(*v.first()? as f64),
        Data::F16(v) => Scalar::Float(v.first()?.to_f64()),
        Data::Bf16(v) => Scalar::Float(v.first()?.to_f64()),
        Data::I32(v) => Scalar::Int(*v.first()? as i64),
        Data::I64(v) => Scalar::Int(*v.first()?),
        Data::Bool(v) => Scalar::Bool(*v.first()?),
        Data::F64(v) => Scalar::Float(*v.first()?),
        Data::I8(v) => Scalar::Int(*v.first()? as i64),
        Data::U8(v) => Scalar::Int(*v.first()? as i64),
        Data::I16(v) => Scalar::Int(*v.first()? as i64),
        Data::U16(v) => Scalar::Int(*v.first()? as i64),
        Data::U32(v) => Scalar::Int(*v.first()? as i64),
        // A literal is at most an i64.
        Data::U64(v) => Scalar::Int(i64::try_from(*v.first()?).ok()?),
    })
}

fn is_splat(t: &Tensor) -> bool {
    fn same<T: PartialEq + Copy>(v: &[T], eq: impl Fn(T, T) -> bool) -> bool {
        v.iter().all(|&x| eq(x, v[0]))
    }
    match &t.data {
        Data::F32(v) => same(v, |a, b| a.to_bits() == b.to_bits()),
        Data::F16(v) => same(v, |a, b| a.to_bits() == b.to_bits()),
        Data::Bf16(v) => same(v, |a, b| a.to_bits() == b.to_bits()),
        Data::I32(v) => same(v, |a, b| a == b),
        Data::I64(v) => same(v, |a, b| a == b),
        Data::Bool(v) => same(v, |a, b| a == b),
        Data::F64(v) => same(v, |a, b| a.to_bits() == b.to_bits()),
        Data::I8(v) => same(v, |a, b| a == b),
        Data::U8(v) => same(v, |a, b| a == b),
        Data::I16(v) => same(v, |a, b| a == b),
        Data::U16(v) => same(v, |a, b| a == b),
        Data::U32(v) => same(v, |a, b| a == b),
        Data::U64(v) => same(v, |a, b| a == b),
    }
}

/// One node being imported: its operands (`None` for an omitted optional one), its
/// attributes and the opset of its domain.
pub(crate) struct NodeIn<'a> {
    pub proto: &'a NodeProto,
    pub inputs: Vec<Option<Val>>,
    pub opset: i64,
    attrs: HashMap<&'a str, &'a AttributeProto>,
}

impl<'a> NodeIn<'a> {
    /// The number of outputs the node declares (trailing empty names left out).
    pub fn outputs(&self) -> usize {
        let o = &self.proto.output;
        o.len() - o.iter().rev().take_while(|s| s.is_empty()).count()
    }

    /// Operand `i`, which must be present.
    pub fn input(&self, i: usize) -> OpResult<&Val> {
        match self.inputs.get(i) {
            Some(Some(v)) => Ok(v),
            _ => invalid!("operand {i} is missing"),
        }
    }

    /// Operand `i`, if given.
    pub fn opt(&self, i: usize) -> Option<&Val> {
        self.inputs.get(i).and_then(|v| v.as_ref())
    }

    /// Every operand, each required.
    pub fn all(&self) -> OpResult<Vec<&Val>> {
        (0..self.inputs.len()).map(|i| self.input(i)).collect()
    }

    fn attr(&self, name: &str, ty: AttributeType) -> OpResult<Option<&'a AttributeProto>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(a) => {
                let actual = a.r#type();
                // Old exporters leave `type` unset; the field present then decides.
                if actual != ty && actual != AttributeType::Undefined {
                    invalid!(
                        "attribute `{name}` is {}, expected {}",
                        actual.as_str_name(),
                        ty.as_str_name()
                    );
                }
                Ok(Some(a))
            }
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.attrs.contains_key(name)
    }

    pub fn int(&self, name: &str, default: i64) -> OpResult<i64> {
        Ok(self
            .attr(name, AttributeType::Int)?
            .map_or(default, |a| a.i()))
    }

    pub fn float(&self, name: &str, default: f64) -> OpResult<f64> {
        Ok(self
            .attr(name, AttributeType::Float)?
            .map_or(default, |a| a.f() as f64))
    }

    pub fn ints(&self, name: &str) -> OpResult<Option<Vec<i64>>> {
        Ok(self
            .attr(name, AttributeType::Ints)?
            .map(|a| a.ints.clone()))
    }

    pub fn floats(&self, name: &str) -> OpResult<Option<Vec<f32>>> {
        Ok(self
            .attr(name, AttributeType::Floats)?
            .map(|a| a.floats.clone()))
    }

    pub fn strings(&self, name: &str) -> OpResult<Option<Vec<String>>> {
        let Some(a) = self.attr(name, AttributeType::Strings)? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(a.strings.len());
        for s in &a.strings {
            match std::str::from_utf8(s) {
                Ok(s) => out.push(s.to_string()),
                Err(_) => invalid!("attribute `{name}` holds a string that is not UTF-8"),
            }
        }
        Ok(Some(out))
    }

    pub fn string(&self, name: &str, default: &str) -> OpResult<String> {
        match self.attr(name, AttributeType::String)? {
            None => Ok(default.to_string()),
            Some(a) => match std::str::from_utf8(a.s()) {
                Ok(s) => Ok(s.to_string()),
                Err(_) => invalid!("attribute `{name}` is not UTF-8"),
            },
        }
    }

    /// A subgraph attribute (If's branches, Loop's and Scan's body).
    pub fn graph(&self, name: &str) -> OpResult<&'a crate::proto::GraphProto> {
        match self
            .attr(name, AttributeType::Graph)?
            .and_then(|a| a.g.as_ref())
        {
            Some(g) => Ok(g),
            None => invalid!("attribute `{name}` is required"),
        }
    }

    pub fn tensor(&self, name: &str) -> OpResult<Option<&'a crate::proto::TensorProto>> {
        Ok(self
            .attr(name, AttributeType::Tensor)?
            .and_then(|a| a.t.as_ref()))
    }
}

/// Maps ONNX names into Ferrite's name syntax `[A-Za-z_][A-Za-z0-9_.]*`,
/// deterministically and without collisions.
pub(crate) struct Names {
    taken: HashSet<String>,
}

impl Names {
    fn new() -> Names {
        Names {
            taken: HashSet::new(),
        }
    }

    /// The Ferrite name for `onnx`: itself when valid and free; otherwise every
    /// character outside the syntax replaced by `_`, a leading `_` added before a
    /// digit or a dot, and `_2`, `_3`, ... appended until it is free.
    fn map(&mut self, onnx: &str) -> String {
        let mut base: String = onnx
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if !base.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            base.insert(0, '_');
        }
        let mut name = base.clone();
        let mut k = 2;
        while self.taken.contains(&name) {
            name = format!("{base}_{k}");
            k += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

/// Imports a decoded model.
pub(crate) fn import_model(
    model: &ModelProto,
    options: &Options,
    ext: &mut dyn ExternalData,
) -> Result<Model> {
    let mut opset = None;
    let mut opsets = HashMap::new();
    for o in &model.opset_import {
        let domain = match o.domain() {
            "" | "ai.onnx" => "",
            d => d,
        };
        opsets.insert(domain.to_string(), o.version());
        if domain.is_empty() {
            opset = Some(o.version());
        }
    }
    // A model of another domain only (the training optimizers) needs no default opset.
    let uses_default =
        |g: &crate::proto::GraphProto| g.node.iter().any(|n| matches!(n.domain(), "" | "ai.onnx"));
    let opset = match opset {
        Some(o) => o,
        None if model.graph.as_ref().is_some_and(|g| !uses_default(g)) => MAX_OPSET,
        None => {
            return Err(Error::Invalid(
                "the model imports no opset of the default ONNX domain".into(),
            ))
        }
    };
    if !(MIN_OPSET..=MAX_OPSET).contains(&opset) {
        return Err(Error::Unsupported(format!(
            "opset {opset} is not supported (Ferrite imports opsets {MIN_OPSET} to {MAX_OPSET})"
        )));
    }
    if !model.functions.is_empty() {
        return Err(Error::Unsupported(
            "model-local functions are not supported".into(),
        ));
    }
    let gp = model
        .graph
        .as_ref()
        .ok_or_else(|| Error::Invalid("the model has no graph".into()))?;
    if gp.node.len() > MAX_NODES {
        return Err(Error::Invalid(format!(
            "the graph has {} nodes, more than the {MAX_NODES} Ferrite imports",
            gp.node.len()
        )));
    }
    for (what, n) in [
        ("initializers", gp.initializer.len()),
        ("inputs", gp.input.len()),
        ("outputs", gp.output.len()),
        ("value infos", gp.value_info.len()),
    ] {
        if n > MAX_VALUES {
            return Err(Error::Invalid(format!(
                "the graph has {n} {what}, more than the {MAX_VALUES} Ferrite imports"
            )));
        }
    }
    if !gp.sparse_initializer.is_empty() {
        return Err(Error::Unsupported(
            "sparse initializers are not supported".into(),
        ));
    }

    let name = {
        let mut names = Names::new();
        names.map(if gp.name().is_empty() {
            "model"
        } else {
            gp.name()
        })
    };
    let mut ctx = Ctx {
        g: Graph::new(name),
        params: HashMap::new(),
        folded: 0,
        fold_budget: options.fold_budget.unwrap_or(FOLD_BUDGET),
        imported: 0,
    };
    let mut names = Names::new();
    let mut values: HashMap<String, Val> = HashMap::new();

    for init in &gp.initializer {
        let t = to_tensor(init, ext)?;
        values.insert(init.name().to_string(), Val::Const(Arc::new(t)));
    }

    let mut inputs = Vec::new();
    for vi in &gp.input {
        let onnx = vi.name().to_string();
        if values.contains_key(&onnx) {
            continue;
        }
        let ty = input_type(vi, options)?;
        if let Some(t) = options.values.get(&onnx) {
            if t.ty != ty {
                return Err(Error::Invalid(format!(
                    "the value given for input `{onnx}` is {} but the input is declared {ty}",
                    t.ty
                )));
            }
            values.insert(onnx, Val::Const(Arc::new(t.clone())));
            continue;
        }
        let name = names.map(&onnx);
        let id = ctx
            .g
            .add_param(name.clone(), ty)
            .map_err(|e| Error::Invalid(format!("input `{onnx}`: {e}")))?;
        ctx.params.insert(id, onnx.clone());
        values.insert(onnx.clone(), Val::Ir(id));
        inputs.push(Binding { onnx, name });
    }
    let mut scope = Scope {
        vals: values,
        parent: None,
    };

    let mut env = Env {
        opsets: &opsets,
        opset,
        ext,
    };
    import_nodes(&mut ctx, &gp.node, &mut env, &mut scope)?;

    let mut outputs = Vec::new();
    for vi in &gp.output {
        let onnx = vi.name().to_string();
        let v = scope
            .get(&onnx)
            .ok_or_else(|| Error::Invalid(format!("graph output `{onnx}` is never computed")))?;
        let id = ctx.ir(&v).map_err(|e| match e {
            OpError::Invalid(m) | OpError::Unsupported(m) => {
                Error::Unsupported(format!("output `{onnx}`: {m}"))
            }
            OpError::NeedsValue { input, .. } => {
                Error::Internal(format!("output `{onnx}` of {input}"))
            }
            OpError::Other(e) => e,
        })?;
        check_declared(&ctx.g, id, vi, &onnx, options)?;
        let name = names.map(&onnx);
        let node = ctx.g.node(id);
        let id = if node.name.is_some() || matches!(node.op, Op::Literal { .. }) {
            // The value already has a name (an input, an earlier output) or is printed
            // inline: a reshape to its own shape carries the output's name.
            let shape = node.ty.shape.iter().map(|&d| d as i64).collect();
            ctx.g
                .add(Op::Reshape { shape }, &[id], Some(name.clone()))
                .map_err(|e| Error::Internal(e.to_string()))?
        } else {
            ctx.g.nodes[id.index()].name = Some(name.clone());
            id
        };
        ctx.g.outputs.push(id);
        outputs.push(Binding { onnx, name });
    }
    if outputs.is_empty() {
        return Err(Error::Invalid("the graph has no outputs".into()));
    }
    let graph = ctx.g.without_dead_nodes();
    ferrite_ir::verify(&graph)
        .map_err(|e| Error::Internal(format!("the imported graph is invalid: {e}")))?;
    Ok(Model {
        graph,
        inputs,
        outputs,
        opset,
    })
}

/// The opsets a graph's nodes are imported under, and where external data is read.
pub(crate) struct Env<'a> {
    /// Domain (`""` for the default one) to opset version.
    pub opsets: &'a HashMap<String, i64>,
    /// The default domain's opset.
    pub opset: i64,
    pub ext: &'a mut dyn ExternalData,
}

/// The values visible to a graph's nodes: its own, then those of the graphs around
/// it (a subgraph reads outer values by name).
pub(crate) struct Scope<'p> {
    pub vals: HashMap<String, Val>,
    pub parent: Option<&'p Scope<'p>>,
}

impl Scope<'_> {
    pub fn get(&self, name: &str) -> Option<Val> {
        match self.vals.get(name) {
            Some(v) => Some(v.clone()),
            None => self.parent.and_then(|p| p.get(name)),
        }
    }
}

/// Imports `nodes` in order, each reading its operands from `scope` and adding its
/// results there.
pub(crate) fn import_nodes(
    ctx: &mut Ctx,
    nodes: &[NodeProto],
    env: &mut Env,
    scope: &mut Scope,
) -> Result<()> {
    for (index, node) in nodes.iter().enumerate() {
        let domain = match node.domain() {
            "" | "ai.onnx" => "",
            d => d,
        };
        let node_opset = env.opsets.get(domain).copied().unwrap_or(env.opset);
        let r = NodeRef {
            index,
            name: Some(node.name().to_string()).filter(|n| !n.is_empty()),
            op_type: if domain.is_empty() {
                node.op_type().to_string()
            } else {
                format!("{domain}.{}", node.op_type())
            },
            opset: node_opset,
        };
        ctx.imported += 1;
        if ctx.imported > MAX_NODES {
            return Err(Error::Node {
                node: r,
                message: format!(
                    "the model unrolls to more than {MAX_NODES} nodes, more than Ferrite imports"
                ),
                unsupported: true,
            });
        }
        let outs = import_node(ctx, node, domain, node_opset, env, scope).map_err(|e| match e {
            OpError::Invalid(message) => Error::Node {
                node: r.clone(),
                message: ferrite_ir::text::bounded_message(&message),
                unsupported: false,
            },
            OpError::Unsupported(message) => Error::Node {
                node: r.clone(),
                message: ferrite_ir::text::bounded_message(&message),
                unsupported: true,
            },
            OpError::NeedsValue { operand, input } => Error::NeedsValue {
                node: r.clone(),
                operand,
                input,
            },
            OpError::Other(e) => e,
        })?;
        for (name, v) in node.output.iter().zip(outs) {
            if let (false, Some(v)) = (name.is_empty(), v) {
                scope.vals.insert(name.clone(), v);
            }
        }
    }
    Ok(())
}

/// The type of a graph input, with symbolic dims taken from the options.
fn input_type(vi: &crate::proto::ValueInfoProto, options: &Options) -> Result<TensorType> {
    let onnx = vi.name();
    let tensor = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => t,
        Some(other) => {
            let kind = match other {
                type_proto::Value::SequenceType(_) => "a sequence",
                type_proto::Value::MapType(_) => "a map",
                type_proto::Value::OptionalType(_) => "an optional",
                type_proto::Value::SparseTensorType(_) => "a sparse tensor",
                type_proto::Value::TensorType(_) => "a tensor",
            };
            return Err(Error::Unsupported(format!(
                "input `{onnx}` is {kind}; Ferrite imports tensor inputs only"
            )));
        }
        None => return Err(Error::Invalid(format!("input `{onnx}` has no type"))),
    };
    let dtype = dtype_of(tensor.elem_type())
        .map_err(|m| Error::Unsupported(format!("input `{onnx}`: {m}")))?;
    let dims = tensor.shape.as_ref().ok_or_else(|| {
        Error::Unsupported(format!(
            "input `{onnx}` has no shape; Ferrite needs static shapes"
        ))
    })?;
    let mut shape = Vec::with_capacity(dims.dim.len());
    for (axis, d) in dims.dim.iter().enumerate() {
        use crate::proto::tensor_shape_proto::dimension::Value as D;
        let n = match &d.value {
            Some(D::DimValue(v)) if *v >= 0 => *v as usize,
            Some(D::DimValue(v)) => {
                return Err(Error::Invalid(format!(
                    "input `{onnx}`: dimension {axis} is {v}"
                )))
            }
            Some(D::DimParam(p)) => match options.dims.get(p) {
                Some(&n) => n,
                None => {
                    return Err(Error::SymbolicDim {
                        input: onnx.to_string(),
                        axis,
                        dim: p.clone(),
                    })
                }
            },
            None => {
                return Err(Error::Unsupported(format!(
                    "input `{onnx}`: dimension {axis} has neither a value nor a name"
                )))
            }
        };
        shape.push(n);
    }
    TensorType::new(dtype, shape).map_err(|e| Error::Invalid(format!("input `{onnx}`: {e}")))
}

/// Checks what the graph computes for an output against its declared type, where
/// the model declares one: a disagreement is a wrong answer avoided. The declaration is
/// the model's own data, so a model that declares what its nodes do not compute is
/// invalid (a user error), not a bug of the importer (found by the `onnx_models` fuzz
/// target: a mutated output dim was an internal error, exit 2).
fn check_declared(
    g: &Graph,
    id: ValueId,
    vi: &crate::proto::ValueInfoProto,
    onnx: &str,
    options: &Options,
) -> Result<()> {
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Ok(());
    };
    let got = g.ty(id);
    if t.elem_type.is_some() {
        let want = dtype_of(t.elem_type())
            .map_err(|m| Error::Unsupported(format!("output `{onnx}`: {m}")))?;
        if want != got.dtype {
            return Err(Error::Invalid(format!(
                "output `{onnx}` is declared {} but its nodes compute {got}",
                want.name()
            )));
        }
    }
    if let Some(shape) = &t.shape {
        use crate::proto::tensor_shape_proto::dimension::Value as D;
        let fits = shape.dim.len() == got.rank()
            && shape
                .dim
                .iter()
                .zip(&got.shape)
                .all(|(d, &n)| match &d.value {
                    Some(D::DimValue(v)) => *v == n as i64,
                    Some(D::DimParam(p)) => options.dims.get(p).is_none_or(|&v| v == n),
                    None => true,
                });
        if !fits {
            return Err(Error::Invalid(format!(
                "output `{onnx}` is declared with shape {:?} but its nodes compute {got}",
                shape
                    .dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(D::DimValue(v)) => v.to_string(),
                        Some(D::DimParam(p)) => p.clone(),
                        None => "?".into(),
                    })
                    .collect::<Vec<_>>()
            )));
        }
    }
    Ok(())
}

fn import_node(
    ctx: &mut Ctx,
    node: &NodeProto,
    domain: &str,
    opset: i64,
    env: &mut Env,
    scope: &Scope,
) -> OpResult<Vec<Option<Val>>> {
    if node.input.len() > MAX_NODE_ARITY
        || node.output.len() > MAX_NODE_ARITY
        || node.attribute.len() > MAX_NODE_ARITY
    {
        invalid!("the node has more than {MAX_NODE_ARITY} operands, results or attributes");
    }
    let control = domain.is_empty() && matches!(node.op_type(), "If" | "Loop" | "Scan");
    if !domain.is_empty() && domain != crate::ops::training::DOMAIN {
        unsupported!("operator domain `{domain}` is not supported");
    }
    let mut attrs = HashMap::new();
    for a in &node.attribute {
        if !a.graphs.is_empty() || (a.g.is_some() && !control) {
            unsupported!(
                "attribute `{}` is a subgraph, which Ferrite imports only for If, Loop and Scan",
                a.name()
            );
        }
        if a.ref_attr_name.is_some() {
            unsupported!("attribute `{}` refers to a function attribute", a.name());
        }
        if attrs.insert(a.name(), a).is_some() {
            invalid!("attribute `{}` is given twice", a.name());
        }
    }
    let mut inputs = Vec::with_capacity(node.input.len());
    for name in &node.input {
        if name.is_empty() {
            inputs.push(None);
        } else {
            match scope.get(name) {
                Some(v) => inputs.push(Some(v)),
                None => invalid!("operand `{name}` is not defined before the node"),
            }
        }
    }
    let n = NodeIn {
        proto: node,
        inputs,
        opset,
        attrs,
    };
    let mut outs = if control {
        crate::ops::control::import(ctx, &n, env, scope)?
    } else if !domain.is_empty() {
        crate::ops::training::import(ctx, &n)?
    } else {
        crate::ops::import(ctx, &n)?
    };
    if outs.len() < n.outputs() {
        // Every declared result must be produced: one left out would be read as missing later.
        let missing = n.outputs();
        if outs.len() < missing {
            unsupported!(
                "result {} (`{}`) is not supported",
                outs.len(),
                node.output[outs.len()]
            );
        }
    }
    outs.truncate(node.output.len());
    Ok(outs)
}
