//! The type checker: shapes, dtypes and names of a [`TileKernel`], resolved into a
//! [`CheckedKernel`] the simulator runs.
//!
//! What it decides, so nothing is left to run time but data:
//!
//! - every value's type: a tile `f32[128, 64]` (a scalar is a rank-0 tile), a
//!   pointer tile `*f32[128]`, a DMA token, or a local buffer `local f32[128, 64]`;
//! - constants: `const` names and literals are folded, and take the dtype of the
//!   tile they meet (`x * 0.5` is f16 when `x` is); alone, an integer is `i32` and
//!   a float `f32`, as in Triton;
//! - implicit conversions, made explicit as casts: operands of an operator are
//!   promoted with PyTorch's rules ([`ferrite_ir::promote`]), a stored value is
//!   converted to the pointer's dtype;
//! - broadcasting (numpy rules), `dot` shapes, mask and `other` shapes against
//!   their pointer tile, DMA shapes and dtypes against their buffer;
//! - scopes: names bound inside a loop body end with it; a name bound before a
//!   loop and reassigned inside it is loop-carried and must keep its type.
//!
//! Limits: a tile has at most [`MAX_TILE_RANK`] axes and [`MAX_TILE_ELEMENTS`]
//! elements.
//!
//! The checked form itself is defined in `typed.rs`; the rules of each builtin
//! call are in `check/calls.rs`.

use super::ast::*;
use super::parser::{reserved, suggest};
use super::printer::print_expr;
use super::typed::*;
use ferrite_ir::types::{broadcast_shapes, normalize_axis, ShapeDisplay};
use ferrite_ir::{promote, DType, Diagnostic};
use std::collections::HashMap;
use std::fmt;

mod calls;

/// The most axes a tile may have.
pub const MAX_TILE_RANK: usize = 3;

/// The most elements a tile may have (a tile lives in one PE).
pub const MAX_TILE_ELEMENTS: usize = 1 << 20;

/// How deep a checked expression may nest (the parser's limit is lower; this
/// guards kernels built in code).
const MAX_DEPTH: usize = super::parser::MAX_EXPRESSION_DEPTH;

/// A type error, located by the span of the offending expression.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CheckError {
    /// The kernel being checked.
    pub kernel: String,
    /// Where the error is.
    pub span: Span,
    /// What is wrong.
    pub message: String,
}

impl CheckError {
    /// The error located in the source text the kernel was parsed from.
    pub fn to_diagnostic(&self, file: &str, src: &str) -> Diagnostic {
        Diagnostic::at(file, src, self.span.start, self.message.clone())
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel `{}`: {}", self.kernel, self.message)
    }
}

impl std::error::Error for CheckError {}

/// Checks `kernel` and resolves it for the simulator.
///
/// ```
/// use ferrite_accel::tile;
/// let src = "kernel k(x: *f32) {\n  a = load(x + arange(0, 4))\n  b = a[:, None] + a\n  store(x, b)\n}\n";
/// let k = tile::parse("k.tile", src).unwrap();
/// let err = tile::check(&k).unwrap_err();
/// assert_eq!(err.to_diagnostic("k.tile", src).to_string(),
///     "k.tile:4:12: error: store: value f32[4, 4] does not fit pointer *f32 \
///      (its shape must broadcast to [])\n    store(x, b)\n             ^");
/// ```
pub fn check(kernel: &TileKernel) -> Result<CheckedKernel, CheckError> {
    let mut c = Checker {
        kernel: &kernel.name,
        names: HashMap::new(),
        slots: 0,
        loop_level: 0,
        ended: HashMap::new(),
        sites: Vec::new(),
        allocs: Vec::new(),
        depth: 0,
        comment_above: None,
    };
    if let Some(why) = reserved(&kernel.name) {
        return Err(c.error(kernel.span, format!("`{}` {why}", kernel.name)));
    }
    for p in &kernel.params {
        if let Some(why) = reserved(&p.name) {
            return Err(c.error(p.span, format!("`{}` {why}", p.name)));
        }
        if c.names.contains_key(&p.name) {
            return Err(c.error(p.span, format!("parameter `{}` is declared twice", p.name)));
        }
        let ty = match p.ty {
            ParamType::Ptr(d) => Ty::Ptr(d, Vec::new()),
            ParamType::Scalar(d) => Ty::Tile(d, Vec::new()),
        };
        let slot = c.new_slot();
        c.names.insert(p.name.clone(), Binding::var(slot, ty, 0));
    }
    let body = c.block(&kernel.body)?;
    Ok(CheckedKernel {
        kernel: kernel.clone(),
        body,
        slots: c.slots,
        sites: c.sites,
        allocs: c.allocs,
    })
}

/// A compile-time value: a literal or a `const`, not yet given a dtype.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Const {
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl fmt::Display for Const {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Const::Int(v) => write!(f, "{v}"),
            Const::Float(v) => write!(f, "{v:?}"),
            Const::Bool(v) => write!(f, "{v}"),
        }
    }
}

impl Const {
    /// The dtype a constant takes next to a value of dtype `peer`: the peer's,
    /// unless the constant's category is higher (a float beside integers is f32).
    fn dtype_beside(self, peer: DType) -> DType {
        match self {
            Const::Float(_) if !peer.is_float() => DType::F32,
            Const::Int(_) if peer == DType::Bool => DType::I32,
            _ => peer,
        }
    }

