//! Generalizing traces: one graph with size symbols from the same program traced at
//! several shapes (Dynamo's "automatic dynamic").
//!
//! A closure traced at `x: f32[2, 16, 64]` and again at `f32[2, 24, 64]` gives two graphs
//! that differ only in the numbers its shapes flowed into: `reshape(.., shape=[2, 16, 4,
//! 16])` against `[2, 24, 4, 16]`, `arange(end=16)` against `end=24`. With the changed axis
//! named `T`, each such number is fitted as `c*T + d` (or `c*S*T` for a product of two
//! symbols) from two traces and checked against every other trace; a number that fits no
//! such form, or fits more than one, or any other difference between the traces (another
//! op, another operand, a constant), means the program is not one function of its shapes
//! in this sense, and nothing is generalized. The result is typed by the one typing rule
//! over the symbols, and each trace must be its instance at the trace's binding, node for
//! node.

use super::{Binding, Expr, Facts, SymAttrs, SymGraph};
use crate::graph::Node;
use crate::infer::infer_dims;
use crate::op::Op;
use crate::types::TensorType;
use crate::Graph;

/// The attributes of `op` that may be size expressions, by key, as integers; `None`
/// for an `arange` end that is not an integer (compared as written instead).
fn size_attrs(op: &Op) -> Vec<(&'static str, Vec<i64>)> {
    match op {
        Op::Full { shape, .. } => vec![("shape", shape.iter().map(|&d| d as i64).collect())],
        Op::Reshape { shape } | Op::Expand { shape } => vec![("shape", shape.clone())],
        Op::Slice { start, end, .. } => vec![("start", vec![*start]), ("end", vec![*end])],
        Op::Arange { end, .. } if end.fract() == 0.0 && end.abs() < 9e15 => {
            vec![("end", vec![*end as i64])]
        }
        _ => Vec::new(),
    }
}

/// `op` with its size attributes cleared, for comparing the rest.
fn without_sizes(op: &Op) -> Op {
    let mut op = op.clone();
    match &mut op {
        Op::Full { shape, .. } => shape.iter_mut().for_each(|d| *d = 0),
        Op::Reshape { shape } | Op::Expand { shape } => shape.iter_mut().for_each(|d| *d = 0),
        Op::Slice { start, end, .. } => (*start, *end) = (0, 0),
        Op::Arange { end, .. } if end.fract() == 0.0 && end.abs() < 9e15 => *end = 0.0,
        _ => {}
    }
    op
}

/// The one expression over `symbols` of the forms `c*s + d` and `c*s*t` that takes value
/// `values[i]` at `bindings[i]` for every trace, if exactly one does.
fn fit(values: &[i64], bindings: &[Binding], symbols: &[String]) -> Option<Expr> {
    if values.iter().all(|&v| v == values[0]) {
        return Some(Expr::from(values[0]));
    }
    let at = |b: &Binding, s: &str| b.get(s).unwrap_or(0);
    let mut found: Vec<Expr> = Vec::new();
    let (b0, b1) = (&bindings[0], &bindings[1]);
    for s in symbols {
        let (s0, s1) = (at(b0, s), at(b1, s));
        if s0 == s1 || (values[1] - values[0]) % (s1 - s0) != 0 {
            continue;
        }
        let c = (values[1] - values[0]) / (s1 - s0);
        let d = values[0] - c * s0;
        let e = Expr::from(c)
            .mul(&Expr::sym(s.as_str()))
            .add(&Expr::from(d));
        if bindings
            .iter()
            .zip(values)
            .all(|(b, &v)| b.eval(&e).ok() == Some(v))
        {
            found.push(e);
        }
    }
    for (i, s) in symbols.iter().enumerate() {
        for t in &symbols[i..] {
            let p0 = at(b0, s) * at(b0, t);
            if p0 == 0 || values[0] % p0 != 0 {
                continue;
            }
            let e = Expr::from(values[0] / p0)
                .mul(&Expr::sym(s.as_str()))
                .mul(&Expr::sym(t.as_str()));
            if bindings
                .iter()
                .zip(values)
                .all(|(b, &v)| b.eval(&e).ok() == Some(v))
                && !found.contains(&e)
            {
                found.push(e);
            }
        }
    }
    (found.len() == 1).then(|| found.remove(0))
}

/// The bindings to trace a program at for [`SymGraph::generalize`], from each symbol's two
/// values `(name, first, second)`: every symbol at its first value, then every symbol at its
/// second, then for each symbol in turn one binding with it moved past both (to the larger
/// plus their difference) and the others at their second, so that no fit holds by the
/// symbols moving together.
pub fn trace_bindings(symbols: &[(&str, i64, i64)]) -> Vec<Binding> {
    (0..2 + symbols.len())
        .map(|j| {
            let mut b = Binding::new();
            for (i, &(name, first, second)) in symbols.iter().enumerate() {
                let v = match j {
                    0 => first,
                    _ if j == 2 + i => first.max(second) + first.abs_diff(second) as i64,
                    _ => second,
                };
                b.set(name, v);
            }
            b
        })
        .collect()
}

