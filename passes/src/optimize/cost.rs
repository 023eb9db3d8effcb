//! The extraction cost model, and the extractor that uses it.
//!
//! # The model
//!
//! A node's own cost is `BYTE_COST * bytes + FLOP_COST * flops`:
//!
//! - **bytes** are the bytes of the result, counted for every op that computes something
//!   (elementwise, reductions, matmul, concat, pad, index ops): the memory it materializes.
//! - **flops** are arithmetic work: elementwise ops cost a per-element weight (1 for add, mul,
//!   compare, select, cast; 4 for divide, square root and reciprocals; 8 for exp, log, pow,
//!   trigonometry), reductions one per input element, `matmul` `2 * M * N * K` per batch.
//! - Views (`reshape`, `permute`, `expand`, `slice`) and `full` cost [`VIEW_COST`], a token amount:
//!   fusion turns them into index expressions and they never touch memory. The token keeps
//!   `x` cheaper than `permute(permute(x))`, which is all a view's cost has to decide. A reshape
//!   costs half the token: it keeps row-major order, so it is the simplest view to index.
//! - Parameters and literals are free.
//!
//! A byte costs as much as four flops ([`FLOP_COST`] is a quarter of [`BYTE_COST`]): a CPU core
//! does tens of GFLOP/s but streams only about ten GB/s, so memory traffic dominates elementwise
//! code while `matmul`'s `2MNK` term still dominates matrix work.
//!
//! This model is deliberately not AST size: `x * x` beats `pow(x, 2)` by its flops, `sum(x) * c`
//! beats `sum(x * c)` because the multiply runs on the reduced tensor, and a transposed operand
//! costs nothing.
//!
//! # Extraction
//!
//! A class's cost is its cheapest node's own cost plus its operand classes' costs (egg's tree
//! cost: a value shared by two users is counted for each, which can only make sharing look
//! expensive, never make a result wrong; an operand a node uses twice, as `x * x` does, is
//! counted once). Costs are computed cheapest class first (Knuth's generalization of
//! Dijkstra's algorithm), each class and node once; egg's `Extractor` sweeps every class until
//! nothing changes, which is quadratic on the deep chains that real models are. The result is then
//! checked against the input with [`graph_cost`], which counts each node of the DAG once.

use super::analysis::{node_type, ClassData};
use super::egraph::{Choice, TensorEGraph};
use super::language::TensorLang;
use egg::{CostFunction, Id};
use ferrite_ir::{BinaryOp, Graph, Op, TensorType, UnaryOp};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Cost of one byte materialized in memory.
pub const BYTE_COST: f64 = 1.0;
/// Cost of one arithmetic operation: a quarter of a byte's.
pub const FLOP_COST: f64 = 0.25;
/// Cost of a view or a broadcast constant: a token, they are free once fused.
pub const VIEW_COST: f64 = 1.0;

/// Flops per element of a unary op.
fn unary_weight(u: UnaryOp) -> f64 {
    match u {
        UnaryOp::Neg
        | UnaryOp::Abs
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Sign
        | UnaryOp::Not
        | UnaryOp::Relu => 1.0,
        UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Reciprocal => 4.0,
        _ => 8.0,
    }
}

/// Flops per element of a binary op.
fn binary_weight(b: BinaryOp) -> f64 {
    match b {
        BinaryOp::Div => 4.0,
        BinaryOp::FloorDivide | BinaryOp::TruncDivide | BinaryOp::Remainder | BinaryOp::Fmod => 8.0,
        BinaryOp::Pow => 8.0,
        _ => 1.0,
    }
}

