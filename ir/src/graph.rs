//! The graph: a typed SSA DAG of tensor ops with named parameters and outputs.

use crate::infer::infer;
use crate::op::{Op, Scalar};
use crate::types::TensorType;
use crate::Constant;
use crate::{DType, Error, Result, TypeError};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// The id of a value (the result of one node). Ids index [`Graph::nodes`]; a node
/// only uses ids smaller than its own, so node order is a topological order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    /// The index into [`Graph::nodes`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// One op application. Its result has type `ty`.
#[derive(Clone, PartialEq, Debug)]
pub struct Node {
    /// The op and its attributes.
    pub op: Op,
    /// Operands, in order.
    pub inputs: Vec<ValueId>,
    /// Result type, inferred when the node was added.
    pub ty: TensorType,
    /// The name bound in text (`h = ...`); `None` for nested expressions and literals.
    pub name: Option<String>,
}

/// A tensor program: parameters, nodes in topological order, outputs.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Graph {
    /// The graph's name (`graph mlp(...)`).
    pub name: String,
    /// Every node; parameters are nodes with [`Op::Param`].
    pub nodes: Vec<Node>,
    /// Parameter values in declaration order.
    pub params: Vec<ValueId>,
    /// Returned values in order (a value may be returned more than once).
    pub outputs: Vec<ValueId>,
    /// The `-> T, T` annotation, when the text had one.
    pub declared_outputs: Option<Vec<TensorType>>,
    /// The weights file that named constants are stored in (`weights "FILE"` in text,
    /// relative to the `.fg` file's folder), when the text had one.
    pub weights: Option<String>,
    /// Where each name is bound, so adding a named value checks uniqueness in constant
    /// time (a scan per node made building a graph quadratic). Derived from `nodes`.
    names: NameIndex,
}

/// The names of `nodes[..indexed]`, each at its first node. Nodes appended to
/// [`Graph::nodes`] directly are indexed on the next [`Graph::find`] miss or addition;
/// names should be given through [`Graph::add`], [`Graph::add_param`] or
/// [`Graph::set_name`] (a name written into a node directly is seen by [`verify`], not
/// by the index).
#[derive(Clone, Default)]
struct NameIndex {
    first: HashMap<String, ValueId>,
    indexed: usize,
}

/// The index is derived data: two graphs with the same nodes are equal whatever it holds.
impl PartialEq for NameIndex {
    fn eq(&self, _: &NameIndex) -> bool {
        true
    }
}

