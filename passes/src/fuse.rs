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
//! | `recompute-costs-more-than-memory` | the operations the merge recomputes cost more than storing and loading the producer's value once (a gather reading each element at several taps) |
//! | `raises-peak-memory` | the merge would raise the peak of live intermediate bytes (Inductor's `can_fusion_increase_peak_memory`) |
//! | `reduction-domains-differ` | reductions with different kept (outer) shapes |
//! | `store-outside-domain` | a value to store fits neither the outer domain nor a reduced input's shape |
//! | `reduction-read-elsewhere` | a reduction result read at another outer point (e.g. a transpose of it) |
//! | `gemm-with-reduction` | a matmul kernel holds one product and no other reduction |
//! | `gemm-operand-not-strided` | a matmul operand computed in the kernel instead of read through strides |
//! | `expression-too-deep` | the merged expressions nest too deeply |
//! | `short-padded-rows` | a `pad` into rows of at most 16 elements read by a window's taps, or by a window of more than 25 taps, is a kernel of its own, lowered without guards ([`SHORT_PADDED_ROW`], [`MANY_TAPS`]) |
//!
//! Recomputation rule: nothing that reads memory is ever computed by two kernels; a
//! value needed by several kernels is stored once and loaded. Within a kernel a fused
//! producer is computed wherever its consumer needs it (a broadcast, softmax's `exp`
//! in both the sum and the store), which `too-much-recompute` bounds relative to the
//! kernels' work and `recompute-costs-more-than-memory` in absolute terms: a depthwise
//! conv's gather reads each element of its input at 9 taps, so a batch norm and ReLU6
//! fused into it would run 9 times per element for the 8 bytes per element that
//! storing the value once and loading it again would cost. The merge is refused when
//! the extra operations, at [`OP_BYTES`] bytes each, exceed the bytes it saves plus
//! [`KERNEL_OVERHEAD_BYTES`] (what the kernel the producer then needs costs anyway), so
//! a small per-channel vector recomputed at every point of a large consumer still fuses;
//! a producer that loads nothing (a causal mask of `arange`s) is index arithmetic
//! wherever it is recomputed and is not held to this rule.

use crate::error::{Error, Result};
use crate::lower::{
    build_unnamed, materialize_gemm_operands, signature, Layout, LowerError, Plan, Role, SNode,
    Signature,
};
use ferrite_ir::hash::{HashMap, HashSet};
use ferrite_ir::loops::Kernel;
use ferrite_ir::parallel::parallel_map;
use ferrite_ir::{Graph, Op, ValueId};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt;

/// Inductor's `max_fusion_size`: the most scheduled nodes one kernel may hold.
pub const MAX_FUSION_SIZE: usize = 64;

/// A merged kernel may perform at most this many times the operations of its parts.
const RECOMPUTE_FACTOR: u64 = 2;

/// What one scalar operation recomputed by a merged kernel costs, in bytes of memory
/// traffic: a scalar op of a fused loop takes about 0.3 ns on the CPU, a byte of DRAM
/// traffic about 0.05 ns, a byte of L2 traffic less. Two is conservative: it refuses
/// a single operation recomputed at 9 taps (16 bytes of work against the 8 bytes per
/// f32 element of storing and reloading it), so a producer cannot creep into a gather
/// one operation at a time either.
pub const OP_BYTES: u64 = 2;

/// The fixed cost of the kernel a producer needs when a merge into its consumer is
/// refused, in bytes of traffic (about 3 us at 20 GB/s: launch, threads, the loop nest).
pub const KERNEL_OVERHEAD_BYTES: u64 = 64 << 10;

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
    /// How much work the planner did.
    pub stats: FusionStats,
}

/// Deterministic counts of the fusion planner's work. They grow with a graph as the
/// planner's running time does, so a test can check that fusion scales near-linearly
/// without timing it.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct FusionStats {
    /// Rounds of fusion run.
    pub rounds: usize,
    /// Candidate pairs examined (scored, refused, or skipped as decided before).
    pub candidates: usize,
    /// Dependency edges followed by cycle checks.
    pub cycle_steps: usize,
    /// Updates of the live-bytes profile (each a few tree operations).
    pub profile_updates: usize,
    /// Groups ordered by full recomputations of the execution order and the live-bytes
    /// profile: one per round, and one per merge that the order cannot absorb in place.
    pub reorder_steps: usize,
    /// Candidate kernels built to be costed.
    pub kernels_built: usize,
    /// Candidates costed from an equal [`Signature`] built before (a twin in another
    /// layer) instead of being built.
    pub twin_costs: usize,
    /// Plans rebuilt to materialize matmul operands the GEMM cannot read as strided views
    /// (one per pass of repairs, whatever the number of matmuls repaired).
    pub operand_plans: usize,
}

