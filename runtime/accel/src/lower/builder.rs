//! Building a tile kernel: statements, comments, loops, and the values bound to
//! names, with common subexpressions shared.
//!
//! Lowering writes expressions as [`E`] trees: the tile language's expressions,
//! plus [`Def`] leaves for values defined by a statement of the kernel. A value
//! the lowering binds ([`Builder::bind`]) or offers for sharing
//! ([`Builder::share`]) is a `Def` whose fate is settled when the kernel is
//! finished ([`Builder::finish`]), once every expression of the kernel is known:
//!
//! - a *binding* is written `name = value`, unless a binding of an equal value is
//!   visible where it is made (then it is that name) or its value is a name or a
//!   literal already;
//! - a *shared* value (a stage-body value used once) is bound when the kernel
//!   writes the same expression in another place too, or when it nests deeper
//!   than [`MAX_INLINE_DEPTH`]; otherwise it is written in place. That is what
//!   makes a row read by three stages of a fused softmax load once, and the
//!   `exp` of its sum and of its store computed once.
//!
//! Expressions are compared as trees ([`E`] is hashed structurally), and
//! decided from the leaves up: whether `exp(t1)` occurs twice depends on whether
//! `t1` became a name, so the values nested deepest in `Def`s are settled
//! first. Then the statements are laid out as a [`TileKernel`], fresh names
//! handed out in statement order; the tile printer writes it for the dump.

use crate::tile::ast::{
    BinaryOp, Builtin, Expr, ExprKind, IndexItem, Param, ParamType, Span, Stmt, StmtKind,
    TileKernel, UnaryOp,
};
use ferrite_ir::DType;
use std::collections::{HashMap, HashSet};

/// Shared values nested deeper than this are bound to a name (the parser limits
/// nesting, and long lines read badly).
pub(super) const MAX_INLINE_DEPTH: u32 = 5;

/// A value defined by a statement of the kernel under construction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub(super) struct Def(u32);

impl Def {
    fn index(self) -> usize {
        self.0 as usize
    }
}

/// An expression of the kernel under construction.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(super) enum E {
    Int(i64),
    /// A float literal, by its bits (every NaN is the one NaN the text has).
    Float(u64),
    Bool(bool),
    /// A kernel parameter.
    Param(String),
    DType(DType),
    Tuple(Vec<E>),
    Unary(UnaryOp, Box<E>),
    Binary(BinaryOp, Box<E>, Box<E>),
    Index(Box<E>, Vec<IndexItem>),
    Call(Builtin, Vec<E>, Vec<(&'static str, E)>),
    /// A defined value: its name, or the value itself when it is written in place.
    Def(Def),
}

/// How deeply a value nests operations written in place: the most of `base` and
/// of `offset + depth(d)` over the shared values `d` it contains, a shared value
/// counting 0 when it is bound.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub(super) struct Depth {
    base: u32,
    shared: Vec<(Def, u32)>,
}

impl Depth {
    /// The depth of a name or a literal.
    pub const ZERO: Depth = Depth {
        base: 0,
        shared: Vec::new(),
    };

    /// A fixed depth.
    pub fn fixed(base: u32) -> Depth {
        Depth {
            base,
            shared: Vec::new(),
        }
    }

    /// The depth of an operation on operands of depths `parts`: one more than
    /// the deepest.
    pub fn over<'a>(parts: impl IntoIterator<Item = &'a Depth>) -> Depth {
        let mut out = Depth::fixed(1);
        for p in parts {
            out.base = out.base.max(p.base + 1);
            for &(d, off) in &p.shared {
                match out.shared.iter_mut().find(|(e, _)| *e == d) {
                    Some((_, o)) => *o = (*o).max(off + 1),
                    None => out.shared.push((d, off + 1)),
                }
            }
        }
        out
    }

    /// The depth of shared value `d` where it is used.
    fn of(d: Def) -> Depth {
        Depth {
            base: 0,
            shared: vec![(d, 0)],
        }
    }

    fn is_zero(&self) -> bool {
        self.base == 0 && self.shared.is_empty()
    }
}

