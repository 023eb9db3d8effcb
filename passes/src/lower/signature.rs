//! [`Signature`]: everything [`build_kernel`](super::build_kernel) reads to build a group's
//! kernel, with the graph's value and buffer numbers replaced by their order of first use.
//!
//! Two groups with equal signatures build the same kernel up to those numbers: the same
//! stages, the same expressions, the same bytes and ops. The fusion planner costs thousands
//! of candidate groups, and in a model of repeated layers each candidate of one layer has
//! an equal twin in every other: with the signature it builds one of them (in a 12-layer
//! GPT-2, ~750 builds where it made ~2,400).
//!
//! What the builder reads, and so what the signature holds, starting from the group's
//! scheduled nodes in order and following operands:
//! - a value computed in the kernel (a member, a view, an inlined value): its op with every
//!   attribute, its type, its operands (by their number in the signature);
//! - a value loaded from memory (a parameter, a constant, a value of another group): its
//!   type and its buffer (numbered; the buffer's type and kind, not which parameter,
//!   output or constant it holds);
//! - a literal: its op (the value) and type;
//! - for each member: whether the group must store it, into which buffer, and whether it
//!   is a graph output; an output copy: its output's buffer and the value copied.
//!
//! A constant's data is not read by the builder and not part of the signature. A refusal
//! names values as `%N`; [`Signature::translate`] restates a twin's refusal with this
//! group's values. Debug builds check every signature hit against a fresh build
//! (`fuse.rs`), so a field the builder comes to read without the signature holding it
//! fails the test suites.

use super::plan::{Layout, Plan, Role, SNode};
use super::refusal::Refusal;
use ferrite_ir::loops::{BufferId, BufferKind};
use ferrite_ir::{Op, TensorType, ValueId};
use rustc_hash::{FxHashMap, FxHasher};
use std::hash::{Hash, Hasher};
use std::mem::Discriminant;

/// One value or store of a [`Signature`].
#[derive(PartialEq, Debug)]
enum Item<'g> {
    /// Computed inside the kernel: a member (`member`), a view or an inlined value.
    Computed {
        member: bool,
        view: bool,
        op: &'g Op,
        ty: &'g TensorType,
        /// Its operands' numbers: `operands[inputs.0..inputs.1]` of the signature.
        inputs: (u32, u32),
    },
    /// Read from buffer number `buffer` (`None`: a value with no buffer, which the builder
    /// reports as a bug).
    Loaded {
        ty: &'g TensorType,
        buffer: Option<u32>,
    },
    /// A literal.
    Literal { op: &'g Op, ty: &'g TensorType },
    /// A dead value (the builder reports it as a bug).
    Dead,
    /// Member value `value`: stored (`must`) into buffer number `buffer`, a graph output or
    /// not.
    Store {
        value: u32,
        must: bool,
        output: bool,
        buffer: Option<u32>,
    },
    /// An output copy of `value` into buffer number `buffer`.
    Copy { value: u32, buffer: Option<u32> },
    /// A buffer of the signature, by number: its type and kind (input, output, constant,
    /// intermediate; not which parameter, output or constant it holds).
    Buffer {
        ty: &'g TensorType,
        kind: Discriminant<BufferKind>,
    },
}

/// A group's kernel up to value and buffer numbering (module docs). Equal signatures, equal
/// kernels; the hash is computed once.
#[derive(Debug)]
pub struct Signature<'g> {
    items: Vec<Item<'g>>,
    operands: Vec<u32>,
    hash: u64,
    /// The graph value of each number (not compared: it is what differs between twins).
    values: Vec<ValueId>,
}

impl PartialEq for Signature<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.items == other.items && self.operands == other.operands
    }
}

impl Eq for Signature<'_> {}

impl Signature<'_> {
    /// The refusal `r`, reported for the group of `twin` (a signature equal to this one),
    /// restated for this group: each `%N` of its detail and its culprit name the value
    /// with the same number here. `None` if it names a value outside `twin`.
    pub fn translate(&self, twin: &Signature<'_>, r: &Refusal) -> Option<Refusal> {
        let map = |v: ValueId| -> Option<ValueId> {
            let n = twin.values.iter().position(|&w| w == v)?;
            self.values.get(n).copied()
        };
        let mut detail = String::with_capacity(r.detail.len());
        let mut rest = r.detail.as_str();
        while let Some(at) = rest.find('%') {
            detail.push_str(&rest[..=at]);
            rest = &rest[at + 1..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 {
                let v = ValueId(rest[..digits].parse().ok()?);
                detail.push_str(&map(v)?.0.to_string());
                rest = &rest[digits..];
            }
        }
        detail.push_str(rest);
        let culprit = match r.culprit {
            Some(c) => Some(map(c)?),
            None => None,
        };
        Some(Refusal {
            rule: r.rule,
            detail,
            culprit,
        })
    }
}

impl Hash for Signature<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

