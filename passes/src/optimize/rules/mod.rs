//! The rewrite rules, by topic, and the machinery that runs them as egg rewrites.
//!
//! A rule is a kebab-case name, the op kinds its left-hand side is rooted at, and a Rust
//! function that looks at one e-node of a class (and, through the e-graph, at its operands) and
//! proposes right-hand sides as [`Term`]s. Rules are written in Rust rather than egg's pattern
//! syntax because nearly every one depends on attributes (permutation dims, reduction axes,
//! shapes) and on the analysis (types, constant values).
//!
//! Every proposal is type-checked before anything is added: the term must infer, bottom-up with
//! the same rules the verifier uses, to exactly the type of the class it joins. A rule therefore
//! cannot produce an ill-typed node or change a shape or dtype, and rules only need to guard
//! semantics (say, "floats only" or "the constant is positive").
//!
//! Following Cranelift's rule for rules: every rule must be able to make code better and the
//! cost model decides whether it does; there is no blanket commutativity or associativity (rules
//! match commuted operands themselves instead of adding every commuted node to the e-graph).

mod arithmetic;
mod constants;
mod matmul;
mod movement;
mod reductions;

use super::analysis::{fit, same_value, TensorAnalysis};
use super::egraph::{add_op, TensorEGraph};
use super::language::{constant_op, Kind, TensorLang};
use egg::{Applier, Id, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};
use ferrite_ir::infer::infer;
use ferrite_ir::{BinaryOp, DType, Op, TensorType, UnaryOp};
use std::sync::Arc;

/// Where a rule's left-hand side can be rooted.
#[derive(Clone, Copy, Debug)]
pub enum Roots {
    /// At an e-node of one of these kinds; the rule sees each such node.
    Kinds(&'static [Kind]),
    /// Anywhere: the rule sees each class once, through its first node.
    EveryClass,
}

/// Proposes right-hand sides for a class (`Id`) given one of its nodes.
pub type Finder = fn(&Ctx, Id, &TensorLang, &mut Vec<Term>);

/// A rewrite rule.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// Kebab-case name, reported when the rule fires.
    pub name: &'static str,
    /// Where it matches.
    pub roots: Roots,
    /// What it proposes.
    pub find: Finder,
}

impl Rule {
    /// A rule rooted at nodes of the given kinds.
    pub const fn new(name: &'static str, kinds: &'static [Kind], find: Finder) -> Rule {
        Rule {
            name,
            roots: Roots::Kinds(kinds),
            find,
        }
    }

    /// A rule that looks at every class once (through its first node).
    pub const fn every_class(name: &'static str, find: Finder) -> Rule {
        Rule {
            name,
            roots: Roots::EveryClass,
            find,
        }
    }

    /// Every proposal for `class`.
    fn proposals(&self, ctx: &Ctx, class: Id) -> Vec<Term> {
        let mut out = Vec::new();
        let nodes = &ctx.eg[class].nodes;
        match self.roots {
            Roots::EveryClass => {
                if let Some(n) = nodes.first() {
                    (self.find)(ctx, class, n, &mut out);
                }
            }
            Roots::Kinds(kinds) => {
                for n in nodes.iter().filter(|n| kinds.contains(&n.kind)) {
                    (self.find)(ctx, class, n, &mut out);
                    // A class rarely matches more than a few ways; a bound keeps a pathological
                    // one from flooding the e-graph.
                    if out.len() >= MAX_PROPOSALS {
                        break;
                    }
                }
            }
        }
        out
    }
}

const MAX_PROPOSALS: usize = 16;

/// Every rule, by topic.
pub fn all() -> Vec<Rule> {
    [
        arithmetic::rules(),
        constants::rules(),
        movement::rules(),
        reductions::rules(),
        matmul::rules(),
    ]
    .concat()
}

/// The rules as egg rewrites.
pub fn rewrites() -> Vec<Rewrite<TensorLang, TensorAnalysis>> {
    all()
        .into_iter()
        .map(|r| {
            let r = Arc::new(r);
            Rewrite::new(r.name, RuleSearcher(r.clone()), RuleApplier(r))
                .expect("rules bind no pattern variables")
        })
        .collect()
}

/// Read access to the e-graph for rules.
pub struct Ctx<'a> {
    /// The e-graph being rewritten.
    pub eg: &'a TensorEGraph,
}