impl FusionStats {
    /// All the work counted, as one number.
    pub fn work(&self) -> usize {
        self.candidates + self.cycle_steps + self.profile_updates + self.reorder_steps
    }
}

/// What costing a candidate gives: its cost, or why it cannot be one kernel.
type Outcome = Result<Cost, crate::lower::Refusal>;

/// Builds the kernel of `members` to cost it; `Err` only for a failure (a bug), which is
/// not an outcome.
fn build_outcome(plan: &Plan<'_>, layout: &Layout, members: &[usize]) -> Result<Outcome> {
    match build_unnamed(plan, layout, members) {
        Ok(k) => Ok(Ok(Cost::of(&k))),
        Err(LowerError::Refused(r)) => Ok(Err(r)),
        Err(LowerError::Failed(e)) => Err(e),
    }
}

/// Static cost of one candidate kernel.
#[derive(Clone, Copy, PartialEq, Debug)]
struct Cost {
    bytes: i64,
    ops: u64,
    /// Whether the kernel loads anything (a memory-free one, an `arange` compared with
    /// another, is index arithmetic wherever it is recomputed).
    loads: bool,
}

impl Cost {
    fn of(k: &Kernel) -> Cost {
        Cost {
            bytes: k.bytes_moved() as i64,
            ops: k.op_count(),
            loads: !k.reads.is_empty(),
        }
    }
}

/// Padded rows at most this long are stored once, padding included, rather than read
/// through the `pad` view's guards by each consumer ([`store_window_pads`]).
pub const SHORT_PADDED_ROW: usize = 16;

/// A `pad` read by a window of at least this many taps (more than 5x5: ResNet's 7x7 stem)
/// is stored once whatever its rows ([`store_window_pads`]): 49 guarded,
/// peeled row copies made the stem's codegen 2x; unguarded, they compile as fast as a
/// gather and run 2.6x faster than one.
pub const MANY_TAPS: usize = 26;

/// Materializes each `pad` view read by a window of [`MANY_TAPS`] taps or more, and each
/// that pads its last axis into rows of at most
/// [`SHORT_PADDED_ROW`] elements and is read by several views (the taps of a window:
/// a 3x3 window's input of 7 or 14 positions a row, MobileNetV2's late depthwise convs,
/// ResNet's late im2col): read through the view, every tap of every output tests the
/// padding per element, and a row of 7 is all edges; stored once (one more pass over the
/// input, the padding written as values by a kernel without guards), the taps read it at
/// plain strided indices. Longer rows are read through the view, whose edges the CPU code
/// peels off, and so is a pad read once per element. The fuser keeps each such `pad` a
/// kernel of its own (rule `short-padded-rows`): merged into a consumer, it would be read
/// through guards again, and merged with anything else it would no longer be lowered as a
/// pad alone (`lower/pad.rs`). Returns the plan and the pads it stored.
fn store_window_pads(mut plan: Plan<'_>) -> (Plan<'_>, HashSet<ValueId>) {
    let g = plan.g;
    let mut readers = vec![Vec::new(); g.nodes.len()];
    for (i, node) in g.nodes.iter().enumerate() {
        for x in &node.inputs {
            readers[x.index()].push(i);
        }
    }
    let mut stored = HashSet::default();
    for i in 0..g.nodes.len() {
        let v = ValueId(i as u32);
        if !matches!(g.node(v).op, Op::Pad { .. }) || !matches!(plan.role[i], Role::View) {
            continue;
        }
        let taps = window_taps(g, &readers, i, 0);
        if taps >= MANY_TAPS || taps >= 2 && pads_short_rows(g, v) {
            plan = plan.with_scheduled(v);
            stored.insert(v);
        }
    }
    (plan, stored)
}

