//! Fusion: grouping the scheduled nodes of a primitive graph into kernels.
//!
//! The input is a [`Plan`] in fused mode, so views are already index arithmetic and
//! memory-free values (`full`, `arange` and elementwise ops over them) are recomputed
//! in each consumer; every other node starts as its own group. Then, round after
//! round (as Inductor's `fuse_nodes` does), every candidate pair of groups is scored
//! and the best are merged:
//!
//! - **vertical** candidates are producer → consumer pairs (pointwise chains, a
//!   reduction's prologue and epilogue, a matmul's epilogue);
//! - **horizontal** candidates are groups that read the same buffer (siblings), taken
//!   between neighbours in execution order.
//!
//! The score is the number of bytes the merge saves: the static bytes moved by the two
//! kernels minus those of the merged kernel (Inductor's `score_fusion`, XLA's priority
//! fusion), so a merge that removes an intermediate write and read, or a second read
//! of shared input, ranks by exactly that. Ties go to the pair closer in graph order.
//!
//! Every refused candidate records why, under one of these rules:
//!
//! | rule | meaning |
//! |---|---|
//! | `max-fusion-size` | the merged kernel would hold more than `max_fusion_size` nodes (64, as Inductor) |
//! | `would-create-cycle` | another path between the two groups exists, so the merged kernel would depend on itself |
//! | `no-bytes-saved` | the kernels share no data |
//! | `too-much-recompute` | the merged kernel would compute more than twice the operations of the two (a value recomputed at many points) |
//! | `raises-peak-memory` | the merge would raise the peak of live intermediate bytes (Inductor's `can_fusion_increase_peak_memory`) |
//! | `reduction-domains-differ` | reductions with different kept (outer) shapes |
//! | `store-outside-domain` | a value to store fits neither the outer domain nor a reduced input's shape |
//! | `reduction-read-elsewhere` | a reduction result read at another outer point (e.g. a transpose of it) |
//! | `gemm-with-reduction` | a matmul kernel holds one product and no other reduction |
//! | `gemm-operand-not-strided` | a matmul operand computed in the kernel instead of read through strides |
//! | `expression-too-deep` | the merged expressions nest too deeply |
//!
//! Recomputation rule: nothing that reads memory is ever computed by two kernels; a
//! value needed by several kernels is stored once and loaded. Within a kernel a fused
//! producer is computed wherever its consumer needs it (a broadcast, softmax's `exp`
//! in both the sum and the store), which `too-much-recompute` bounds.

use crate::error::{Error, Result};
use crate::lower::{build_kernel, materialize_gemm_operands, Layout, LowerError, Plan, SNode};
use ferrite_ir::loops::KernelId;
use ferrite_ir::{Graph, ValueId};
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::Dfs;
use petgraph::Direction;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::fmt;

/// Inductor's `max_fusion_size`: the most scheduled nodes one kernel may hold.
pub const MAX_FUSION_SIZE: usize = 64;

/// A merged kernel may perform at most this many times the operations of its parts.
const RECOMPUTE_FACTOR: u64 = 2;

/// Rounds of fusion before giving up looking for more (each round merges many pairs).
const MAX_ROUNDS: usize = 64;

/// Vertical (producer → consumer) or horizontal (siblings sharing an input).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FusionKind {
    /// The second group reads what the first computes.
    Vertical,
    /// Both groups read a common buffer.
    Horizontal,
}

