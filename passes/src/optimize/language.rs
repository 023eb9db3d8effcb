//! The e-graph language over Ferrite's ops, and the conversions graph -> e-graph -> graph.
//!
//! An e-node is an interned op plus the e-classes of its operands. Ops keep their attributes
//! exactly as the graph had them (they are `ferrite_ir::Op` values), so an op no rule touches
//! comes back out of the e-graph unchanged; ops that no rule models (composites, say) are simply
//! opaque nodes. Interning keeps e-nodes small: egg hashes and clones them constantly, and an
//! `Op` owns vectors of attributes.

use super::analysis::TensorEGraph;
use egg::{Id, Language};
use ferrite_ir::infer::infer;
use ferrite_ir::{BinaryOp, Graph, Node, Op, ReduceOp, Scalar, TensorType, UnaryOp, ValueId};
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

/// The coarse kind of an e-node's op: what rules are indexed by (egg's discriminant).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Kind {
    /// A graph parameter.
    Param,
    /// A rank-0 literal.
    Literal,
    /// An elementwise op of one operand.
    Unary(UnaryOp),
    /// An elementwise op of two operands.
    Binary(BinaryOp),
    /// `where(cond, a, b)`.
    Where,
    /// `cast`.
    Cast,
    /// A reduction.
    Reduce(ReduceOp),
    /// `argmax` / `argmin`.
    ArgReduce,
    /// `matmul`.
    MatMul,
    /// `reshape`.
    Reshape,
    /// `permute`.
    Permute,
    /// `expand`.
    Expand,
    /// `slice`.
    Slice,
    /// `concat`.
    Concat,
    /// `pad`.
    Pad,
    /// `index_select` / `gather`.
    Index,
    /// `full`.
    Full,
    /// `arange`.
    Arange,
    /// Anything no rule looks into (composite ops): carried through as is.
    Opaque,
}

impl Kind {
    /// The kind of `op`.
    pub fn of(op: &Op) -> Kind {
        match op {
            Op::Param { .. } => Kind::Param,
            Op::Literal { .. } => Kind::Literal,
            Op::Unary(u) => Kind::Unary(*u),
            Op::Binary(b) => Kind::Binary(*b),
            Op::Where => Kind::Where,
            Op::Cast { .. } => Kind::Cast,
            Op::Reduce { op, .. } => Kind::Reduce(*op),
            Op::ArgReduce { .. } => Kind::ArgReduce,
            Op::MatMul => Kind::MatMul,
            Op::Reshape { .. } => Kind::Reshape,
            Op::Permute { .. } => Kind::Permute,
            Op::Expand { .. } => Kind::Expand,
            Op::Slice { .. } => Kind::Slice,
            Op::Concat { .. } => Kind::Concat,
            Op::Pad { .. } => Kind::Pad,
            Op::IndexSelect { .. } | Op::Gather { .. } => Kind::Index,
            Op::Full { .. } => Kind::Full,
            Op::Arange { .. } => Kind::Arange,
            _ => Kind::Opaque,
        }
    }

    /// A key that orders kinds (and so e-nodes): the variant, then the op within it.
    fn key(self) -> (u8, u8) {
        match self {
            Kind::Param => (0, 0),
            Kind::Literal => (1, 0),
            Kind::Unary(u) => (2, u as u8),
            Kind::Binary(b) => (3, b as u8),
            Kind::Where => (4, 0),
            Kind::Cast => (5, 0),
            Kind::Reduce(r) => (6, r as u8),
            Kind::ArgReduce => (7, 0),
            Kind::MatMul => (8, 0),
            Kind::Reshape => (9, 0),
            Kind::Permute => (10, 0),
            Kind::Expand => (11, 0),
            Kind::Slice => (12, 0),
            Kind::Concat => (13, 0),
            Kind::Pad => (14, 0),
            Kind::Index => (15, 0),
            Kind::Full => (16, 0),
            Kind::Arange => (17, 0),
            Kind::Opaque => (18, 0),
        }
    }
}

