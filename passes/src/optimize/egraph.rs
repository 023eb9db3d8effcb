//! The e-graph the optimizer works on, and the conversions graph -> e-graph -> graph.

use super::analysis::TensorAnalysis;
use super::language::{Kind, TensorLang};
use crate::error::{Error, Result};
use egg::{EGraph, Id};
use ferrite_ir::hash::{HashMap, HashSet};
use ferrite_ir::infer::infer;
use ferrite_ir::{Graph, Node, Op, TensorType, ValueId};

/// The e-graph the optimizer works on.
pub type TensorEGraph = EGraph<TensorLang, TensorAnalysis>;

/// Adds `op(children)` to the e-graph, interning the op.
pub fn add_op(eg: &mut TensorEGraph, op: Op, leaf_ty: Option<TensorType>, children: Vec<Id>) -> Id {
    let kind = Kind::of(&op);
    let op = eg.analysis.ops.intern(op, leaf_ty);
    eg.add(TensorLang { kind, op, children })
}

/// Adds every node of `g` to the e-graph and returns the e-class of each node.
pub fn add_graph(eg: &mut TensorEGraph, g: &Graph) -> Vec<Id> {
    let mut classes: Vec<Id> = Vec::with_capacity(g.nodes.len());
    for n in &g.nodes {
        let leaf_ty = matches!(n.op, Op::Param { .. } | Op::Literal { .. }).then(|| n.ty.clone());
        let children = n.inputs.iter().map(|v| classes[v.index()]).collect();
        classes.push(add_op(eg, n.op.clone(), leaf_ty, children));
    }
    eg.rebuild();
    classes
}

/// The representative chosen for each e-class by extraction.
pub type Choice = HashMap<Id, TensorLang>;

/// Builds a graph from the extracted representatives.
///
/// `template` is the graph that was added to the e-graph (its params, outputs and names are
/// reused) and `classes` its node -> e-class map. Outputs `strict[i]` keep their name (or their
/// lack of one, which makes their name `output{i}`) on the node that produces them; where that
/// node cannot (a parameter, a literal, or a value another output names) a free `reshape` to the
/// same shape carries the output. Other names are kept where the value they name survives.
/// Nodes are emitted in the template's order where possible, so a graph that no rule changed
/// comes back as it went in.
pub fn extract_graph(
    eg: &TensorEGraph,
    choice: &Choice,
    template: &Graph,
    classes: &[Id],
    strict: &[bool],
) -> Result<Graph> {
    let find = |id: Id| eg.find(id);
    let mut out = Graph::new(template.name.clone());
    out.declared_outputs = template.declared_outputs.clone();
    let mut value: HashMap<Id, ValueId> = HashMap::default();
    for &p in &template.params {
        let node = template.node(p);
        let id = ValueId(out.nodes.len() as u32);
        out.nodes.push(Node {
            op: Op::Param {
                index: out.params.len(),
            },
            inputs: vec![],
            ty: node.ty.clone(),
            name: node.name.clone(),
        });
        out.params.push(id);
        value.entry(find(classes[p.index()])).or_insert(id);
    }

    // Names: outputs first (they must keep theirs), then the other named values.
    let roots: Vec<Id> = template
        .outputs
        .iter()
        .map(|o| find(classes[o.index()]))
        .collect();
    let live = live_classes(eg, choice, &roots)?;
    let can_carry_name = |c: Id| {
        !value.contains_key(&c)
            && choice
                .get(&c)
                .is_some_and(|n| !matches!(n.kind, Kind::Literal | Kind::Param))
    };
    let mut names: HashMap<Id, String> = HashMap::default();
    let mut used: HashSet<String> = template
        .params
        .iter()
        .filter_map(|&p| template.node(p).name.clone())
        .collect();
    // Outputs that need a node of their own: a name the class cannot carry, or no name where
    // the class's node has one (an anonymous output must stay anonymous: its name is `output{i}`).
    let mut wrappers: Vec<(usize, Option<String>)> = Vec::new();
    let mut anonymous: HashSet<Id> = HashSet::default();
    for (i, (&o, &c)) in template.outputs.iter().zip(&roots).enumerate() {
        let node = template.node(o);
        // A returned parameter is itself; non-strict outputs are named below, as any value.
        if matches!(node.op, Op::Param { .. }) || !strict.get(i).copied().unwrap_or(true) {
            continue;
        }
        match node.name.clone() {
            Some(name) => {
                if names.get(&c) == Some(&name) || used.contains(&name) {
                    continue; // the same value returned twice
                }
                if can_carry_name(c) && !names.contains_key(&c) && !anonymous.contains(&c) {
                    names.insert(c, name.clone());
                } else {
                    wrappers.push((i, Some(name.clone())));
                }
                used.insert(name);
            }
            None => {
                let literal = choice.get(&c).is_some_and(|n| n.kind == Kind::Literal);
                if value.contains_key(&c) || names.contains_key(&c) {
                    wrappers.push((i, None));
                } else if !literal {
                    anonymous.insert(c);
                }
            }
        }
    }
    for (i, n) in template.nodes.iter().enumerate() {
        let Some(name) = &n.name else { continue };
        let c = find(classes[i]);
        if used.contains(name)
            || !live.contains(&c)
            || names.contains_key(&c)
            || anonymous.contains(&c)
            || !can_carry_name(c)
        {
            continue;
        }
        used.insert(name.clone());
        names.insert(c, name.clone());
    }

    // Emit in template order, each class after the classes it uses.
    for &c in classes.iter().chain(&roots) {
        let c = find(c);
        if live.contains(&c) && !value.contains_key(&c) {
            emit(eg, choice, c, &mut out, &mut value, &names)?;
        }
    }
    let mut outputs: Vec<ValueId> = roots.iter().map(|c| value[c]).collect();
    let mut wrapped: HashMap<String, ValueId> = HashMap::default();
    for (i, name) in wrappers {
        let v = outputs[i];
        let shape = out.ty(v).shape.iter().map(|&d| d as i64).collect();
        let w = push(&mut out, Op::Reshape { shape }, vec![v], name.clone())?;
        outputs[i] = w;
        if let Some(name) = name {
            wrapped.insert(name, w);
        }
    }
    // A named output returned twice shares its wrapper.
    for (i, &o) in template.outputs.iter().enumerate() {
        if let Some(&w) = template.node(o).name.as_ref().and_then(|n| wrapped.get(n)) {
            outputs[i] = w;
        }
    }
    out.outputs = outputs;
    Ok(out)
}

