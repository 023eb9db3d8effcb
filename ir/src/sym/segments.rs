//! Row graphs with attention: a graph cut at its attention sites into row graphs.
//!
//! A transformer is a row graph but for its attentions ([`super::attention`]). Cut at
//! them, it is a sequence of steps: a row graph computing the first attention's
//! queries, keys and values (and whatever later steps need), the attention, a row graph
//! from its result to the next attention's inputs, and so on. Each row graph compiles once
//! into a row program ([`super::rows`]); each attention runs as one kernel that takes the
//! sequence length and the number of sequences at run time. [`SymGraph::segments`] makes
//! the cut; the values that pass between steps are *slots*, row values of the original
//! graph held in memory between the steps (the graph's outputs among them).
//!
//! Which step computes a value: its *stage* is the number of attentions on its longest
//! path from the inputs (an attention's result is one more than its inputs'). Values
//! that depend on no row value (weights, constants, transposed weights) belong to no
//! stage: each step that needs one computes its own copy.

use super::attention::AttentionSite;
use super::rows::RowForm;
use super::{Expr, SymGraph};
use crate::graph::Node;
use crate::infer::infer_dims;
use crate::op::Op;
use crate::types::TensorType;
use crate::{Graph, ValueId};
use std::collections::{HashMap, HashSet};

/// A graph cut at its attention sites into row graphs (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct Segments {
    /// The row symbols and the most rows, as for a row graph.
    pub form: RowForm,
    /// The values held between steps: the original graph's value and its type.
    pub slots: Vec<(ValueId, TensorType<Expr>)>,
    /// The steps, in order.
    pub steps: Vec<Segment>,
    /// The slot holding each output of the graph.
    pub outputs: Vec<usize>,
    /// Slots that hold token positions (`L ++ []`, the position of each row within its
    /// sequence: `t` at `[b, t]`), filled before the steps run. Each stands for an
    /// `arange(T)` over the last row symbol that a row step uses (learned position
    /// embeddings: `index_select(wpe, arange(T))`), so that the step stays a row graph.
    pub positions: Vec<usize>,
}

/// One step of [`Segments`].
#[derive(Clone, Debug)]
pub enum Segment {
    /// A row graph: its inputs from the graph's inputs or slots, its outputs into slots.
    Rows {
        /// The row graph.
        graph: Box<SymGraph>,
        /// Its row form.
        form: RowForm,
        /// Where each of its parameters comes from.
        inputs: Vec<Source>,
        /// The slot each of its outputs fills.
        outputs: Vec<usize>,
    },
    /// An attention from the slots of its queries, keys and values into its result's.
    Attention {
        /// The site.
        site: AttentionSite,
        /// Where the queries come from.
        q: Source,
        /// Where the keys come from.
        k: Source,
        /// Where the values come from.
        v: Source,
        /// The result's slot.
        out: usize,
    },
}

/// Where a row step's parameter comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source {
    /// The graph's input with this index.
    Input(usize),
    /// A slot.
    Slot(usize),
}