impl SymGraph {
    /// One graph with size symbols from `traces`, the same program traced at several
    /// bindings (at least two; the first two fit each changed number, the rest check
    /// it), whose parameters have the symbolic types `params`; `facts` declares the
    /// symbols and their ranges. An error says what differs that cannot be generalized.
    pub fn generalize(
        traces: &[(Graph, Binding)],
        params: &[TensorType<Expr>],
        facts: Facts,
    ) -> std::result::Result<SymGraph, String> {
        let [(g0, _), (_, _), ..] = traces else {
            return Err("generalizing needs two traces".into());
        };
        let bindings: Vec<Binding> = traces.iter().map(|(_, b)| b.clone()).collect();
        let symbols: Vec<String> = facts.symbols.iter().map(|s| s.name.to_string()).collect();
        for (g, _) in &traces[1..] {
            if g.nodes.len() != g0.nodes.len() || g.params != g0.params || g.outputs != g0.outputs {
                return Err("the traces differ in their nodes".into());
            }
        }
        if g0.params.len() != params.len() {
            return Err("one symbolic type per parameter".into());
        }
        let mut skeleton = Graph::new(g0.name.clone());
        skeleton.weights = g0.weights.clone();
        let mut types: Vec<TensorType<Expr>> = Vec::with_capacity(g0.nodes.len());
        let mut attrs: Vec<SymAttrs> = Vec::with_capacity(g0.nodes.len());
        let mut facts = facts;
        for (i, node) in g0.nodes.iter().enumerate() {
            let bare = without_sizes(&node.op);
            for (g, _) in &traces[1..] {
                let other = &g.nodes[i];
                if without_sizes(&other.op) != bare || other.inputs != node.inputs {
                    return Err(format!(
                        "node {i} ({}) differs between the traces beyond its sizes",
                        node.op.name()
                    ));
                }
            }
            let mut sym: SymAttrs = Vec::new();
            // The node's size attributes in every trace (the first is this node's).
            let sizes: Vec<Vec<(&str, Vec<i64>)>> = traces
                .iter()
                .map(|(g, _)| size_attrs(&g.nodes[i].op))
                .collect();
            for (k, (key, values)) in sizes[0].iter().enumerate() {
                let mut exprs = Vec::with_capacity(values.len());
                let mut changed = false;
                for (j, &v0) in values.iter().enumerate() {
                    let seen: Vec<i64> = sizes
                        .iter()
                        .map(|t| t[k].1.get(j).copied())
                        .collect::<Option<Vec<i64>>>()
                        .ok_or_else(|| format!("node {i} ({}) changes rank", node.op.name()))?;
                    let e = fit(&seen, &bindings, &symbols).ok_or_else(|| {
                        format!(
                            "node {i} ({}): {key} {v0} is no one expression of the sizes",
                            node.op.name()
                        )
                    })?;
                    changed |= !e.is_const();
                    exprs.push(e);
                }
                if changed {
                    sym.push((key.to_string(), exprs));
                }
            }
            let ty = match &node.op {
                Op::Param { index } => params[*index].clone(),
                Op::Literal { .. } | Op::Constant(_) => TensorType {
                    dtype: node.ty.dtype,
                    shape: node
                        .ty
                        .shape
                        .iter()
                        .map(|&d| Expr::from(d as i64))
                        .collect(),
                },
                op => {
                    let tys: Vec<&TensorType<Expr>> =
                        node.inputs.iter().map(|x| &types[x.index()]).collect();
                    facts.at_node(None, sym.clone());
                    let ty = infer_dims(op, &tys, &mut facts)
                        .map_err(|e| format!("node {i} ({}): {e}", op.name()))?;
                    facts.at_node(None, Vec::new());
                    ty
                }
            };
            // Each trace is the instance at its binding.
            for (g, b) in traces {
                let want = &g.nodes[i].ty;
                if ty.bind(b).ok().as_ref() != Some(want) {
                    return Err(format!(
                        "node {i} ({}) is {ty} over the sizes but {want} in a trace",
                        node.op.name()
                    ));
                }
            }
            skeleton
                .push(Node {
                    op: node.op.clone(),
                    inputs: node.inputs.clone(),
                    ty: TensorType::scalar(node.ty.dtype),
                    name: node.name.clone(),
                })
                .map_err(|e| e.to_string())?;
            types.push(ty);
            attrs.push(sym);
        }
        skeleton.params = g0.params.clone();
        skeleton.outputs = g0.outputs.clone();
        let places = vec![None; types.len()];
        Ok(SymGraph {
            skeleton,
            types,
            attrs,
            places,
            facts,
            declared_outputs: None,
        })
    }
}