/// The own cost of `op` applied to operands of types `inputs`, producing `out` (the model above).
pub fn op_cost(op: &Op, inputs: &[&TensorType], out: &TensorType) -> f64 {
    let bytes = out.size_bytes() as f64;
    match op {
        Op::Param { .. } | Op::Literal { .. } | Op::Constant(_) => 0.0,
        // Keeping row-major order, a reshape is the simplest view of all.
        Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => VIEW_COST / 2.0,
        Op::Full { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Expand { .. }
        | Op::Slice { .. } => VIEW_COST,
        _ => BYTE_COST * bytes + FLOP_COST * op_flops(op, inputs, out),
    }
}

/// The arithmetic work of `op` on operands of types `inputs`, producing `out`, as the model
/// counts it: zero for leaves and views, a weight per element for elementwise ops, one per
/// input element for a reduction, `2 * M * N * K` for a `matmul`.
pub fn op_flops(op: &Op, inputs: &[&TensorType], out: &TensorType) -> f64 {
    let n = out.numel() as f64;
    let input_elems = inputs.first().map_or(0.0, |t| t.numel() as f64);
    match op {
        Op::Param { .. }
        | Op::Literal { .. }
        | Op::Constant(_)
        | Op::Reshape { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Full { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Expand { .. }
        | Op::Slice { .. } => 0.0,
        Op::Unary(u) => n * unary_weight(*u),
        Op::Binary(b) => n * binary_weight(*b),
        Op::Where | Op::Cast { .. } => n,
        Op::Reduce { .. } | Op::ArgReduce { .. } => input_elems,
        Op::MatMul => {
            // Each output element is a dot product over the shared axis.
            let k = inputs
                .first()
                .and_then(|a| a.shape.last())
                .copied()
                .unwrap_or(0) as f64;
            2.0 * n * k
        }
        Op::Concat { .. }
        | Op::Pad { .. }
        | Op::IndexSelect { .. }
        | Op::Gather { .. }
        | Op::Arange { .. } => n,
        // Composite ops (normally gone by now): a few passes over the input.
        _ => 8.0 * input_elems.max(n),
    }
}

/// The cost of a whole graph: every live node once (the DAG cost, sharing counted once).
pub fn graph_cost(g: &Graph) -> f64 {
    let g = g.without_dead_nodes();
    g.nodes
        .iter()
        .map(|n| {
            let tys: Vec<&TensorType> = n.inputs.iter().map(|&v| g.ty(v)).collect();
            op_cost(&n.op, &tys, &n.ty)
        })
        .sum()
}

/// The model as an egg [`CostFunction`] over an e-graph (tree cost: own cost plus operands').
pub(crate) struct CostModel<'a> {
    egraph: &'a TensorEGraph,
    own: HashMap<TensorLang, f64>,
}

impl<'a> CostModel<'a> {
    /// A model reading operand types from `egraph`.
    pub(crate) fn new(egraph: &'a TensorEGraph) -> Self {
        CostModel {
            egraph,
            own: HashMap::default(),
        }
    }

    /// The node's own cost; infinite if its type is unknown.
    fn own_cost(&mut self, enode: &TensorLang) -> f64 {
        if let Some(&c) = self.own.get(enode) {
            return c;
        }
        let eg = self.egraph;
        let entry = eg.analysis.ops.get(enode.op);
        let inputs: Vec<&ClassData> = enode.children.iter().map(|&c| &eg[c].data).collect();
        let tys: Option<Vec<&TensorType>> = inputs.iter().map(|d| d.ty.as_ref()).collect();
        let cost = match (node_type(entry, &inputs), tys) {
            (Some(out), Some(tys)) => op_cost(&entry.op, &tys, &out),
            _ => f64::INFINITY,
        };
        self.own.insert(enode.clone(), cost);
        cost
    }
}

impl CostFunction<TensorLang> for CostModel<'_> {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &TensorLang, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        let own = self.own_cost(enode);
        // An operand used twice by the same node (`x * x`) is one value: counted once, or
        // `x * x` would cost `x` twice and lose to `pow(x, 2)` whenever `x` is expensive.
        let eg = self.egraph;
        let children = &enode.children;
        (0..children.len())
            .filter(|&i| {
                let c = eg.find(children[i]);
                !children[..i].iter().any(|&d| eg.find(d) == c)
            })
            .fold(own, |sum, i| sum + costs(children[i]))
    }
}

/// A cost that prefers nodes outside `original` over nodes in it, whatever they compute: it
/// isolates what a rule added (see `rewrite_once`).
pub(crate) struct PreferNew {
    /// The nodes the e-graph started with (canonicalized).
    pub original: HashSet<TensorLang>,
}

impl CostFunction<TensorLang> for PreferNew {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &TensorLang, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        let own = if enode.children.is_empty() {
            0.0
        } else if self.original.contains(enode) {
            1.0
        } else {
            1e-3
        };
        enode.children.iter().fold(own, |sum, &c| sum + costs(c))
    }
}

