//! Scalar expressions: the body a loop runs at each point.
//!
//! A [`Block`] is a small SSA list of [`ExprNode`]s (a DAG: a node may be used many
//! times, so a value shared by several consumers is computed once per point). Each
//! node has a dtype and its value is that of the op computed in that dtype: an `f32`
//! add yields an `f32`, exactly as the reference interpreter rounds once per op.

use super::ids::{AccId, BufferId, ExprRef};
use super::index::IndexExpr;
use crate::op::{BinaryOp, UnaryOp};
use crate::DType;
use std::fmt;
use std::hash::{Hash, Hasher};

/// A scalar value of the loop IR, in one of the three computation domains: floats
/// as f64 (holding a value of the node's dtype), integers as i128 (which holds every
/// value of every integer dtype, `u64` included), or bool.
///
/// Equality and hashing are bitwise for floats, so constants can be deduplicated
/// (`NaN == NaN`, `0.0 != -0.0`).
#[derive(Clone, Copy, Debug)]
pub enum Value {
    /// A float of any float dtype.
    Float(f64),
    /// An integer of any integer dtype.
    Int(i128),
    /// A bool.
    Bool(bool),
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Value::Float(v) => (0u8, v.to_bits()).hash(state),
            Value::Int(v) => (1u8, *v).hash(state),
            Value::Bool(v) => (2u8, *v).hash(state),
        }
    }
}

impl Value {
    /// The zero of `dtype`'s domain (the value a masked load yields by default).
    pub fn zero(dtype: DType) -> Value {
        match dtype.category() {
            crate::Category::Float => Value::Float(0.0),
            crate::Category::Int => Value::Int(0),
            crate::Category::Bool => Value::Bool(false),
        }
    }

    /// True when the value lives in `dtype`'s domain (float, int or bool).
    pub fn fits_domain(&self, dtype: DType) -> bool {
        matches!(
            (self, dtype.category()),
            (Value::Float(_), crate::Category::Float)
                | (Value::Int(_), crate::Category::Int)
                | (Value::Bool(_), crate::Category::Bool)
        )
    }

    /// The value read as a number (bools are 0 and 1).
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Float(v) => v,
            Value::Int(v) => v as f64,
            Value::Bool(b) => b as u8 as f64,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Float(v) => f.write_str(&crate::op::format_float(*v)),
            Value::Int(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
        }
    }
}

/// A bounds condition `lo <= expr < hi` of a guarded load.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Bound {
    /// The guarded index expression.
    pub expr: IndexExpr,
    /// Inclusive lower bound.
    pub lo: i64,
    /// Exclusive upper bound.
    pub hi: i64,
}

/// A read of one buffer element.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Load {
    /// The buffer read.
    pub buffer: BufferId,
    /// The element offset (row-major, in elements).
    pub index: IndexExpr,
    /// When non-empty, the load happens only if every bound holds; otherwise it yields
    /// `other` and touches no memory (pad and concat regions). A backend may clamp
    /// the index of a guarded load, since its value is discarded when a bound fails.
    pub guard: Vec<Bound>,
    /// The value when the guard fails (in the node's dtype).
    pub other: Value,
}

/// What a node computes.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum ExprOp {
    /// A constant of the node's dtype.
    Const(Value),
    /// A buffer element.
    Load(Load),
    /// The value of a reduction accumulator defined by an earlier stage (for argmax
    /// and argmin, the index).
    Acc(AccId),
    /// An index expression as an `i64` value (iota, `arange`, concat selectors).
    Index(IndexExpr),
    /// An index value read from data (`index_select`, `gather`), checked to be in
    /// `0..extent`: an out-of-range value is an evaluation error naming the kernel.
    /// When a guard bound fails the check is skipped and the result is 0.
    CheckedIndex {
        /// The integer node holding the index.
        value: ExprRef,
        /// The exclusive upper bound.
        extent: u64,
        /// Bounds under which the index is needed (those of the enclosing pad/concat).
        guard: Vec<Bound>,
    },
    /// An elementwise op of one operand of the node's dtype (`not` takes any dtype).
    Unary(UnaryOp, ExprRef),
    /// An elementwise op of two operands of one dtype.
    Binary(BinaryOp, ExprRef, ExprRef),
    /// `where(cond, a, b)` with a bool condition and `a`, `b` of the node's dtype.
    Where(ExprRef, ExprRef, ExprRef),
    /// Conversion of the operand to the node's dtype.
    Cast(ExprRef),
}

/// One node: an op and the dtype of its value.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ExprNode {
    /// The dtype of the value.
    pub dtype: DType,
    /// What is computed.
    pub op: ExprOp,
}

impl ExprNode {
    /// Calls `f` on every node this one reads, including those inside index expressions.
    pub fn for_each_operand(&self, f: &mut impl FnMut(ExprRef)) {
        match &self.op {
            ExprOp::Const(_) | ExprOp::Acc(_) => {}
            ExprOp::Load(l) => {
                l.index.for_each_ref(f);
                for b in &l.guard {
                    b.expr.for_each_ref(f);
                }
            }
            ExprOp::Index(e) => e.for_each_ref(f),
            ExprOp::CheckedIndex { value, guard, .. } => {
                f(*value);
                for b in guard {
                    b.expr.for_each_ref(f);
                }
            }
            ExprOp::Unary(_, a) | ExprOp::Cast(a) => f(*a),
            ExprOp::Binary(_, a, b) => {
                f(*a);
                f(*b);
            }
            ExprOp::Where(c, a, b) => {
                f(*c);
                f(*a);
                f(*b);
            }
        }
    }

