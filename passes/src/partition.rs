//! Splitting a joint forward + backward graph ([`crate::autodiff`]) into a forward graph
//! and a backward graph, choosing what the forward saves for the backward by a minimum
//! cut (AOTAutograd's rematerialization partitioner).
//!
//! **Forward and backward.** The first `forward_outputs` outputs of the joint graph are
//! the forward's; the rest (gradients) the backward's. A node is *forward* when a forward
//! output depends on it; every other node the backward outputs depend on is *backward*.
//! Parameters, constants and literals are leaves: alive anyway, so the backward reads a
//! parameter as an input of its own and copies a constant (sharing its data) or a
//! literal, and none of them counts as saved.
//!
//! **What is saved.** The backward reads some forward values. The naive partition saves
//! exactly those ([`crate::autodiff::saved_for_backward`]'s activations). The min-cut
//! partition may instead save an earlier value and recompute the cheap ops between it
//! and the backward's reads in the backward graph: each forward value `v` is an edge
//! `v.in -> v.out` whose capacity is its size in bytes (saving `v` cuts it); each
//! operand is an edge of infinite capacity from the operand's `out` to the user's `in`;
//! each forward value the backward reads has an infinite edge from its `out` to the sink;
//! and each value that must not be recomputed has an infinite edge from the source to its
//! `in`, so that the cut lies at or after it. A minimum source-sink cut (Dinic's max-flow,
//! then the source side of the residual network) is a set of values to save of the least
//! total bytes from which the backward can recompute everything else it reads. The naive
//! partition is one such cut, so the min-cut one never saves more bytes.
//!
//! Recomputed in the backward may be elementwise ops, casts, selects and movement ops
//! (reshapes, permutes, slices, concats, pads) and the creation ops `full` and `arange`.
//! Never recomputed ([`recomputable`]): `matmul`, reductions and the composites built on
//! them (softmax, norms), the window ops, and index ops whose indices are data
//! (`index_select`, `gather`, `index_add`, `embedding_bag`): these are saved (or a
//! value computed from them later is). The graph IR has no random ops; one would be
//! banned here too, since recomputing it would draw other numbers.
//!
//! Composing the two graphs computes the joint graph's outputs op for op: the forward
//! graph's nodes are the joint graph's, the backward graph's are the joint graph's
//! backward nodes plus the recomputed ones, with the same operands, so the reference
//! interpreter gives the same bits.

use crate::error::{Error, Result};
use crate::optimize::cost::op_flops;
use ferrite_ir::{print, verify, Graph, Op, TensorType, ValueId};
use std::collections::VecDeque;
use std::fmt;

/// How the saved values are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Save every forward value the backward reads; recompute nothing.
    Naive,
    /// Save a minimum-bytes cut; recompute cheap ops in the backward (the module docs).
    MinCut,
}

/// A joint graph split into a forward and a backward graph.
///
/// Running it: `f = forward(joint_inputs[forward_inputs])`; `b = backward(f[n..] ++
/// joint_inputs[backward_inputs])` where `n = forward_outputs`; the joint graph's outputs
/// are `f[..n] ++ b`.
#[derive(Clone, Debug)]
pub struct Partition {
    /// The forward outputs, then the saved values (in [`Partition::saved`]'s order).
    pub forward: Graph,
    /// Parameters: the saved values, then the joint parameters of `backward_inputs`;
    /// outputs: the joint graph's outputs after the forward ones.
    pub backward: Graph,
    /// The joint parameters (positions) that the forward graph takes, in order.
    pub forward_inputs: Vec<usize>,
    /// The joint parameters (positions) that the backward graph takes after the saved
    /// values, in order: cotangents, and parameters the backward reads.
    pub backward_inputs: Vec<usize>,
    /// The joint values the forward saves for the backward, in node order.
    pub saved: Vec<ValueId>,
    /// The joint (forward) values the backward computes again, in node order.
    pub recomputed: Vec<ValueId>,
    /// Both policies' figures.
    pub report: Report,
}