/// How many views read node `i` through chains of `slice`s at most 2 deep (a window's
/// taps: a 3x3 window's slices along one axis then the other are 9 either way, shared or
/// not by common subexpressions).
fn window_taps(g: &Graph, readers: &[Vec<usize>], i: usize, depth: usize) -> usize {
    readers[i]
        .iter()
        .map(|&r| {
            if depth < 2 && matches!(g.nodes[r].op, Op::Slice { .. }) && !readers[r].is_empty() {
                window_taps(g, readers, r, depth + 1)
            } else {
                1
            }
        })
        .sum()
}

/// Whether `v` is a `pad` ([`store_window_pads`]) of its last axis into rows
/// of at most [`SHORT_PADDED_ROW`] elements, of at least two axes, padding only.
fn pads_short_rows(g: &Graph, v: ValueId) -> bool {
    let Op::Pad { pads, .. } = &g.node(v).op else {
        return false;
    };
    let shape = &g.ty(v).shape;
    let r = shape.len();
    r >= 2
        && shape[r - 1] <= SHORT_PADDED_ROW
        && (pads[2 * (r - 1)] != 0 || pads[2 * (r - 1) + 1] != 0)
        && pads.iter().all(|&p| p >= 0)
}

/// Groups the primitive graph `g` into kernels (see the module docs).
pub fn fuse(g: &Graph, max_fusion_size: usize, threads: usize) -> Result<Fusion<'_>> {
    let (plan, operand_plans) = materialize_gemm_operands(Plan::fused(g))?;
    let (plan, stored_pads) = store_window_pads(plan);
    let layout = Layout::provisional(&plan);
    let n = plan.snodes.len();
    let mut succ = vec![BTreeSet::new(); n];
    let mut pred = vec![BTreeSet::new(); n];
    for (s, loads) in plan.loads.iter().enumerate() {
        for v in loads {
            if let Some(p) = plan.snode_of(*v) {
                succ[p].insert(s);
                pred[s].insert(p);
            }
        }
    }
    let counted = plan
        .snodes
        .iter()
        .map(|node| match *node {
            SNode::Value(v) => plan.output_of[v.index()].is_none(),
            SNode::OutputCopy { .. } => false,
        })
        .collect();
    let mut f = Fuser {
        plan: &plan,
        layout: &layout,
        groups: (0..n).map(|s| Some(vec![s])).collect(),
        of: (0..n).collect(),
        succ,
        pred,
        rank: (0..n).collect(),
        counted,
        profile: Profile::default(),
        seen: vec![0; n],
        stamp: 0,
        cache: HashMap::default(),
        twins: HashMap::default(),
        decided: HashSet::default(),
        decisions: Vec::new(),
        max_fusion_size: max_fusion_size.max(1),
        threads: threads.max(1),
        stats: FusionStats {
            operand_plans,
            ..FusionStats::default()
        },
        stored_pads,
    };
    let singletons: Vec<Vec<usize>> = (0..n).map(|s| vec![s]).collect();
    f.prefetch(singletons);
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
    let stats = f.stats;
    let decisions = f.decisions;
    Ok(Fusion {
        plan,
        groups,
        decisions,
        stats,
    })
}

struct Fuser<'a, 'g> {
    plan: &'a Plan<'g>,
    layout: &'a Layout,
    /// Group slots; merged-away groups are `None`. Members are sorted.
    groups: Vec<Option<Vec<usize>>>,
    /// The group of each scheduled node.
    of: Vec<usize>,
    /// Dependencies between active groups (consumers, producers), kept up to date on
    /// merges.
    succ: Vec<BTreeSet<usize>>,
    pred: Vec<BTreeSet<usize>>,
    /// Each active group's position in an execution order. Every dependency goes from a
    /// lower rank to a higher one, so a path search stops at its target's rank, and the
    /// live-bytes profile is indexed by it.
    rank: Vec<usize>,
    /// Whether the value of each scheduled node counts as an intermediate (not an
    /// output, not an output copy).
    counted: Vec<bool>,
    profile: Profile,
    /// Visit marks of path searches (`stamp` is the current search's).
    seen: Vec<u32>,
    stamp: u32,
    cache: HashMap<Vec<usize>, Outcome>,
    /// The outcomes of the kernels built so far by [`Signature`]: a candidate whose
    /// signature is here (its twin in another layer was built) is not built again.
    twins: HashMap<Signature<'a>, Outcome>,
    /// Candidate pairs already decided (by member lists), so refusals are recorded once.
    decided: HashSet<(Vec<usize>, Vec<usize>)>,
    /// The pads stored for their window's taps ([`store_window_pads`]).
    stored_pads: HashSet<ValueId>,
    decisions: Vec<FusionDecision>,
    max_fusion_size: usize,
    /// Threads that may build a round's candidate kernels ([`Fuser::prefetch`]).
    threads: usize,
    stats: FusionStats,
}