/// What a definition is.
#[derive(Clone, Debug)]
enum Kind {
    /// `const NAME = value`.
    Const(i64),
    /// A loop variable.
    Loop,
    /// A variable ([`Builder::var`]): always its own statement, never shared,
    /// reassigned by [`Builder::assign`].
    Var,
    /// A binding ([`Builder::bind`]).
    Bind,
    /// A shared value ([`Builder::share`]), with its depth and how many times
    /// more than once it is offered (by stage-body nodes that forward it).
    Shared { depth: Depth, again: usize },
}

#[derive(Clone, Debug)]
struct Info {
    hint: String,
    kind: Kind,
    /// The value (unused for constants and loop variables).
    value: E,
    /// Position among the definitions and reassignments, in statement order.
    seq: usize,
    /// The innermost loop open where it is defined.
    scope: usize,
    /// 0 for names; 1 + the deepest level among the definitions a binding or
    /// shared value contains, which are settled before it.
    level: u32,
    /// Once settled: what `E::Def` of it stands for (its own name when
    /// `bound`, another binding's name, or the value written in place).
    rep: Option<E>,
    /// Once settled: it has a statement `name = value` of its own.
    bound: bool,
    /// Once settled, for a shared value: its depth where it is used.
    depth: u32,
}

/// A line of the kernel body.
enum Line {
    Comment(String),
    /// The statement of a definition, written when it has one.
    Def(Def),
    Assign(Def, E),
    Stmt(E),
    For {
        var: Def,
        bounds: [E; 3],
        body: Vec<Line>,
    },
}

/// A loop's variable and `range` bounds.
type LoopHeader = (Def, [E; 3]);