impl fmt::Debug for NameIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} names", self.first.len())
    }
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }

    /// The node producing `v`.
    pub fn node(&self, v: ValueId) -> &Node {
        &self.nodes[v.index()]
    }

    /// The type of `v`.
    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.nodes[v.index()].ty
    }

    /// Appends a parameter. Names must be unique among named values.
    pub fn add_param(&mut self, name: impl Into<String>, ty: TensorType) -> Result<ValueId> {
        let name = name.into();
        crate::types::check_shape(&ty.shape)?;
        let index = self.params.len();
        let id = self.push(Node {
            op: Op::Param { index },
            inputs: vec![],
            ty,
            name: Some(name),
        })?;
        self.params.push(id);
        Ok(id)
    }

    /// Appends a rank-0 literal of the given dtype. Its value must fit the dtype, as in
    /// the parser ([`Scalar::fits`]): `3e38` is no `f16`, `2^31` no `i32`.
    pub fn add_literal(&mut self, value: Scalar, dtype: DType) -> Result<ValueId> {
        if let (Scalar::Float(v), false) = (value, dtype.is_float()) {
            return Err(TypeError::new(format!("literal {v} cannot be a {dtype}")).into());
        }
        if !value.fits(dtype) {
            let shown = match value {
                Scalar::Float(v) => format!("{v:?}"),
                Scalar::Int(i) => i.to_string(),
                Scalar::Bool(b) => b.to_string(),
            };
            return Err(
                TypeError::new(format!("literal `{shown}` does not fit in {dtype}")).into(),
            );
        }
        self.push(Node {
            op: Op::Literal { value },
            inputs: vec![],
            ty: TensorType::scalar(dtype),
            name: None,
        })
    }

    /// Appends a constant tensor (a weight) with an optional name; its type is the tensor's.
    pub fn add_constant(&mut self, constant: Constant, name: Option<String>) -> Result<ValueId> {
        constant.check().map_err(Error::InvalidGraph)?;
        let ty = constant.ty().clone();
        self.push(Node {
            op: Op::Constant(constant),
            inputs: vec![],
            ty,
            name,
        })
    }

    /// The constant nodes, in node order.
    pub fn constants(&self) -> impl Iterator<Item = (ValueId, &Constant)> {
        self.values()
            .zip(&self.nodes)
            .filter_map(|(v, n)| Some((v, n.op.constant()?)))
    }

    /// Appends `op(inputs)` with an optional name, inferring (and so checking) its type.
    pub fn add(&mut self, op: Op, inputs: &[ValueId], name: Option<String>) -> Result<ValueId> {
        if matches!(op, Op::Param { .. } | Op::Literal { .. }) {
            return Err(Error::InvalidGraph(format!(
                "use add_param/add_literal for {}",
                op.name()
            )));
        }
        for &v in inputs {
            if v.index() >= self.nodes.len() {
                return Err(Error::InvalidGraph(format!("operand {v} is not defined")));
            }
        }
        let tys: Vec<&TensorType> = inputs.iter().map(|&v| self.ty(v)).collect();
        let ty = infer(&op, &tys)?;
        self.push(Node {
            op,
            inputs: inputs.to_vec(),
            ty,
            name,
        })
    }

    pub(crate) fn push(&mut self, node: Node) -> Result<ValueId> {
        self.catch_up_names();
        if let Some(name) = &node.name {
            self.check_new_name(name)?;
        }
        let id = u32::try_from(self.nodes.len())
            .map(ValueId)
            .map_err(|_| Error::InvalidGraph("too many nodes".into()))?;
        if let Some(name) = &node.name {
            self.names.first.insert(name.clone(), id);
        }
        self.nodes.push(node);
        self.names.indexed = self.nodes.len();
        Ok(id)
    }

    /// Names value `v` (which has no name yet) `name`, which must be valid and new.
    pub fn set_name(&mut self, v: ValueId, name: impl Into<String>) -> Result<()> {
        let name = name.into();
        self.catch_up_names();
        match self.nodes.get(v.index()) {
            None => return Err(Error::InvalidGraph(format!("{v} is not defined"))),
            Some(n) if n.name.is_some() => {
                return Err(Error::InvalidGraph(format!("{v} is already named")))
            }
            Some(_) => {}
        }
        self.check_new_name(&name)?;
        self.names.first.insert(name.clone(), v);
        self.nodes[v.index()].name = Some(name);
        Ok(())
    }

    fn check_new_name(&self, name: &str) -> Result<()> {
        if !is_valid_name(name) {
            return Err(Error::InvalidGraph(format!("`{name}` is not a valid name")));
        }
        if self.find(name).is_some() {
            return Err(Error::InvalidGraph(format!("`{name}` is already defined")));
        }
        Ok(())
    }

    /// Indexes the names of nodes appended to `nodes` directly.
    fn catch_up_names(&mut self) {
        let from = self.names.indexed.min(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate().skip(from) {
            if let Some(name) = &n.name {
                self.names
                    .first
                    .entry(name.clone())
                    .or_insert(ValueId(i as u32));
            }
        }
        self.names.indexed = self.nodes.len();
    }

    /// The value bound to `name`, if any (the first, in a graph that binds it twice and
    /// so fails [`verify`]).
    pub fn find(&self, name: &str) -> Option<ValueId> {
        let named = |i: usize| self.nodes.get(i).and_then(|n| n.name.as_deref()) == Some(name);
        if let Some(&v) = self.names.first.get(name) {
            if named(v.index()) {
                return Some(v);
            }
            // The node was renamed or removed behind the index's back.
            return (0..self.nodes.len())
                .find(|&i| named(i))
                .map(|i| ValueId(i as u32));
        }
        // Nodes appended directly since the index last caught up.
        let from = self.names.indexed.min(self.nodes.len());
        (from..self.nodes.len())
            .find(|&i| named(i))
            .map(|i| ValueId(i as u32))
    }

    /// All value ids in node order.
    pub fn values(&self) -> impl Iterator<Item = ValueId> {
        (0..self.nodes.len() as u32).map(ValueId)
    }

    /// How many times each value is used as an operand or output.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.nodes.len()];
        for n in &self.nodes {
            for &i in &n.inputs {
                counts[i.index()] += 1;
            }
        }
        for &o in &self.outputs {
            counts[o.index()] += 1;
        }
        counts
    }

    /// The name of output `i`: the returned value's name, or `output{i}` when it has none.
    pub fn output_name(&self, i: usize) -> String {
        self.node(self.outputs[i])
            .name
            .clone()
            .unwrap_or_else(|| format!("output{i}"))
    }

    /// The parameter types in order.
    pub fn param_types(&self) -> Vec<TensorType> {
        self.params.iter().map(|&p| self.ty(p).clone()).collect()
    }

    /// Counts nodes that do work (everything but params, literals and constants).
    pub fn op_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| {
                !matches!(
                    n.op,
                    Op::Param { .. } | Op::Literal { .. } | Op::Constant(_)
                )
            })
            .count()
    }

    /// Returns a copy without nodes that no output depends on (params are kept).
    pub fn without_dead_nodes(&self) -> Graph {
        let mut live = vec![false; self.nodes.len()];
        for &o in &self.outputs {
            live[o.index()] = true;
        }
        for (i, n) in self.nodes.iter().enumerate().rev() {
            if live[i] || matches!(n.op, Op::Param { .. }) {
                live[i] = true;
                for &x in &n.inputs {
                    live[x.index()] = true;
                }
            }
        }
        let mut remap = vec![ValueId(u32::MAX); self.nodes.len()];
        let mut out = Graph::new(self.name.clone());
        out.declared_outputs = self.declared_outputs.clone();
        out.weights = self.weights.clone();
        for (i, n) in self.nodes.iter().enumerate() {
            if !live[i] {
                continue;
            }
            remap[i] = ValueId(out.nodes.len() as u32);
            let mut n = n.clone();
            for x in &mut n.inputs {
                *x = remap[x.index()];
            }
            if matches!(n.op, Op::Param { .. }) {
                out.params.push(remap[i]);
            }
            out.nodes.push(n);
        }
        out.outputs = self.outputs.iter().map(|o| remap[o.index()]).collect();
        out
    }
}

