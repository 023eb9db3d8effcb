//! A graph with symbolic dimensions, and its instantiation at a binding.
//!
//! A [`SymGraph`] is what the `.fg` reader makes of a file whose parameter types
//! (or `dims` line) name size symbols: the nodes as written, each value's
//! symbolic type (typed by [`crate::infer::infer_dims`] over [`Expr`]), the
//! symbolic attribute values, where each node is in the file, and the [`Facts`]
//! the graph relies on. [`SymGraph::instantiate`] checks a binding against the
//! facts and builds the concrete [`Graph`] exactly as if the numbers had been
//! written: every node is typed again by the concrete rule.

use super::{Binding, Expr, Facts, SymAttrs};
use crate::op::Op;
use crate::types::{ShapeDisplay, TensorType};
use crate::{Error, Graph, Result, ValueId};

/// The `(op, attribute)` pairs whose integer values may be size expressions.
pub const SYMBOLIC_ATTRIBUTES: &[(&str, &str)] = &[
    ("full", "shape"),
    ("reshape", "shape"),
    ("expand", "shape"),
    ("slice", "start"),
    ("slice", "end"),
    ("arange", "end"),
];

/// Whether attribute `key` of `op` may hold size expressions.
pub fn is_symbolic_attribute(op: &str, key: &str) -> bool {
    SYMBOLIC_ATTRIBUTES.contains(&(op, key))
}

/// A graph whose dimensions may be size symbols.
#[derive(Clone, Debug)]
pub struct SymGraph {
    /// The structure: nodes, parameters, outputs and names as written. Its node
    /// types hold only the dtype (the shapes are in `types`): it is never run.
    pub(crate) skeleton: Graph,
    /// Each node's symbolic type.
    pub(crate) types: Vec<TensorType<Expr>>,
    /// Each node's symbolic attribute values (empty for most).
    pub(crate) attrs: Vec<SymAttrs>,
    /// Where each node is written (`file:line:col`).
    pub(crate) places: Vec<Option<String>>,
    /// The symbols and the constraints the graph relies on.
    pub(crate) facts: Facts,
    /// The `-> T, T` annotation, when the text had one.
    pub(crate) declared_outputs: Option<Vec<TensorType<Expr>>>,
}