impl Partition {
    /// What `ferrite grad --partition` prints: the report as `#` comment lines, then the
    /// forward graph and the backward graph as `.fg` text, a blank line between them.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for line in self.report.to_string().lines() {
            s.push_str("# ");
            s.push_str(line);
            s.push('\n');
        }
        s.push('\n');
        s.push_str(&print(&self.forward));
        s.push('\n');
        s.push_str(&print(&self.backward));
        s
    }
}

/// What a partition saves and recomputes, for the naive and the min-cut policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The joint graph's name.
    pub graph: String,
    /// Saved by the naive partition.
    pub naive: Vec<SavedValue>,
    /// Saved by the min-cut partition.
    pub min_cut: Vec<SavedValue>,
    /// Recomputed by the min-cut partition's backward graph.
    pub recomputed: Vec<RecomputedOp>,
    /// Ops (not parameters, constants or literals) in this partition's forward and
    /// backward graphs.
    pub forward_ops: usize,
    /// See `forward_ops`.
    pub backward_ops: usize,
}

/// A value the forward saves.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedValue {
    /// Its id in the joint graph.
    pub value: ValueId,
    /// Its name there, or `%id` (the forward and backward graphs call it `saved<id>`).
    pub name: String,
    /// Its type.
    pub ty: TensorType,
}

/// An op the backward computes again.
#[derive(Clone, Debug, PartialEq)]
pub struct RecomputedOp {
    /// Its value in the joint graph.
    pub value: ValueId,
    /// Its name there, or `%id`.
    pub name: String,
    /// The op's name.
    pub op: &'static str,
    /// Its result type.
    pub ty: TensorType,
    /// Its arithmetic work, as the optimizer's cost model counts it.
    pub flops: f64,
}

impl Report {
    /// The bytes the naive partition saves.
    pub fn naive_bytes(&self) -> usize {
        self.naive.iter().map(|s| s.ty.size_bytes()).sum()
    }

    /// The bytes the min-cut partition saves.
    pub fn min_cut_bytes(&self) -> usize {
        self.min_cut.iter().map(|s| s.ty.size_bytes()).sum()
    }

    /// The flops the min-cut backward spends recomputing.
    pub fn recomputed_flops(&self) -> f64 {
        self.recomputed.iter().map(|r| r.flops).sum()
    }
}

impl fmt::Display for Report {
    /// The report as `ferrite grad --partition` prints it: one line per figure, then the
    /// values saved by each policy and the ops recomputed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "partition of `{}`: forward {}, backward {}",
            self.graph,
            count(self.forward_ops, "op"),
            count(self.backward_ops, "op")
        )?;
        let list = |f: &mut fmt::Formatter<'_>, label: &str, saved: &[SavedValue]| {
            let bytes: usize = saved.iter().map(|s| s.ty.size_bytes()).sum();
            let values = count(saved.len(), "value");
            writeln!(f, "saved ({label}): {values}, {bytes} bytes")?;
            for s in saved {
                writeln!(f, "  {} {} ({} bytes)", s.name, s.ty, s.ty.size_bytes())?;
            }
            Ok(())
        };
        list(f, "naive", &self.naive)?;
        list(f, "min-cut", &self.min_cut)?;
        writeln!(
            f,
            "recomputed in backward: {}, {} flops",
            count(self.recomputed.len(), "op"),
            self.recomputed_flops()
        )?;
        for r in &self.recomputed {
            writeln!(f, "  {} = {} {} ({} flops)", r.name, r.op, r.ty, r.flops)?;
        }
        Ok(())
    }
}

/// `n` and `noun`, plural unless `n` is 1.
fn count(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ => format!("{n} {noun}s"),
    }
}

/// Whether the backward may compute `op` again instead of the forward saving its
/// result: cheap ops with no data-dependent reads (the module docs). Anything else (and
/// any op added later) is saved, never recomputed.
pub fn recomputable(op: &Op) -> bool {
    match op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Where
        | Op::Cast { .. }
        | Op::Clip { .. }
        | Op::Full { .. }
        | Op::Arange { .. } => true,
        _ => op.is_movement(),
    }
}