    /// The dtype a constant takes on its own.
    fn default_dtype(self) -> DType {
        match self {
            Const::Int(_) => DType::I32,
            Const::Float(_) => DType::F32,
            Const::Bool(_) => DType::Bool,
        }
    }
}

/// What checking an expression yields.
enum Cv {
    Const(Const),
    Val(CExpr),
    DType(DType),
    Shape(Vec<usize>),
}

#[derive(Clone)]
enum Binding {
    Const(Const, usize),
    Var {
        slot: usize,
        ty: Ty,
        /// Loop nesting level where the name was bound.
        level: usize,
        /// Loop variables cannot be assigned.
        mutable: bool,
    },
}

impl Binding {
    fn var(slot: usize, ty: Ty, level: usize) -> Binding {
        Binding::Var {
            slot,
            ty,
            level,
            mutable: true,
        }
    }

    fn level(&self) -> usize {
        match self {
            Binding::Const(_, l) | Binding::Var { level: l, .. } => *l,
        }
    }
}

struct Checker<'k> {
    kernel: &'k str,
    names: HashMap<String, Binding>,
    slots: usize,
    loop_level: usize,
    /// Names whose loop ended, with the loop's span, for a helpful message.
    ended: HashMap<String, Span>,
    sites: Vec<Site>,
    allocs: Vec<Alloc>,
    depth: usize,
    /// The comment on the line right above the statement being checked: a
    /// `check`'s reason.
    comment_above: Option<String>,
}

type CResult<T> = Result<T, CheckError>;

/// The checked `mask` and `other` operands of an access.
type MaskOther = (Option<Box<CExpr>>, Option<Box<CExpr>>);

fn b(e: CExpr) -> Box<CExpr> {
    Box::new(e)
}