/// A kernel body under construction.
pub(super) struct Builder {
    defs: Vec<Info>,
    /// The open blocks: the body, then each open loop with its header.
    blocks: Vec<(Vec<Line>, Option<LoopHeader>)>,
    /// The parent of each loop scope (scope 0, the body, has none).
    scopes: Vec<usize>,
    /// The innermost open scope.
    scope: usize,
    /// Reassignments: position and variable.
    assigns: Vec<(usize, Def)>,
    seq: usize,
    /// Names that bindings must not take (the parameters).
    reserved: Vec<String>,
    /// While capturing ([`Builder::capture_stores`]): the stores made, with
    /// their pointer, value and mask bound where they were made.
    captured: Option<Vec<E>>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder {
            defs: Vec::new(),
            blocks: vec![(Vec::new(), None)],
            scopes: vec![0],
            scope: 0,
            assigns: Vec::new(),
            seq: 0,
            reserved: Vec::new(),
            captured: None,
        }
    }

    fn push(&mut self, line: Line) {
        if let Some((lines, _)) = self.blocks.last_mut() {
            lines.push(line);
        }
    }

    fn next_seq(&mut self) -> usize {
        self.seq += 1;
        self.seq
    }

    fn define(&mut self, hint: &str, kind: Kind, value: E) -> Def {
        let level = match (&kind, &value) {
            // A binding of a shared value is settled right after it: when the
            // shared value is written in place, the binding has its expression.
            (Kind::Bind, E::Def(s)) => self.defs[s.index()].level,
            (Kind::Bind | Kind::Shared { .. }, _) => {
                let mut deepest = 0;
                self.for_each_def(&value, &mut |d| deepest = deepest.max(d.level));
                if let Kind::Shared { depth, .. } = &kind {
                    for (d, _) in &depth.shared {
                        deepest = deepest.max(self.defs[d.index()].level);
                    }
                }
                deepest + 1
            }
            _ => 0,
        };
        let d = self.new_def(hint, kind, value, level);
        self.push(Line::Def(d));
        d
    }

    fn new_def(&mut self, hint: &str, kind: Kind, value: E, level: u32) -> Def {
        let d = Def(self.defs.len() as u32);
        // Names stand for themselves; bindings and shared values are settled later.
        let named = matches!(kind, Kind::Const(_) | Kind::Loop | Kind::Var);
        let seq = self.next_seq();
        self.defs.push(Info {
            hint: hint.to_string(),
            kind,
            value,
            seq,
            scope: self.scope,
            level,
            rep: named.then_some(E::Def(d)),
            bound: named,
            depth: 0,
        });
        d
    }

    fn for_each_def(&self, e: &E, f: &mut impl FnMut(&Info)) {
        match e {
            E::Def(d) => f(&self.defs[d.index()]),
            _ => e.for_each_operand(&mut |x| self.for_each_def(x, f)),
        }
    }

    /// A `# comment` line.
    pub fn comment(&mut self, text: &str) {
        self.push(Line::Comment(text.to_string()));
    }

    /// Reserves `name` (a parameter) so no binding takes it.
    pub fn reserve(&mut self, name: &str) {
        self.reserved.push(name.to_string());
    }

    /// `const NAME = value`.
    pub fn constant(&mut self, hint: &str, value: i64) -> E {
        E::Def(self.define(hint, Kind::Const(value), E::Int(value)))
    }

    /// Binds `e` to a name (or to the name an equal value is bound to where this
    /// binding is made) and returns the name. Names and literals are returned as
    /// they are.
    pub fn bind(&mut self, hint: &str, e: E) -> E {
        if self.is_name_or_literal(&e) {
            return e;
        }
        E::Def(self.define(hint, Kind::Bind, e))
    }

    /// Offers `e`, a stage-body value of depth `depth` used once, for sharing: it
    /// is bound when the kernel writes the same expression elsewhere too or when
    /// it nests too deep, and written in place otherwise. Returns the value and
    /// its depth where it is used.
    pub fn share(&mut self, e: E, depth: Depth) -> (E, Depth) {
        if depth.is_zero() {
            return (e, depth);
        }
        if let E::Def(d) = e {
            if let Kind::Shared { again, .. } = &mut self.defs[d.index()].kind {
                // A node forwarding another's value offers the same expression again.
                if depth == Depth::of(d) {
                    *again += 1;
                    return (e, depth);
                }
            }
        }
        let d = self.define("t", Kind::Shared { depth, again: 0 }, e);
        (E::Def(d), Depth::of(d))
    }

    /// A variable bound to `e`, never shared (for values reassigned later, like
    /// accumulators).
    pub fn var(&mut self, hint: &str, e: E) -> Def {
        self.define(hint, Kind::Var, e)
    }

    /// Reassigns variable `var` (a loop-carried value). Bindings that mention it
    /// are not reused after this: they hold its old value.
    pub fn assign(&mut self, var: Def, e: E) {
        let seq = self.next_seq();
        self.assigns.push((seq, var));
        self.push(Line::Assign(var, e));
    }

    /// A statement (`store`, `dma_wait`).
    pub fn stmt(&mut self, e: E) {
        if self.captured.is_some() {
            if let E::Call(Builtin::Store, args, kwargs) = e {
                let hints = ["sp", "sv", "sm"];
                let bound: Vec<E> = args
                    .into_iter()
                    .zip(hints)
                    .map(|(a, h)| E::Def(self.var(h, a)))
                    .collect();
                if let Some(c) = &mut self.captured {
                    c.push(E::Call(Builtin::Store, bound, kwargs));
                }
                return;
            }
        }
        self.push(Line::Stmt(e));
    }

    /// From now on, stores are not written but kept, their pointer, value and
    /// mask computed here, until [`Builder::take_captured_stores`]: the caller
    /// writes them later (a GEMM defers a block's store into the next block's K
    /// loop).
    pub fn capture_stores(&mut self) {
        self.captured = Some(Vec::new());
    }

    /// The stores kept since [`Builder::capture_stores`]; stores are written again.
    pub fn take_captured_stores(&mut self) -> Vec<E> {
        self.captured.take().unwrap_or_default()
    }

    /// Opens `for var in range(start, end, step) {`; returns the loop variable.
    pub fn open_loop(&mut self, hint: &str, start: E, end: E, step: E) -> E {
        let var = self.new_def(hint, Kind::Loop, E::Int(0), 0);
        self.scopes.push(self.scope);
        self.scope = self.scopes.len() - 1;
        self.blocks
            .push((Vec::new(), Some((var, [start, end, step]))));
        E::Def(var)
    }

    /// Closes the innermost loop; values bound inside it end with it.
    pub fn close_loop(&mut self) {
        if let Some((body, Some((var, bounds)))) = self.blocks.pop() {
            self.push(Line::For { var, bounds, body });
            self.scope = self.scopes[self.scope];
        }
    }

    fn is_name_or_literal(&self, e: &E) -> bool {
        match e {
            E::Int(_) | E::Float(_) | E::Bool(_) | E::Param(_) => true,
            E::Def(d) => !matches!(self.defs[d.index()].kind, Kind::Shared { .. }),
            _ => false,
        }
    }

    /// `e` with every settled definition replaced by what it stands for.
    fn settled(&self, e: &E) -> E {
        let s = |x: &E| self.settled(x);
        match e {
            E::Def(d) => match &self.defs[d.index()].rep {
                Some(r) => r.clone(),
                None => e.clone(),
            },
            E::Tuple(xs) => E::Tuple(xs.iter().map(s).collect()),
            E::Unary(op, x) => E::Unary(*op, Box::new(s(x))),
            E::Binary(op, x, y) => E::Binary(*op, Box::new(s(x)), Box::new(s(y))),
            E::Index(x, items) => E::Index(Box::new(s(x)), items.clone()),
            E::Call(f, args, kw) => E::Call(
                *f,
                args.iter().map(s).collect(),
                kw.iter().map(|(k, v)| (*k, s(v))).collect(),
            ),
            leaf => leaf.clone(),
        }
    }

    fn depth_of(&self, depth: &Depth) -> u32 {
        depth
            .shared
            .iter()
            .map(|&(d, off)| off + self.defs[d.index()].depth)
            .fold(depth.base, u32::max)
    }

    /// True when the scope `inner` is `outer` or inside it.
    fn within(&self, mut inner: usize, outer: usize) -> bool {
        loop {
            if inner == outer {
                return true;
            }
            if inner == 0 {
                return false;
            }
            inner = self.scopes[inner];
        }
    }

    /// True when binding `b` can stand for its value at definition `at`: made
    /// before it, in a scope still open there, and mentioning no variable
    /// reassigned in between.
    fn reusable(&self, b: Def, at: Def) -> bool {
        let (b, at) = (&self.defs[b.index()], &self.defs[at.index()]);
        if b.seq >= at.seq || !self.within(at.scope, b.scope) {
            return false;
        }
        !self
            .assigns
            .iter()
            .any(|&(seq, var)| seq > b.seq && seq < at.seq && mentions(&b.value, var))
    }

    /// Settles every binding and shared value, level by level from the most
    /// deeply nested up, each level in statement order.
    fn settle(&mut self) {
        let mut order: Vec<(u32, usize, Def)> = (0..self.defs.len())
            .filter(|&i| matches!(self.defs[i].kind, Kind::Bind | Kind::Shared { .. }))
            .map(|i| (self.defs[i].level, self.defs[i].seq, Def(i as u32)))
            .collect();
        order.sort();
        // Bindings made so far, by value.
        let mut bindings: HashMap<E, Vec<Def>> = HashMap::new();
        for level in order.chunk_by(|a, b| a.0 == b.0) {
            let level: Vec<Def> = level.iter().map(|&(_, _, d)| d).collect();
            self.settle_level(&level, &mut bindings);
        }
    }

    fn settle_level(&mut self, level: &[Def], bindings: &mut HashMap<E, Vec<Def>>) {
        // The shared values as they will be written, their depths, and how many
        // times each expression is offered.
        // A binding of the same expression counts as an offer too: the shared
        // value is then bound, and the binding takes its name where it can (an
        // `exp` a stage reduces and a later stage stores is computed once).
        let mut offers: HashMap<E, usize> = HashMap::new();
        let mut shared = HashMap::new();
        for &d in level {
            match &self.defs[d.index()].kind {
                Kind::Shared { depth, again } => {
                    let value = self.settled(&self.defs[d.index()].value);
                    let depth = self.depth_of(depth);
                    if depth > 0 && depth <= MAX_INLINE_DEPTH {
                        *offers.entry(value.clone()).or_insert(0) += 1 + again;
                    }
                    shared.insert(d, (value, depth));
                }
                Kind::Bind => {
                    let value = self.settled(&self.defs[d.index()].value);
                    if !value.is_leaf() {
                        *offers.entry(value).or_insert(0) += 1;
                    }
                }
                _ => {}
            }
        }
        for &d in level {
            let (value, binds) = match shared.remove(&d) {
                Some((value, depth)) => {
                    let offered = offers.get(&value).copied().unwrap_or(0);
                    let binds = depth > MAX_INLINE_DEPTH || (depth > 0 && offered > 1);
                    self.defs[d.index()].depth = if binds { 0 } else { depth };
                    (value, binds)
                }
                // A binding's value may contain a shared value settled just now.
                None => (self.settled(&self.defs[d.index()].value), true),
            };
            let reuse = bindings
                .get(&value)
                .and_then(|bs| bs.iter().rev().find(|&&b| self.reusable(b, d)).copied());
            let info = &mut self.defs[d.index()];
            if !binds || value.is_leaf() {
                info.rep = Some(value);
            } else if let Some(b) = reuse {
                info.rep = Some(E::Def(b));
            } else {
                info.rep = Some(E::Def(d));
                info.bound = true;
                info.value = value.clone();
                bindings.entry(value).or_default().push(d);
            }
        }
    }

    /// The kernel: `comments` above it, its name, pointer parameters and body.
    pub fn finish(
        mut self,
        comments: Vec<String>,
        name: &str,
        params: &[(String, DType)],
    ) -> TileKernel {
        while self.blocks.len() > 1 {
            self.close_loop();
        }
        self.settle();
        let lines = self.blocks.pop().map(|(l, _)| l).unwrap_or_default();
        let mut names = Names {
            taken: self.reserved.iter().cloned().collect(),
            of: vec![None; self.defs.len()],
        };
        let body = self.lay_out(lines, &mut names);
        TileKernel {
            comments,
            name: name.to_string(),
            params: params
                .iter()
                .map(|(n, d)| Param {
                    name: n.clone(),
                    ty: ParamType::Ptr(*d),
                    span: Span::default(),
                })
                .collect(),
            body,
            span: Span::default(),
        }
    }

    fn lay_out(&self, lines: Vec<Line>, names: &mut Names) -> Vec<Stmt> {
        let mut out = Vec::new();
        for line in lines {
            let kind = match line {
                Line::Comment(text) => StmtKind::Comment(text),
                Line::Def(d) => {
                    let info = &self.defs[d.index()];
                    if !info.bound {
                        continue;
                    }
                    let name = names.fresh(d, &info.hint);
                    match info.kind {
                        Kind::Const(v) => StmtKind::Const {
                            name,
                            value: Expr::new(ExprKind::Int(v)),
                        },
                        _ => StmtKind::Assign {
                            name,
                            value: self.expr(&info.value, names),
                        },
                    }
                }
                Line::Assign(var, e) => StmtKind::Assign {
                    name: names.of[var.index()].clone().unwrap_or_default(),
                    value: self.expr(&e, names),
                },
                Line::Stmt(e) => StmtKind::Expr(self.expr(&e, names)),
                Line::For { var, bounds, body } => {
                    let [start, end, step] = bounds.map(|b| self.expr(&b, names));
                    let var = names.fresh(var, &self.defs[var.index()].hint);
                    StmtKind::For {
                        var,
                        start,
                        end,
                        step: Some(step),
                        body: self.lay_out(body, names),
                    }
                }
            };
            out.push(Stmt {
                kind,
                span: Span::default(),
            });
        }
        out
    }

    /// `e` as a tile expression, every definition written as what it stands for.
    fn expr(&self, e: &E, names: &Names) -> Expr {
        let x = |e: &E| self.expr(e, names);
        let kind = match e {
            E::Int(v) => ExprKind::Int(*v),
            E::Float(bits) => ExprKind::Float(f64::from_bits(*bits)),
            E::Bool(v) => ExprKind::Bool(*v),
            E::Param(n) => ExprKind::Name(n.clone()),
            E::DType(d) => ExprKind::DType(*d),
            E::Tuple(xs) => ExprKind::Tuple(xs.iter().map(x).collect()),
            E::Unary(op, a) => ExprKind::Unary(*op, Box::new(x(a))),
            E::Binary(op, a, b) => ExprKind::Binary(*op, Box::new(x(a)), Box::new(x(b))),
            E::Index(a, items) => ExprKind::Index(Box::new(x(a)), items.clone()),
            E::Call(func, args, kw) => ExprKind::Call {
                func: *func,
                args: args.iter().map(x).collect(),
                kwargs: kw.iter().map(|(k, v)| (k.to_string(), x(v))).collect(),
            },
            E::Def(d) => match &self.defs[d.index()].rep {
                Some(E::Def(b)) => ExprKind::Name(names.of[b.index()].clone().unwrap_or_default()),
                Some(r) => return self.expr(r, names),
                None => ExprKind::Name(String::new()),
            },
        };
        Expr::new(kind)
    }
}