/// One fusion decision, made or refused.
#[derive(Clone, PartialEq, Debug)]
pub struct FusionDecision {
    /// Vertical or horizontal.
    pub kind: FusionKind,
    /// The graph values of the first group (`%3 add`, ..), as `(value, op name)`.
    pub first: Vec<(ValueId, String)>,
    /// The graph values of the second group.
    pub second: Vec<(ValueId, String)>,
    /// Bytes of memory traffic the merge saves (0 when not computed).
    pub saved_bytes: i64,
    /// `None` when fused; otherwise the rule that refused it and the details.
    pub refused: Option<(&'static str, String)>,
}

impl fmt::Display for FusionDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |g: &[(ValueId, String)]| {
            g.iter()
                .map(|(v, n)| format!("{v} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let kind = match self.kind {
            FusionKind::Vertical => "vertical",
            FusionKind::Horizontal => "horizontal",
        };
        match &self.refused {
            None => write!(
                f,
                "fused   {{{}}} + {{{}}}  ({kind}, saves {} B)",
                list(&self.first),
                list(&self.second),
                self.saved_bytes
            ),
            Some((rule, detail)) => write!(
                f,
                "refused {{{}}} + {{{}}}  ({kind}) {rule}: {detail}",
                list(&self.first),
                list(&self.second)
            ),
        }
    }
}

/// The result of fusion: the plan, the groups in execution order, and the decisions.
pub struct Fusion<'g> {
    /// The fused-mode plan the groups refer to.
    pub plan: Plan<'g>,
    /// Each kernel's scheduled nodes, kernels in execution order.
    pub groups: Vec<Vec<usize>>,
    /// Every decision made, in order.
    pub decisions: Vec<FusionDecision>,
}

/// Static cost of one candidate kernel.
#[derive(Clone, Copy)]
struct Cost {
    bytes: i64,
    ops: u64,
}

/// Groups the primitive graph `g` into kernels (see the module docs).
pub fn fuse(g: &Graph, max_fusion_size: usize) -> Result<Fusion<'_>> {
    let plan = materialize_gemm_operands(Plan::fused(g))?;
    let layout = Layout::provisional(&plan);
    let n = plan.snodes.len();
    let mut dag = StableDiGraph::new();
    let node: Vec<Option<NodeIndex>> = (0..n).map(|s| Some(dag.add_node(s))).collect();
    for (s, loads) in plan.loads.iter().enumerate() {
        for v in loads {
            if let (Some(p), Some(ns)) = (plan.snode_of(*v), node[s]) {
                if let Some(np) = node[p] {
                    dag.update_edge(np, ns, ());
                }
            }
        }
    }
    let mut f = Fuser {
        plan: &plan,
        layout: &layout,
        groups: (0..n).map(|s| Some(vec![s])).collect(),
        of: (0..n).collect(),
        dag,
        node,
        cache: HashMap::new(),
        decided: HashSet::new(),
        decisions: Vec::new(),
        max_fusion_size: max_fusion_size.max(1),
    };
    for s in 0..n {
        f.cost(&[s]).map_err(|e| match e {
            LowerError::Refused(r) => Error::Internal(format!("node cannot be lowered alone: {r}")),
            LowerError::Failed(e) => e,
        })?;
    }
    for _ in 0..MAX_ROUNDS {
        if !f.round()? {
            break;
        }
    }
    let order = f.topological_order(None);
    let groups: Vec<Vec<usize>> = order
        .into_iter()
        .filter_map(|gi| f.groups[gi].clone())
        .collect();
    let decisions = f.decisions;
    Ok(Fusion {
        plan,
        groups,
        decisions,
    })
}

struct Fuser<'a, 'g> {
    plan: &'a Plan<'g>,
    layout: &'a Layout,
    /// Group slots; merged-away groups are `None`. Members are sorted.
    groups: Vec<Option<Vec<usize>>>,
    /// The group of each scheduled node.
    of: Vec<usize>,
    /// Dependencies between groups (producer -> consumer), kept up to date on merges.
    dag: StableDiGraph<usize, ()>,
    /// The DAG node of each active group.
    node: Vec<Option<NodeIndex>>,
    cache: HashMap<Vec<usize>, Result<Cost, crate::lower::Refusal>>,
    /// Candidate pairs already decided (by member lists), so refusals are recorded once.
    decided: HashSet<(Vec<usize>, Vec<usize>)>,
    decisions: Vec<FusionDecision>,
    max_fusion_size: usize,
}

/// A scored candidate.
struct Candidate {
    a: usize,
    b: usize,
    kind: FusionKind,
    saved: i64,
    distance: usize,
}