struct Builder<'a, 'g> {
    plan: &'g Plan<'g>,
    layout: &'g Layout,
    in_group: &'a [usize],
    values: FxHashMap<ValueId, u32>,
    order: Vec<ValueId>,
    buffers: FxHashMap<BufferId, u32>,
    items: Vec<Item<'g>>,
    operands: Vec<u32>,
    stack: Vec<(ValueId, bool)>,
    hasher: FxHasher,
}

impl<'g> Builder<'_, 'g> {
    fn buffer(&mut self, b: Option<BufferId>) -> Option<u32> {
        let b = b?;
        if let Some(&n) = self.buffers.get(&b) {
            return Some(n);
        }
        let n = self.buffers.len() as u32;
        self.buffers.insert(b, n);
        let buf = &self.layout.buffers[b.0 as usize];
        buf.ty.hash(&mut self.hasher);
        self.items.push(Item::Buffer {
            ty: &buf.ty,
            kind: std::mem::discriminant(&buf.kind),
        });
        Some(n)
    }

    /// The number of value `v`, adding it (and what it reads) on first use. Iterative: a
    /// chain of views may be long.
    fn value(&mut self, v: ValueId) -> u32 {
        if let Some(&n) = self.values.get(&v) {
            return n;
        }
        // Post-order over the operands still unnumbered.
        let mut stack = std::mem::take(&mut self.stack);
        stack.push((v, false));
        while let Some((x, expanded)) = stack.pop() {
            if self.values.contains_key(&x) {
                continue;
            }
            let g = self.plan.g;
            let node = g.node(x);
            let role = self.plan.role[x.index()];
            let computed = match role {
                Role::View | Role::Inline => Some(false),
                Role::Scheduled(s) if self.in_group.binary_search(&s).is_ok() => Some(true),
                _ => None,
            };
            if computed.is_some() && !expanded {
                stack.push((x, true));
                for &i in node.inputs.iter().rev() {
                    if !self.values.contains_key(&i) {
                        stack.push((i, false));
                    }
                }
                continue;
            }
            let item = match (role, computed) {
                (_, Some(member)) => {
                    let start = self.operands.len() as u32;
                    for i in &node.inputs {
                        let n = self.values[i];
                        self.hasher.write_u32(n);
                        self.operands.push(n);
                    }
                    let inputs = (start, self.operands.len() as u32);
                    std::mem::discriminant(&node.op).hash(&mut self.hasher);
                    node.ty.hash(&mut self.hasher);
                    Item::Computed {
                        member,
                        view: role == Role::View,
                        op: &node.op,
                        ty: &node.ty,
                        inputs,
                    }
                }
                (Role::Dead, _) => Item::Dead,
                (Role::Literal, _) => {
                    std::mem::discriminant(&node.op).hash(&mut self.hasher);
                    Item::Literal {
                        op: &node.op,
                        ty: &node.ty,
                    }
                }
                _ => {
                    let buffer = self.buffer(self.layout.of_value[x.index()]);
                    node.ty.hash(&mut self.hasher);
                    buffer.hash(&mut self.hasher);
                    Item::Loaded {
                        ty: &node.ty,
                        buffer,
                    }
                }
            };
            let n = self.values.len() as u32;
            self.values.insert(x, n);
            self.order.push(x);
            n.hash(&mut self.hasher);
            self.items.push(item);
        }
        self.stack = stack;
        self.values[&v]
    }
}

/// The signature of the kernel of `members` (sorted scheduled node numbers of `plan`); it
/// borrows from the graph and the layout.
pub fn signature<'g>(plan: &'g Plan<'g>, layout: &'g Layout, members: &[usize]) -> Signature<'g> {
    let mut b = Builder {
        plan,
        layout,
        in_group: members,
        // Sized for a group's values and buffers: growing them was a fifth of the cost.
        values: FxHashMap::with_capacity_and_hasher(4 * members.len(), Default::default()),
        order: Vec::new(),
        buffers: FxHashMap::with_capacity_and_hasher(2 * members.len() + 2, Default::default()),
        items: Vec::with_capacity(4 * members.len()),
        operands: Vec::new(),
        stack: Vec::new(),
        hasher: FxHasher::default(),
    };
    members.len().hash(&mut b.hasher);
    for &s in members {
        let item = match plan.snodes[s] {
            SNode::Value(v) => {
                let value = b.value(v);
                let must = plan.must_store(s, &|r| members.binary_search(&r).is_ok());
                let buffer = b.buffer(layout.of_value[v.index()]);
                Item::Store {
                    value,
                    must,
                    output: plan.output_of[v.index()].is_some(),
                    buffer,
                }
            }
            SNode::OutputCopy { output, value } => {
                let value = b.value(value);
                let buffer = b.buffer(layout.of_output[output]);
                Item::Copy { value, buffer }
            }
        };
        b.items.len().hash(&mut b.hasher);
        b.items.push(item);
    }
    let hash = b.hasher.finish();
    Signature {
        items: b.items,
        operands: b.operands,
        hash,
        values: b.order,
    }
}