/// A scored candidate.
struct Candidate {
    a: usize,
    b: usize,
    kind: FusionKind,
    saved: i64,
    distance: usize,
}

/// Live intermediate bytes at each position of the execution order: a value is live
/// from its kernel to its last reader in another kernel, both included. Kept up to date
/// under merges, so scoring a merge's effect on the peak costs its own values only.
#[derive(Default)]
struct Profile {
    tree: MaxTree,
    /// The live interval (ranks) of each scheduled node's value, if counted and read
    /// outside its group.
    live: Vec<Live>,
    /// For each scheduled node: the ranks of the groups reading its value, with how many
    /// of their scheduled nodes do.
    readers: Vec<BTreeMap<usize, usize>>,
}

/// The live interval (first and last rank) of a value, if it is read outside its group.
type Live = Option<(usize, usize)>;

/// What [`Fuser::apply`] changed, to take it back.
struct Undo {
    /// (producer, from rank, to rank) of each reader moved.
    moves: Vec<(usize, usize, usize)>,
    /// (producer, old interval, new interval).
    intervals: Vec<(usize, Live, Live)>,
    /// The rank that no longer holds a kernel.
    gone: usize,
}

/// A position that holds no kernel is pushed this far below any real total.
const GONE: i64 = 1 << 62;

