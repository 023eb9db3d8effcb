//! Lowering: primitive graph nodes to loop-IR kernels.
//!
//! This file holds the one code generator that both schedules use. A [`Plan`] says how
//! every graph value is obtained: loaded from a parameter, folded in as a constant,
//! computed by a scheduled node (an [`SNode`], which owns a buffer when its value is
//! needed outside its kernel), or — in fused mode — inlined into every consumer: views
//! become index arithmetic, and values that read no memory (`full`, `arange` and
//! elementwise ops over them) are recomputed. A *group* of scheduled nodes becomes one
//! kernel ([`build_kernel`]); fusion ([`crate::fuse`]) decides the groups, [`lower`]
//! makes every group a single node (the `--no-fuse` baseline).
//!
//! How a group becomes a kernel:
//!
//! - its outer domain is the kept shape of its reductions (all must agree), or the
//!   shape of what it stores; axes of extent 1 are dropped;
//! - every reduction (`sum`, `max`, `argmax`, `matmul`, ..) becomes an accumulator of a
//!   reduction stage, in dependency order; reductions over equal inner domains that do
//!   not depend on each other share one loop;
//! - every value the group must store (read by another kernel, or a graph output)
//!   becomes a write of a store stage: one per outer point (also through a permute or
//!   reshape of the domain, so a transposed layout is written directly), or a loop over
//!   the inner domain of a reduction whose input has the value's shape (a softmax row);
//! - values are computed on demand at index expressions (`KernelBuilder::value_at`):
//!   elementwise ops recurse into their operands at broadcast coordinates, movement ops
//!   rewrite the coordinates, reductions of the group are read as accumulators (only at
//!   the current outer point), and values from elsewhere are loads.
//!
//! A group that cannot become a kernel is refused with a named rule ([`Refusal`]), which
//! fusion records so a dump can say why two nodes were not fused.

use ferrite_ir::infer::{permutation, reduced_axes, slice_bounds};
use ferrite_ir::loops::{
    scalar, AccId, Block, Bound, Buffer, BufferId, BufferKind, ExprNode, ExprOp, ExprRef, Extents,
    GemmInfo, GemmOperand, IndexExpr, Kernel, KernelId, Load, Program, ReduceKind, Reduction,
    Stage, StoreOp, Value, Var,
};
use ferrite_ir::types::{contiguous_strides, normalize_axis, TensorType};
use ferrite_ir::{promote, ArgReduceOp, BinaryOp, DType, Graph, Op, ReduceOp, Scalar, ValueId};
use std::collections::{HashMap, HashSet};

/// Views and recomputed values nested deeper than this are materialized instead, which
/// bounds the recursion of code generation.
const MAX_INLINE_CHAIN: usize = 32;

/// Code generation gives up on expressions nested deeper than this (fusion then
/// refuses the group with `expression-too-deep`).
const MAX_DEPTH: usize = 400;

/// Why a group of nodes cannot be one kernel: a rule name and the particulars.
#[derive(Clone, PartialEq, Debug)]
pub struct Refusal {
    /// The rule, in kebab case (`reduction-domains-differ`).
    pub rule: &'static str,
    /// What exactly violated it.
    pub detail: String,
    /// A value whose materialization would make the group possible, when there is one.
    pub culprit: Option<ValueId>,
}

impl Refusal {
    fn new(rule: &'static str, detail: String) -> Refusal {
        Refusal {
            rule,
            detail,
            culprit: None,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.rule, self.detail)
    }
}

/// Failure of code generation for a group.
#[derive(Debug)]
pub enum LowerError {
    /// The group is legal as nodes but cannot be one kernel.
    Refused(Refusal),
    /// The graph itself cannot be lowered (a value that does not fit its dtype, ..).
    Invalid(String),
}

impl From<Refusal> for LowerError {
    fn from(r: Refusal) -> LowerError {
        LowerError::Refused(r)
    }
}

/// How consumers obtain a graph value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// No output depends on it.
    Dead,
    /// Graph parameter `.0`: loaded from its input buffer.
    Param(usize),
    /// A literal: a constant in the consumer's expression.
    Literal,
    /// A movement op inlined as index arithmetic into each consumer.
    View,
    /// A value that reads no memory, recomputed in each consumer.
    Inline,
    /// Computed by scheduled node `.0`.
    Scheduled(usize),
}

/// What a scheduled node computes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SNode {
    /// The graph value.
    Value(ValueId),
    /// Graph output `output`, a copy of `value` (an output that is a parameter, a view,
    /// a recomputed value, or a value already returned at an earlier position).
    OutputCopy {
        /// The output position.
        output: usize,
        /// The value copied.
        value: ValueId,
    },
}

/// Roles of all values and the scheduled nodes, with their data dependencies.
#[derive(Clone, Debug)]
pub struct Plan<'g> {
    /// The graph being lowered.
    pub g: &'g Graph,
    /// The role of each value, by value index.
    pub role: Vec<Role>,
    /// The scheduled nodes, in a topological order.
    pub snodes: Vec<SNode>,
    /// For each scheduled node, the parameter or scheduled values it loads (through views).
    pub loads: Vec<Vec<ValueId>>,
    /// For each value, the scheduled nodes that load it.
    pub readers: Vec<Vec<usize>>,
    /// For each value, the graph output whose buffer it is stored in directly.
    pub output_of: Vec<Option<usize>>,
}

impl<'g> Plan<'g> {
    /// The unfused plan: every non-parameter, non-literal live node is scheduled.
    pub fn unfused(g: &'g Graph) -> Plan<'g> {
        let live = live_values(g);
        let role = g
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| match n.op {
                _ if !live[i] => Role::Dead,
                Op::Param { index } => Role::Param(index),
                Op::Literal { .. } => Role::Literal,
                _ => Role::Scheduled(0),
            })
            .collect();
        Plan::with_roles(g, role)
    }