fn is_leaf(op: &Op) -> bool {
    matches!(op, Op::Param { .. } | Op::Constant(_) | Op::Literal { .. })
}

/// The min-cut partition of `joint`, whose first `forward_outputs` outputs are the
/// forward's.
pub fn partition(joint: &Graph, forward_outputs: usize) -> Result<Partition> {
    partition_with(joint, forward_outputs, Policy::MinCut)
}

/// The partition of `joint` under `policy`; its report has both policies' figures.
pub fn partition_with(joint: &Graph, forward_outputs: usize, policy: Policy) -> Result<Partition> {
    verify(joint).map_err(|e| Error::invalid_input("partition", e))?;
    if forward_outputs > joint.outputs.len() {
        return Err(Error::InvalidGraph(format!(
            "partition: the graph has {} outputs, fewer than the {forward_outputs} forward ones",
            joint.outputs.len()
        )));
    }
    let sides = Sides::of(joint, forward_outputs);
    let naive = sides.saved_naive(joint);
    let (min_cut, min_cut_recomputed) = sides.min_cut(joint);
    let (saved, recomputed) = match policy {
        Policy::Naive => (naive.clone(), Vec::new()),
        Policy::MinCut => (min_cut.clone(), min_cut_recomputed.clone()),
    };
    let (forward, forward_inputs, names) = build_forward(joint, forward_outputs, &sides, &saved)?;
    let (backward, backward_inputs) =
        build_backward(joint, forward_outputs, &sides, &saved, &names)?;
    let describe = |v: ValueId| match &joint.node(v).name {
        Some(n) => n.clone(),
        None => format!("{v}"),
    };
    let saved_values = |vs: &[ValueId]| {
        vs.iter()
            .map(|&v| SavedValue {
                value: v,
                name: describe(v),
                ty: joint.ty(v).clone(),
            })
            .collect()
    };
    let report = Report {
        graph: joint.name.clone(),
        naive: saved_values(&naive),
        min_cut: saved_values(&min_cut),
        recomputed: min_cut_recomputed
            .iter()
            .map(|&v| {
                let n = joint.node(v);
                let tys: Vec<&TensorType> = n.inputs.iter().map(|&x| joint.ty(x)).collect();
                RecomputedOp {
                    value: v,
                    name: describe(v),
                    op: n.op.name(),
                    ty: n.ty.clone(),
                    flops: op_flops(&n.op, &tys, &n.ty),
                }
            })
            .collect(),
        forward_ops: forward.op_count(),
        backward_ops: backward.op_count(),
    };
    Ok(Partition {
        forward,
        backward,
        forward_inputs,
        backward_inputs,
        saved,
        recomputed,
        report,
    })
}

/// Which side of the joint graph each node is on.
struct Sides {
    /// A forward output depends on the node.
    forward: Vec<bool>,
    /// A backward node reads it, or it is a backward output (forward nodes only).
    read_by_backward: Vec<bool>,
}

impl Sides {
    fn of(joint: &Graph, forward_outputs: usize) -> Sides {
        let n = joint.nodes.len();
        let mut forward = vec![false; n];
        for &o in &joint.outputs[..forward_outputs] {
            forward[o.index()] = true;
        }
        for i in (0..n).rev() {
            if forward[i] {
                for x in &joint.nodes[i].inputs {
                    forward[x.index()] = true;
                }
            }
        }
        let mut backward = vec![false; n];
        for &o in &joint.outputs[forward_outputs..] {
            backward[o.index()] = true;
        }
        let mut read_by_backward = vec![false; n];
        for i in (0..n).rev() {
            if !backward[i] {
                continue;
            }
            if forward[i] {
                // A backward output that the forward computes.
                read_by_backward[i] = true;
                continue;
            }
            for x in &joint.nodes[i].inputs {
                backward[x.index()] = true;
                if forward[x.index()] {
                    read_by_backward[x.index()] = true;
                }
            }
        }
        Sides {
            forward,
            read_by_backward,
        }
    }