impl<'a> Ctx<'a> {
    /// The op of `n`.
    pub fn op(&self, n: &TensorLang) -> &'a Op {
        &self.eg.analysis.ops.get(n.op).op
    }

    /// The type of class `id`.
    pub fn ty(&self, id: Id) -> Option<&'a TensorType> {
        self.eg[id].data.ty.as_ref()
    }

    /// The dtype of class `id`.
    pub fn dtype(&self, id: Id) -> Option<DType> {
        self.ty(id).map(|t| t.dtype)
    }

    /// True if class `id` holds floats.
    pub fn is_float(&self, id: Id) -> bool {
        self.dtype(id).is_some_and(DType::is_float)
    }

    /// The value of every element of class `id`, when it is one known constant.
    pub fn konst(&self, id: Id) -> Option<f64> {
        self.eg[id].data.konst
    }

    /// True if class `id` is the constant `v`.
    pub fn is(&self, id: Id, v: f64) -> bool {
        self.konst(id) == Some(v)
    }

    /// The nodes of kind `kind` in class `id`.
    pub fn nodes(&self, id: Id, kind: Kind) -> impl Iterator<Item = &'a TensorLang> + 'a {
        self.eg[id].nodes.iter().filter(move |n| n.kind == kind)
    }

    /// A scalar factor for the rules that move scalars around: the class itself if it is
    /// rank 0, or a rank-0 literal of its value if it is a constant of any shape.
    pub fn scalar(&self, id: Id) -> Option<Term> {
        let ty = self.ty(id)?;
        if ty.rank() == 0 {
            Some(Term::Class(id))
        } else {
            let v = self.konst(id)?;
            Some(Term::constant(v, &TensorType::scalar(ty.dtype)))
        }
    }
}

/// A right-hand side: existing classes, constants and new ops over them.
#[derive(Clone, Debug, PartialEq)]
pub enum Term {
    /// An existing e-class.
    Class(Id),
    /// A tensor of type `ty` whose elements are all `value` (a literal or a `full`).
    Const {
        /// The value (already representable in `ty.dtype`).
        value: f64,
        /// Its type.
        ty: TensorType,
    },
    /// A new node.
    Op(Op, Vec<Term>),
}

impl Term {
    /// A constant of type `ty`.
    pub fn constant(value: f64, ty: &TensorType) -> Term {
        Term::Const {
            value,
            ty: ty.clone(),
        }
    }

    /// `op(a)` for a unary op.
    pub fn unary(op: UnaryOp, a: Term) -> Term {
        Term::Op(Op::Unary(op), vec![a])
    }

    /// `op(a, b)` for a binary op.
    pub fn binary(op: BinaryOp, a: Term, b: Term) -> Term {
        Term::Op(Op::Binary(op), vec![a, b])
    }

    /// `op(a)` for any one-operand op.
    pub fn apply(op: Op, a: Term) -> Term {
        Term::Op(op, vec![a])
    }

    /// The term's type, or `None` if some node of it does not type-check.
    fn ty(&self, ctx: &Ctx) -> Option<TensorType> {
        match self {
            Term::Class(id) => ctx.ty(*id).cloned(),
            Term::Const { value, ty } => {
                // The value must be one the dtype holds exactly (a literal 2.5 cannot be an i32).
                if !fit(*value, ty.dtype).is_some_and(|v| same_value(v, *value)) {
                    return None;
                }
                let (op, leaf) = constant_op(*value, ty);
                match leaf {
                    Some(t) => Some(t),
                    None => infer(&op, &[]).ok(),
                }
            }
            Term::Op(op, children) => {
                let tys: Option<Vec<TensorType>> = children.iter().map(|c| c.ty(ctx)).collect();
                let tys = tys?;
                let refs: Vec<&TensorType> = tys.iter().collect();
                infer(op, &refs).ok()
            }
        }
    }

    fn add(&self, eg: &mut TensorEGraph) -> Id {
        match self {
            Term::Class(id) => *id,
            Term::Const { value, ty } => {
                let (op, leaf) = constant_op(*value, ty);
                add_op(eg, op, leaf, vec![])
            }
            Term::Op(op, children) => {
                let ids = children.iter().map(|c| c.add(eg)).collect();
                add_op(eg, op.clone(), None, ids)
            }
        }
    }
}

/// Converts `t` (of type `from`) to type `to` by a cast and/or a broadcast, when `to` is what
/// type promotion and broadcasting would make of it.
pub fn fit_to(t: Term, from: &TensorType, to: &TensorType) -> Term {
    let t = if from.dtype != to.dtype {
        Term::apply(Op::Cast { to: to.dtype }, t)
    } else {
        t
    };
    if from.shape != to.shape {
        let shape = to.shape.iter().map(|&d| d as i64).collect();
        Term::apply(Op::Expand { shape }, t)
    } else {
        t
    }
}