impl Fuser<'_, '_> {
    /// The static cost of a kernel made of `members` (cached), or why it cannot exist.
    fn cost(&mut self, members: &[usize]) -> Result<Cost, LowerError> {
        let mut key = members.to_vec();
        key.sort_unstable();
        if let Some(c) = self.cache.get(&key) {
            return c.clone().map_err(LowerError::Refused);
        }
        let result = match build_kernel(self.plan, self.layout, &key, KernelId(0)) {
            Ok(k) => Ok(Cost {
                bytes: k.bytes_moved() as i64,
                ops: k.op_count(),
            }),
            Err(LowerError::Refused(r)) => Err(r),
            Err(LowerError::Failed(e)) => return Err(LowerError::Failed(e)),
        };
        self.cache.insert(key, result.clone());
        result.map_err(LowerError::Refused)
    }

    /// Edges producer group -> consumer group.
    fn edges(&self) -> Vec<(usize, usize)> {
        self.dag
            .edge_indices()
            .filter_map(|e| self.dag.edge_endpoints(e))
            .map(|(x, y)| (self.dag[x], self.dag[y]))
            .collect()
    }

    /// Active groups in a topological order, earliest graph position first. With
    /// `alias = Some((a, b))`, as if `b` were merged into `a`.
    fn topological_order(&self, alias: Option<(usize, usize)>) -> Vec<usize> {
        let map = |g: usize| match alias {
            Some((a, b)) if g == b => a,
            _ => g,
        };
        let n = self.groups.len();
        let mut indegree = vec![0usize; n];
        let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (x, y) in self.edges() {
            let (x, y) = (map(x), map(y));
            if x != y {
                indegree[y] += 1;
                succ[x].push(y);
            }
        }
        // Min-heap on the group's first scheduled node keeps graph order where free.
        let first = |gi: usize| {
            let own = self.groups[gi].as_ref().and_then(|m| m.first().copied());
            match alias {
                Some((a, b)) if gi == a => {
                    let other = self.groups[b].as_ref().and_then(|m| m.first().copied());
                    own.min(other).or(own).or(other)
                }
                _ => own,
            }
        };
        let mut heap = BinaryHeap::new();
        for (gi, &d) in indegree.iter().enumerate() {
            if self.groups[gi].is_some() && map(gi) == gi && d == 0 {
                heap.push(std::cmp::Reverse((first(gi), gi)));
            }
        }
        let mut order = Vec::with_capacity(n);
        while let Some(std::cmp::Reverse((_, gi))) = heap.pop() {
            order.push(gi);
            for &y in &succ[gi] {
                indegree[y] -= 1;
                if indegree[y] == 0 {
                    heap.push(std::cmp::Reverse((first(y), y)));
                }
            }
        }
        order
    }

    /// Peak of live intermediate bytes for the groups in topological order (a value is
    /// live from its kernel to its last reader), optionally as if `b` were merged into `a`.
    fn peak_live_bytes(&self, alias: Option<(usize, usize)>) -> usize {
        let map = |g: usize| match alias {
            Some((a, b)) if g == b => a,
            _ => g,
        };
        let order = self.topological_order(alias);
        let mut position = vec![0usize; self.groups.len()];
        for (p, &gi) in order.iter().enumerate() {
            position[gi] = p;
        }
        let mut delta = vec![0i64; order.len() + 1];
        for (s, node) in self.plan.snodes.iter().enumerate() {
            let SNode::Value(v) = *node else { continue };
            if self.plan.output_of[v.index()].is_some() {
                continue;
            }
            let gi = map(self.of[s]);
            let last = self.plan.readers[v.index()]
                .iter()
                .map(|&r| map(self.of[r]))
                .filter(|&r| r != gi)
                .map(|r| position[r])
                .max();
            let Some(last) = last else { continue };
            let size = self.plan.g.ty(v).size_bytes() as i64;
            delta[position[gi]] += size;
            delta[last + 1] -= size;
        }
        let mut live = 0i64;
        let mut peak = 0i64;
        for d in delta {
            live += d;
            peak = peak.max(live);
        }
        peak.max(0) as usize
    }