    /// Forward values (not leaves) that the backward reads.
    fn saved_naive(&self, joint: &Graph) -> Vec<ValueId> {
        joint
            .values()
            .filter(|v| self.read_by_backward[v.index()] && !is_leaf(&joint.node(*v).op))
            .collect()
    }

    /// The values the min cut saves and those the backward recomputes (node order).
    fn min_cut(&self, joint: &Graph) -> (Vec<ValueId>, Vec<ValueId>) {
        let n = joint.nodes.len();
        // Network nodes: 2i is value i's `in`, 2i + 1 its `out`; then source and sink.
        let (source, sink) = (2 * n, 2 * n + 1);
        let mut net = Network::new(2 * n + 2);
        let in_network = |i: usize| self.forward[i] && !is_leaf(&joint.nodes[i].op);
        for (i, node) in joint.nodes.iter().enumerate() {
            if !in_network(i) {
                continue;
            }
            net.add_edge(2 * i, 2 * i + 1, node.ty.size_bytes() as u64);
            if !recomputable(&node.op) {
                net.add_edge(source, 2 * i, INFINITE);
            }
            for x in &node.inputs {
                if in_network(x.index()) {
                    net.add_edge(2 * x.index() + 1, 2 * i, INFINITE);
                }
            }
            if self.read_by_backward[i] {
                net.add_edge(2 * i + 1, sink, INFINITE);
            }
        }
        net.max_flow(source, sink);
        let source_side = net.reachable(source);
        // From what the backward reads: a value whose `in` is on the source side is
        // saved (its `out` is not, or the flow was not maximal); else it is recomputed
        // from its operands.
        let (mut saved, mut recomputed) = (vec![false; n], vec![false; n]);
        let mut stack: Vec<usize> = (0..n)
            .filter(|&i| self.read_by_backward[i] && in_network(i))
            .collect();
        while let Some(i) = stack.pop() {
            if saved[i] || recomputed[i] {
                continue;
            }
            if source_side[2 * i] {
                saved[i] = true;
                continue;
            }
            recomputed[i] = true;
            for x in &joint.nodes[i].inputs {
                if in_network(x.index()) {
                    stack.push(x.index());
                }
            }
        }
        let pick = |marks: &[bool]| {
            (0..n)
                .filter(|&i| marks[i])
                .map(|i| ValueId(i as u32))
                .collect()
        };
        (pick(&saved), pick(&recomputed))
    }
}

/// The forward graph: every forward node, returning the forward outputs and the saved
/// values; also the joint parameters it takes and the name each saved value has.
fn build_forward(
    joint: &Graph,
    forward_outputs: usize,
    sides: &Sides,
    saved: &[ValueId],
) -> Result<(Graph, Vec<usize>, Vec<String>)> {
    let mut g = Graph::new(joint.name.clone());
    g.weights = joint.weights.clone();
    let mut map = vec![None; joint.nodes.len()];
    let mut inputs = Vec::new();
    for (i, node) in joint.nodes.iter().enumerate() {
        if sides.forward[i] {
            map[i] = Some(copy(&mut g, node, &map)?);
            if let Op::Param { index } = node.op {
                inputs.push(index);
            }
        }
    }
    let at = |v: ValueId, map: &[Option<ValueId>]| {
        map[v.index()].ok_or_else(|| Error::internal("partition: a forward value was not copied"))
    };
    for &o in &joint.outputs[..forward_outputs] {
        let v = at(o, &map)?;
        g.outputs.push(v);
    }
    let mut names = Vec::with_capacity(saved.len());
    for &s in saved {
        let v = at(s, &map)?;
        let name = match &joint.node(s).name {
            Some(n) => n.clone(),
            None => {
                let name = fresh_in(&[joint, &g], &format!("saved{}", s.0));
                g.set_name(v, name.clone()).map_err(ir)?;
                name
            }
        };
        names.push(name);
        g.outputs.push(v);
    }
    verify(&g).map_err(|e| Error::internal(format!("partition: invalid forward graph: {e}")))?;
    Ok((g, inputs, names))
}