    /// The fused plan: views are inlined, memory-free values recomputed, and matmul
    /// operands that are not strided views of a buffer materialized.
    pub fn fused(g: &'g Graph) -> Result<Plan<'g>, String> {
        let live = live_values(g);
        let mut role: Vec<Role> = Vec::with_capacity(g.nodes.len());
        // Inline depth of each value (0 for anything that is not a view or inlined).
        let mut depth = vec![0usize; g.nodes.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            let inline_operands = n
                .inputs
                .iter()
                .all(|x| matches!(role[x.index()], Role::Inline | Role::Literal));
            let r = match n.op {
                _ if !live[i] => Role::Dead,
                Op::Param { index } => Role::Param(index),
                Op::Literal { .. } => Role::Literal,
                Op::Full { .. } | Op::Arange { .. } => Role::Inline,
                _ if n.op.is_movement() => Role::View,
                _ if n.op.is_elementwise() && inline_operands => Role::Inline,
                _ => Role::Scheduled(0),
            };
            let d = if matches!(r, Role::View | Role::Inline) {
                1 + n.inputs.iter().map(|x| depth[x.index()]).max().unwrap_or(0)
            } else {
                0
            };
            if d > MAX_INLINE_CHAIN {
                role.push(Role::Scheduled(0));
            } else {
                depth[i] = d;
                role.push(r);
            }
        }
        let mut plan = Plan::with_roles(g, role);
        // A GEMM reads its operands through strides; materialize any operand that is
        // not a strided view of a buffer (a padded view, an arange, ..).
        for _ in 0..=2 * g.nodes.len() {
            let mut changed = false;
            for s in 0..plan.snodes.len() {
                let SNode::Value(v) = plan.snodes[s] else {
                    continue;
                };
                if g.node(v).op != Op::MatMul {
                    continue;
                }
                let layout = Layout::provisional(&plan);
                match build_kernel(&plan, &layout, &[s], KernelId(0)) {
                    Ok(_) => {}
                    Err(LowerError::Refused(r)) => match r.culprit {
                        Some(c) if !matches!(plan.role[c.index()], Role::Scheduled(_)) => {
                            let mut role = plan.role.clone();
                            role[c.index()] = Role::Scheduled(0);
                            plan = Plan::with_roles(g, role);
                            changed = true;
                            break;
                        }
                        _ => return Err(format!("cannot lower %{}: {r}", v.0)),
                    },
                    Err(LowerError::Invalid(e)) => return Err(e),
                }
            }
            if !changed {
                return Ok(plan);
            }
        }
        Err("lowering: materializing matmul operands did not converge".into())
    }

    /// Builds the scheduled nodes and dependencies for given roles (scheduled node
    /// numbers in `roles` are recomputed).
    fn with_roles(g: &'g Graph, mut role: Vec<Role>) -> Plan<'g> {
        let mut snodes = Vec::new();
        for (i, r) in role.iter_mut().enumerate() {
            if let Role::Scheduled(s) = r {
                *s = snodes.len();
                snodes.push(SNode::Value(ValueId(i as u32)));
            }
        }
        let mut output_of = vec![None; g.nodes.len()];
        for (i, &o) in g.outputs.iter().enumerate() {
            if matches!(role[o.index()], Role::Scheduled(_)) && output_of[o.index()].is_none() {
                output_of[o.index()] = Some(i);
            } else {
                snodes.push(SNode::OutputCopy {
                    output: i,
                    value: o,
                });
            }
        }
        // sources[v]: the parameter/scheduled values that reading v touches.
        let mut sources: Vec<Vec<ValueId>> = vec![Vec::new(); g.nodes.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            sources[i] = match role[i] {
                Role::Param(_) | Role::Scheduled(_) => vec![ValueId(i as u32)],
                Role::View | Role::Inline => {
                    let mut s: Vec<ValueId> = n
                        .inputs
                        .iter()
                        .flat_map(|x| sources[x.index()].iter().copied())
                        .collect();
                    s.sort();
                    s.dedup();
                    s
                }
                Role::Literal | Role::Dead => Vec::new(),
            };
        }
        let loads: Vec<Vec<ValueId>> = snodes
            .iter()
            .map(|s| {
                let mut l: Vec<ValueId> = match *s {
                    SNode::Value(v) => g
                        .node(v)
                        .inputs
                        .iter()
                        .flat_map(|x| sources[x.index()].iter().copied())
                        .collect(),
                    SNode::OutputCopy { value, .. } => sources[value.index()].clone(),
                };
                l.sort();
                l.dedup();
                l
            })
            .collect();
        let mut readers = vec![Vec::new(); g.nodes.len()];
        for (s, l) in loads.iter().enumerate() {
            for v in l {
                readers[v.index()].push(s);
            }
        }
        Plan {
            g,
            role,
            snodes,
            loads,
            readers,
            output_of,
        }
    }

    /// The scheduled node computing `v`, if `v` is scheduled.
    pub fn snode_of(&self, v: ValueId) -> Option<usize> {
        match self.role.get(v.index()) {
            Some(Role::Scheduled(s)) => Some(*s),
            _ => None,
        }
    }

    /// True when the value of scheduled node `s` must be written to memory if its group
    /// is `in_group` (some reader is outside the group, or it is a graph output).
    pub fn must_store(&self, s: usize, in_group: &dyn Fn(usize) -> bool) -> bool {
        match self.snodes[s] {
            SNode::OutputCopy { .. } => true,
            SNode::Value(v) => {
                self.output_of[v.index()].is_some()
                    || self.readers[v.index()].iter().any(|&r| !in_group(r))
            }
        }
    }
}

/// Values some output depends on.
fn live_values(g: &Graph) -> Vec<bool> {
    let mut live = vec![false; g.nodes.len()];
    for o in &g.outputs {
        if let Some(l) = live.get_mut(o.index()) {
            *l = true;
        }
    }
    for i in (0..g.nodes.len()).rev() {
        if live[i] {
            for x in &g.nodes[i].inputs {
                live[x.index()] = true;
            }
        }
    }
    live
}

/// Which buffer holds each parameter, scheduled value and output copy.
#[derive(Clone, Debug)]
pub struct Layout {
    /// All buffers.
    pub buffers: Vec<Buffer>,
    /// The buffer of each parameter or stored scheduled value, by value index.
    pub of_value: Vec<Option<BufferId>>,
    /// The buffer of each graph output position.
    pub of_output: Vec<Option<BufferId>>,
}

impl Layout {
    fn empty(plan: &Plan) -> Layout {
        let g = plan.g;
        let mut l = Layout {
            buffers: Vec::new(),
            of_value: vec![None; g.nodes.len()],
            of_output: vec![None; g.outputs.len()],
        };
        for (i, &p) in g.params.iter().enumerate() {
            let id = l.push(g.ty(p).clone(), BufferKind::Input(i), value_name(g, p));
            l.of_value[p.index()] = Some(id);
        }
        l
    }

    fn push(&mut self, ty: TensorType, kind: BufferKind, name: String) -> BufferId {
        let id = BufferId(self.buffers.len() as u32);
        self.buffers.push(Buffer { id, ty, kind, name });
        id
    }

    /// Adds the buffer that scheduled node `s` stores into.
    fn add_snode(&mut self, plan: &Plan, s: usize) {
        let g = plan.g;
        match plan.snodes[s] {
            SNode::Value(v) => {
                if self.of_value[v.index()].is_some() {
                    return;
                }
                let kind = match plan.output_of[v.index()] {
                    Some(o) => BufferKind::Output(o),
                    None => BufferKind::Intermediate,
                };
                let id = self.push(g.ty(v).clone(), kind, value_name(g, v));
                self.of_value[v.index()] = Some(id);
                if let Some(o) = plan.output_of[v.index()] {
                    self.of_output[o] = Some(id);
                }
            }
            SNode::OutputCopy { output, value } => {
                if self.of_output[output].is_some() {
                    return;
                }
                let id = self.push(
                    g.ty(value).clone(),
                    BufferKind::Output(output),
                    g.output_name(output),
                );
                self.of_output[output] = Some(id);
            }
        }
    }

    /// A layout giving every scheduled node a buffer, for trying out groups.
    pub fn provisional(plan: &Plan) -> Layout {
        let mut l = Layout::empty(plan);
        for s in 0..plan.snodes.len() {
            l.add_snode(plan, s);
        }
        l
    }

    /// The final layout for `groups` in execution order: inputs first, then the buffers
    /// each group stores, in order.
    pub fn for_groups(plan: &Plan, groups: &[Vec<usize>]) -> Layout {
        let mut l = Layout::empty(plan);
        let mut group_of = vec![usize::MAX; plan.snodes.len()];
        for (gi, members) in groups.iter().enumerate() {
            for &s in members {
                group_of[s] = gi;
            }
        }
        for (gi, members) in groups.iter().enumerate() {
            for &s in members {
                if plan.must_store(s, &|r| group_of[r] == gi) {
                    l.add_snode(plan, s);
                }
            }
        }
        l
    }
}

fn value_name(g: &Graph, v: ValueId) -> String {
    g.node(v).name.clone().unwrap_or_else(|| v.to_string())
}

/// Lowers a primitive graph with one kernel per primitive op, every value
/// materialized (views and output copies included): the `--no-fuse` baseline.
pub fn lower(g: &Graph) -> Result<Program, String> {
    let plan = Plan::unfused(g);
    let groups: Vec<Vec<usize>> = (0..plan.snodes.len()).map(|s| vec![s]).collect();
    assemble(&plan, &groups)
}

/// Builds the program for `groups` (each a kernel, in execution order).
pub fn assemble(plan: &Plan, groups: &[Vec<usize>]) -> Result<Program, String> {
    let layout = Layout::for_groups(plan, groups);
    let mut kernels = Vec::with_capacity(groups.len());
    for (i, members) in groups.iter().enumerate() {
        let k = build_kernel(plan, &layout, members, KernelId(i as u32)).map_err(|e| match e {
            LowerError::Refused(r) => format!("internal error: kernel {i} cannot be built: {r}"),
            LowerError::Invalid(e) => e,
        })?;
        kernels.push(k);
    }
    let outputs = layout
        .of_output
        .iter()
        .enumerate()
        .map(|(i, b)| b.ok_or_else(|| format!("output {i} has no buffer")))
        .collect::<Result<Vec<_>, String>>()?;
    let inputs = plan
        .g
        .params
        .iter()
        .map(|p| layout.of_value[p.index()].ok_or("a parameter has no buffer".to_string()))
        .collect::<Result<Vec<_>, String>>()?;
    let p = Program {
        name: plan.g.name.clone(),
        buffers: layout.buffers,
        inputs,
        outputs,
        kernels,
    };
    p.verify()
        .map_err(|e| format!("internal error: lowered program is invalid: {e}"))?;
    Ok(p)
}

/// Drops extent-1 axes: the loop domain of a shape.
fn squeeze(shape: &[usize]) -> Vec<usize> {
    shape.iter().copied().filter(|&d| d != 1).collect()
}

/// Variables for the non-1 axes of `shape`, in order (`make(k)` names the k-th), and 0
/// for extent-1 axes.
fn coords_of(shape: &[usize], make: impl Fn(usize) -> Var) -> Vec<IndexExpr> {
    let mut next = 0;
    shape
        .iter()
        .map(|&d| {
            if d == 1 {
                IndexExpr::Const(0)
            } else {
                next += 1;
                IndexExpr::Var(make(next - 1))
            }
        })
        .collect()
}

/// The reduction structure of a graph node: input shape, reduced axes and kind.
struct ReductionShape {
    input: Vec<usize>,
    axes: Vec<usize>,
    kind: ReduceKind,
}

fn reduction_shape(g: &Graph, v: ValueId) -> Option<ReductionShape> {
    let n = g.node(v);
    let input = || g.ty(n.inputs[0]).shape.clone();
    match &n.op {
        Op::Reduce { op, axes, .. } => {
            let shape = input();
            let axes = reduced_axes(op.name(), axes.as_deref(), shape.len()).ok()?;
            let kind = match op {
                ReduceOp::Sum | ReduceOp::Mean => ReduceKind::Sum,
                ReduceOp::Max => ReduceKind::Max,
                ReduceOp::Min => ReduceKind::Min,
                ReduceOp::Prod => ReduceKind::Prod,
            };
            Some(ReductionShape {
                input: shape,
                axes,
                kind,
            })
        }
        Op::ArgReduce { op, axis, .. } => {
            let shape = input();
            let axes = match axis {
                None => (0..shape.len()).collect(),
                Some(a) if shape.is_empty() => {
                    normalize_axis(*a, 0).ok()?;
                    vec![]
                }
                Some(a) => vec![normalize_axis(*a, shape.len()).ok()?],
            };
            let kind = match op {
                ArgReduceOp::ArgMax => ReduceKind::ArgMax,
                ArgReduceOp::ArgMin => ReduceKind::ArgMin,
            };
            Some(ReductionShape {
                input: shape,
                axes,
                kind,
            })
        }
        _ => None,
    }
}

fn is_reduction(op: &Op) -> bool {
    matches!(op, Op::Reduce { .. } | Op::ArgReduce { .. } | Op::MatMul)
}

/// Failure inside value generation.
enum Fail {
    Lower(LowerError),
    /// The value needs an accumulator of the stage being built: start a new stage.
    Pending,
}

impl From<Refusal> for Fail {
    fn from(r: Refusal) -> Fail {
        Fail::Lower(LowerError::Refused(r))
    }
}

fn invalid(msg: String) -> Fail {
    Fail::Lower(LowerError::Invalid(msg))
}

/// A store the group must perform.
struct StoreTarget {
    /// The value stored.
    value: ValueId,
    buffer: BufferId,
    shape: Vec<usize>,
}

/// The stage being generated.
#[derive(Default)]
struct StageState {
    block: Block,
    ext: Extents,
    cse: HashMap<ExprNode, ExprRef>,
    memo: HashMap<(ValueId, Vec<IndexExpr>, Vec<Bound>), ExprRef>,
    /// Reductions whose accumulators this (reduction) stage defines.
    pending: Vec<ValueId>,
}

/// Generates one kernel from a group of scheduled nodes.
struct KernelBuilder<'a> {
    plan: &'a Plan<'a>,
    layout: &'a Layout,
    in_group: Vec<bool>,
    /// Outer domain of the kernel.
    outer: Vec<usize>,
    /// Accumulators of finished stages.
    ready: HashMap<ValueId, (AccId, DType)>,
    next_acc: u32,
    cur: StageState,
    depth: usize,
    touched: HashSet<ValueId>,
}

/// Builds the kernel for `members` (scheduled node numbers of `plan`).
pub fn build_kernel(
    plan: &Plan,
    layout: &Layout,
    members: &[usize],
    id: KernelId,
) -> Result<Kernel, LowerError> {
    let g = plan.g;
    let mut in_group = vec![false; plan.snodes.len()];
    for &s in members {
        in_group[s] = true;
    }
    let mut members: Vec<usize> = members.to_vec();
    members.sort_unstable();
    members.dedup();

    // What must be written.
    let mut stores = Vec::new();
    for &s in &members {
        if !plan.must_store(s, &|r| in_group[r]) {
            continue;
        }
        let (value, buffer) = match plan.snodes[s] {
            SNode::Value(v) => (v, layout.of_value[v.index()]),
            SNode::OutputCopy { output, value } => (value, layout.of_output[output]),
        };
        let buffer = buffer.ok_or_else(|| {
            LowerError::Invalid(format!("internal error: %{} has no buffer", value.0))
        })?;
        stores.push(StoreTarget {
            value,
            buffer,
            shape: g.ty(value).shape.clone(),
        });
    }
    if stores.is_empty() {
        return Err(LowerError::Invalid(
            "internal error: a kernel that stores nothing".into(),
        ));
    }

    // Reductions of the group and the outer domain they agree on.
    let reductions: Vec<ValueId> = members
        .iter()
        .filter_map(|&s| match plan.snodes[s] {
            SNode::Value(v) if is_reduction(&g.node(v).op) => Some(v),
            _ => None,
        })
        .collect();
    let outer = match reductions.first() {
        Some(&r) => squeeze(&g.ty(r).shape),
        None => squeeze(&stores[0].shape),
    };
    for &r in &reductions {
        let kept = squeeze(&g.ty(r).shape);
        if kept != outer {
            return Err(Refusal::new(
                "reduction-domains-differ",
                format!(
                    "%{} keeps {:?} but %{} keeps {:?}",
                    reductions[0].0, outer, r.0, kept
                ),
            )
            .into());
        }
    }
    let matmuls: Vec<ValueId> = reductions
        .iter()
        .copied()
        .filter(|&r| g.node(r).op == Op::MatMul)
        .collect();
    if !matmuls.is_empty() && reductions.len() > 1 {
        return Err(Refusal::new(
            "gemm-with-reduction",
            format!(
                "a matmul kernel computes one product and no other reduction (%{} with {} more)",
                matmuls[0].0,
                reductions.len() - 1
            ),
        )
        .into());
    }

    let mut b = KernelBuilder {
        plan,
        layout,
        in_group,
        outer: outer.clone(),
        ready: HashMap::new(),
        next_acc: 0,
        cur: StageState::default(),
        depth: 0,
        touched: HashSet::new(),
    };
    for &s in &members {
        if let SNode::Value(v) = plan.snodes[s] {
            b.touched.insert(v);
        }
    }

    // Where each store goes: one per outer point, or over a reduction's inner domain.
    enum Placement {
        /// One write per outer point, at these coordinates of the stored value.
        Outer(Vec<IndexExpr>),
        Inner {
            domain: Vec<usize>,
            coords: Vec<IndexExpr>,
        },
    }
    let mut placements = Vec::with_capacity(stores.len());
    for st in &stores {
        if squeeze(&st.shape) == outer {
            placements.push(Placement::Outer(coords_of(&st.shape, Var::outer)));
            continue;
        }
        if let Some(coords) = view_coords(plan, st.value, &outer) {
            placements.push(Placement::Outer(coords));
            continue;
        }
        let found = reductions.iter().find_map(|&r| {
            let rs = reduction_shape(g, r)?;
            (rs.input == st.shape).then(|| {
                let mut next_outer = 0;
                let mut next_inner = 0;
                let mut domain = Vec::new();
                let coords = rs
                    .input
                    .iter()
                    .enumerate()
                    .map(|(k, &d)| {
                        if d == 1 {
                            IndexExpr::Const(0)
                        } else if rs.axes.contains(&k) {
                            domain.push(d);
                            next_inner += 1;
                            IndexExpr::Var(Var::store(next_inner - 1))
                        } else {
                            next_outer += 1;
                            IndexExpr::Var(Var::outer(next_outer - 1))
                        }
                    })
                    .collect();
                Placement::Inner { domain, coords }
            })
        });
        match found {
            Some(p) => placements.push(p),
            None => {
                return Err(Refusal::new(
                    "store-outside-domain",
                    format!(
                        "%{} of shape {:?} is neither the outer domain {:?}, a permuted or reshaped view of it, nor a reduced input",
                        st.value.0, st.shape, outer
                    ),
                )
                .into())
            }
        }
    }

    // Reduction stages, in dependency (value) order.
    let mut stages: Vec<Stage> = Vec::new();
    let mut stage_reductions: Vec<Reduction> = Vec::new();
    let mut gemm_stage: Option<(usize, ValueId)> = None;
    let mut open_domain: Option<Vec<usize>> = None;
    let mut sorted = reductions.clone();
    sorted.sort();
    for &r in &sorted {
        let is_mm = g.node(r).op == Op::MatMul;
        let domain = b.reduction_domain(r);
        let fits_open = !is_mm && open_domain.as_ref() == Some(&domain);
        if !fits_open {
            b.close_reduce_stage(&mut stages, &mut stage_reductions, &mut open_domain);
            b.open_stage(Extents {
                outer: outer.clone(),
                reduce: domain.clone(),
                store: vec![],
            });
            open_domain = Some(domain.clone());
        }
        let (value, rhs) = match b.reduction_body(r) {
            Ok(v) => v,
            Err(Fail::Pending) if fits_open => {
                // It reads an accumulator of the open stage: give it its own loop.
                b.close_reduce_stage(&mut stages, &mut stage_reductions, &mut open_domain);
                b.open_stage(Extents {
                    outer: outer.clone(),
                    reduce: domain.clone(),
                    store: vec![],
                });
                open_domain = Some(domain.clone());
                b.reduction_body(r).map_err(fail_to_error)?
            }
            Err(e) => return Err(fail_to_error(e)),
        };
        let acc = AccId(b.next_acc);
        b.next_acc += 1;
        let rs = reduction_shape(g, r);
        let kind = rs.map_or(ReduceKind::Sum, |rs| rs.kind);
        stage_reductions.push(Reduction {
            acc,
            kind,
            dtype: g.ty(r).dtype,
            value,
            rhs,
        });
        b.cur.pending.push(r);
        if is_mm {
            gemm_stage = Some((stages.len(), r));
            b.close_reduce_stage(&mut stages, &mut stage_reductions, &mut open_domain);
        }
    }
    b.close_reduce_stage(&mut stages, &mut stage_reductions, &mut open_domain);

    // Store stages: the per-point writes, then one loop per inner domain.
    let mut outer_stores = Vec::new();
    // (inner domain, [(store index, coordinates)])
    type InnerStores = Vec<(usize, Vec<IndexExpr>)>;
    let mut inner_groups: Vec<(Vec<usize>, InnerStores)> = Vec::new();
    for (i, p) in placements.into_iter().enumerate() {
        match p {
            Placement::Outer(coords) => outer_stores.push((i, coords)),
            Placement::Inner { domain, coords } => {
                match inner_groups.iter_mut().find(|(d, _)| *d == domain) {
                    Some((_, list)) => list.push((i, coords)),
                    None => inner_groups.push((domain, vec![(i, coords)])),
                }
            }
        }
    }
    if !outer_stores.is_empty() {
        b.open_stage(Extents {
            outer: outer.clone(),
            reduce: vec![],
            store: vec![],
        });
        let mut ops = Vec::new();
        for (i, coords) in outer_stores {
            ops.push(b.store_op(&stores[i], &coords).map_err(fail_to_error)?);
        }
        stages.push(b.close_store_stage(vec![], ops));
    }
    for (domain, list) in inner_groups {
        b.open_stage(Extents {
            outer: outer.clone(),
            reduce: vec![],
            store: domain.clone(),
        });
        let mut ops = Vec::new();
        for (i, coords) in list {
            ops.push(b.store_op(&stores[i], &coords).map_err(fail_to_error)?);
        }
        stages.push(b.close_store_stage(domain, ops));
    }

    let gemm = match gemm_stage {
        Some((si, r)) => Some(b.gemm_info(&stages, si, r)?),
        None => None,
    };

    let mut nodes: Vec<ValueId> = b.touched.into_iter().collect();
    nodes.sort();
    let mut k = Kernel {
        id,
        name: kernel_name(g, id, &members, plan),
        nodes,
        domain: outer,
        stages,
        gemm,
        reads: vec![],
        writes: vec![],
    };
    (k.reads, k.writes) = k.compute_accesses(&layout.buffers);
    Ok(k)
}

/// When `v` is a chain of permutes and reshapes (bijections) over a value whose shape
/// is the outer domain, the coordinates of `v` at each outer point: writing `v` there
/// covers every element exactly once. This lets a kernel store a transposed or
/// reshaped layout directly instead of leaving the copy to another kernel.
fn view_coords(plan: &Plan, v: ValueId, outer: &[usize]) -> Option<Vec<IndexExpr>> {
    let g = plan.g;
    let mut chain = Vec::new();
    let mut base = v;
    while squeeze(&g.ty(base).shape) != outer {
        let n = g.node(base);
        if !matches!(n.op, Op::Permute { .. } | Op::Reshape { .. })
            || chain.len() > MAX_INLINE_CHAIN
        {
            return None;
        }
        chain.push(base);
        base = n.inputs[0];
    }
    if chain.is_empty() {
        return None;
    }
    let ext = Extents {
        outer: outer.to_vec(),
        ..Extents::default()
    };
    let mut coords = coords_of(&g.ty(base).shape, Var::outer);
    for &c in chain.iter().rev() {
        let n = g.node(c);
        let from = &g.ty(n.inputs[0]).shape;
        let to = &n.ty.shape;
        coords = match &n.op {
            Op::Permute { dims } => {
                let perm = permutation("permute", dims, to.len()).ok()?;
                perm.iter().map(|&p| coords[p].clone()).collect()
            }
            _ => {
                let flat = IndexExpr::Sum(
                    coords
                        .iter()
                        .zip(contiguous_strides(from))
                        .map(|(x, s)| x.clone() * s as i64)
                        .collect(),
                );
                to.iter()
                    .zip(contiguous_strides(to))
                    .map(|(&d, s)| flat.clone().floor_div(s as i64).modulo(d.max(1) as i64))
                    .collect()
            }
        };
        coords = coords.iter().map(|x| x.simplify(&ext)).collect();
    }
    Some(coords)
}

fn fail_to_error(f: Fail) -> LowerError {
    match f {
        Fail::Lower(e) => e,
        Fail::Pending => LowerError::Invalid(
            "internal error: a value needs an accumulator of its own stage".into(),
        ),
    }
}

/// `k3_add_relu`: the id and the ops of the group's nodes, at most five.
fn kernel_name(g: &Graph, id: KernelId, members: &[usize], plan: &Plan) -> String {
    let mut names: Vec<&str> = Vec::new();
    for &s in members {
        let n = match plan.snodes[s] {
            SNode::Value(v) => g.node(v).op.name(),
            SNode::OutputCopy { .. } => "copy",
        };
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let more = names.len() > 5;
    names.truncate(5);
    let mut name = format!("{id}_{}", names.join("_"));
    if more {
        name.push_str("_etc");
    }
    name
}

impl KernelBuilder<'_> {
    fn open_stage(&mut self, ext: Extents) {
        self.cur = StageState {
            ext,
            ..StageState::default()
        };
    }

    fn close_reduce_stage(
        &mut self,
        stages: &mut Vec<Stage>,
        reductions: &mut Vec<Reduction>,
        open: &mut Option<Vec<usize>>,
    ) {
        if reductions.is_empty() {
            return;
        }
        let mut body = std::mem::take(&mut self.cur.block);
        let roots: Vec<ExprRef> = reductions
            .iter()
            .flat_map(|r| std::iter::once(r.value).chain(r.rhs))
            .collect();
        let map = body.retain_live(&roots);
        let m = |r: ExprRef| map.get(r.index()).copied().flatten().unwrap_or(r);
        let mut reductions = std::mem::take(reductions);
        for r in &mut reductions {
            r.value = m(r.value);
            r.rhs = r.rhs.map(m);
        }
        for (v, r) in self.cur.pending.drain(..).zip(&reductions) {
            self.ready.insert(v, (r.acc, r.dtype));
        }
        stages.push(Stage::Reduce {
            domain: self.cur.ext.reduce.clone(),
            body,
            reductions,
            stores: Vec::new(),
        });
        *open = None;
        self.cur = StageState::default();
    }

    fn close_store_stage(&mut self, domain: Vec<usize>, mut stores: Vec<StoreOp>) -> Stage {
        let mut body = std::mem::take(&mut self.cur.block);
        let mut roots = Vec::new();
        for s in &stores {
            roots.push(s.value);
            s.index.for_each_ref(&mut |r| roots.push(r));
        }
        let map = body.retain_live(&roots);
        let m = |r: ExprRef| map.get(r.index()).copied().flatten().unwrap_or(r);
        for s in &mut stores {
            s.value = m(s.value);
            s.index = s.index.map_refs(&m);
        }
        self.cur = StageState::default();
        Stage::Store {
            domain,
            body,
            stores,
        }
    }

    /// The inner domain of reduction `r` (reduced extents, 1s dropped).
    fn reduction_domain(&self, r: ValueId) -> Vec<usize> {
        let g = self.plan.g;
        match reduction_shape(g, r) {
            Some(rs) => rs
                .axes
                .iter()
                .map(|&a| rs.input[a])
                .filter(|&d| d != 1)
                .collect(),
            None => {
                // matmul: the contracted extent.
                let a = g.ty(g.node(r).inputs[0]);
                squeeze(&[*a.shape.last().unwrap_or(&1)])
            }
        }
    }

    /// The value combined by reduction `r` at the current point (inside its stage),
    /// and for a matmul the second factor of the dot product.
    fn reduction_body(&mut self, r: ValueId) -> Result<(ExprRef, Option<ExprRef>), Fail> {
        let g = self.plan.g;
        let node = g.node(r);
        if let Some(rs) = reduction_shape(g, r) {
            let mut next_outer = 0;
            let mut next_inner = 0;
            let coords: Vec<IndexExpr> = rs
                .input
                .iter()
                .enumerate()
                .map(|(k, &d)| {
                    if d == 1 {
                        IndexExpr::Const(0)
                    } else if rs.axes.contains(&k) {
                        next_inner += 1;
                        IndexExpr::Var(Var::reduce(next_inner - 1))
                    } else {
                        next_outer += 1;
                        IndexExpr::Var(Var::outer(next_outer - 1))
                    }
                })
                .collect();
            let x = self.value_at(node.inputs[0], &coords, &[])?;
            let want = if rs.kind.is_arg() {
                self.dtype(x)
            } else {
                node.ty.dtype
            };
            return Ok((self.cast(x, want), None));
        }
        // matmul: lhs[batch.., m, k] * rhs[batch.., k, n] summed over k.
        let (a, bv) = (node.inputs[0], node.inputs[1]);
        let (ash, bsh) = (&g.ty(a).shape, &g.ty(bv).shape);
        let out = &node.ty.shape;
        let oc = coords_of(out, Var::outer);
        let k_extent = *ash.last().unwrap_or(&1);
        let k = if k_extent == 1 {
            IndexExpr::Const(0)
        } else {
            IndexExpr::Var(Var::reduce(0))
        };
        let nb = out.len() - (ash.len() >= 2) as usize - (bsh.len() >= 2) as usize;
        // Right-aligned broadcasting of the operand's batch axes against the output's.
        let batch_coords = |own: &[usize]| Self::broadcast(&oc[..nb], own, &out[..nb]);
        let m = if ash.len() >= 2 {
            oc[nb].clone()
        } else {
            IndexExpr::Const(0)
        };
        let n = if bsh.len() >= 2 {
            oc[out.len() - 1].clone()
        } else {
            IndexExpr::Const(0)
        };
        let ac: Vec<IndexExpr> = if ash.len() >= 2 {
            let mut c = batch_coords(&ash[..ash.len() - 2]);
            c.push(m);
            c.push(k.clone());
            c
        } else {
            vec![k.clone()]
        };
        let bc: Vec<IndexExpr> = if bsh.len() >= 2 {
            let mut c = batch_coords(&bsh[..bsh.len() - 2]);
            c.push(k);
            c.push(n);
            c
        } else {
            vec![k]
        };
        let x = self.value_at(a, &ac, &[])?;
        let y = self.value_at(bv, &bc, &[])?;
        Ok((x, Some(y)))
    }

    /// The GEMM description of matmul `r`, whose reduction is stage `si`.
    fn gemm_info(&self, stages: &[Stage], si: usize, r: ValueId) -> Result<GemmInfo, LowerError> {
        let g = self.plan.g;
        let node = g.node(r);
        let (ash, bsh) = (&g.ty(node.inputs[0]).shape, &g.ty(node.inputs[1]).shape);
        let out = &node.ty.shape;
        let Some(Stage::Reduce {
            domain,
            body,
            reductions,
            ..
        }) = stages.get(si)
        else {
            return Err(LowerError::Invalid("internal error: gemm stage".into()));
        };
        let ext = Extents {
            outer: self.outer.clone(),
            reduce: domain.clone(),
            store: vec![],
        };
        let red = &reductions[0];
        let (x, Some(y)) = (red.value, red.rhs) else {
            return Err(LowerError::Invalid("internal error: gemm body".into()));
        };
        let nb = out.len() - (ash.len() >= 2) as usize - (bsh.len() >= 2) as usize;
        // Outer axis of each of batch.., m, n (None for extent 1).
        let oc = coords_of(out, Var::outer);
        let axis_var = |c: &IndexExpr| match c {
            IndexExpr::Var(v) => Some(v.index as usize),
            _ => None,
        };
        let mut outer_axes: Vec<Option<usize>> = oc[..nb].iter().map(axis_var).collect();
        outer_axes.push(if ash.len() >= 2 {
            axis_var(&oc[nb])
        } else {
            None
        });
        outer_axes.push(if bsh.len() >= 2 {
            axis_var(&oc[out.len() - 1])
        } else {
            None
        });
        let operand = |e: ExprRef, culprit: ValueId, is_lhs: bool| {
            let which = if is_lhs { "left" } else { "right" };
            let refuse = |why: &str| {
                LowerError::Refused(Refusal {
                    rule: "gemm-operand-not-strided",
                    detail: format!("the {which} operand of %{} {why}", r.0),
                    culprit: Some(culprit),
                })
            };
            let ExprOp::Load(l) = &body.nodes[e.index()].op else {
                return Err(refuse("is computed, not loaded"));
            };
            if !l.guard.is_empty() {
                return Err(refuse("is a guarded (padded) load"));
            }
            let Some((offset, terms)) = l.index.as_affine(&ext) else {
                return Err(refuse("is not an affine view of a buffer"));
            };
            let stride_of = |axis: Option<usize>, kind_reduce: bool| -> i64 {
                let var = match (axis, kind_reduce) {
                    (_, true) if domain.is_empty() => return 0,
                    (_, true) => Var::reduce(0),
                    (Some(a), false) => Var::outer(a),
                    (None, false) => return 0,
                };
                terms.iter().find(|(v, _)| *v == var).map_or(0, |(_, c)| *c)
            };
            let batch_strides = outer_axes[..nb]
                .iter()
                .map(|&a| stride_of(a, false))
                .collect();
            let (row_stride, col_stride) = if is_lhs {
                // [m, k]: rows along the outer m axis, columns along the reduction.
                (stride_of(outer_axes[nb], false), stride_of(None, true))
            } else {
                // [k, n]: rows along the reduction, columns along the outer n axis.
                (stride_of(None, true), stride_of(outer_axes[nb + 1], false))
            };
            Ok(GemmOperand {
                buffer: l.buffer,
                offset,
                batch_strides,
                row_stride,
                col_stride,
            })
        };
        let lhs = operand(x, node.inputs[0], true)?;
        let rhs = operand(y, node.inputs[1], false)?;
        let m = if ash.len() >= 2 {
            ash[ash.len() - 2]
        } else {
            1
        };
        let n = if bsh.len() >= 2 {
            bsh[bsh.len() - 1]
        } else {
            1
        };
        Ok(GemmInfo {
            batch: out[..nb].to_vec(),
            m,
            n,
            k: *ash.last().unwrap_or(&1),
            lhs,
            rhs,
            stage: si,
            acc: red.acc,
            outer_axes,
        })
    }

    fn store_op(&mut self, st: &StoreTarget, coords: &[IndexExpr]) -> Result<StoreOp, Fail> {
        let value = self.value_at(st.value, coords, &[])?;
        let index = self.flat(coords, &st.shape);
        Ok(StoreOp {
            buffer: st.buffer,
            index,
            value,
        })
    }

    fn dtype(&self, r: ExprRef) -> DType {
        self.cur.block.get(r).map_or(DType::F32, |n| n.dtype)
    }

    /// Appends a node, reusing an identical existing one.
    fn push(&mut self, dtype: DType, op: ExprOp) -> ExprRef {
        let node = ExprNode { dtype, op };
        if let Some(&r) = self.cur.cse.get(&node) {
            return r;
        }
        let r = self.cur.block.push(node.clone());
        self.cur.cse.insert(node, r);
        r
    }

    fn cast(&mut self, r: ExprRef, to: DType) -> ExprRef {
        if self.dtype(r) == to {
            return r;
        }
        // Fold casts of constants.
        if let Some(ExprNode {
            op: ExprOp::Const(v),
            ..
        }) = self.cur.block.get(r)
        {
            let v = scalar::cast(*v, to);
            return self.push(to, ExprOp::Const(v));
        }
        self.push(to, ExprOp::Cast(r))
    }

    fn constant(&mut self, v: Value, dtype: DType) -> ExprRef {
        self.push(dtype, ExprOp::Const(v))
    }

    fn simplify(&self, e: &IndexExpr) -> IndexExpr {
        e.simplify(&self.cur.ext)
    }

    /// Row-major offset of `coords` in a tensor of `shape`, simplified.
    fn flat(&self, coords: &[IndexExpr], shape: &[usize]) -> IndexExpr {
        let strides = contiguous_strides(shape);
        let terms: Vec<IndexExpr> = coords
            .iter()
            .zip(&strides)
            .map(|(c, &s)| c.clone() * s as i64)
            .collect();
        self.simplify(&IndexExpr::Sum(terms))
    }

    /// Bounds among `candidates` that the loop ranges do not already prove.
    fn needed_bounds(&self, candidates: Vec<Bound>) -> Vec<Bound> {
        candidates
            .into_iter()
            .filter(|b| match b.expr.range(&self.cur.ext) {
                Some((lo, hi)) => !(lo >= b.lo && hi < b.hi),
                None => true,
            })
            .collect()
    }

    fn load(&mut self, v: ValueId, coords: &[IndexExpr], guard: &[Bound]) -> Result<ExprRef, Fail> {
        let g = self.plan.g;
        let buffer = self.layout.of_value[v.index()].ok_or_else(|| {
            invalid(format!(
                "internal error: %{} is loaded but has no buffer",
                v.0
            ))
        })?;
        let ty = g.ty(v);
        let index = self.flat(coords, &ty.shape);
        Ok(self.push(
            ty.dtype,
            ExprOp::Load(Load {
                buffer,
                index,
                guard: guard.to_vec(),
                other: Value::zero(ty.dtype),
            }),
        ))
    }

    /// The value of graph value `v` at coordinates `coords` (one per axis of `v`),
    /// computing only where every bound of `guard` holds.
    fn value_at(
        &mut self,
        v: ValueId,
        coords: &[IndexExpr],
        guard: &[Bound],
    ) -> Result<ExprRef, Fail> {
        let coords: Vec<IndexExpr> = coords.iter().map(|c| self.simplify(c)).collect();
        let key = (v, coords.clone(), guard.to_vec());
        if let Some(&r) = self.cur.memo.get(&key) {
            return Ok(r);
        }
        if self.depth > MAX_DEPTH {
            return Err(Refusal::new(
                "expression-too-deep",
                format!("expressions nest deeper than {MAX_DEPTH} levels"),
            )
            .into());
        }
        self.depth += 1;
        let result = self.value_at_uncached(v, &coords, guard);
        self.depth -= 1;
        let r = result?;
        self.cur.memo.insert(key, r);
        Ok(r)
    }

    fn value_at_uncached(
        &mut self,
        v: ValueId,
        coords: &[IndexExpr],
        guard: &[Bound],
    ) -> Result<ExprRef, Fail> {
        let g = self.plan.g;
        let node = g.node(v);
        match self.plan.role[v.index()] {
            Role::Dead => Err(invalid(format!("internal error: %{} is dead", v.0))),
            Role::Param(_) => self.load(v, coords, guard),
            Role::Scheduled(s) if !self.in_group[s] => self.load(v, coords, guard),
            Role::Literal => {
                let Op::Literal { value } = node.op else {
                    return Err(invalid("internal error: literal".into()));
                };
                let c = literal_value(value, node.ty.dtype);
                Ok(self.constant(c, node.ty.dtype))
            }
            Role::View | Role::Inline | Role::Scheduled(_) => {
                self.touched.insert(v);
                self.compute(v, coords, guard)
            }
        }
    }

    /// Operand coordinates under broadcasting from the result shape `out`.
    fn broadcast(coords: &[IndexExpr], own: &[usize], out: &[usize]) -> Vec<IndexExpr> {
        let lead = out.len() - own.len();
        own.iter()
            .enumerate()
            .map(|(i, &d)| {
                if d == 1 {
                    IndexExpr::Const(0)
                } else {
                    coords[lead + i].clone()
                }
            })
            .collect()
    }

    fn operand(
        &mut self,
        x: ValueId,
        coords: &[IndexExpr],
        out: &[usize],
        guard: &[Bound],
    ) -> Result<ExprRef, Fail> {
        let own = self.plan.g.ty(x).shape.clone();
        let c = Self::broadcast(coords, &own, out);
        self.value_at(x, &c, guard)
    }

    fn compute(
        &mut self,
        v: ValueId,
        coords: &[IndexExpr],
        guard: &[Bound],
    ) -> Result<ExprRef, Fail> {
        let g = self.plan.g;
        let node = g.node(v);
        let ty = &node.ty;
        let out = ty.shape.as_slice();
        let ins = &node.inputs;
        match &node.op {
            Op::Unary(u) => {
                let x = self.operand(ins[0], coords, out, guard)?;
                if *u == ferrite_ir::UnaryOp::Not {
                    return Ok(self.push(DType::Bool, ExprOp::Unary(*u, x)));
                }
                let x = self.cast(x, ty.dtype);
                Ok(self.push(ty.dtype, ExprOp::Unary(*u, x)))
            }
            Op::Binary(bop) => {
                let compute = if bop.is_comparison() || bop.is_logical() {
                    promote(g.ty(ins[0]).dtype, g.ty(ins[1]).dtype)
                } else {
                    ty.dtype
                };
                let x = self.operand(ins[0], coords, out, guard)?;
                let y = self.operand(ins[1], coords, out, guard)?;
                let (x, y) = (self.cast(x, compute), self.cast(y, compute));
                Ok(self.push(ty.dtype, ExprOp::Binary(*bop, x, y)))
            }
            Op::Where => {
                let c = self.operand(ins[0], coords, out, guard)?;
                let a = self.operand(ins[1], coords, out, guard)?;
                let b = self.operand(ins[2], coords, out, guard)?;
                let c = self.cast(c, DType::Bool);
                let (a, b) = (self.cast(a, ty.dtype), self.cast(b, ty.dtype));
                Ok(self.push(ty.dtype, ExprOp::Where(c, a, b)))
            }
            Op::Cast { to } => {
                let x = self.value_at(ins[0], coords, guard)?;
                Ok(self.cast(x, *to))
            }
            Op::Reduce { .. } | Op::ArgReduce { .. } | Op::MatMul => {
                let canonical: Vec<IndexExpr> = coords_of(out, Var::outer)
                    .iter()
                    .map(|c| self.simplify(c))
                    .collect();
                if coords != canonical.as_slice() {
                    return Err(Refusal::new(
                        "reduction-read-elsewhere",
                        format!(
                            "%{} is read at [{}], not at the kernel's current point",
                            v.0,
                            coords
                                .iter()
                                .map(|c| c.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                    .into());
                }
                if let Some(&(acc, dtype)) = self.ready.get(&v) {
                    return Ok(self.push(dtype, ExprOp::Acc(acc)));
                }
                if self.cur.pending.contains(&v) {
                    return Err(Fail::Pending);
                }
                Err(invalid(format!(
                    "internal error: %{} is read before its reduction",
                    v.0
                )))
            }
            Op::Reshape { .. } => {
                let src_shape = g.ty(ins[0]).shape.clone();
                let flat = self.flat(coords, out);
                let strides = contiguous_strides(&src_shape);
                let src: Vec<IndexExpr> = src_shape
                    .iter()
                    .zip(&strides)
                    .map(|(&d, &s)| flat.clone().floor_div(s as i64).modulo(d.max(1) as i64))
                    .collect();
                self.value_at(ins[0], &src, guard)
            }
            Op::Permute { dims } => {
                let perm = permutation("permute", dims, out.len()).map_err(invalid)?;
                let mut src = vec![IndexExpr::Const(0); out.len()];
                for (k, &p) in perm.iter().enumerate() {
                    src[p] = coords[k].clone();
                }
                self.value_at(ins[0], &src, guard)
            }
            Op::Expand { .. } => {
                let own = g.ty(ins[0]).shape.clone();
                let src = Self::broadcast(coords, &own, out);
                self.value_at(ins[0], &src, guard)
            }
            Op::Slice {
                axis,
                start,
                end,
                step,
            } => {
                let own = g.ty(ins[0]).shape.clone();
                let a = normalize_axis(*axis, own.len()).map_err(invalid)?;
                let (lo, _) = slice_bounds(own[a], *start, *end);
                let mut src = coords.to_vec();
                src[a] = coords[a].clone() * *step + IndexExpr::Const(lo as i64);
                self.value_at(ins[0], &src, guard)
            }
            Op::Pad { pads, value } => {
                let own = g.ty(ins[0]).shape.clone();
                let fill = fill_value(*value, ty.dtype, "pad").map_err(invalid)?;
                let src: Vec<IndexExpr> = coords
                    .iter()
                    .enumerate()
                    .map(|(k, c)| self.simplify(&(c.clone() + IndexExpr::Const(-pads[2 * k]))))
                    .collect();
                let bounds = self.needed_bounds(
                    src.iter()
                        .zip(&own)
                        .map(|(e, &d)| Bound {
                            expr: e.clone(),
                            lo: 0,
                            hi: d as i64,
                        })
                        .collect(),
                );
                self.guarded(ins[0], &src, guard, bounds, fill, ty.dtype)
            }
            Op::Concat { axis } => {
                let a = normalize_axis(*axis, out.len()).map_err(invalid)?;
                let c = coords[a].clone();
                let (lo, hi) = c.range(&self.cur.ext).unwrap_or((i64::MIN, i64::MAX));
                // (operand, offset, length) of the operands the coordinate can reach.
                let mut parts = Vec::new();
                let mut off: i64 = 0;
                for &x in ins {
                    let len = g.ty(x).shape[a] as i64;
                    if len > 0 && off <= hi && off + len > lo {
                        parts.push((x, off, len));
                    }
                    off += len;
                }
                let mut result: Option<ExprRef> = None;
                for &(x, off, len) in parts.iter().rev() {
                    let mut src = coords.to_vec();
                    src[a] = self.simplify(&(c.clone() + IndexExpr::Const(-off)));
                    let bounds = self.needed_bounds(vec![Bound {
                        expr: src[a].clone(),
                        lo: 0,
                        hi: len,
                    }]);
                    let zero = Value::zero(ty.dtype);
                    let part = self.guarded(x, &src, guard, bounds, zero, ty.dtype)?;
                    result = Some(match result {
                        None => part,
                        Some(rest) => {
                            let at = self.push(DType::I64, ExprOp::Index(c.clone()));
                            let end = self.constant(Value::Int(off + len), DType::I64);
                            let cond =
                                self.push(DType::Bool, ExprOp::Binary(BinaryOp::Lt, at, end));
                            self.push(ty.dtype, ExprOp::Where(cond, part, rest))
                        }
                    });
                }
                match result {
                    Some(r) => Ok(r),
                    // No operand is reachable: the output is empty along the axis.
                    None => Ok(self.constant(Value::zero(ty.dtype), ty.dtype)),
                }
            }
            Op::IndexSelect { axis } => {
                let own = g.ty(ins[0]).shape.clone();
                let a = normalize_axis(*axis, own.len()).map_err(invalid)?;
                let iv = self.value_at(ins[1], &[coords[a].clone()], guard)?;
                let dynamic = self.checked_index(iv, own[a], guard);
                let mut src = coords.to_vec();
                src[a] = dynamic;
                self.value_at(ins[0], &src, guard)
            }
            Op::Gather { axis } => {
                let own = g.ty(ins[0]).shape.clone();
                let ishape = g.ty(ins[1]).shape.clone();
                let a = normalize_axis(*axis, own.len()).map_err(invalid)?;
                let ic: Vec<IndexExpr> = ishape
                    .iter()
                    .enumerate()
                    .map(|(k, &d)| {
                        if k != a && d == 1 {
                            IndexExpr::Const(0)
                        } else {
                            coords[k].clone()
                        }
                    })
                    .collect();
                let iv = self.value_at(ins[1], &ic, guard)?;
                let dynamic = self.checked_index(iv, own[a], guard);
                let src: Vec<IndexExpr> = own
                    .iter()
                    .enumerate()
                    .map(|(k, &d)| {
                        if k == a {
                            dynamic.clone()
                        } else if d == 1 {
                            IndexExpr::Const(0)
                        } else {
                            coords[k].clone()
                        }
                    })
                    .collect();
                self.value_at(ins[0], &src, guard)
            }
            Op::Full { value, dtype, .. } => {
                let fill = fill_value(*value, *dtype, "full").map_err(invalid)?;
                Ok(self.constant(fill, *dtype))
            }
            Op::Arange {
                start, step, dtype, ..
            } => {
                let i = coords.first().cloned().unwrap_or(IndexExpr::Const(0));
                let integral = |x: f64| x.fract() == 0.0 && x.abs() < 9.0e15;
                if !dtype.is_float() || (integral(*start) && integral(*step)) {
                    // PyTorch truncates start and step for integer dtypes and computes in i64.
                    let e = self.simplify(&(i * *step as i64 + IndexExpr::Const(*start as i64)));
                    let r = self.push(DType::I64, ExprOp::Index(e));
                    Ok(self.cast(r, *dtype))
                } else {
                    // start + i*step in the float dtype (the interpreter uses f64: within rounding).
                    let r = self.push(DType::I64, ExprOp::Index(i));
                    let r = self.cast(r, *dtype);
                    let s = self.constant(scalar::round_to(Value::Float(*step), *dtype), *dtype);
                    let o = self.constant(scalar::round_to(Value::Float(*start), *dtype), *dtype);
                    let m = self.push(*dtype, ExprOp::Binary(BinaryOp::Mul, r, s));
                    Ok(self.push(*dtype, ExprOp::Binary(BinaryOp::Add, m, o)))
                }
            }
            Op::Param { .. } | Op::Literal { .. } => {
                Err(invalid(format!("internal error: %{} computed", v.0)))
            }
            other => Err(invalid(format!(
                "`{}` is not a primitive op; run decompose first",
                other.name()
            ))),
        }
    }

    /// The index expression for a data-dependent index value: the value itself when it
    /// is index arithmetic provably in `0..extent` (an `arange`), else a checked index.
    fn checked_index(&mut self, iv: ExprRef, extent: usize, guard: &[Bound]) -> IndexExpr {
        let mut at = iv;
        // Look through a cast of index arithmetic (an i32 arange).
        if let Some(ExprNode {
            op: ExprOp::Cast(inner),
            ..
        }) = self.cur.block.get(at)
        {
            at = *inner;
        }
        let known = match self.cur.block.get(at).map(|n| &n.op) {
            Some(ExprOp::Index(e)) => Some(e.clone()),
            Some(ExprOp::Const(Value::Int(c))) => Some(IndexExpr::Const(*c)),
            _ => None,
        };
        if let Some(e) = known {
            if let Some((lo, hi)) = e.range(&self.cur.ext) {
                if lo >= 0 && (hi as i128) < extent as i128 && hi <= i32::MAX as i64 {
                    return e;
                }
            }
        }
        let r = self.push(
            DType::I64,
            ExprOp::CheckedIndex {
                value: iv,
                extent: extent as u64,
                guard: guard.to_vec(),
            },
        );
        IndexExpr::Dynamic {
            value: r,
            extent: extent as u64,
        }
    }

    /// `x` at `src` where `bounds` hold (and the enclosing `guard`), else `fill`.
    fn guarded(
        &mut self,
        x: ValueId,
        src: &[IndexExpr],
        guard: &[Bound],
        bounds: Vec<Bound>,
        fill: Value,
        dtype: DType,
    ) -> Result<ExprRef, Fail> {
        if bounds.is_empty() {
            return self.value_at(x, src, guard);
        }
        let mut all = guard.to_vec();
        all.extend(bounds.iter().cloned());
        let inner = self.value_at(x, src, &all)?;
        // A load guarded by exactly these bounds can yield the fill value itself.
        if let Some(ExprNode {
            op: ExprOp::Load(l),
            ..
        }) = self.cur.block.get(inner)
        {
            if l.guard == all {
                let l = Load {
                    other: fill,
                    ..l.clone()
                };
                return Ok(self.push(dtype, ExprOp::Load(l)));
            }
        }
        let mut cond: Option<ExprRef> = None;
        for b in &bounds {
            let at = self.push(DType::I64, ExprOp::Index(b.expr.clone()));
            let lo = self.constant(Value::Int(b.lo), DType::I64);
            let hi = self.constant(Value::Int(b.hi), DType::I64);
            let ge = self.push(DType::Bool, ExprOp::Binary(BinaryOp::Ge, at, lo));
            let lt = self.push(DType::Bool, ExprOp::Binary(BinaryOp::Lt, at, hi));
            let both = self.push(DType::Bool, ExprOp::Binary(BinaryOp::And, ge, lt));
            cond = Some(match cond {
                None => both,
                Some(c) => self.push(DType::Bool, ExprOp::Binary(BinaryOp::And, c, both)),
            });
        }
        let c = cond.unwrap_or(inner);
        let f = self.constant(fill, dtype);
        let inner = self.cast(inner, dtype);
        Ok(self.push(dtype, ExprOp::Where(c, inner, f)))
    }
}

/// A literal's value in `dtype` (integer literals wrap into `i32`, as the interpreter does).
fn literal_value(value: Scalar, dtype: DType) -> Value {
    match value {
        Scalar::Float(v) => scalar::round_to(Value::Float(v), dtype),
        Scalar::Int(v) => scalar::cast(Value::Int(v), dtype),
        Scalar::Bool(b) => scalar::cast(Value::Bool(b), dtype),
    }
}

/// A `full`/`pad` fill value in `dtype`; values that do not fit are errors, as in the
/// interpreter (integers out of range, finite floats that overflow).
fn fill_value(value: f64, dtype: DType, op: &str) -> Result<Value, String> {
    let fits = match dtype {
        DType::I32 => value.fract() == 0.0 && value >= i32::MIN as f64 && value <= i32::MAX as f64,
        DType::I64 => value.fract() == 0.0 && value >= -(2f64.powi(63)) && value < 2f64.powi(63),
        DType::Bool => true,
        _ => {
            !value.is_finite()
                || scalar::round_to(Value::Float(value), dtype)
                    .as_f64()
                    .is_finite()
        }
    };
    if !fits {
        return Err(format!(
            "{op}: value {value} cannot be converted to {dtype} without overflow"
        ));
    }
    Ok(scalar::cast(Value::Float(value), dtype))
}