/// The classes the outputs depend on through the chosen representatives. Fails on a cycle,
/// which a sound extraction never produces.
fn live_classes(eg: &TensorEGraph, choice: &Choice, roots: &[Id]) -> Result<HashSet<Id>> {
    let mut live = HashSet::default();
    let mut stack: Vec<Id> = roots.to_vec();
    while let Some(c) = stack.pop() {
        let c = eg.find(c);
        if !live.insert(c) {
            continue;
        }
        let node = choice.get(&c).ok_or_else(|| {
            Error::Internal(format!(
                "optimize: e-class {c} has no extracted representative"
            ))
        })?;
        stack.extend(node.children.iter().map(|&k| eg.find(k)));
    }
    Ok(live)
}

/// Emits class `root` and, first, every class it depends on (iteratively: graphs can be deep).
fn emit(
    eg: &TensorEGraph,
    choice: &Choice,
    root: Id,
    out: &mut Graph,
    value: &mut HashMap<Id, ValueId>,
    names: &HashMap<Id, String>,
) -> Result<()> {
    // (class, next child to visit); `on_stack` detects cycles.
    let mut stack: Vec<(Id, usize)> = vec![(root, 0)];
    let mut on_stack: HashSet<Id> = HashSet::from_iter([root]);
    while let Some(&mut (c, ref mut next)) = stack.last_mut() {
        let node = &choice[&c];
        if let Some(&child) = node.children.get(*next) {
            *next += 1;
            let child = eg.find(child);
            if value.contains_key(&child) {
                continue;
            }
            if !on_stack.insert(child) {
                return Err(Error::internal("optimize: extraction produced a cycle"));
            }
            stack.push((child, 0));
            continue;
        }
        stack.pop();
        on_stack.remove(&c);
        let entry = eg.analysis.ops.get(node.op);
        let inputs: Vec<ValueId> = node.children.iter().map(|&k| value[&eg.find(k)]).collect();
        let v = match (&entry.op, &entry.leaf_ty) {
            (Op::Literal { value: lit }, Some(ty)) => {
                let id = ValueId(out.nodes.len() as u32);
                out.nodes.push(Node {
                    op: Op::Literal { value: *lit },
                    inputs: vec![],
                    ty: ty.clone(),
                    name: None,
                });
                id
            }
            (Op::Param { .. }, _) => {
                return Err(Error::internal(
                    "optimize: a parameter's e-class lost its parameter",
                ))
            }
            (op, _) => push(out, op.clone(), inputs, names.get(&c).cloned())?,
        };
        value.insert(c, v);
    }
    Ok(())
}

/// Appends a node, inferring its type. Names are unique by construction (the caller hands out
/// each template name once), and the verifier checks the whole graph afterwards; this avoids
/// `Graph::add`'s linear name lookup, which would make large graphs quadratic.
fn push(out: &mut Graph, op: Op, inputs: Vec<ValueId>, name: Option<String>) -> Result<ValueId> {
    let tys: Vec<&TensorType> = inputs.iter().map(|&v| out.ty(v)).collect();
    let ty = infer(&op, &tys)
        .map_err(|e| Error::Internal(format!("optimize: rebuilt node is ill-typed: {e}")))?;
    let id = ValueId(out.nodes.len() as u32);
    out.nodes.push(Node {
        op,
        inputs,
        ty,
        name,
    });
    Ok(id)
}