impl Ord for Kind {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Kind {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The index of an op in an [`OpTable`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct OpId(u32);

/// An interned op. Parameters and literals carry their type, which nothing else determines.
#[derive(Clone, PartialEq, Debug)]
pub struct OpEntry {
    /// The op with its attributes, exactly as in the graph.
    pub op: Op,
    /// The result type of a leaf (`Param`, `Literal`); `None` for ops typed by inference.
    pub leaf_ty: Option<TensorType>,
}

/// Interned ops: each distinct (op, leaf type) is stored once and named by an [`OpId`].
#[derive(Default, Debug)]
pub struct OpTable {
    entries: Vec<OpEntry>,
    // Keyed by the Debug text, which is exact: f64 Debug output round-trips, and -0.0 and 0.0
    // print differently. All NaNs share one key, which is harmless (no op tells them apart).
    index: HashMap<String, OpId>,
}

impl OpTable {
    /// The id of `op` (typed `leaf_ty` for leaves), adding it if it is new.
    pub fn intern(&mut self, op: Op, leaf_ty: Option<TensorType>) -> OpId {
        let key = format!("{op:?}|{leaf_ty:?}");
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        let id = OpId(self.entries.len() as u32);
        self.entries.push(OpEntry { op, leaf_ty });
        self.index.insert(key, id);
        id
    }

    /// The op named `id`.
    pub fn get(&self, id: OpId) -> &OpEntry {
        &self.entries[id.0 as usize]
    }
}

/// An e-node: an interned op applied to e-classes.
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct TensorLang {
    /// The op's kind (egg's discriminant; determined by `op`).
    pub kind: Kind,
    /// The op in the e-graph's [`OpTable`].
    pub op: OpId,
    /// Operand e-classes, in order.
    pub children: Vec<Id>,
}

impl Language for TensorLang {
    type Discriminant = Kind;

    fn discriminant(&self) -> Kind {
        self.kind
    }

    fn matches(&self, other: &Self) -> bool {
        self.op == other.op && self.children.len() == other.children.len()
    }

    fn children(&self) -> &[Id] {
        &self.children
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.children
    }
}

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
) -> Result<Graph, String> {
    let find = |id: Id| eg.find(id);
    let mut out = Graph {
        name: template.name.clone(),
        declared_outputs: template.declared_outputs.clone(),
        ..Graph::default()
    };
    let mut value: HashMap<Id, ValueId> = HashMap::new();
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
    let mut names: HashMap<Id, String> = HashMap::new();
    let mut used: HashSet<String> = template
        .params
        .iter()
        .filter_map(|&p| template.node(p).name.clone())
        .collect();
    // Outputs that need a node of their own: a name the class cannot carry, or no name where
    // the class's node has one (an anonymous output must stay anonymous: its name is `output{i}`).
    let mut wrappers: Vec<(usize, Option<String>)> = Vec::new();
    let mut anonymous: HashSet<Id> = HashSet::new();
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
    let mut wrapped: HashMap<String, ValueId> = HashMap::new();
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
fn live_classes(eg: &TensorEGraph, choice: &Choice, roots: &[Id]) -> Result<HashSet<Id>, String> {
    let mut live = HashSet::new();
    let mut stack: Vec<Id> = roots.to_vec();
    while let Some(c) = stack.pop() {
        let c = eg.find(c);
        if !live.insert(c) {
            continue;
        }
        let node = choice
            .get(&c)
            .ok_or_else(|| format!("optimize: e-class {c} has no extracted representative"))?;
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
) -> Result<(), String> {
    // (class, next child to visit); `on_stack` detects cycles.
    let mut stack: Vec<(Id, usize)> = vec![(root, 0)];
    let mut on_stack: HashSet<Id> = HashSet::from([root]);
    while let Some(&mut (c, ref mut next)) = stack.last_mut() {
        let node = &choice[&c];
        if let Some(&child) = node.children.get(*next) {
            *next += 1;
            let child = eg.find(child);
            if value.contains_key(&child) {
                continue;
            }
            if !on_stack.insert(child) {
                return Err("optimize: extraction produced a cycle".into());
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
                return Err("optimize: a parameter's e-class lost its parameter".into())
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
fn push(
    out: &mut Graph,
    op: Op,
    inputs: Vec<ValueId>,
    name: Option<String>,
) -> Result<ValueId, String> {
    let tys: Vec<&TensorType> = inputs.iter().map(|&v| out.ty(v)).collect();
    let ty = infer(&op, &tys).map_err(|e| format!("optimize: rebuilt node is ill-typed: {e}"))?;
    let id = ValueId(out.nodes.len() as u32);
    out.nodes.push(Node {
        op,
        inputs,
        ty,
        name,
    });
    Ok(id)
}

/// The scalar spelling of a constant `value` of dtype `dtype` (`Float` for float dtypes).
pub fn scalar_of(value: f64, dtype: ferrite_ir::DType) -> Scalar {
    if dtype.is_float() {
        Scalar::Float(value)
    } else if dtype == ferrite_ir::DType::Bool {
        Scalar::Bool(value != 0.0)
    } else {
        Scalar::Int(value as i64)
    }
}

/// The canonical node for a tensor of type `ty` whose elements all equal `value`: a literal for
/// a finite scalar, otherwise `full` (whose attribute text spells `inf` and `nan`).
pub fn constant_op(value: f64, ty: &TensorType) -> (Op, Option<TensorType>) {
    if ty.rank() == 0 && value.is_finite() {
        (
            Op::Literal {
                value: scalar_of(value, ty.dtype),
            },
            Some(ty.clone()),
        )
    } else {
        (
            Op::Full {
                shape: ty.shape.clone(),
                value,
                dtype: ty.dtype,
            },
            None,
        )
    }
}