impl SymGraph {
    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.skeleton.name
    }

    /// The symbols with their ranges, and the constraints.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    /// The parameters' names and symbolic types, in order.
    pub fn params(&self) -> Vec<(&str, &TensorType<Expr>)> {
        self.skeleton
            .params
            .iter()
            .map(|&p| {
                let name = self.skeleton.node(p).name.as_deref().unwrap_or("");
                (name, &self.types[p.index()])
            })
            .collect()
    }

    /// The outputs' symbolic types, in order.
    pub fn output_types(&self) -> Vec<&TensorType<Expr>> {
        self.skeleton
            .outputs
            .iter()
            .map(|&o| &self.types[o.index()])
            .collect()
    }

    /// The number of nodes that are ops (not parameters, literals or constants).
    pub fn op_count(&self) -> usize {
        self.skeleton.op_count()
    }

    /// Every value's symbolic type, by value id.
    pub fn types(&self) -> &[TensorType<Expr>] {
        &self.types
    }

    /// The symbolic type of value `v`.
    pub fn ty(&self, v: ValueId) -> &TensorType<Expr> {
        &self.types[v.index()]
    }

    /// The binding that inputs of these shapes give, with `extra` for symbols that
    /// no parameter binds (`--dim T=128`); every range and constraint is checked.
    /// A shape that does not match its declaration names the parameter and axis.
    pub fn bind(&self, shapes: &[&[usize]], extra: &Binding) -> Result<Binding> {
        let params = self.params();
        if shapes.len() != params.len() {
            return Err(Error::Input(format!(
                "graph `{}` takes {} inputs, got {}",
                self.name(),
                params.len(),
                shapes.len()
            )));
        }
        let given: Vec<(usize, &[usize])> = shapes.iter().copied().enumerate().collect();
        let b = self.bind_some(&given, extra)?;
        self.facts.check(&b).map_err(Error::Input)?;
        Ok(b)
    }

    /// The binding that the shapes of some parameters give (`(index, shape)`), with
    /// `extra`; each given shape is checked against its declaration, but neither
    /// that every symbol is bound nor the constraints (see [`SymGraph::bind`]).
    pub fn bind_some(&self, given: &[(usize, &[usize])], extra: &Binding) -> Result<Binding> {
        let all = self.params();
        let mut params = Vec::with_capacity(given.len());
        let mut shapes = Vec::with_capacity(given.len());
        for &(i, shape) in given {
            let p = all
                .get(i)
                .ok_or_else(|| Error::Input(format!("graph `{}` has no input {i}", self.name())))?;
            params.push(*p);
            shapes.push(shape);
        }
        let mut b = extra.clone();
        let mut from: Vec<(String, String)> = Vec::new();
        for ((name, ty), shape) in params.iter().zip(&shapes) {
            if ty.rank() != shape.len() {
                return Err(Error::Input(format!(
                    "input `{name}` has shape {} but is declared {ty}",
                    ShapeDisplay(shape)
                )));
            }
            for (axis, (d, &n)) in ty.shape.iter().zip(shape.iter()).enumerate() {
                let Some(s) = d.as_symbol() else {
                    continue;
                };
                let here = format!("input `{name}` axis {axis}");
                match b.get(s) {
                    None => {
                        b.set(s.clone(), n as i64);
                        from.push((s.to_string(), here));
                    }
                    Some(v) if v == n as i64 => {}
                    Some(v) => {
                        let first = from
                            .iter()
                            .find(|(x, _)| **x == **s)
                            .map_or("--dim".to_string(), |(_, w)| w.clone());
                        return Err(Error::Input(format!(
                            "size symbol `{s}` is {v} from {first} but {n} from {here} (shape {} for {ty})",
                            ShapeDisplay(shape)
                        )));
                    }
                }
            }
        }
        // Every extent, compound ones (`B*T`) and numbers included, against its value.
        for ((name, ty), shape) in params.iter().zip(&shapes) {
            for (axis, (d, &n)) in ty.shape.iter().zip(shape.iter()).enumerate() {
                match b.eval(d) {
                    Ok(v) if v == n as i64 => {}
                    Ok(v) => {
                        return Err(Error::Input(format!(
                            "input `{name}` has shape {} but is declared {ty}: axis {axis} is {n}, not {d} = {v}",
                            ShapeDisplay(shape)
                        )))
                    }
                    Err(e) => return Err(Error::Input(format!("input `{name}`: {e}"))),
                }
            }
        }
        Ok(b)
    }

    /// The concrete graph at `b`: the facts checked, every symbol replaced by its
    /// value, every node typed by the concrete rule. A node that the concrete rule
    /// rejects is reported at its place in the file.
    pub fn instantiate(&self, b: &Binding) -> Result<Graph> {
        self.facts.check(b).map_err(Error::Input)?;
        self.build(b)
    }

    /// The concrete graph at `b` without checking the facts (the typing still checks
    /// every node): [`SymGraph::instantiate`] after its check, and row instances.
    pub(crate) fn build(&self, b: &Binding) -> Result<Graph> {
        let sk = &self.skeleton;
        let mut g = Graph::new(sk.name.clone());
        g.weights = sk.weights.clone();
        let located = |i: usize, e: Error| match &self.places[i] {
            Some(at) => e.context(at),
            None => e,
        };
        for (i, node) in sk.nodes.iter().enumerate() {
            let id = match &node.op {
                Op::Param { .. } => {
                    let ty = self.types[i].bind(b).map_err(|m| {
                        Error::Input(format!(
                            "parameter `{}`: {m}",
                            node.name.as_deref().unwrap_or("")
                        ))
                    })?;
                    g.add_param(node.name.clone().unwrap_or_default(), ty)?
                }
                Op::Literal { value } => g.add_literal(*value, node.ty.dtype)?,
                Op::Constant(c) => g.add_constant(c.clone(), node.name.clone())?,
                op => {
                    let op = substitute(op, &self.attrs[i], b).map_err(|e| located(i, e))?;
                    g.add(op, &node.inputs, node.name.clone())
                        .map_err(|e| located(i, e))?
                }
            };
            if id.index() != i {
                return Err(Error::internal(format!(
                    "instantiating `{}`: node {i} became {id}",
                    sk.name
                )));
            }
        }
        g.outputs = sk.outputs.clone();
        if let Some(decl) = &self.declared_outputs {
            let mut out = Vec::with_capacity(decl.len());
            for t in decl {
                out.push(t.bind(b).map_err(Error::Input)?);
            }
            crate::check_declared_outputs(&g, &out).map_err(|m| Error::Input(m.to_string()))?;
            g.declared_outputs = Some(out);
        }
        crate::verify(&g)?;
        Ok(g)
    }
}

/// `op` with its symbolic attributes replaced by their values under `b`.
pub(crate) fn substitute(op: &Op, attrs: &SymAttrs, b: &Binding) -> Result<Op> {
    let mut op = op.clone();
    let name = op.name();
    for (key, exprs) in attrs {
        let mut vals = Vec::with_capacity(exprs.len());
        for e in exprs {
            vals.push(
                b.eval(e)
                    .map_err(|err| Error::Input(format!("{name} {key}: {err}")))?,
            );
        }
        let size = |v: i64| {
            usize::try_from(v).map_err(|_| {
                Error::Input(format!(
                    "{name}: {key} {} is {v}, not a size",
                    exprs
                        .iter()
                        .map(Expr::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
        };
        match (&mut op, key.as_str()) {
            (Op::Full { shape, .. }, "shape") => {
                *shape = vals.iter().map(|&v| size(v)).collect::<Result<_>>()?
            }
            (Op::Reshape { shape }, "shape") | (Op::Expand { shape }, "shape") => *shape = vals,
            (Op::Slice { start, .. }, "start") => *start = vals[0],
            (Op::Slice { end, .. }, "end") => *end = vals[0],
            (Op::Arange { end, .. }, "end") => *end = vals[0] as f64,
            (_, key) => {
                return Err(Error::internal(format!(
                    "{name}: attribute `{key}` cannot hold a size expression"
                )))
            }
        }
    }
    Ok(op)
}