/// True if `s` matches `[A-Za-z_][A-Za-z0-9_.]*`.
pub fn is_valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// Checks a graph's invariants: operands defined before use, params consistent,
/// names valid and unique, every node's type equal to what [`infer`] gives, outputs
/// defined, declared output types matching. Passes call this after they run.
pub fn verify(g: &Graph) -> Result<()> {
    let mut names = HashSet::new();
    let mut param_count = 0;
    for (i, n) in g.nodes.iter().enumerate() {
        let id = ValueId(i as u32);
        // Formatted only for an error: verify runs several times per compile.
        let label = || match &n.name {
            Some(name) => format!("{id} (`{name}`)"),
            None => format!("{id}"),
        };
        if let Some(name) = &n.name {
            if !is_valid_name(name) {
                return Err(Error::InvalidGraph(format!("{}: invalid name", label())));
            }
            if !names.insert(name.as_str()) {
                return Err(Error::InvalidGraph(format!(
                    "{}: name defined twice",
                    label()
                )));
            }
        }
        for &x in &n.inputs {
            if x.index() >= i {
                return Err(Error::InvalidGraph(format!(
                    "{}: operand {x} is not defined before its use",
                    label()
                )));
            }
        }
        crate::types::check_shape(&n.ty.shape)
            .map_err(|e| Error::InvalidGraph(format!("{}: {e}", label())))?;
        match &n.op {
            Op::Param { index } => {
                if *index != param_count || g.params.get(*index) != Some(&id) {
                    return Err(Error::InvalidGraph(format!(
                        "{}: parameter {index} is out of order",
                        label()
                    )));
                }
                param_count += 1;
            }
            Op::Literal { value } => {
                if !n.inputs.is_empty() || n.ty.rank() != 0 {
                    return Err(Error::InvalidGraph(format!(
                        "{}: a literal is rank 0 with no operands",
                        label()
                    )));
                }
                if matches!(value, Scalar::Float(_)) && !n.ty.dtype.is_float() {
                    return Err(Error::InvalidGraph(format!(
                        "{}: float literal typed {}",
                        label(),
                        n.ty.dtype
                    )));
                }
            }
            Op::Constant(c) => {
                c.check()
                    .map_err(|e| Error::InvalidGraph(format!("{}: {e}", label())))?;
                if !n.inputs.is_empty() || &n.ty != c.ty() {
                    return Err(Error::InvalidGraph(format!(
                        "{}: a constant has no operands and the type of its tensor ({})",
                        label(),
                        c.ty()
                    )));
                }
            }
            op => {
                let tys: Vec<&TensorType> = n.inputs.iter().map(|&x| g.ty(x)).collect();
                let ty = infer(op, &tys)
                    .map_err(|e| Error::InvalidGraph(format!("{}: {e}", label())))?;
                if ty != n.ty {
                    return Err(Error::InvalidGraph(format!(
                        "{}: {} is recorded as {} but infers as {ty}",
                        label(),
                        op.name(),
                        n.ty
                    )));
                }
            }
        }
    }
    if param_count != g.params.len() {
        return Err(Error::InvalidGraph(
            "the parameter list does not match the param nodes".into(),
        ));
    }
    if g.outputs.is_empty() {
        return Err(Error::InvalidGraph("the graph returns nothing".into()));
    }
    for &o in &g.outputs {
        if o.index() >= g.nodes.len() {
            return Err(Error::InvalidGraph(format!("output {o} is not defined")));
        }
    }
    if let Some(decl) = &g.declared_outputs {
        check_declared_outputs(g, decl)?;
    }
    Ok(())
}

/// Checks a `-> T, T` annotation against the returned values.
pub fn check_declared_outputs(g: &Graph, decl: &[TensorType]) -> Result<()> {
    if decl.len() != g.outputs.len() {
        return Err(Error::InvalidGraph(format!(
            "the signature declares {} result{} but the graph returns {}",
            decl.len(),
            if decl.len() == 1 { "" } else { "s" },
            g.outputs.len()
        )));
    }
    for (i, (d, &o)) in decl.iter().zip(&g.outputs).enumerate() {
        if d != g.ty(o) {
            return Err(Error::InvalidGraph(format!(
                "result {i} is declared {d} but `{}` is {}",
                g.output_name(i),
                g.ty(o)
            )));
        }
    }
    Ok(())
}