/// The backward graph: the saved values and the joint parameters it reads as
/// parameters, then every backward node and every recomputed one, in joint order.
fn build_backward(
    joint: &Graph,
    forward_outputs: usize,
    sides: &Sides,
    saved: &[ValueId],
    names: &[String],
) -> Result<(Graph, Vec<usize>)> {
    let n = joint.nodes.len();
    let mut is_saved = vec![false; n];
    for &s in saved {
        is_saved[s.index()] = true;
    }
    // What the backward computes: from its outputs back to saved values and parameters.
    let mut needed = vec![false; n];
    let mut stack: Vec<usize> = joint.outputs[forward_outputs..]
        .iter()
        .map(|v| v.index())
        .collect();
    while let Some(i) = stack.pop() {
        if needed[i] {
            continue;
        }
        needed[i] = true;
        if is_saved[i] {
            continue;
        }
        if sides.forward[i] && !is_leaf(&joint.nodes[i].op) && !recomputable(&joint.nodes[i].op) {
            return Err(Error::internal(format!(
                "partition: the backward needs {} again, which may not be recomputed",
                ValueId(i as u32)
            )));
        }
        stack.extend(joint.nodes[i].inputs.iter().map(|v| v.index()));
    }
    let mut g = Graph::new(format!("{}_backward", joint.name));
    g.weights = joint.weights.clone();
    let mut map = vec![None; n];
    for (&s, name) in saved.iter().zip(names) {
        map[s.index()] = Some(g.add_param(name.clone(), joint.ty(s).clone()).map_err(ir)?);
    }
    let mut inputs = Vec::new();
    for (i, node) in joint.nodes.iter().enumerate() {
        if needed[i] && !is_saved[i] {
            if let Op::Param { index } = node.op {
                map[i] = Some(copy(&mut g, node, &map)?);
                inputs.push(index);
            }
        }
    }
    for (i, node) in joint.nodes.iter().enumerate() {
        if needed[i] && map[i].is_none() {
            map[i] = Some(copy(&mut g, node, &map)?);
        }
    }
    for &o in &joint.outputs[forward_outputs..] {
        let v = map[o.index()]
            .ok_or_else(|| Error::internal("partition: a backward output was not computed"))?;
        g.outputs.push(v);
    }
    verify(&g).map_err(|e| Error::internal(format!("partition: invalid backward graph: {e}")))?;
    Ok((g, inputs))
}

/// Appends a copy of `node` (of another graph) to `g`, its operands mapped by `map`.
fn copy(g: &mut Graph, node: &ferrite_ir::Node, map: &[Option<ValueId>]) -> Result<ValueId> {
    let name = node.name.clone();
    match &node.op {
        Op::Param { .. } => {
            let name = name.ok_or_else(|| Error::internal("partition: an unnamed parameter"))?;
            g.add_param(name, node.ty.clone()).map_err(ir)
        }
        Op::Literal { value } => g.add_literal(*value, node.ty.dtype).map_err(ir),
        Op::Constant(c) => g.add_constant(c.clone(), name).map_err(ir),
        op => {
            let inputs = node
                .inputs
                .iter()
                .map(|x| {
                    map[x.index()].ok_or_else(|| Error::internal("partition: operand missing"))
                })
                .collect::<Result<Vec<_>>>()?;
            g.add(op.clone(), &inputs, name).map_err(ir)
        }
    }
}

/// `base`, or `base_N`, whichever none of `graphs` binds.
fn fresh_in(graphs: &[&Graph], base: &str) -> String {
    let free = |n: &str| graphs.iter().all(|g| g.find(n).is_none());
    if free(base) {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| free(n))
        .unwrap()
}

fn ir(e: ferrite_ir::Error) -> Error {
    Error::internal(format!("partition: {e}"))
}

/// An edge capacity no cut takes: more than the bytes of every value together.
const INFINITE: u64 = u64::MAX / 4;

/// A flow network for Dinic's algorithm: edges in pairs (`e`, `e ^ 1` its reverse), each
/// with its residual capacity.
struct Network {
    adjacent: Vec<Vec<usize>>,
    to: Vec<usize>,
    capacity: Vec<u64>,
}

