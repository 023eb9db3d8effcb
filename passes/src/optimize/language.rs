//! The e-graph language over Ferrite's ops (the conversions graph -> e-graph -> graph are in
//! `egraph`).
//!
//! An e-node is an interned op plus the e-classes of its operands. Ops keep their attributes
//! exactly as the graph had them (they are `ferrite_ir::Op` values), so an op no rule touches
//! comes back out of the e-graph unchanged; ops that no rule models (composites, say) are simply
//! opaque nodes. Interning keeps e-nodes small: egg hashes and clones them constantly, and an
//! `Op` owns vectors of attributes.

use egg::{Id, Language};
use ferrite_ir::{BinaryOp, Op, ReduceOp, Scalar, TensorType, UnaryOp};
use std::cmp::Ordering;
use std::collections::HashMap;

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
    /// A constant tensor: a leaf no rule looks into (the analysis knows the value of a
    /// small uniform one, so folding goes through it).
    Constant,
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
            Op::Constant(_) => Kind::Constant,
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
            Kind::Constant => (19, 0),
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
        // A constant is the same op only as the same shared tensor: its Debug text shows
        // a large tensor's fingerprint, which is no proof of equality. The table holds the
        // tensor, so its address is not reused while the key is in use.
        let key = match &op {
            Op::Constant(c) => format!(
                "constant@{:p}|{:?}",
                std::sync::Arc::as_ptr(c.shared()),
                c.key()
            ),
            _ => format!("{op:?}|{leaf_ty:?}"),
        };
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