impl E {
    /// Calls `f` on each operand.
    fn for_each_operand(&self, f: &mut impl FnMut(&E)) {
        match self {
            E::Tuple(xs) => xs.iter().for_each(f),
            E::Call(_, args, kwargs) => {
                args.iter().for_each(&mut *f);
                kwargs.iter().for_each(|(_, x)| f(x));
            }
            E::Unary(_, x) | E::Index(x, _) => f(x),
            E::Binary(_, x, y) => {
                f(x);
                f(y);
            }
            _ => {}
        }
    }

    /// True for names and literals (a settled expression's `Def`s are names).
    fn is_leaf(&self) -> bool {
        matches!(
            self,
            E::Int(_) | E::Float(_) | E::Bool(_) | E::Param(_) | E::Def(_)
        )
    }
}

/// True when `e` uses variable `var` itself (not through another name).
fn mentions(e: &E, var: Def) -> bool {
    let mut hit = *e == E::Def(var);
    e.for_each_operand(&mut |x| hit |= mentions(x, var));
    hit
}

/// The names handed out so far.
struct Names {
    taken: HashSet<String>,
    of: Vec<Option<String>>,
}

impl Names {
    /// A fresh name for `d` starting with `hint`: the hint itself when free, else
    /// `hint1`, `hint2`, ... Names are never reused, so no binding can shadow
    /// another or change type inside a loop by accident.
    fn fresh(&mut self, d: Def, hint: &str) -> String {
        let mut name = hint.to_string();
        let mut n = 1;
        // A numbered hint can spell a dtype (`i8`, `u16`) or another reserved word.
        while self.taken.contains(&name) || crate::tile::reserved(&name).is_some() {
            name = format!("{hint}{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        self.of[d.index()] = Some(name.clone());
        name
    }
}

// Expression constructors, so lowering code reads like the kernels it writes.

pub(super) fn int(v: i64) -> E {
    E::Int(v)
}

pub(super) fn boolean(v: bool) -> E {
    E::Bool(v)
}

/// A float literal. Values that are exactly an f32 print in f32's shortest form
/// (`1.4285715`, as the loop IR prints them) when that form reads back to the
/// same f32; others print in f64's.
pub(super) fn float(v: f64) -> E {
    let f = v as f32;
    if v.is_finite() && f as f64 == v {
        if let Ok(short) = format!("{f:?}").parse::<f64>() {
            if short as f32 == f {
                return E::Float(short.to_bits());
            }
        }
    }
    E::Float(if v.is_nan() { f64::NAN } else { v }.to_bits())
}

/// A float literal of exactly `v`, for f64 values (which [`float`]'s short f32
/// form would change).
pub(super) fn float_exact(v: f64) -> E {
    E::Float(if v.is_nan() { f64::NAN } else { v }.to_bits())
}

/// A kernel parameter.
pub(super) fn param(name: &str) -> E {
    E::Param(name.to_string())
}

pub(super) fn dtype(d: DType) -> E {
    E::DType(d)
}

pub(super) fn tuple(items: &[usize]) -> E {
    E::Tuple(items.iter().map(|&v| int(v as i64)).collect())
}

pub(super) fn bin(op: BinaryOp, a: E, b: E) -> E {
    E::Binary(op, Box::new(a), Box::new(b))
}

pub(super) fn add(a: E, b: E) -> E {
    bin(BinaryOp::Add, a, b)
}

pub(super) fn sub(a: E, b: E) -> E {
    bin(BinaryOp::Sub, a, b)
}

pub(super) fn mul(a: E, b: E) -> E {
    bin(BinaryOp::Mul, a, b)
}

pub(super) fn div(a: E, b: E) -> E {
    bin(BinaryOp::Div, a, b)
}

pub(super) fn rem(a: E, b: E) -> E {
    bin(BinaryOp::Rem, a, b)
}

pub(super) fn and(a: E, b: E) -> E {
    bin(BinaryOp::And, a, b)
}

pub(super) fn or(a: E, b: E) -> E {
    bin(BinaryOp::Or, a, b)
}

pub(super) fn lt(a: E, b: E) -> E {
    bin(BinaryOp::Lt, a, b)
}

pub(super) fn ge(a: E, b: E) -> E {
    bin(BinaryOp::Ge, a, b)
}

pub(super) fn not(a: E) -> E {
    E::Unary(UnaryOp::Not, Box::new(a))
}

pub(super) fn neg(a: E) -> E {
    E::Unary(UnaryOp::Neg, Box::new(a))
}

pub(super) fn call(func: Builtin, args: Vec<E>) -> E {
    E::Call(func, args, Vec::new())
}

pub(super) fn call_kw(func: Builtin, args: Vec<E>, kwargs: Vec<(&'static str, E)>) -> E {
    E::Call(func, args, kwargs)
}

pub(super) fn cast(e: E, d: DType) -> E {
    call(Builtin::Cast, vec![e, dtype(d)])
}

pub(super) fn where_(c: E, a: E, b: E) -> E {
    call(Builtin::Where, vec![c, a, b])
}

/// `e[:, None]`: a row of values as a column.
pub(super) fn column(e: E) -> E {
    E::Index(Box::new(e), vec![IndexItem::Full, IndexItem::NewAxis])
}

/// `e[None, :]`: a 1-D tile as a row.
pub(super) fn row(e: E) -> E {
    E::Index(Box::new(e), vec![IndexItem::NewAxis, IndexItem::Full])
}

/// `arange(0, n)`.
pub(super) fn arange(n: usize) -> E {
    call(Builtin::Arange, vec![int(0), int(n as i64)])
}

/// `program_id(axis)`.
pub(super) fn program_id(axis: usize) -> E {
    call(Builtin::ProgramId, vec![int(axis as i64)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tile::print;

    fn text(b: Builder) -> String {
        print(&b.finish(vec!["doc".into()], "k", &[("p".into(), DType::F32)]))
    }

    #[test]
    fn equal_bindings_share_a_name_within_visible_scopes() {
        let mut b = Builder::new();
        b.reserve("p");
        let x = b.bind("x", add(param("p"), int(1)));
        let y = b.bind("y", add(param("p"), int(1)));
        b.stmt(call(Builtin::Store, vec![x, y]));
        let v = b.open_loop("k", int(0), int(8), int(2));
        let z = b.bind("z", mul(v.clone(), int(3)));
        b.stmt(call(Builtin::Store, vec![param("p"), z]));
        b.close_loop();
        // The loop's bindings ended with it: a new name.
        let z2 = b.bind("z", mul(v, int(3)));
        b.stmt(call(Builtin::Store, vec![param("p"), z2]));
        assert_eq!(
            text(b),
            "# doc\nkernel k(p: *f32) {\n  x = p + 1\n  store(x, x)\n  \
             for k in range(0, 8, 2) {\n    z = k * 3\n    store(p, z)\n  }\n  \
             z1 = k * 3\n  store(p, z1)\n}\n"
        );
    }

    #[test]
    fn shared_values_are_bound_where_the_kernel_writes_them_twice() {
        let mut b = Builder::new();
        let load = b.bind("x", call(Builtin::Load, vec![param("p")]));
        // exp(x - 1) in two stages, x - 2 in one: the first is bound (both
        // levels), the second written in place.
        let (d1, _) = b.share(sub(load.clone(), int(1)), Depth::fixed(1));
        let (e1, _) = b.share(call(Builtin::Exp, vec![d1]), Depth::fixed(2));
        b.stmt(call(Builtin::Store, vec![param("p"), e1]));
        let (d2, _) = b.share(sub(load.clone(), int(1)), Depth::fixed(1));
        let (e2, _) = b.share(call(Builtin::Exp, vec![d2]), Depth::fixed(2));
        let (f, _) = b.share(sub(load, int(2)), Depth::fixed(1));
        b.stmt(call(Builtin::Store, vec![e2, f]));
        assert_eq!(
            text(b),
            "# doc\nkernel k(p: *f32) {\n  x = load(p)\n  t = x - 1\n  t1 = exp(t)\n  \
             store(p, t1)\n  store(t1, x - 2)\n}\n"
        );
    }

    #[test]
    fn reassignment_ends_reuse_of_bindings_that_mention_the_variable() {
        let mut b = Builder::new();
        let acc = b.var("acc", int(0));
        let t = b.bind("t", add(E::Def(acc), int(1)));
        b.stmt(call(Builtin::Store, vec![param("p"), t]));
        b.assign(acc, int(5));
        let t2 = b.bind("t", add(E::Def(acc), int(1)));
        b.stmt(call(Builtin::Store, vec![param("p"), t2]));
        assert_eq!(
            text(b),
            "# doc\nkernel k(p: *f32) {\n  acc = 0\n  t = acc + 1\n  store(p, t)\n  \
             acc = 5\n  t1 = acc + 1\n  store(p, t1)\n}\n"
        );
    }

    #[test]
    fn floats_print_in_their_shortest_f32_form() {
        let show = |e: E| {
            let mut b = Builder::new();
            b.stmt(call(Builtin::Store, vec![param("p"), e]));
            text(b)
                .lines()
                .nth(2)
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        let v = (1.0f32 / 0.7f32) as f64;
        assert_eq!(show(float(v)), "store(p, 1.4285715)");
        assert_eq!(show(float(0.1)), "store(p, 0.1)");
        assert_eq!(show(float(f64::NEG_INFINITY)), "store(p, -inf)");
        assert_eq!(show(float(1e-5f32 as f64)), "store(p, 1e-5)");
    }
}
