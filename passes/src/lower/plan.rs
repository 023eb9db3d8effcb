//! The plan: how every graph value is obtained (its [`Role`]), the scheduled nodes
//! ([`SNode`]) with their data dependencies, and which buffer holds what ([`Layout`]).

use ferrite_ir::loops::{Buffer, BufferId, BufferKind};
use ferrite_ir::types::TensorType;
use ferrite_ir::{Graph, Op, ValueId};

/// Views and recomputed values nested deeper than this are materialized instead, which
/// bounds the recursion of code generation.
pub(super) const MAX_INLINE_CHAIN: usize = 32;

/// How consumers obtain a graph value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// No output depends on it.
    Dead,
    /// Graph parameter `.0`: loaded from its input buffer.
    Param(usize),
    /// Constant `.0` of the program (numbered in node order among live constants):
    /// loaded from its read-only constant buffer, like a parameter bound at compile time.
    Constant(usize),
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
                Op::Constant(_) => Role::Constant(0),
                _ => Role::Scheduled(0),
            })
            .collect();
        Plan::with_roles(g, role)
    }

    /// The fused roles: views are inlined and memory-free values recomputed. Matmul
    /// operands that cannot be read through strides are materialized afterwards
    /// ([`super::materialize_gemm_operands`]).
    pub fn fused(g: &'g Graph) -> Plan<'g> {
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
                Op::Constant(_) => Role::Constant(0),
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
        Plan::with_roles(g, role)
    }

    /// This plan with value `v` scheduled (materialized) instead of inlined.
    pub fn with_scheduled(&self, v: ValueId) -> Plan<'g> {
        self.with_scheduled_all(&[v])
    }

    /// This plan with every value of `values` scheduled (materialized) instead of inlined.
    pub fn with_scheduled_all(&self, values: &[ValueId]) -> Plan<'g> {
        let mut role = self.role.clone();
        for v in values {
            role[v.index()] = Role::Scheduled(0);
        }
        Plan::with_roles(self.g, role)
    }

    /// Builds the scheduled nodes and dependencies for given roles (scheduled node
    /// numbers in `roles` are recomputed).
    fn with_roles(g: &'g Graph, mut role: Vec<Role>) -> Plan<'g> {
        let mut snodes = Vec::new();
        let mut constants = 0;
        for (i, r) in role.iter_mut().enumerate() {
            match r {
                Role::Scheduled(s) => {
                    *s = snodes.len();
                    snodes.push(SNode::Value(ValueId(i as u32)));
                }
                Role::Constant(c) => {
                    *c = constants;
                    constants += 1;
                }
                _ => {}
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
                Role::Param(_) | Role::Constant(_) | Role::Scheduled(_) => {
                    vec![ValueId(i as u32)]
                }
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
    /// The constant tensors, by the number of their [`Role::Constant`].
    pub constants: Vec<ferrite_ir::Constant>,
}

impl Layout {
    fn empty(plan: &Plan) -> Layout {
        let g = plan.g;
        let mut l = Layout {
            buffers: Vec::new(),
            of_value: vec![None; g.nodes.len()],
            of_output: vec![None; g.outputs.len()],
            constants: Vec::new(),
        };
        for (i, &p) in g.params.iter().enumerate() {
            let id = l.push(g.ty(p).clone(), BufferKind::Input(i), value_name(g, p));
            l.of_value[p.index()] = Some(id);
        }
        for (i, r) in plan.role.iter().enumerate() {
            let (Role::Constant(c), Op::Constant(k)) = (r, &g.nodes[i].op) else {
                continue;
            };
            let v = ValueId(i as u32);
            let id = l.push(g.ty(v).clone(), BufferKind::Constant(*c), value_name(g, v));
            l.of_value[i] = Some(id);
            l.constants.push(k.clone());
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