    /// True when merging groups `a` and `b` would make a kernel depend on itself: a
    /// path between them passes through a third group.
    fn would_cycle(&self, a: usize, b: usize) -> bool {
        let (Some(ia), Some(ib)) = (self.node[a], self.node[b]) else {
            return true;
        };
        self.through_third(ia, ib) || self.through_third(ib, ia)
    }

    /// Whether `to` is reachable from `from` other than by their direct edge.
    fn through_third(&self, from: NodeIndex, to: NodeIndex) -> bool {
        // One depth-first search from all of `from`'s other successors at once.
        let mut dfs = Dfs::empty(&self.dag);
        dfs.stack
            .extend(self.dag.neighbors(from).filter(|&n| n != to));
        while let Some(n) = dfs.next(&self.dag) {
            if n == to {
                return true;
            }
        }
        false
    }

    /// Merges group `b` into group `a`.
    fn merge(&mut self, a: usize, b: usize) {
        let Some(mb) = self.groups[b].take() else {
            return;
        };
        for &s in &mb {
            self.of[s] = a;
        }
        if let Some(ma) = self.groups[a].as_mut() {
            ma.extend(mb);
            ma.sort_unstable();
        }
        if let (Some(ia), Some(ib)) = (self.node[a], self.node[b].take()) {
            let outgoing: Vec<NodeIndex> = self
                .dag
                .neighbors_directed(ib, Direction::Outgoing)
                .collect();
            let incoming: Vec<NodeIndex> = self
                .dag
                .neighbors_directed(ib, Direction::Incoming)
                .collect();
            for n in outgoing {
                if n != ia {
                    self.dag.update_edge(ia, n, ());
                }
            }
            for n in incoming {
                if n != ia {
                    self.dag.update_edge(n, ia, ());
                }
            }
            self.dag.remove_node(ib);
        }
    }

    fn describe(&self, gi: usize) -> Vec<(ValueId, String)> {
        self.groups[gi]
            .iter()
            .flatten()
            .map(|&s| match self.plan.snodes[s] {
                SNode::Value(v) => (v, self.plan.g.node(v).op.name().to_string()),
                SNode::OutputCopy { output, value } => (value, format!("copy to output {output}")),
            })
            .collect()
    }

    fn refuse(&mut self, a: usize, b: usize, kind: FusionKind, rule: &'static str, detail: String) {
        self.decisions.push(FusionDecision {
            kind,
            first: self.describe(a),
            second: self.describe(b),
            saved_bytes: 0,
            refused: Some((rule, detail)),
        });
    }