    /// The same node with every index expression (a load's index and guards, an iota, a
    /// checked index's guards) rewritten by `f`, or `None` as soon as `f` refuses one.
    pub fn try_map_indices(
        &self,
        f: &mut impl FnMut(&IndexExpr) -> Option<IndexExpr>,
    ) -> Option<ExprNode> {
        let mut n = self.clone();
        let guards = match &mut n.op {
            ExprOp::Load(l) => {
                l.index = f(&l.index)?;
                &mut l.guard
            }
            ExprOp::Index(e) => {
                *e = f(e)?;
                return Some(n);
            }
            ExprOp::CheckedIndex { guard, .. } => guard,
            _ => return Some(n),
        };
        for b in guards {
            b.expr = f(&b.expr)?;
        }
        Some(n)
    }

    /// The same node with every index expression rewritten by `f` (see
    /// [`ExprNode::try_map_indices`]).
    pub fn map_indices(&self, f: impl Fn(&IndexExpr) -> IndexExpr) -> ExprNode {
        // `f` never refuses, so neither does the rewrite.
        self.try_map_indices(&mut |e| Some(f(e)))
            .unwrap_or_else(|| self.clone())
    }

    /// The same node with every reference rewritten through `m`.
    pub fn map_refs(&self, m: &impl Fn(ExprRef) -> ExprRef) -> ExprNode {
        let map_guard = |g: &[Bound]| -> Vec<Bound> {
            g.iter()
                .map(|b| Bound {
                    expr: b.expr.map_refs(m),
                    lo: b.lo,
                    hi: b.hi,
                })
                .collect()
        };
        let op = match &self.op {
            ExprOp::Const(_) | ExprOp::Acc(_) => self.op.clone(),
            ExprOp::Load(l) => ExprOp::Load(Load {
                buffer: l.buffer,
                index: l.index.map_refs(m),
                guard: map_guard(&l.guard),
                other: l.other,
            }),
            ExprOp::Index(e) => ExprOp::Index(e.map_refs(m)),
            ExprOp::CheckedIndex {
                value,
                extent,
                guard,
            } => ExprOp::CheckedIndex {
                value: m(*value),
                extent: *extent,
                guard: map_guard(guard),
            },
            ExprOp::Unary(u, a) => ExprOp::Unary(*u, m(*a)),
            ExprOp::Cast(a) => ExprOp::Cast(m(*a)),
            ExprOp::Binary(b, x, y) => ExprOp::Binary(*b, m(*x), m(*y)),
            ExprOp::Where(c, a, b) => ExprOp::Where(m(*c), m(*a), m(*b)),
        };
        ExprNode {
            dtype: self.dtype,
            op,
        }
    }
}

/// A straight-line list of nodes, each using only earlier ones.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Block {
    /// The nodes in evaluation order.
    pub nodes: Vec<ExprNode>,
}

impl Block {
    /// Appends a node and returns its reference.
    pub fn push(&mut self, node: ExprNode) -> ExprRef {
        self.nodes.push(node);
        ExprRef(self.nodes.len() as u32 - 1)
    }

    /// The node `r`, if it exists.
    pub fn get(&self, r: ExprRef) -> Option<&ExprNode> {
        self.nodes.get(r.index())
    }

    /// How many times each node is used by later nodes or by `roots`.
    pub fn use_counts(&self, roots: &[ExprRef]) -> Vec<usize> {
        let mut uses = vec![0; self.nodes.len()];
        for n in &self.nodes {
            n.for_each_operand(&mut |r| {
                if let Some(u) = uses.get_mut(r.index()) {
                    *u += 1;
                }
            });
        }
        for r in roots {
            if let Some(u) = uses.get_mut(r.index()) {
                *u += 1;
            }
        }
        uses
    }

    /// Removes nodes that no root needs, renumbering the rest; returns the map from
    /// old to new references (`None` for removed nodes).
    pub fn retain_live(&mut self, roots: &[ExprRef]) -> Vec<Option<ExprRef>> {
        let mut live = vec![false; self.nodes.len()];
        for r in roots {
            if let Some(l) = live.get_mut(r.index()) {
                *l = true;
            }
        }
        for i in (0..self.nodes.len()).rev() {
            if live[i] {
                self.nodes[i].for_each_operand(&mut |r| {
                    if let Some(l) = live.get_mut(r.index()) {
                        *l = true;
                    }
                });
            }
        }
        let mut map = vec![None; self.nodes.len()];
        let mut kept = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            if live[i] {
                let m = |r: ExprRef| map.get(r.index()).copied().flatten().unwrap_or(r);
                let node = n.map_refs(&m);
                map[i] = Some(ExprRef(kept.len() as u32));
                kept.push(node);
            }
        }
        self.nodes = kept;
        map
    }
}