/// Chooses the cheapest node of every class under `cost`.
///
/// Knuth's generalization of Dijkstra's algorithm to superior functions (a node costs at least
/// as much as each operand, true of both cost models here): a node is costed once, when the
/// last of its operand classes is settled, and the class with the cheapest costed node is
/// settled next, with that node. Each class and node is handled once, `O(n log n)` in the
/// e-graph's size. (A worklist that revisits a class's users whenever it gets cheaper is
/// quadratic on the long chains of deep models: a residual stream through twelve layers made
/// extraction most of GPT-2's optimizer time.) Ties go to the lower class id, then to the
/// node listed first, so the choice is deterministic.
pub(crate) fn extract<CF>(eg: &TensorEGraph, cost: &mut CF) -> Choice
where
    CF: CostFunction<TensorLang, Cost = f64>,
{
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// An `f64` ordered by `total_cmp` (costs are never NaN; infinity sorts last).
    #[derive(PartialEq)]
    struct Key(f64);
    impl Eq for Key {}
    impl PartialOrd for Key {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Key {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&other.0)
        }
    }

    let mut classes: Vec<Id> = eg.classes().map(|c| c.id).collect();
    classes.sort_unstable();
    // For each class, the nodes that use it (class, node index), each once; for each node,
    // how many distinct operand classes are not settled yet.
    let mut users: HashMap<Id, Vec<(Id, usize)>> = HashMap::default();
    let mut pending: HashMap<Id, Vec<usize>> = HashMap::default();
    let mut heap: BinaryHeap<Reverse<(Key, Id, usize)>> = BinaryHeap::new();
    let mut operands: Vec<Id> = Vec::new();
    for &c in &classes {
        let nodes = &eg[c].nodes;
        let mut counts = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            operands.clear();
            operands.extend(n.children.iter().map(|&k| eg.find(k)));
            operands.sort_unstable();
            operands.dedup();
            for &k in &operands {
                users.entry(k).or_default().push((c, i));
            }
            counts.push(operands.len());
            if operands.is_empty() {
                let k = cost.cost(n, |_| 0.0);
                heap.push(Reverse((Key(k), c, i)));
            }
        }
        pending.insert(c, counts);
    }
    let mut best: HashMap<Id, (f64, TensorLang)> = HashMap::default();
    while let Some(Reverse((Key(k), c, i))) = heap.pop() {
        if best.contains_key(&c) {
            continue;
        }
        best.insert(c, (k, eg[c].nodes[i].clone()));
        let Some(us) = users.get(&c) else { continue };
        for &(p, j) in us {
            let left = &mut pending.get_mut(&p).expect("every class is counted")[j];
            *left -= 1;
            if *left == 0 && !best.contains_key(&p) {
                let n = &eg[p].nodes[j];
                let k = cost.cost(n, |x| best[&eg.find(x)].0);
                heap.push(Reverse((Key(k), p, j)));
            }
        }
    }
    best.into_iter().map(|(c, (_, n))| (c, n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_ir::DType;

    fn t(shape: &[usize]) -> TensorType {
        TensorType::new(DType::F32, shape.to_vec()).unwrap()
    }

    #[test]
    fn model_counts_bytes_and_flops() {
        let x = t(&[10, 10]);
        // 400 bytes written, 100 multiplies.
        assert_eq!(op_cost(&Op::Binary(BinaryOp::Mul), &[&x, &x], &x), 425.0);
        assert_eq!(op_cost(&Op::Binary(BinaryOp::Pow), &[&x, &x], &x), 600.0);
        // [4, 8] @ [8, 2]: 32 bytes out, 2*4*2*8 = 128 flops.
        let mm = op_cost(&Op::MatMul, &[&t(&[4, 8]), &t(&[8, 2])], &t(&[4, 2]));
        assert_eq!(mm, 32.0 + 0.25 * 128.0);
        // A sum reads 100 elements and writes 10.
        let sum = Op::Reduce {
            op: ferrite_ir::ReduceOp::Sum,
            axes: Some(vec![1]),
            keepdim: false,
        };
        assert_eq!(op_cost(&sum, &[&x], &t(&[10])), 40.0 + 25.0);
        let p = Op::Permute { dims: vec![1, 0] };
        assert_eq!(op_cost(&p, &[&x], &x), VIEW_COST);
    }
}