    /// One round: score every candidate, merge the best disjoint ones. Returns whether
    /// anything merged.
    fn round(&mut self) -> Result<bool> {
        let edges: BTreeSet<(usize, usize)> = self.edges().into_iter().collect();

        // Candidate pairs: edges, and neighbouring readers of a common buffer.
        let mut pairs: BTreeSet<(usize, usize, bool)> = BTreeSet::new();
        for &(a, b) in &edges {
            pairs.insert((a, b, true));
        }
        let order = self.topological_order(None);
        let mut position = vec![usize::MAX; self.groups.len()];
        for (p, &gi) in order.iter().enumerate() {
            position[gi] = p;
        }
        for readers in &self.plan.readers {
            let mut gs: Vec<usize> = readers.iter().map(|&r| self.of[r]).collect();
            gs.sort_by_key(|&gi| position[gi]);
            gs.dedup();
            for w in gs.windows(2) {
                let (a, b) = (w[0], w[1]);
                if !edges.contains(&(a, b)) && !edges.contains(&(b, a)) {
                    pairs.insert((a, b, false));
                }
            }
        }

        let mut candidates = Vec::new();
        for (a, b, vertical) in pairs {
            let kind = if vertical {
                FusionKind::Vertical
            } else {
                FusionKind::Horizontal
            };
            let (Some(ma), Some(mb)) = (self.groups[a].clone(), self.groups[b].clone()) else {
                continue;
            };
            let key = (ma.clone(), mb.clone());
            if self.decided.contains(&key) {
                continue;
            }
            if ma.len() + mb.len() > self.max_fusion_size {
                self.decided.insert(key);
                let detail = format!(
                    "{} + {} nodes exceed {}",
                    ma.len(),
                    mb.len(),
                    self.max_fusion_size
                );
                self.refuse(a, b, kind, "max-fusion-size", detail);
                continue;
            }
            if self.would_cycle(a, b) {
                self.decided.insert(key);
                self.refuse(
                    a,
                    b,
                    kind,
                    "would-create-cycle",
                    "another kernel lies on a path between them".into(),
                );
                continue;
            }
            let mut merged = ma.clone();
            merged.extend(&mb);
            merged.sort_unstable();
            let (ca, cb) = match (self.cost(&ma), self.cost(&mb)) {
                (Ok(x), Ok(y)) => (x, y),
                (Err(LowerError::Failed(e)), _) | (_, Err(LowerError::Failed(e))) => return Err(e),
                _ => continue,
            };
            let cm = match self.cost(&merged) {
                Ok(c) => c,
                Err(LowerError::Refused(r)) => {
                    self.decided.insert(key);
                    self.refuse(a, b, kind, r.rule, r.detail);
                    continue;
                }
                Err(LowerError::Failed(e)) => return Err(e),
            };
            let saved = ca.bytes + cb.bytes - cm.bytes;
            if saved <= 0 {
                self.decided.insert(key);
                self.refuse(
                    a,
                    b,
                    kind,
                    "no-bytes-saved",
                    format!("the merge saves {saved} B"),
                );
                continue;
            }
            if cm.ops > RECOMPUTE_FACTOR.saturating_mul(ca.ops.saturating_add(cb.ops)) {
                self.decided.insert(key);
                let detail = format!("{} ops merged vs {} + {} apart", cm.ops, ca.ops, cb.ops);
                self.refuse(a, b, kind, "too-much-recompute", detail);
                continue;
            }
            let distance = ma[0].abs_diff(mb[0]);
            candidates.push(Candidate {
                a,
                b,
                kind,
                saved,
                distance,
            });
        }
        candidates.sort_by(|x, y| {
            y.saved
                .cmp(&x.saved)
                .then(x.distance.cmp(&y.distance))
                .then((x.a, x.b).cmp(&(y.a, y.b)))
        });

        let mut used = HashSet::new();
        let mut merged_any = false;
        let mut peak = self.peak_live_bytes(None);
        for c in candidates {
            if used.contains(&c.a) || used.contains(&c.b) {
                continue;
            }
            let (Some(ma), Some(mb)) = (self.groups[c.a].clone(), self.groups[c.b].clone()) else {
                continue;
            };
            // Earlier merges of this round may have joined a path between the two.
            if merged_any && self.would_cycle(c.a, c.b) {
                self.decided.insert((ma, mb));
                let detail = "another kernel lies on a path between them".to_string();
                self.refuse(c.a, c.b, c.kind, "would-create-cycle", detail);
                continue;
            }
            let after = self.peak_live_bytes(Some((c.a, c.b)));
            if after > peak {
                self.decided.insert((ma, mb));
                let detail = format!("peak live intermediates {peak} B -> {after} B");
                self.refuse(c.a, c.b, c.kind, "raises-peak-memory", detail);
                continue;
            }
            self.decisions.push(FusionDecision {
                kind: c.kind,
                first: self.describe(c.a),
                second: self.describe(c.b),
                saved_bytes: c.saved,
                refused: None,
            });
            self.merge(c.a, c.b);
            peak = after;
            used.insert(c.a);
            used.insert(c.b);
            merged_any = true;
        }
        Ok(merged_any)
    }
}