impl<'a> Fuser<'a, '_> {
    /// The static cost of a kernel made of `members` (cached), or why it cannot exist.
    fn cost(&mut self, members: &[usize]) -> Result<Cost, LowerError> {
        let mut key = members.to_vec();
        key.sort_unstable();
        if let Some(c) = self.cache.get(&key) {
            return c.clone().map_err(LowerError::Refused);
        }
        let sig = signature(self.plan, self.layout, &key);
        if let Some(result) = self.twin_outcome(&sig, &key) {
            self.cache.insert(key, result.clone());
            return result.map_err(LowerError::Refused);
        }
        self.stats.kernels_built += 1;
        let result = build_outcome(self.plan, self.layout, &key).map_err(LowerError::Failed)?;
        self.twins.insert(sig, result.clone());
        self.cache.insert(key, result.clone());
        result.map_err(LowerError::Refused)
    }

    /// The outcome of the group `members` taken from its twin, a group with an equal
    /// [`Signature`] built before: its cost, or its refusal restated for these values.
    /// Debug builds check it against a fresh build, so a field the builder reads and the
    /// signature lacks fails the tests.
    fn twin_outcome(&mut self, sig: &Signature<'a>, members: &[usize]) -> Option<Outcome> {
        let (twin, outcome) = self.twins.get_key_value(sig)?;
        let outcome = match outcome {
            Ok(c) => Ok(*c),
            Err(r) => Err(sig.translate(twin, r)?),
        };
        if cfg!(debug_assertions) {
            let built = build_outcome(self.plan, self.layout, members).ok();
            assert_eq!(
                built.as_ref(),
                Some(&outcome),
                "a group with an equal signature builds differently: {members:?}"
            );
        }
        self.stats.twin_costs += 1;
        Some(outcome)
    }

    /// Builds the kernels of `lists` (sorted member lists) that are not cached yet, on
    /// up to `threads` threads, and caches their costs: the same entries [`Fuser::cost`]
    /// would make one at a time (a build that fails is left for it to report). A list
    /// whose [`Signature`] was built before takes that outcome; of several lists with one
    /// new signature, one is built and the others take its outcome.
    fn prefetch(&mut self, mut lists: Vec<Vec<usize>>) {
        if self.threads < 2 {
            return;
        }
        lists.retain(|l| !self.cache.contains_key(l));
        lists.sort_unstable();
        lists.dedup();
        let mut sigs: Vec<Option<Signature<'a>>> = lists
            .iter()
            .map(|l| Some(signature(self.plan, self.layout, l)))
            .collect();
        // Per new signature, the lists that have it; the first is built.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut slot: HashMap<&Signature<'a>, usize> = HashMap::default();
        for (i, sig) in sigs.iter().enumerate() {
            let sig = sig.as_ref().expect("every list has its signature");
            if let Some(outcome) = self.twin_outcome(sig, &lists[i]) {
                self.cache.insert(lists[i].clone(), outcome);
                continue;
            }
            match slot.entry(sig) {
                Entry::Occupied(e) => groups[*e.get()].push(i),
                Entry::Vacant(e) => {
                    e.insert(groups.len());
                    groups.push(vec![i]);
                }
            }
        }
        drop(slot);
        if groups.len() < 2 {
            return;
        }
        self.stats.kernels_built += groups.len();
        let (plan, layout) = (self.plan, self.layout);
        // A failure is `cost`'s to report.
        let built = parallel_map(groups.len(), self.threads, |j| {
            build_outcome(plan, layout, &lists[groups[j][0]]).ok()
        });
        for (members, outcome) in groups.iter().zip(built) {
            let Some(outcome) = outcome else { continue };
            let first = members[0];
            let sig = sigs[first].take().expect("taken once, by its group");
            self.cache
                .insert(std::mem::take(&mut lists[first]), outcome.clone());
            self.twins.insert(sig, outcome);
            for &i in &members[1..] {
                let sig = sigs[i].as_ref().expect("only a group's first is taken");
                if let Some(outcome) = self.twin_outcome(sig, &lists[i]) {
                    self.cache.insert(std::mem::take(&mut lists[i]), outcome);
                }
            }
        }
    }

    /// [`Fuser::prefetch`] for the merged kernels a round will cost: the pairs that pass
    /// the cheap refusals (size, cycles) and are not decided yet.
    fn prefetch_round(&mut self, pairs: &BTreeSet<(usize, usize, bool)>) {
        if self.threads < 2 {
            return;
        }
        let mut lists = Vec::new();
        for &(a, b, _) in pairs {
            let (Some(ma), Some(mb)) = (&self.groups[a], &self.groups[b]) else {
                continue;
            };
            if ma.len() + mb.len() > self.max_fusion_size
                || self.decided.contains(&(ma.clone(), mb.clone()))
            {
                continue;
            }
            let mut merged = ma.clone();
            merged.extend(mb);
            merged.sort_unstable();
            if !self.cache.contains_key(&merged) && !self.would_cycle(a, b) {
                lists.push(merged);
            }
        }
        self.prefetch(lists);
    }

    /// Edges producer group -> consumer group.
    fn edges(&self) -> Vec<(usize, usize)> {
        self.succ
            .iter()
            .enumerate()
            .flat_map(|(x, ys)| ys.iter().map(move |&y| (x, y)))
            .collect()
    }

    /// Active groups in a topological order, earliest graph position first. With
    /// `alias = Some((a, b))`, as if `b` were merged into `a`.
    fn topological_order(&mut self, alias: Option<(usize, usize)>) -> Vec<usize> {
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
        self.stats.reorder_steps += n;
        order
    }

    /// Peak of live intermediate bytes for the groups in topological order (a value is
    /// live from its kernel to its last reader), as if `b` were merged into `a`: the
    /// whole computation, for a merge the order cannot absorb in place.
    fn peak_live_bytes_merged(&mut self, a: usize, b: usize) -> usize {
        let map = |g: usize| if g == b { a } else { g };
        let order = self.topological_order(Some((a, b)));
        let mut position = vec![0usize; self.groups.len()];
        for (p, &gi) in order.iter().enumerate() {
            position[gi] = p;
        }
        let mut delta = vec![0i64; order.len() + 1];
        for (s, node) in self.plan.snodes.iter().enumerate() {
            let SNode::Value(v) = *node else { continue };
            if !self.counted[s] {
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

    /// Recomputes the execution order, the ranks and the live-bytes profile from scratch.
    fn reorder(&mut self) {
        let order = self.topological_order(None);
        for (p, &gi) in order.iter().enumerate() {
            self.rank[gi] = p;
        }
        let n = self.plan.snodes.len();
        self.profile = Profile {
            tree: MaxTree::new(order.len()),
            live: vec![None; n],
            readers: vec![BTreeMap::new(); n],
        };
        for s in 0..n {
            let SNode::Value(v) = self.plan.snodes[s] else {
                continue;
            };
            if !self.counted[s] {
                continue;
            }
            for &r in &self.plan.readers[v.index()] {
                *self.profile.readers[s]
                    .entry(self.rank[self.of[r]])
                    .or_default() += 1;
            }
            let iv = self.interval(s, None);
            self.set_interval(s, iv);
        }
    }

    /// The live interval of scheduled node `s`'s value from the reader ranks, as if
    /// `merged = Some((a, b, at))`: `b` merged into `a` at rank `at`.
    fn interval(&self, s: usize, merged: Option<(usize, usize, usize)>) -> Live {
        let gi = self.of[s];
        let at = match merged {
            Some((a, b, at)) if gi == a || gi == b => at,
            _ => self.rank[gi],
        };
        let mut ranks = self.profile.readers[s].keys().rev();
        // Readers at the producer's own rank are in its group; none can come earlier.
        let last = match ranks.next() {
            Some(&r) if r == at => ranks.next().copied(),
            r => r.copied(),
        };
        last.map(|l| (at, l))
    }

    fn set_interval(&mut self, s: usize, iv: Live) {
        let old = std::mem::replace(&mut self.profile.live[s], iv);
        if old == iv {
            return;
        }
        let SNode::Value(v) = self.plan.snodes[s] else {
            return;
        };
        let size = self.plan.g.ty(v).size_bytes() as i64;
        if let Some((lo, hi)) = old {
            self.profile.tree.add(lo, hi, -size);
        }
        if let Some((lo, hi)) = iv {
            self.profile.tree.add(lo, hi, size);
        }
        self.stats.profile_updates += 1;
    }

    fn move_reader(&mut self, producer: usize, from: usize, to: usize) {
        let readers = &mut self.profile.readers[producer];
        if let Some(c) = readers.get_mut(&from) {
            *c -= 1;
            if *c == 0 {
                readers.remove(&from);
            }
        }
        *readers.entry(to).or_default() += 1;
        self.stats.profile_updates += 1;
    }

    /// Where merging `b` into `a` can run without reordering other kernels: at the
    /// earlier rank when no producer of the later group comes between them, else at the
    /// later rank when no consumer of the earlier one does. Returns (rank kept, rank
    /// freed), or `None` when other kernels would have to move.
    fn placement(&self, a: usize, b: usize) -> Option<(usize, usize)> {
        let (first, second) = if self.rank[a] < self.rank[b] {
            (a, b)
        } else {
            (b, a)
        };
        let (r1, r2) = (self.rank[first], self.rank[second]);
        if self.pred[second]
            .iter()
            .all(|&p| p == first || self.rank[p] < r1)
        {
            return Some((r1, r2));
        }
        if self.succ[first]
            .iter()
            .all(|&c| c == second || self.rank[c] > r2)
        {
            return Some((r2, r1));
        }
        None
    }

    /// Applies merging `b` into `a` at rank `at` to the live-bytes profile (the rank
    /// `gone` then holds no kernel); [`Fuser::undo`] takes it back.
    fn apply(&mut self, a: usize, b: usize, at: usize, gone: usize) -> Undo {
        let mut undo = Undo {
            moves: Vec::new(),
            intervals: Vec::new(),
            gone,
        };
        let mut affected = Vec::new();
        for g in [a, b] {
            let r = self.rank[g];
            let members = self.groups[g].clone().unwrap_or_default();
            for m in members {
                if self.counted[m] {
                    affected.push(m);
                }
                for &v in &self.plan.loads[m] {
                    let Some(p) = self.plan.snode_of(v) else {
                        continue;
                    };
                    if !self.counted[p] {
                        continue;
                    }
                    affected.push(p);
                    if r != at {
                        self.move_reader(p, r, at);
                        undo.moves.push((p, r, at));
                    }
                }
            }
        }
        affected.sort_unstable();
        affected.dedup();
        for p in affected {
            let old = self.profile.live[p];
            let new = self.interval(p, Some((a, b, at)));
            if old != new {
                self.set_interval(p, new);
                undo.intervals.push((p, old, new));
            }
        }
        self.profile.tree.add(gone, gone, -GONE);
        undo
    }

    fn undo(&mut self, undo: Undo) {
        self.profile.tree.add(undo.gone, undo.gone, GONE);
        for &(p, old, _) in undo.intervals.iter().rev() {
            self.set_interval(p, old);
        }
        for &(p, from, to) in undo.moves.iter().rev() {
            self.move_reader(p, to, from);
        }
    }

    fn peak(&self) -> usize {
        self.profile.tree.max().max(0) as usize
    }

    /// True when merging groups `a` and `b` would make a kernel depend on itself: a
    /// path between them passes through a third group.
    fn would_cycle(&mut self, a: usize, b: usize) -> bool {
        if self.groups[a].is_none() || self.groups[b].is_none() {
            return true;
        }
        self.through_third(a, b) || self.through_third(b, a)
    }

    /// Whether `to` is reachable from `from` other than by their direct edge. The search
    /// starts from whichever end has fewer edges and never passes the other end's rank.
    fn through_third(&mut self, from: usize, to: usize) -> bool {
        let (lo, hi) = (self.rank[from], self.rank[to]);
        if lo >= hi {
            return false;
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.seen.fill(0);
            self.stamp = 1;
        }
        let forward = self.succ[from].len() <= self.pred[to].len();
        let (start, goal, next) = if forward {
            (from, to, &self.succ)
        } else {
            (to, from, &self.pred)
        };
        let rank = &self.rank;
        // Strictly between the two ranks: only there can a third group on a path lie.
        let between = |g: usize| lo < rank[g] && rank[g] < hi;
        let mut stack: Vec<usize> = Vec::new();
        let mut steps = 0;
        for &g in &next[start] {
            steps += 1;
            if g != goal && between(g) && self.seen[g] != self.stamp {
                self.seen[g] = self.stamp;
                stack.push(g);
            }
        }
        let mut found = false;
        'search: while let Some(g) = stack.pop() {
            for &h in &next[g] {
                steps += 1;
                if h == goal {
                    found = true;
                    break 'search;
                }
                if between(h) && self.seen[h] != self.stamp {
                    self.seen[h] = self.stamp;
                    stack.push(h);
                }
            }
        }
        self.stats.cycle_steps += steps;
        found
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
        for c in std::mem::take(&mut self.succ[b]) {
            self.pred[c].remove(&b);
            if c != a {
                self.pred[c].insert(a);
                self.succ[a].insert(c);
            }
        }
        for p in std::mem::take(&mut self.pred[b]) {
            self.succ[p].remove(&b);
            if p != a {
                self.succ[p].insert(a);
                self.pred[a].insert(p);
            }
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
        self.stats.rounds += 1;
        self.reorder();

        // Candidate pairs: edges, and neighbouring readers of a common buffer.
        let mut pairs: BTreeSet<(usize, usize, bool)> = BTreeSet::new();
        for (a, b) in self.edges() {
            pairs.insert((a, b, true));
        }
        for readers in &self.plan.readers {
            let mut gs: Vec<usize> = readers.iter().map(|&r| self.of[r]).collect();
            gs.sort_by_key(|&gi| self.rank[gi]);
            gs.dedup();
            for w in gs.windows(2) {
                let (a, b) = (w[0], w[1]);
                if !self.succ[a].contains(&b) && !self.succ[b].contains(&a) {
                    pairs.insert((a, b, false));
                }
            }
        }

        self.prefetch_round(&pairs);
        let mut candidates = Vec::new();
        for (a, b, vertical) in pairs {
            self.stats.candidates += 1;
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
            let stored_pad = |m: &[usize]| {
                matches!(m, [s] if matches!(self.plan.snodes[*s],
                    SNode::Value(v) if self.stored_pads.contains(&v)))
            };
            let refusal = if ma.len() + mb.len() > self.max_fusion_size {
                let detail = format!(
                    "{} + {} nodes exceed {}",
                    ma.len(),
                    mb.len(),
                    self.max_fusion_size
                );
                Some(("max-fusion-size", detail))
            } else if stored_pad(&ma) || stored_pad(&mb) {
                Some((
                    "short-padded-rows",
                    "a stored pad is read by its window's taps without guards".into(),
                ))
            } else if self.would_cycle(a, b) {
                Some((
                    "would-create-cycle",
                    "another kernel lies on a path between them".into(),
                ))
            } else {
                None
            };
            if let Some((rule, detail)) = refusal {
                self.decided.insert(key);
                self.refuse(a, b, kind, rule, detail);
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
            let extra = cm.ops.saturating_sub(ca.ops.saturating_add(cb.ops));
            let recompute = extra.saturating_mul(OP_BYTES);
            if ca.loads
                && cb.loads
                && recompute > (saved as u64).saturating_add(KERNEL_OVERHEAD_BYTES)
            {
                self.decided.insert(key);
                let detail = format!(
                    "{extra} ops recomputed ({recompute} B at {OP_BYTES} B each) vs {saved} B saved"
                );
                self.refuse(a, b, kind, "recompute-costs-more-than-memory", detail);
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

        let mut used = HashSet::default();
        let mut merged_any = false;
        let mut peak = self.peak();
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
            // The merged kernel runs in place of one of the two when the order allows
            // (the profile is then updated for its values only); otherwise the order is
            // recomputed.
            let placed = self.placement(c.a, c.b);
            let (after, undo) = match placed {
                Some((at, gone)) => {
                    let undo = self.apply(c.a, c.b, at, gone);
                    (self.peak(), Some(undo))
                }
                None => (self.peak_live_bytes_merged(c.a, c.b), None),
            };
            if after > peak {
                if let Some(undo) = undo {
                    self.undo(undo);
                }
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
            match placed {
                Some((at, _)) => self.rank[c.a] = at,
                None => self.reorder(),
            }
            peak = after;
            used.insert(c.a);
            used.insert(c.b);
            merged_any = true;
        }
        Ok(merged_any)
    }
}

/// A segment tree over positions `0..n` with range addition and the maximum over all
/// positions (padding positions sit at `-GONE`).
#[derive(Default)]
struct MaxTree {
    size: usize,
    /// Per tree node: the maximum over its range, including its own `add`.
    max: Vec<i64>,
    /// Per tree node: what was added to its whole range.
    add: Vec<i64>,
}

impl MaxTree {
    fn new(n: usize) -> MaxTree {
        let size = n.max(1).next_power_of_two();
        let mut max = vec![0i64; 2 * size];
        for leaf in n..size {
            max[size + leaf] = -GONE;
        }
        for i in (1..size).rev() {
            max[i] = max[2 * i].max(max[2 * i + 1]);
        }
        MaxTree {
            size,
            max,
            add: vec![0; 2 * size],
        }
    }

    /// Adds `delta` to positions `lo..=hi`.
    fn add(&mut self, lo: usize, hi: usize, delta: i64) {
        if self.max.is_empty() || lo > hi || hi >= self.size {
            return;
        }
        self.add_in(1, 0, self.size - 1, lo, hi, delta);
    }

    fn add_in(&mut self, node: usize, l: usize, r: usize, lo: usize, hi: usize, delta: i64) {
        if hi < l || r < lo {
            return;
        }
        if lo <= l && r <= hi {
            self.add[node] += delta;
            self.max[node] += delta;
            return;
        }
        let mid = (l + r) / 2;
        self.add_in(2 * node, l, mid, lo, hi, delta);
        self.add_in(2 * node + 1, mid + 1, r, lo, hi, delta);
        self.max[node] = self.add[node] + self.max[2 * node].max(self.max[2 * node + 1]);
    }

    fn max(&self) -> i64 {
        self.max.get(1).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::MaxTree;

    #[test]
    fn the_max_tree_adds_ranges() {
        let mut t = MaxTree::new(5);
        assert_eq!(t.max(), 0);
        t.add(1, 3, 10);
        t.add(3, 4, 5);
        assert_eq!(t.max(), 15);
        t.add(3, 3, -100);
        assert_eq!(t.max(), 10);
        t.add(0, 4, -20);
        assert_eq!(t.max(), -10);
    }
}