impl Checker<'_> {
    fn error(&self, span: Span, message: impl Into<String>) -> CheckError {
        CheckError {
            kernel: self.kernel.to_string(),
            span,
            message: message.into(),
        }
    }

    fn new_slot(&mut self) -> usize {
        self.slots += 1;
        self.slots - 1
    }

    fn block(&mut self, body: &[Stmt]) -> CResult<Vec<CStmt>> {
        let mut out = Vec::new();
        let mut above = None;
        for s in body {
            self.comment_above = above.take();
            if let Some(c) = self.stmt(s)? {
                out.push(c);
            }
            if let StmtKind::Comment(text) = &s.kind {
                above = Some(text.clone());
            }
        }
        Ok(out)
    }

    fn stmt(&mut self, s: &Stmt) -> CResult<Option<CStmt>> {
        match &s.kind {
            StmtKind::Const { name, value } => {
                self.check_new_name(name, s.span)?;
                if self.names.contains_key(name) {
                    return Err(self.error(s.span, format!("`{name}` is already defined")));
                }
                let Cv::Const(c) = self.expr(value)? else {
                    return Err(self.error(
                        value.span,
                        format!(
                            "`const {name}` needs a value known before launch (literals and \
                             other constants), got `{}`",
                            print_expr(value)
                        ),
                    ));
                };
                self.names
                    .insert(name.clone(), Binding::Const(c, self.loop_level));
                Ok(None)
            }
            StmtKind::Assign { name, value } => {
                self.check_new_name(name, s.span)?;
                let v = self.value(value, "an assigned value")?;
                let slot = match self.names.get(name) {
                    Some(Binding::Const(..)) => {
                        return Err(
                            self.error(s.span, format!("cannot assign to constant `{name}`"))
                        )
                    }
                    Some(Binding::Var { mutable: false, .. }) => {
                        return Err(
                            self.error(s.span, format!("cannot assign to loop variable `{name}`"))
                        )
                    }
                    Some(Binding::Var {
                        slot, ty, level, ..
                    }) if *level < self.loop_level => {
                        if *ty != v.ty {
                            return Err(self.error(
                                value.span,
                                format!(
                                    "`{name}` is carried around the loop, so it must keep its \
                                     type: it was {ty} before the loop, and this is {}",
                                    v.ty
                                ),
                            ));
                        }
                        *slot
                    }
                    Some(Binding::Var { slot, .. }) => *slot,
                    None => self.new_slot(),
                };
                let level = match self.names.get(name) {
                    Some(b) if b.level() < self.loop_level => b.level(),
                    _ => self.loop_level,
                };
                self.names
                    .insert(name.clone(), Binding::var(slot, v.ty.clone(), level));
                Ok(Some(CStmt::Assign(slot, v)))
            }
            StmtKind::For {
                var,
                start,
                end,
                step,
                body,
            } => self
                .for_loop(s, var, start, end, step.as_ref(), body)
                .map(Some),
            StmtKind::Comment(_) => Ok(None),
            StmtKind::Expr(e) => {
                let ExprKind::Call { func, args, kwargs } = &e.kind else {
                    return Err(self.error(e.span, "an expression on its own does nothing"));
                };
                match func {
                    Builtin::Store => self.store(e, args, kwargs).map(Some),
                    Builtin::Check => self.check_call(e, args, kwargs).map(Some),
                    Builtin::DmaWait => {
                        let a = self.bind_args(*func, args, kwargs, e.span)?;
                        let t = self.value(a[0].unwrap_or(e), "a token")?;
                        if t.ty != Ty::Token {
                            return Err(self.error(
                                a[0].map_or(e.span, |x| x.span),
                                format!(
                                    "dma_wait needs the token dma_async returned, got {}",
                                    t.ty
                                ),
                            ));
                        }
                        Ok(Some(CStmt::DmaWait(t)))
                    }
                    Builtin::DmaAsync => Err(self.error(
                        e.span,
                        "keep the token of dma_async (`t = dma_async(..)`) so you can \
                         `dma_wait(t)` before reading the buffer",
                    )),
                    f => Err(self.error(
                        e.span,
                        format!("the result of `{}` is unused; bind it to a name", f.name()),
                    )),
                }
            }
        }
    }

    fn check_new_name(&self, name: &str, span: Span) -> CResult<()> {
        match reserved(name) {
            Some(why) => Err(self.error(span, format!("`{name}` {why} and cannot be assigned"))),
            None => Ok(()),
        }
    }

    fn for_loop(
        &mut self,
        s: &Stmt,
        var: &str,
        start: &Expr,
        end: &Expr,
        step: Option<&Expr>,
        body: &[Stmt],
    ) -> CResult<CStmt> {
        self.check_new_name(var, s.span)?;
        if self.names.contains_key(var) {
            return Err(self.error(
                s.span,
                format!("loop variable `{var}` hides an existing name; pick another"),
            ));
        }
        let one = Expr {
            kind: ExprKind::Int(1),
            span: s.span,
        };
        let bounds = [start, end, step.unwrap_or(&one)];
        let mut cvs = Vec::new();
        for e in bounds {
            let cv = self.expr(e)?;
            match &cv {
                Cv::Const(Const::Int(_)) => {}
                Cv::Val(v) if matches!(&v.ty, Ty::Tile(d, s) if d.is_int() && s.is_empty()) => {}
                _ => {
                    return Err(self.error(
                        e.span,
                        format!(
                            "range bounds must be integer scalars, got {}",
                            self.describe(&cv)
                        ),
                    ))
                }
            }
            cvs.push(cv);
        }
        if let Cv::Const(Const::Int(0)) = cvs[2] {
            return Err(self.error(bounds[2].span, "range step is 0"));
        }
        // The loop variable has the widest dtype among runtime bounds; with
        // constant bounds only it is i32 when they fit, i64 otherwise.
        let mut dtype: Option<DType> = None;
        for cv in &cvs {
            if let Cv::Val(v) = cv {
                if let Ty::Tile(d, _) = v.ty {
                    dtype = Some(dtype.map_or(d, |x| promote(x, d)));
                }
            }
        }
        let dtype = dtype.unwrap_or_else(|| {
            let fits = cvs
                .iter()
                .all(|cv| matches!(cv, Cv::Const(Const::Int(v)) if i32::try_from(*v).is_ok()));
            if fits {
                DType::I32
            } else {
                DType::I64
            }
        });
        let mut resolved = Vec::new();
        for (cv, e) in cvs.into_iter().zip(bounds) {
            resolved.push(self.to_dtype(cv, dtype, e.span)?);
        }
        let [start, end, step]: [CExpr; 3] = resolved
            .try_into()
            .map_err(|_| self.error(s.span, "internal: range bounds"))?;
        self.loop_level += 1;
        let slot = self.new_slot();
        self.names.insert(
            var.to_string(),
            Binding::Var {
                slot,
                ty: Ty::Tile(dtype, Vec::new()),
                level: self.loop_level,
                mutable: false,
            },
        );
        let body = self.block(body);
        // Names bound inside the body end with it.
        let level = self.loop_level;
        let ended: Vec<String> = self
            .names
            .iter()
            .filter(|(_, b)| b.level() >= level)
            .map(|(n, _)| n.clone())
            .collect();
        for n in ended {
            self.names.remove(&n);
            self.ended.insert(n, s.span);
        }
        self.loop_level -= 1;
        Ok(CStmt::For {
            var: slot,
            start,
            end,
            step,
            body: body?,
        })
    }

    fn describe(&self, cv: &Cv) -> String {
        match cv {
            Cv::Const(c) => format!("the constant {c}"),
            Cv::Val(v) => v.ty.to_string(),
            Cv::DType(d) => format!("the dtype {d}"),
            Cv::Shape(s) => format!("the shape {}", ShapeDisplay(s)),
        }
    }

    /// Checks `e` and requires a runtime value; constants become scalars of their
    /// default dtype.
    fn value(&mut self, e: &Expr, what: &str) -> CResult<CExpr> {
        let cv = self.expr(e)?;
        self.as_value(cv, e.span, what)
    }

    fn as_value(&self, cv: Cv, span: Span, what: &str) -> CResult<CExpr> {
        match cv {
            Cv::Val(v) => Ok(v),
            Cv::Const(c) => self.lit(c, c.default_dtype(), span),
            Cv::DType(d) => Err(self.error(span, format!("expected {what}, found the dtype {d}"))),
            Cv::Shape(_) => Err(self.error(
                span,
                format!("expected {what}, found a tuple (tuples are only shapes)"),
            )),
        }
    }

    /// A constant as a scalar of dtype `d`.
    fn lit(&self, c: Const, d: DType, span: Span) -> CResult<CExpr> {
        let lit = match (c, d) {
            (Const::Bool(v), DType::Bool) => Lit::B(v),
            (Const::Int(v), DType::Bool) => Lit::B(v != 0),
            (Const::Float(v), DType::Bool) => Lit::B(v != 0.0),
            // A 64-bit integer takes any literal (a negative one beside `u64` is
            // its bits, as in C); a narrower one only the literals it holds.
            (Const::Int(v), DType::I64 | DType::U64) => Lit::I(v),
            (Const::Int(v), _) if d.is_int() => {
                if d.int_range()
                    .is_some_and(|(lo, hi)| (lo..=hi).contains(&(v as i128)))
                {
                    Lit::I(v)
                } else {
                    return Err(self.error(
                        span,
                        format!(
                            "the constant {v} does not fit in {d}; cast the other operand to i64"
                        ),
                    ));
                }
            }
            (Const::Bool(v), _) if d.is_int() => Lit::I(v as i64),
            // As a cast would: truncate toward zero, saturate, NaN is 0 (`u64`
            // keeps the bits of its value).
            (Const::Float(v), _) if d.is_int() => Lit::I(d.saturate_int(v as i128) as i64),
            (Const::Int(v), _) => Lit::F(v as f64),
            (Const::Float(v), _) => Lit::F(v),
            (Const::Bool(v), _) => Lit::F(v as u8 as f64),
        };
        Ok(CExpr {
            kind: CKind::Lit(lit),
            ty: Ty::Tile(d, Vec::new()),
        })
    }

    /// A value or constant converted to dtype `d` (a cast when the dtype differs).
    fn to_dtype(&self, cv: Cv, d: DType, span: Span) -> CResult<CExpr> {
        match cv {
            Cv::Const(c) => self.lit(c, d, span),
            other => {
                let v = self.as_value(other, span, "a value")?;
                Ok(cast(v, d))
            }
        }
    }

    fn mk(&self, kind: CKind, ty: Ty, span: Span) -> CResult<CExpr> {
        if let Ty::Tile(_, s) | Ty::Ptr(_, s) | Ty::Local(_, s) = &ty {
            self.check_shape(s, span)?;
        }
        Ok(CExpr { kind, ty })
    }

    fn check_shape(&self, s: &[usize], span: Span) -> CResult<()> {
        if s.len() > MAX_TILE_RANK {
            return Err(self.error(
                span,
                format!(
                    "tile {} has more than {MAX_TILE_RANK} axes",
                    ShapeDisplay(s)
                ),
            ));
        }
        let n = s
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .unwrap_or(usize::MAX);
        if n > MAX_TILE_ELEMENTS {
            return Err(self.error(
                span,
                format!(
                    "tile {} has {n} elements, more than the limit of {MAX_TILE_ELEMENTS}",
                    ShapeDisplay(s)
                ),
            ));
        }
        Ok(())
    }

    fn expr(&mut self, e: &Expr) -> CResult<Cv> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(e.span, format!("expression nests deeper than {MAX_DEPTH}")));
        }
        let r = self.expr_inner(e);
        self.depth -= 1;
        r
    }

    fn expr_inner(&mut self, e: &Expr) -> CResult<Cv> {
        match &e.kind {
            ExprKind::Int(v) => Ok(Cv::Const(Const::Int(*v))),
            ExprKind::Float(v) => Ok(Cv::Const(Const::Float(*v))),
            ExprKind::Bool(v) => Ok(Cv::Const(Const::Bool(*v))),
            ExprKind::DType(d) => Ok(Cv::DType(*d)),
            ExprKind::Name(n) => match self.names.get(n) {
                Some(Binding::Const(c, _)) => Ok(Cv::Const(*c)),
                Some(Binding::Var { slot, ty, .. }) => Ok(Cv::Val(CExpr {
                    kind: CKind::Slot(*slot),
                    ty: ty.clone(),
                })),
                None => {
                    let mut msg = format!("`{n}` is not defined");
                    if self.ended.contains_key(n) {
                        msg += " here: it was bound inside a loop body, and names bound \
                                there end with the loop (bind it before the loop to carry it)";
                    } else if let Some(s) = suggest(n, self.names.keys().map(String::as_str)) {
                        msg += &format!("; did you mean `{s}`?");
                    }
                    Err(self.error(e.span, msg))
                }
            },
            ExprKind::Tuple(items) => {
                let mut shape = Vec::new();
                for x in items {
                    shape.push(self.extent(x)?);
                }
                Ok(Cv::Shape(shape))
            }
            ExprKind::Unary(op, x) => {
                let cv = self.expr(x)?;
                self.unary(*op, cv, e.span)
            }
            ExprKind::Binary(op, l, r) => {
                let (lv, rv) = (self.expr(l)?, self.expr(r)?);
                self.binary(*op, lv, rv, e.span)
            }
            ExprKind::Index(base, items) => {
                let v = self.value(base, "a tile to index")?;
                let (d, shape) = match &v.ty {
                    Ty::Tile(d, s) | Ty::Ptr(d, s) => (*d, s.clone()),
                    other => return Err(self.error(e.span, format!("cannot index a {other}"))),
                };
                let kept = items.iter().filter(|i| **i == IndexItem::Full).count();
                if kept != shape.len() {
                    return Err(self.error(
                        e.span,
                        format!(
                            "index has {kept} `:` but the tile has {} axes {}; write one `:` \
                             per axis and `None` where a new axis goes",
                            shape.len(),
                            ShapeDisplay(&shape)
                        ),
                    ));
                }
                let mut axes = shape.iter();
                let new: Vec<usize> = items
                    .iter()
                    .map(|i| match i {
                        IndexItem::Full => axes.next().copied().unwrap_or(1),
                        IndexItem::NewAxis => 1,
                    })
                    .collect();
                let ty = match v.ty {
                    Ty::Ptr(..) => Ty::Ptr(d, new),
                    _ => Ty::Tile(d, new),
                };
                Ok(Cv::Val(self.mk(CKind::Reshape(b(v)), ty, e.span)?))
            }
            ExprKind::Call { func, args, kwargs } => self.call(e, *func, args, kwargs),
        }
    }

    /// A constant, positive tile extent.
    fn extent(&mut self, e: &Expr) -> CResult<usize> {
        match self.expr(e)? {
            Cv::Const(Const::Int(v)) if v >= 1 => usize::try_from(v)
                .map_err(|_| self.error(e.span, format!("extent {v} is too large"))),
            Cv::Const(Const::Int(v)) => {
                Err(self.error(e.span, format!("a tile extent must be at least 1, got {v}")))
            }
            other => Err(self.error(
                e.span,
                format!(
                    "a tile extent must be a constant integer (tile shapes are static), got {}",
                    self.describe(&other)
                ),
            )),
        }
    }

    /// A shape argument: `(a, b)`, or a single extent for a 1-D tile.
    fn shape_arg(&mut self, e: &Expr) -> CResult<Vec<usize>> {
        if let ExprKind::Tuple(_) = e.kind {
            let Cv::Shape(s) = self.expr(e)? else {
                return Err(self.error(e.span, "expected a shape"));
            };
            self.check_shape(&s, e.span)?;
            return Ok(s);
        }
        Ok(vec![self.extent(e)?])
    }

    fn const_int(&mut self, e: &Expr, what: &str) -> CResult<i64> {
        match self.expr(e)? {
            Cv::Const(Const::Int(v)) => Ok(v),
            other => Err(self.error(
                e.span,
                format!(
                    "{what} must be a constant integer, got {}",
                    self.describe(&other)
                ),
            )),
        }
    }

    fn dtype_arg(&mut self, e: Option<&Expr>, default: DType) -> CResult<DType> {
        let Some(e) = e else { return Ok(default) };
        match self.expr(e)? {
            Cv::DType(d) => Ok(d),
            other => Err(self.error(
                e.span,
                format!(
                    "expected a dtype (f32, f16, ...), got {}",
                    self.describe(&other)
                ),
            )),
        }
    }

    fn unary(&self, op: UnaryOp, cv: Cv, span: Span) -> CResult<Cv> {
        match (op, cv) {
            (UnaryOp::Neg, Cv::Const(Const::Int(v))) => v
                .checked_neg()
                .map(|v| Cv::Const(Const::Int(v)))
                .ok_or_else(|| self.error(span, "integer overflow in a constant")),
            (UnaryOp::Neg, Cv::Const(Const::Float(v))) => Ok(Cv::Const(Const::Float(-v))),
            (UnaryOp::Not, Cv::Const(Const::Bool(v))) => Ok(Cv::Const(Const::Bool(!v))),
            (op, cv) => {
                let v = self.as_value(cv, span, "an operand")?;
                let uop = match op {
                    UnaryOp::Neg => UnOp::Neg,
                    UnaryOp::Not => UnOp::Not,
                };
                self.elementwise1(uop, v, span).map(Cv::Val)
            }
        }
    }

    /// Type rules of one-operand elementwise functions.
    fn elementwise1(&self, op: UnOp, v: CExpr, span: Span) -> CResult<CExpr> {
        let name = format!("{op:?}").to_lowercase();
        let Ty::Tile(d, shape) = v.ty.clone() else {
            return Err(self.error(span, format!("{name} needs a tile, got {}", v.ty)));
        };
        match op {
            UnOp::Not if d.is_float() => {
                return Err(self.error(
                    span,
                    format!("`!` needs a bool or integer tile, got {}", v.ty),
                ))
            }
            UnOp::Neg | UnOp::Abs | UnOp::Relu if d == DType::Bool => {
                return Err(self.error(span, format!("{name} needs numbers, got {}", v.ty)))
            }
            UnOp::Not | UnOp::Neg | UnOp::Abs | UnOp::Relu => {}
            _ if !d.is_float() => {
                return Err(self.error(
                    span,
                    format!("{name} needs a float tile, got {} (cast it first)", v.ty),
                ))
            }
            _ => {}
        }
        self.mk(CKind::Unary(op, b(v)), Ty::Tile(d, shape), span)
    }

    fn binary(&self, op: BinaryOp, l: Cv, r: Cv, span: Span) -> CResult<Cv> {
        if let (Cv::Const(a), Cv::Const(c)) = (&l, &r) {
            return self.fold(op, *a, *c, span).map(Cv::Const);
        }
        // Pointer arithmetic: pointer +/- integer offsets, integer + pointer.
        let is_ptr = |cv: &Cv| {
            matches!(
                cv,
                Cv::Val(CExpr {
                    ty: Ty::Ptr(..),
                    ..
                })
            )
        };
        if is_ptr(&l) || is_ptr(&r) {
            let (ptr, off, negate) = match op {
                BinaryOp::Add if is_ptr(&l) => (l, r, false),
                BinaryOp::Add => (r, l, false),
                BinaryOp::Sub if is_ptr(&l) && !is_ptr(&r) => (l, r, true),
                _ => {
                    return Err(self.error(
                        span,
                        format!(
                            "pointers support only `ptr + offsets`, `offsets + ptr` and \
                             `ptr - offsets`, not {} {} {}",
                            self.describe(&l),
                            op.symbol(),
                            self.describe(&r)
                        ),
                    ))
                }
            };
            let ptr = self.as_value(ptr, span, "a pointer")?;
            let off = match off {
                Cv::Const(Const::Int(v)) => self.lit(Const::Int(v), DType::I64, span)?,
                other => self.as_value(other, span, "an integer offset")?,
            };
            let (Ty::Ptr(d, ps), Ty::Tile(od, os)) = (&ptr.ty, &off.ty) else {
                return Err(self.error(
                    span,
                    format!("a pointer offset must be an integer tile, got {}", off.ty),
                ));
            };
            if !od.is_int() {
                return Err(self.error(
                    span,
                    format!("a pointer offset must be an integer tile, got {}", off.ty),
                ));
            }
            let shape = self.broadcast(ps, os, span)?;
            let ty = Ty::Ptr(*d, shape);
            return self
                .mk(CKind::PtrOffset(b(ptr), b(off), negate), ty, span)
                .map(Cv::Val);
        }
        let bop = match op {
            BinaryOp::Or => BinOp::Or,
            BinaryOp::And => BinOp::And,
            BinaryOp::Xor => BinOp::Xor,
            BinaryOp::Shl => BinOp::Shl,
            BinaryOp::Shr => BinOp::Shr,
            BinaryOp::Eq => BinOp::Eq,
            BinaryOp::Ne => BinOp::Ne,
            BinaryOp::Lt => BinOp::Lt,
            BinaryOp::Le => BinOp::Le,
            BinaryOp::Gt => BinOp::Gt,
            BinaryOp::Ge => BinOp::Ge,
            BinaryOp::Add => BinOp::Add,
            BinaryOp::Sub => BinOp::Sub,
            BinaryOp::Mul => BinOp::Mul,
            BinaryOp::Div => BinOp::Div,
            BinaryOp::Rem => BinOp::Rem,
        };
        self.elementwise2(bop, op.symbol(), l, r, span).map(Cv::Val)
    }

    /// Type rules of two-operand elementwise operations (operators, maximum, minimum).
    fn elementwise2(&self, op: BinOp, name: &str, l: Cv, r: Cv, span: Span) -> CResult<CExpr> {
        let (l, r) = self.unify(l, r, span)?;
        let (Ty::Tile(d, ls), Ty::Tile(_, rs)) = (&l.ty, &r.ty) else {
            return Err(self.error(
                span,
                format!("`{name}` needs tiles or scalars, got {} and {}", l.ty, r.ty),
            ));
        };
        let d = *d;
        let shape = self.broadcast(ls, rs, span)?;
        let comparison = matches!(
            op,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne
        );
        let logic = matches!(op, BinOp::And | BinOp::Or | BinOp::Xor);
        if logic && d.is_float() {
            return Err(self.error(
                span,
                format!("`{name}` needs bool (or integer) operands, got {}", l.ty),
            ));
        }
        if matches!(op, BinOp::Shl | BinOp::Shr) && !d.is_int() {
            return Err(self.error(
                span,
                format!("`{name}` needs integer operands, got {}", l.ty),
            ));
        }
        if !logic && !comparison && d == DType::Bool {
            return Err(self.error(
                span,
                format!("`{name}` needs numbers, got bool operands (use `&`, `|`, `!` or cast)"),
            ));
        }
        let out = if comparison { DType::Bool } else { d };
        self.mk(CKind::Binary(op, b(l), b(r)), Ty::Tile(out, shape), span)
    }

    /// Brings two operands to one dtype: constants adopt the other side's dtype,
    /// two values promote.
    fn unify(&self, l: Cv, r: Cv, span: Span) -> CResult<(CExpr, CExpr)> {
        let dtype_of = |cv: &Cv| match cv {
            Cv::Val(CExpr {
                ty: Ty::Tile(d, _), ..
            }) => Some(*d),
            _ => None,
        };
        let d = match (&l, &r, dtype_of(&l), dtype_of(&r)) {
            (_, _, Some(a), Some(c)) => promote(a, c),
            (Cv::Const(c), _, None, Some(p)) | (_, Cv::Const(c), Some(p), None) => {
                c.dtype_beside(p)
            }
            (Cv::Const(a), Cv::Const(c), ..) => promote(a.default_dtype(), c.default_dtype()),
            _ => {
                let bad = if dtype_of(&l).is_none() { &l } else { &r };
                return Err(self.error(
                    span,
                    format!("expected a tile or scalar, got {}", self.describe(bad)),
                ));
            }
        };
        Ok((self.to_dtype(l, d, span)?, self.to_dtype(r, d, span)?))
    }

    fn broadcast(&self, a: &[usize], c: &[usize], span: Span) -> CResult<Vec<usize>> {
        broadcast_shapes(a, c).map_err(|e| self.error(span, e))
    }

    /// Requires that `shape` broadcasts to exactly `target` (masks, `other`, stored values).
    fn fits(&self, what: &str, ty: &Ty, target: &Ty, span: Span) -> CResult<()> {
        let (Ty::Tile(_, s), Ty::Ptr(_, t) | Ty::Local(_, t)) = (ty, target) else {
            return Err(self.error(span, format!("{what} must be a tile, got {ty}")));
        };
        match broadcast_shapes(s, t) {
            Ok(r) if &r == t => Ok(()),
            _ => Err(self.error(
                span,
                format!(
                    "{what} {ty} does not fit {target} (its shape must broadcast to {})",
                    ShapeDisplay(t)
                ),
            )),
        }
    }

    fn fold(&self, op: BinaryOp, a: Const, c: Const, span: Span) -> CResult<Const> {
        use BinaryOp::*;
        let overflow = || self.error(span, "integer overflow in a constant expression");
        match (a, c) {
            (Const::Bool(x), Const::Bool(y)) if matches!(op, And | Or | Xor | Eq | Ne) => {
                Ok(Const::Bool(match op {
                    And => x & y,
                    Or => x | y,
                    Xor => x ^ y,
                    Eq => x == y,
                    _ => x != y,
                }))
            }
            (Const::Float(_), _) | (_, Const::Float(_)) => {
                let f = |k: Const| match k {
                    Const::Int(v) => v as f64,
                    Const::Float(v) => v,
                    Const::Bool(v) => v as u8 as f64,
                };
                let (x, y) = (f(a), f(c));
                Ok(match op {
                    Add => Const::Float(x + y),
                    Sub => Const::Float(x - y),
                    Mul => Const::Float(x * y),
                    Div => Const::Float(x / y),
                    Rem => Const::Float(x % y),
                    Lt => Const::Bool(x < y),
                    Le => Const::Bool(x <= y),
                    Gt => Const::Bool(x > y),
                    Ge => Const::Bool(x >= y),
                    Eq => Const::Bool(x == y),
                    Ne => Const::Bool(x != y),
                    And | Or | Xor | Shl | Shr => {
                        return Err(self.error(
                            span,
                            format!("`{}` needs bool or integer operands", op.symbol()),
                        ))
                    }
                })
            }
            _ => {
                let i = |k: Const| match k {
                    Const::Int(v) => v,
                    Const::Bool(v) => v as i64,
                    Const::Float(v) => v as i64,
                };
                let (x, y) = (i(a), i(c));
                if matches!(op, Div | Rem) && y == 0 {
                    return Err(self.error(span, "division by zero in a constant expression"));
                }
                Ok(match op {
                    Add => Const::Int(x.checked_add(y).ok_or_else(overflow)?),
                    Sub => Const::Int(x.checked_sub(y).ok_or_else(overflow)?),
                    Mul => Const::Int(x.checked_mul(y).ok_or_else(overflow)?),
                    Div => Const::Int(x.checked_div(y).ok_or_else(overflow)?),
                    Rem => Const::Int(x.checked_rem(y).ok_or_else(overflow)?),
                    And => Const::Int(x & y),
                    Or => Const::Int(x | y),
                    Xor => Const::Int(x ^ y),
                    // Constants are 64-bit: a shift is one of i64, and a left shift
                    // that loses bits overflows like a product that does.
                    // (A shift outside `[0, 64)` gives 0 or the sign fill, as on tiles.)
                    Shl if !(0..64).contains(&y) => Const::Int(0),
                    Shl if (x << y) >> y != x => return Err(overflow()),
                    Shl => Const::Int(x << y),
                    Shr if !(0..64).contains(&y) => Const::Int(x >> 63),
                    Shr => Const::Int(x >> y),
                    Lt => Const::Bool(x < y),
                    Le => Const::Bool(x <= y),
                    Gt => Const::Bool(x > y),
                    Ge => Const::Bool(x >= y),
                    Eq => Const::Bool(x == y),
                    Ne => Const::Bool(x != y),
                })
            }
        }
    }

    /// Matches call arguments to the builtin's parameters, by position then by name.
    fn bind_args<'e>(
        &self,
        func: Builtin,
        args: &'e [Expr],
        kwargs: &'e [(String, Expr)],
        span: Span,
    ) -> CResult<Vec<Option<&'e Expr>>> {
        let params = func.params();
        let names: Vec<&str> = params.iter().map(|p| p.0).collect();
        let mut out: Vec<Option<&Expr>> = vec![None; params.len()];
        if args.len() > params.len() {
            return Err(self.error(
                args[params.len()].span,
                format!(
                    "`{}` takes at most {} argument{} ({})",
                    func.name(),
                    params.len(),
                    if params.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ),
            ));
        }
        for (slot, a) in out.iter_mut().zip(args) {
            *slot = Some(a);
        }
        for (k, v) in kwargs {
            let Some(i) = names.iter().position(|n| n == k) else {
                let mut msg = format!(
                    "`{}` has no argument `{k}` (it takes {})",
                    func.name(),
                    names.join(", ")
                );
                if let Some(s) = suggest(k, names.iter().copied()) {
                    msg += &format!("; did you mean `{s}`?");
                }
                return Err(self.error(v.span, msg));
            };
            if out[i].is_some() {
                return Err(self.error(v.span, format!("argument `{k}` is given twice")));
            }
            out[i] = Some(v);
        }
        for (i, (name, required)) in params.iter().enumerate() {
            if *required && out[i].is_none() {
                return Err(self.error(span, format!("`{}` needs argument `{name}`", func.name())));
            }
        }
        Ok(out)
    }

    fn site(&mut self, e: &Expr) -> usize {
        self.sites.push(Site {
            text: print_expr(e),
            span: e.span,
            location: None,
        });
        self.sites.len() - 1
    }

    /// The pointer operand of a memory access.
    fn pointer(&mut self, e: &Expr, func: &str) -> CResult<CExpr> {
        let p = self.value(e, "a pointer")?;
        if !matches!(p.ty, Ty::Ptr(..)) {
            return Err(self.error(
                e.span,
                format!(
                    "{func} needs a pointer (a `*dtype` parameter plus offsets), got {}",
                    p.ty
                ),
            ));
        }
        Ok(p)
    }

    /// The `mask` and `other` operands of a load or DMA into a tile of `target`'s shape.
    fn mask_other(
        &mut self,
        func: &str,
        target: &Ty,
        mask: Option<&Expr>,
        other: Option<&Expr>,
    ) -> CResult<MaskOther> {
        let m = match mask {
            None => None,
            Some(e) => {
                let cv = self.expr(e)?;
                let m = self.to_dtype_checked(cv, DType::Bool, e.span, &format!("{func} mask"))?;
                self.fits(&format!("{func}: mask"), &m.ty, target, e.span)?;
                Some(b(m))
            }
        };
        let (Ty::Ptr(d, _) | Ty::Local(d, _)) = target else {
            return Ok((m, None));
        };
        let o = match other {
            None => None,
            Some(e) if m.is_none() => {
                return Err(self.error(
                    e.span,
                    format!("{func}: `other` fills masked-off lanes, so it needs a `mask`"),
                ))
            }
            Some(e) => {
                let cv = self.expr(e)?;
                let v = self.to_dtype(cv, *d, e.span)?;
                self.fits(&format!("{func}: other"), &v.ty, target, e.span)?;
                Some(b(v))
            }
        };
        Ok((m, o))
    }

    /// Like [`Self::to_dtype`] but without converting: the value must already have
    /// dtype `d` (constants are taken as `d`).
    fn to_dtype_checked(&self, cv: Cv, d: DType, span: Span, what: &str) -> CResult<CExpr> {
        match cv {
            Cv::Const(c @ Const::Bool(_)) => self.lit(c, d, span),
            Cv::Val(v) if matches!(&v.ty, Ty::Tile(x, _) if *x == d) => Ok(v),
            other => Err(self.error(
                span,
                format!("{what} must be a {d} tile, got {}", self.describe(&other)),
            )),
        }
    }
}