impl Network {
    fn new(nodes: usize) -> Network {
        Network {
            adjacent: vec![Vec::new(); nodes],
            to: Vec::new(),
            capacity: Vec::new(),
        }
    }

    fn add_edge(&mut self, from: usize, to: usize, capacity: u64) {
        self.adjacent[from].push(self.to.len());
        self.to.push(to);
        self.capacity.push(capacity);
        self.adjacent[to].push(self.to.len());
        self.to.push(from);
        self.capacity.push(0);
    }

    /// Pushes a maximum flow from `s` to `t` (Dinic: BFS levels, then blocking flows by
    /// depth-first search, iterative so deep graphs do not exhaust the stack), and
    /// returns its value.
    fn max_flow(&mut self, s: usize, t: usize) -> u64 {
        let nodes = self.adjacent.len();
        let mut total = 0u64;
        loop {
            let mut level = vec![usize::MAX; nodes];
            level[s] = 0;
            let mut queue = VecDeque::from([s]);
            while let Some(u) = queue.pop_front() {
                for &e in &self.adjacent[u] {
                    let v = self.to[e];
                    if self.capacity[e] > 0 && level[v] == usize::MAX {
                        level[v] = level[u] + 1;
                        queue.push_back(v);
                    }
                }
            }
            if level[t] == usize::MAX {
                return total;
            }
            let mut next = vec![0usize; nodes];
            while let Some(pushed) = self.augment(s, t, &mut level, &mut next) {
                total += pushed;
            }
        }
    }

    /// One augmenting path in the level graph, or `None` when the flow is blocking.
    fn augment(
        &mut self,
        s: usize,
        t: usize,
        level: &mut [usize],
        next: &mut [usize],
    ) -> Option<u64> {
        let mut path: Vec<usize> = Vec::new();
        let mut u = s;
        loop {
            if u == t {
                let pushed = path.iter().map(|&e| self.capacity[e]).min()?;
                for &e in &path {
                    self.capacity[e] -= pushed;
                    self.capacity[e ^ 1] += pushed;
                }
                return Some(pushed);
            }
            let mut advanced = false;
            while next[u] < self.adjacent[u].len() {
                let e = self.adjacent[u][next[u]];
                let v = self.to[e];
                if self.capacity[e] > 0 && level[v] == level[u].wrapping_add(1) {
                    path.push(e);
                    u = v;
                    advanced = true;
                    break;
                }
                next[u] += 1;
            }
            if advanced {
                continue;
            }
            // A dead end: no path to `t` through `u` in this phase.
            level[u] = usize::MAX;
            let e = path.pop()?;
            u = self.to[e ^ 1];
            next[u] += 1;
        }
    }

    /// The nodes reachable from `s` through edges with capacity left.
    fn reachable(&self, s: usize) -> Vec<bool> {
        let mut seen = vec![false; self.adjacent.len()];
        seen[s] = true;
        let mut stack = vec![s];
        while let Some(u) = stack.pop() {
            for &e in &self.adjacent[u] {
                let v = self.to[e];
                if self.capacity[e] > 0 && !seen[v] {
                    seen[v] = true;
                    stack.push(v);
                }
            }
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dinic_finds_the_maximum_flow_of_a_textbook_network() {
        // CLRS figure 26.1: the maximum flow is 23.
        let mut net = Network::new(6);
        for (u, v, c) in [
            (0, 1, 16),
            (0, 2, 13),
            (2, 1, 4),
            (1, 3, 12),
            (3, 2, 9),
            (2, 4, 14),
            (4, 3, 7),
            (3, 5, 20),
            (4, 5, 4),
        ] {
            net.add_edge(u, v, c);
        }
        assert_eq!(net.max_flow(0, 5), 23);
        // The minimum cut: {s, v1, v2, v4} on the source side.
        let side = net.reachable(0);
        assert_eq!(side, vec![true, true, true, false, true, false]);
    }
}