impl SymGraph {
    /// The graph cut at its attention sites into row graphs, or why it cannot be: it has
    /// no attention site, or a part between the sites is not a row graph (named).
    pub fn segments(&self) -> std::result::Result<Segments, String> {
        let sites = self.attention_sites();
        if sites.is_empty() {
            return Err("no attention in the usual form".into());
        }
        let sk = &self.skeleton;
        let n = sk.nodes.len();
        let mut site_of: HashMap<ValueId, usize> = HashMap::new();
        let mut inside = vec![false; n];
        for (i, s) in sites.iter().enumerate() {
            site_of.insert(s.out, i);
            for &v in &s.nodes {
                inside[v.index()] = true;
            }
        }
        // Stages; `None` for values that depend on no input row value.
        let row_param = |v: ValueId| {
            matches!(sk.node(v).op, Op::Param { .. })
                && self.types[v.index()].shape.iter().any(|d| !d.is_const())
        };
        let mut stage: Vec<Option<usize>> = vec![None; n];
        for i in 0..n {
            let v = ValueId(i as u32);
            if let Some(&s) = site_of.get(&v) {
                let site = &sites[s];
                let before = [site.q, site.k, site.v]
                    .iter()
                    .filter_map(|x| stage[x.index()])
                    .max()
                    .unwrap_or(0);
                stage[i] = Some(before + 1);
            } else if inside[i] {
                continue;
            } else if row_param(v) {
                stage[i] = Some(0);
            } else {
                stage[i] = sk
                    .node(v)
                    .inputs
                    .iter()
                    .filter_map(|x| stage[x.index()])
                    .max();
            }
        }
        for (i, node) in sk.nodes.iter().enumerate() {
            if inside[i] {
                continue;
            }
            for x in &node.inputs {
                if inside[x.index()] && !site_of.contains_key(x) {
                    return Err(format!(
                        "{} uses a value inside an attention",
                        self.label(ValueId(i as u32))
                    ));
                }
            }
        }
        let last = stage.iter().flatten().copied().max().unwrap_or(0);
        for o in &sk.outputs {
            if matches!(sk.node(*o).op, Op::Param { .. }) {
                return Err(format!("output {} is an input", self.label(*o)));
            }
            if stage[o.index()].is_none() {
                return Err(format!("output {} depends on no input row", self.label(*o)));
            }
        }

        // Slots: every value computed by one step and used by a later one, and every
        // output.
        let mut slots: Vec<(ValueId, TensorType<Expr>)> = Vec::new();
        let mut slot_of: HashMap<ValueId, usize> = HashMap::new();
        let mut slot = |v: ValueId, slots: &mut Vec<(ValueId, TensorType<Expr>)>| {
            *slot_of.entry(v).or_insert_with(|| {
                slots.push((v, self.types[v.index()].clone()));
                slots.len() - 1
            })
        };
        // Which values each stage's row graph must return.
        let mut roots: Vec<Vec<ValueId>> = vec![Vec::new(); last + 1];
        let root = |v: ValueId, roots: &mut Vec<Vec<ValueId>>| {
            if let (Some(s), false) = (stage[v.index()], site_of.contains_key(&v)) {
                if !row_param(v) && !roots[s].contains(&v) {
                    roots[s].push(v);
                }
            }
        };
        for (i, node) in sk.nodes.iter().enumerate() {
            let v = ValueId(i as u32);
            if let Some(&s) = site_of.get(&v) {
                let site = &sites[s];
                for x in [site.q, site.k, site.v] {
                    root(x, &mut roots);
                }
                continue;
            }
            let Some(here) = stage[i] else { continue };
            if inside[i] {
                continue;
            }
            for &x in &node.inputs {
                if stage[x.index()].is_some_and(|s| s < here) {
                    root(x, &mut roots);
                }
            }
        }
        for &o in &sk.outputs {
            root(o, &mut roots);
        }

        let lead = self.lead();
        let positions_of = |v: ValueId| -> bool {
            matches!(sk.node(v).op, Op::Arange { start, step, .. } if start == 0.0 && step == 1.0)
                && lead
                    .last()
                    .is_some_and(|t| self.types[v.index()].shape == [t.clone()])
        };
        let mut positions = Vec::new();
        let names: HashSet<&str> = sk.nodes.iter().filter_map(|n| n.name.as_deref()).collect();
        let mut steps = Vec::new();
        let mut form: Option<RowForm> = None;
        for (s, roots_here) in roots.iter().enumerate() {
            if s > 0 {
                for site in &sites {
                    if stage[site.out.index()] != Some(s) {
                        continue;
                    }
                    let mut source = |x: ValueId| match sk.node(x).op {
                        Op::Param { index } => Source::Input(index),
                        _ => Source::Slot(slot(x, &mut slots)),
                    };
                    let (q, k, v) = (source(site.q), source(site.k), source(site.v));
                    steps.push(Segment::Attention {
                        site: site.clone(),
                        q,
                        k,
                        v,
                        out: slot(site.out, &mut slots),
                    });
                }
            }
            if roots_here.is_empty() {
                continue;
            }
            // The nodes this stage computes: its roots and what they need of this stage
            // and of no stage; anything else is a parameter.
            let mut here = vec![false; n];
            let mut external: Vec<ValueId> = Vec::new();
            let mut todo: Vec<ValueId> = roots_here.clone();
            while let Some(v) = todo.pop() {
                if here[v.index()] || external.contains(&v) {
                    continue;
                }
                let computed = match sk.node(v).op {
                    Op::Param { .. } => false,
                    _ if positions_of(v) => false,
                    _ => stage[v.index()].is_none_or(|t| t == s) && !site_of.contains_key(&v),
                };
                if computed {
                    here[v.index()] = true;
                    todo.extend(&sk.node(v).inputs);
                } else {
                    external.push(v);
                }
            }
            external.sort();
            let mut g = Graph::new(format!("{}_part{}", sk.name, steps.len()));
            g.weights = sk.weights.clone();
            let mut map: HashMap<ValueId, ValueId> = HashMap::new();
            let mut types = Vec::new();
            let mut attrs = Vec::new();
            let mut places = Vec::new();
            let mut inputs = Vec::new();
            for &x in &external {
                let node = sk.node(x);
                let name = match (&node.op, &node.name) {
                    (_, Some(name)) => name.clone(),
                    _ => {
                        let mut name = format!("v{}", x.index());
                        while names.contains(name.as_str()) {
                            name.push('_');
                        }
                        name
                    }
                };
                let index = g.params.len();
                let id = g
                    .push(Node {
                        op: Op::Param { index },
                        inputs: vec![],
                        ty: node.ty.clone(),
                        name: Some(name),
                    })
                    .map_err(|e| e.to_string())?;
                g.params.push(id);
                map.insert(x, id);
                let mut ty = self.types[x.index()].clone();
                if positions_of(x) {
                    // A row value: the position of each row in its sequence.
                    ty.shape = lead.clone();
                }
                types.push(ty.clone());
                attrs.push(Default::default());
                places.push(self.places[x.index()].clone());
                inputs.push(match node.op {
                    Op::Param { index } => Source::Input(index),
                    _ => {
                        let j = slot(x, &mut slots);
                        if positions_of(x) {
                            slots[j].1 = ty;
                            if !positions.contains(&j) {
                                positions.push(j);
                            }
                        }
                        Source::Slot(j)
                    }
                });
            }
            for (i, node) in sk.nodes.iter().enumerate() {
                if !here[i] {
                    continue;
                }
                let id = g
                    .push(Node {
                        op: node.op.clone(),
                        inputs: node.inputs.iter().map(|x| map[x]).collect(),
                        ty: node.ty.clone(),
                        name: node.name.clone(),
                    })
                    .map_err(|e| e.to_string())?;
                map.insert(ValueId(i as u32), id);
                types.push(self.types[i].clone());
                attrs.push(self.attrs[i].clone());
                places.push(self.places[i].clone());
            }
            g.outputs = roots_here.iter().map(|r| map[r]).collect();
            let outputs: Vec<usize> = roots_here.iter().map(|&r| slot(r, &mut slots)).collect();
            // Typed again: a position input is `[B, T]` where `arange` was `[T]`.
            let mut facts = self.facts.clone();
            for i in g.params.len()..g.nodes.len() {
                let node = &g.nodes[i];
                if matches!(node.op, Op::Literal { .. } | Op::Constant(_)) {
                    continue;
                }
                let tys: Vec<&TensorType<Expr>> =
                    node.inputs.iter().map(|x| &types[x.index()]).collect();
                facts.at_node(places[i].clone(), attrs[i].clone());
                let ty = infer_dims(&node.op, &tys, &mut facts).map_err(|e| {
                    format!(
                        "between its attentions, {}: {e}",
                        node.name
                            .as_deref()
                            .map_or(format!("%{i}"), |n| format!("`{n}`"))
                    )
                })?;
                facts.at_node(None, Vec::new());
                types[i] = ty;
            }
            for (&r, &j) in roots_here.iter().zip(&outputs) {
                let ty = &types[map[&r].index()];
                if *ty != slots[j].1 {
                    return Err(format!(
                        "{} is {ty} between its attentions, not {}",
                        self.label(r),
                        slots[j].1
                    ));
                }
            }
            let part = SymGraph {
                skeleton: g,
                types,
                attrs,
                places,
                facts,
                declared_outputs: None,
            };
            let f = part
                .rows()
                .map_err(|why| format!("between its attentions, {why}"))?;
            if let Some(prev) = &form {
                if prev.symbols != f.symbols {
                    return Err("its parts have different row symbols".into());
                }
            }
            form.get_or_insert_with(|| f.clone());
            steps.push(Segment::Rows {
                graph: Box::new(part),
                form: f,
                inputs,
                outputs,
            });
        }
        let form = match form {
            Some(f) => f,
            // Attention alone: the rows are the leading symbols of its inputs.
            None => {
                let (_, symbols, max_rows) = self.row_symbols()?;
                let carries =
                    |v: &ValueId| self.types[v.index()].shape.iter().any(|d| !d.is_const());
                RowForm {
                    symbols,
                    max_rows,
                    params: sk.params.iter().map(carries).collect(),
                    outputs: sk.outputs.iter().map(carries).collect(),
                }
            }
        };
        for site in &sites {
            for x in [site.q, site.k, site.v, site.out] {
                let t = &self.types[x.index()];
                if t.shape.len() <= form.symbols.len()
                    || t.shape[..form.symbols.len()]
                        .iter()
                        .zip(&form.symbols)
                        .any(|(d, s)| d.as_symbol() != Some(s))
                {
                    return Err(format!(
                        "the attention at {} does not run over the rows {}",
                        self.label(site.out),
                        form.name()
                    ));
                }
            }
        }
        let outputs = sk.outputs.iter().map(|&o| slot(o, &mut slots)).collect();
        Ok(Segments {
            form,
            slots,
            steps,
            outputs,
            positions,
        })
    }

    /// `` `name` at file:line:col `` (or the value id) for messages.
    pub(crate) fn label(&self, v: ValueId) -> String {
        let name = self
            .skeleton
            .node(v)
            .name
            .clone()
            .map_or(format!("{v}"), |n| format!("`{n}`"));
        match &self.places[v.index()] {
            Some(p) => format!("{name} at {p}"),
            None => name,
        }
    }
}