/// `v` converted to dtype `d`; no node when it already has it.
fn cast(v: CExpr, d: DType) -> CExpr {
    match &v.ty {
        Ty::Tile(x, s) if *x != d => {
            let ty = Ty::Tile(d, s.clone());
            CExpr {
                kind: CKind::Cast(b(v)),
                ty,
            }
        }
        _ => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tile::parse;

    fn check_src(body: &str) -> Result<CheckedKernel, String> {
        let src = format!("kernel k(x: *f32, h: *f16, n: i32) {{\n{body}\n}}\n");
        let k = parse("t.tile", &src).map_err(|d| d.to_string())?;
        check(&k).map_err(|e| e.message)
    }

    #[test]
    fn constants_take_the_dtype_they_meet() {
        let k =
            check_src("  a = load(h + arange(0, 8))\n  b = a * 0.5\n  store(h + arange(0, 8), b)")
                .unwrap();
        let CStmt::Assign(_, e) = &k.body[1] else {
            panic!("not an assignment")
        };
        assert_eq!(e.ty, Ty::Tile(DType::F16, vec![8]));
        let k = check_src("  i = arange(0, 4) * 2.0").unwrap();
        let CStmt::Assign(_, e) = &k.body[0] else {
            panic!("not an assignment")
        };
        assert_eq!(e.ty, Ty::Tile(DType::F32, vec![4]));
    }

    #[test]
    fn loop_carried_values_keep_their_type() {
        assert!(check_src(
            "  acc = zeros((4,), f32)\n  for k in range(0, n, 4) {\n    acc = acc + 1.0\n  }\n  store(x + arange(0, 4), acc)"
        )
        .is_ok());
        let e = check_src(
            "  acc = zeros((4,), f32)\n  for k in range(0, n, 4) {\n    acc = acc[:, None]\n  }",
        )
        .unwrap_err();
        assert!(e.contains("carried around the loop"), "{e}");
        let e = check_src("  for k in range(0, n) {\n    t = k\n  }\n  u = t").unwrap_err();
        assert!(e.contains("names bound there end with the loop"), "{e}");
    }

    #[test]
    fn local_memory_is_summed_over_allocation_sites() {
        let k = check_src("  a = local_alloc((64, 32), f16)\n  b = local_alloc((16,))").unwrap();
        assert_eq!(k.local_memory_bytes(), 64 * 32 * 2 + 16 * 4);
    }

    #[test]
    fn constant_folding_checks_overflow_and_division() {
        assert!(check_src("  const A = 9223372036854775807 + 1")
            .unwrap_err()
            .contains("overflow"));
        assert!(check_src("  const A = 7 / 0")
            .unwrap_err()
            .contains("division by zero"));
        assert!(check_src("  const A = 7 / 2\n  t = zeros((A, A))").is_ok());
        assert!(check_src("  m = arange(0, 4) < 3000000000")
            .unwrap_err()
            .contains("does not fit in i32"));
    }
}