/// Adds `term` to the e-graph and merges it into `class`, if it has exactly the class's type.
/// Returns the merged class when the merge taught the e-graph something new.
fn insert(eg: &mut TensorEGraph, class: Id, term: &Term) -> Option<Id> {
    let want = eg[class].data.ty.clone()?;
    if term.ty(&Ctx { eg }).as_ref() != Some(&want) {
        return None;
    }
    let id = term.add(eg);
    eg.union(class, id).then(|| eg.find(class))
}

/// A rule's left-hand side: matches classes where the rule proposes something.
struct RuleSearcher(Arc<Rule>);

/// A rule's right-hand side: proposes again (the e-graph may have grown since the search) and
/// merges every well-typed proposal into the class.
struct RuleApplier(Arc<Rule>);

impl Searcher<TensorLang, TensorAnalysis> for RuleSearcher {
    fn search_eclass_with_limit(
        &self,
        eg: &TensorEGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, TensorLang>> {
        let class = eg.find(eclass);
        (limit > 0 && !self.0.proposals(&Ctx { eg }, class).is_empty()).then(|| SearchMatches {
            eclass: class,
            substs: vec![Subst::default()],
            ast: None,
        })
    }

    fn search_with_limit(
        &self,
        eg: &TensorEGraph,
        mut limit: usize,
    ) -> Vec<SearchMatches<'_, TensorLang>> {
        let mut classes: Vec<Id> = match self.0.roots {
            Roots::EveryClass => eg.classes().map(|c| c.id).collect(),
            Roots::Kinds(kinds) => kinds
                .iter()
                .filter_map(|k| eg.classes_for_op(k))
                .flatten()
                .collect(),
        };
        // Hash-set order is arbitrary; sorting keeps runs reproducible.
        classes.sort_unstable();
        classes.dedup();
        let mut matches = Vec::new();
        for c in classes {
            if limit == 0 {
                break;
            }
            if let Some(m) = self.search_eclass_with_limit(eg, c, limit) {
                limit -= m.substs.len();
                matches.push(m);
            }
        }
        matches
    }

    fn vars(&self) -> Vec<Var> {
        vec![]
    }
}

impl Applier<TensorLang, TensorAnalysis> for RuleApplier {
    fn apply_one(
        &self,
        eg: &mut TensorEGraph,
        eclass: Id,
        _subst: &Subst,
        _searcher_ast: Option<&PatternAst<TensorLang>>,
        _rule_name: Symbol,
    ) -> Vec<Id> {
        let class = eg.find(eclass);
        let terms = self.0.proposals(&Ctx { eg }, class);
        terms.iter().filter_map(|t| insert(eg, class, t)).collect()
    }
}

/// The two operands of a binary node.
pub fn operands(n: &TensorLang) -> (Id, Id) {
    (n.children[0], n.children[1])
}

/// `(other, constant)` pairs for a binary node with a constant operand on either side: lets
/// rules on commutative ops match both orders without adding commuted nodes.
pub fn with_constant(ctx: &Ctx, n: &TensorLang) -> Vec<(Id, Id)> {
    let (a, b) = operands(n);
    let mut out = Vec::new();
    if ctx.konst(b).is_some() {
        out.push((a, b));
    }
    if ctx.konst(a).is_some() {
        out.push((b, a));
    }
    out
}

/// `(other, factor)` pairs for a `mul` node where `factor` is a scalar (rank 0, or a constant):
/// the factor rules move such scalars through matmuls and reductions.
pub fn scalar_factors(ctx: &Ctx, n: &TensorLang) -> Vec<(Id, Term)> {
    let (a, b) = operands(n);
    let mut out = Vec::new();
    for (x, c) in [(a, b), (b, a)] {
        // The factor must only scale x: same shape and dtype as the product.
        let (Some(tx), Some(tc)) = (ctx.ty(x), ctx.ty(c)) else {
            continue;
        };
        let keeps_type = ferrite_ir::types::broadcast_shapes(&tx.shape, &tc.shape)
            .is_ok_and(|s| s == tx.shape)
            && ferrite_ir::promote(tx.dtype, tc.dtype) == tx.dtype;
        if keeps_type {
            if let Some(s) = ctx.scalar(c) {
                out.push((x, s));
            }
        }
    }
    out
}

/// The shape as `i64`s, for attributes.
pub fn dims(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}
