//! The loop-IR printer: readable text for dumps and golden tests.
//!
//! ```text
//! kernel k2_max_sub_exp_sum_div(buf0: f32[64, 512]) -> buf1: f32[64, 512]   # %3 %4 %5 %6 %7
//!   for i0 in 0..64 parallel:
//!     acc0 = max(r0 in 0..512) buf0[i0*512 + r0]
//!     acc1 = sum(r0 in 0..512) exp(buf0[i0*512 + r0] - acc0)
//!     for j0 in 0..512: buf1[i0*512 + j0] = exp(buf0[i0*512 + j0] - acc0) / acc1
//! ```
//!
//! A node used more than once in a stage is bound to a name (`t3 = ...`, `t3` being
//! node 3 of the stage's block) and the stage is printed as a block; data-dependent
//! indices are always bound (`t1 = checked(buf1[i0], 0..10)`), so an index like
//! `buf2[t1*64 + i1]` refers to them.
//!
//! The text is complete, so that `read.rs` rebuilds the program from it: a constant
//! whose dtype is not its literal's default (`f32`, `i64`) says it (`0.5_f16`, `3_i32`);
//! an index value that does not start with a loop variable is written `index(i0 + 1)`
//! (`i1*4` and `r0 // 2` stand bare); an empty-domain store stage that follows another
//! is headed `store over one point:`; a GEMM's stage and outer axes are stated
//! (`stage 1`, `axes [1, 0]`) when they are not the ones the kernel implies.
//! A reduction stage that also writes elements (a backend's stash) is a block whose
//! writes come before its accumulators:
//!
//! ```text
//! reduce r0 in 0..512:
//!   t2 = exp(buf0[i0*512 + r0] - acc0)
//!   buf2[r0] = t2
//!   acc1 = sum(t2)
//! ```

use super::expr::{Block, ExprOp};
use super::ids::ExprRef;
use super::index::IndexExpr;
use super::program::{BufferKind, GemmInfo, Kernel, Program, Stage};
use crate::op::{BinaryOp, UnaryOp};
use crate::DType;
use std::fmt::{self, Write};

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "program {}", self.name)?;
        for b in &self.buffers {
            let role = match b.kind {
                BufferKind::Input(i) => format!("input {i}"),
                BufferKind::Output(i) => match self.donated.iter().find(|d| d.output == i) {
                    Some(d) => format!("output {i} in place of input {}", d.input),
                    None => format!("output {i}"),
                },
                BufferKind::Intermediate => "intermediate".to_string(),
                BufferKind::Scratch => "scratch".to_string(),
                BufferKind::Constant(i) => format!("constant {i}"),
            };
            write!(f, "  {}: {}  {role} `{}`", b.id, b.ty, b.name)?;
            // The data is not printed (weights are large); its fingerprint tells
            // constants apart in a dump.
            match b.kind {
                BufferKind::Constant(i) => match self.constants.get(i) {
                    Some(c) => writeln!(f, "  # {:016x}", c.fingerprint())?,
                    None => writeln!(f, "  # missing")?,
                },
                _ => writeln!(f)?,
            }
        }
        for k in &self.kernels {
            writeln!(f)?;
            write!(f, "{}", self.display_kernel(k))?;
        }
        Ok(())
    }
}

impl Program {
    /// A printable view of kernel `k` (its header names the buffers' types).
    pub fn display_kernel<'a>(&'a self, k: &'a Kernel) -> impl fmt::Display + 'a {
        KernelText { p: self, k }
    }
}

impl Block {
    /// Node `r` written out as one expression (data-dependent indices by their node
    /// names), for reports that mention a value of a stage.
    pub fn expr_text(&self, r: ExprRef) -> String {
        let bound: Vec<bool> = self
            .nodes
            .iter()
            .map(|n| matches!(n.op, ExprOp::CheckedIndex { .. }))
            .collect();
        Printer {
            body: self,
            bound: &bound,
        }
        .expr(r)
    }
}

struct KernelText<'a> {
    p: &'a Program,
    k: &'a Kernel,
}

impl fmt::Display for KernelText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, k) = (self.p, self.k);
        let sig = |list: &[super::BufferAccess]| -> String {
            list.iter()
                .map(|a| match p.buffer(a.buffer) {
                    Some(b) => format!("{}: {}", b.id, b.ty),
                    None => format!("{}: ?", a.buffer),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let nodes: Vec<String> = k.nodes.iter().map(|v| v.to_string()).collect();
        write!(
            f,
            "kernel {}({}) -> {}",
            k.name,
            sig(&k.reads),
            sig(&k.writes)
        )?;
        if nodes.is_empty() {
            writeln!(f)?;
        } else {
            writeln!(f, "   # {}", nodes.join(" "))?;
        }
        if let Some(g) = &k.gemm {
            let op = |o: &super::GemmOperand| {
                let mut s = format!("{}[{}", o.buffer, o.offset);
                for st in &o.batch_strides {
                    let _ = write!(s, ", {st}");
                }
                let _ = write!(s, "; {}, {}]", o.row_stride, o.col_stride);
                s
            };
            write!(
                f,
                "  gemm {} = {} @ {}  batch {:?} m {} n {} k {}",
                g.acc,
                op(&g.lhs),
                op(&g.rhs),
                g.batch,
                g.m,
                g.n,
                g.k
            )?;
            // Stated only when they differ from what the rest implies.
            if Some(g.stage) != gemm_stage(k, g) {
                write!(f, " stage {}", g.stage)?;
            }
            if g.outer_axes != gemm_outer_axes(g) {
                let axes: Vec<String> = g
                    .outer_axes
                    .iter()
                    .map(|a| a.map_or("_".to_string(), |a| a.to_string()))
                    .collect();
                write!(f, " axes [{}]", axes.join(", "))?;
            }
            writeln!(f)?;
        }
        let mut indent = "  ".to_string();
        if !k.domain.is_empty() {
            writeln!(f, "  for {} parallel:", loops("i", &k.domain))?;
            indent.push_str("  ");
        }
        let mut previous: Option<&Stage> = None;
        for stage in &k.stages {
            write_stage(f, stage, previous, &indent)?;
            previous = Some(stage);
        }
        Ok(())
    }
}

/// The stage a GEMM replaces when not stated: the first reduction stage defining its
/// accumulator.
pub(super) fn gemm_stage(k: &Kernel, g: &GemmInfo) -> Option<usize> {
    k.stages.iter().position(|s| match s {
        Stage::Reduce { reductions, .. } => reductions.iter().any(|r| r.acc == g.acc),
        Stage::Store { .. } => false,
    })
}

/// The outer axes of a GEMM when not stated: `batch.., m, n` in order, each axis of
/// extent 1 dropped from the domain.
pub(super) fn gemm_outer_axes(g: &GemmInfo) -> Vec<Option<usize>> {
    let mut next = 0;
    g.batch
        .iter()
        .chain([&g.m, &g.n])
        .map(|&d| {
            (d != 1).then(|| {
                next += 1;
                next - 1
            })
        })
        .collect()
}

/// An empty-domain store stage prints its lines flat, unless they would read as part
/// of the store stage before it (or as nothing at all).
fn needs_store_header(stage: &Stage, previous: Option<&Stage>) -> bool {
    let Stage::Store { domain, stores, .. } = stage else {
        return false;
    };
    let after_flat_store =
        matches!(previous, Some(Stage::Store { domain, .. }) if domain.is_empty());
    domain.is_empty() && (after_flat_store || stores.is_empty())
}

/// `i0 in 0..64, i1 in 0..8`
fn loops(prefix: &str, domain: &[usize]) -> String {
    domain
        .iter()
        .enumerate()
        .map(|(i, d)| format!("{prefix}{i} in 0..{d}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn write_stage(
    f: &mut fmt::Formatter<'_>,
    stage: &Stage,
    previous: Option<&Stage>,
    indent: &str,
) -> fmt::Result {
    let body = stage.body();
    let roots = stage.roots();
    let uses = body.use_counts(&roots);
    let bound: Vec<bool> = body
        .nodes
        .iter()
        .zip(&uses)
        .map(|(n, &u)| match n.op {
            ExprOp::CheckedIndex { .. } => true,
            ExprOp::Const(_) | ExprOp::Acc(_) => false,
            _ => u > 1,
        })
        .collect();
    let any_bound = bound.iter().any(|&b| b);
    let pr = Printer {
        body,
        bound: &bound,
    };
    let line = |s: &super::StoreOp| format!("{}[{}] = {}", s.buffer, s.index, pr.expr(s.value));
    match stage {
        Stage::Reduce {
            domain,
            reductions,
            stores,
            ..
        } => {
            if !any_bound && reductions.len() == 1 && stores.is_empty() {
                let r = &reductions[0];
                return writeln!(
                    f,
                    "{indent}{} = {}({}) {}",
                    r.acc,
                    reduction_name(r),
                    if domain.is_empty() {
                        "one point".to_string()
                    } else {
                        loops("r", domain)
                    },
                    pr.reduced(r)
                );
            }
            if domain.is_empty() {
                writeln!(f, "{indent}reduce over one point:")?;
            } else {
                writeln!(f, "{indent}reduce {}:", loops("r", domain))?;
            }
            let inner = format!("{indent}  ");
            pr.write_bindings(f, &inner)?;
            for s in stores {
                writeln!(f, "{inner}{}", line(s))?;
            }
            for r in reductions {
                writeln!(
                    f,
                    "{inner}{} = {}({})",
                    r.acc,
                    reduction_name(r),
                    pr.reduced(r)
                )?;
            }
            Ok(())
        }
        Stage::Store { domain, stores, .. } => {
            if domain.is_empty() && !needs_store_header(stage, previous) {
                pr.write_bindings(f, indent)?;
                for s in stores {
                    writeln!(f, "{indent}{}", line(s))?;
                }
                return Ok(());
            }
            if domain.is_empty() {
                writeln!(f, "{indent}store over one point:")?;
            } else if !any_bound && stores.len() == 1 {
                return writeln!(
                    f,
                    "{indent}for {}: {}",
                    loops("j", domain),
                    line(&stores[0])
                );
            } else {
                writeln!(f, "{indent}for {}:", loops("j", domain))?;
            }
            let inner = format!("{indent}  ");
            pr.write_bindings(f, &inner)?;
            for s in stores {
                writeln!(f, "{inner}{}", line(s))?;
            }
            Ok(())
        }
    }
}

/// `sum`, `max`, .. or `dot` for a sum of exact products.
fn reduction_name(r: &super::Reduction) -> &'static str {
    match r.rhs {
        Some(_) => "dot",
        None => r.kind.name(),
    }
}

/// Prints expressions of one block, naming the bound nodes.
struct Printer<'a> {
    body: &'a Block,
    bound: &'a [bool],
}

/// Binding strength of an infix operator (higher binds tighter); 9 for atoms.
fn precedence(op: &ExprOp) -> u8 {
    match op {
        ExprOp::Binary(b, ..) => match b {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => 3,
            BinaryOp::Add | BinaryOp::Sub => 4,
            BinaryOp::Mul | BinaryOp::Div => 5,
            _ => 9,
        },
        _ => 9,
    }
}

/// The name of a unary op in loop-IR text (`gelu_tanh` apart from `gelu`).
pub(super) fn unary_name(u: UnaryOp) -> &'static str {
    match u {
        UnaryOp::GeluTanh => "gelu_tanh",
        _ => u.name(),
    }
}

/// The operator symbol of an infix binary op; the others print as calls (`maximum(a, b)`).
pub(super) fn infix(b: BinaryOp) -> Option<&'static str> {
    Some(match b {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        BinaryOp::Eq => "==",
        BinaryOp::Ne => "!=",
        BinaryOp::Lt => "<",
        BinaryOp::Le => "<=",
        BinaryOp::Gt => ">",
        BinaryOp::Ge => ">=",
        BinaryOp::And => "and",
        BinaryOp::Or => "or",
        _ => return None,
    })
}

impl Printer<'_> {
    fn write_bindings(&self, f: &mut fmt::Formatter<'_>, indent: &str) -> fmt::Result {
        for (i, &b) in self.bound.iter().enumerate() {
            if b {
                writeln!(f, "{indent}t{i} = {}", self.node(ExprRef(i as u32)))?;
            }
        }
        Ok(())
    }

    /// What a reduction combines: its value, or `a, b` for a dot product.
    fn reduced(&self, r: &super::Reduction) -> String {
        match r.rhs {
            Some(rhs) => format!("{}, {}", self.expr(r.value), self.expr(rhs)),
            None => self.expr(r.value),
        }
    }

    /// A reference as it appears inside an expression.
    fn expr(&self, r: ExprRef) -> String {
        if self.bound.get(r.index()).copied().unwrap_or(false) {
            r.to_string()
        } else {
            self.node(r)
        }
    }

    /// `r` at a position needing at least binding strength `min`.
    fn operand(&self, r: ExprRef, min: u8) -> String {
        let bound = self.bound.get(r.index()).copied().unwrap_or(false);
        let prec = match self.body.get(r) {
            Some(n) if !bound => precedence(&n.op),
            _ => 9,
        };
        let s = self.expr(r);
        if prec < min {
            format!("({s})")
        } else {
            s
        }
    }

    /// The node's own definition.
    fn node(&self, r: ExprRef) -> String {
        let Some(n) = self.body.get(r) else {
            return format!("<missing {r}>");
        };
        match &n.op {
            ExprOp::Const(v) => constant(*v, n.dtype),
            ExprOp::Acc(a) => a.to_string(),
            ExprOp::Index(e) if starts_with_var(e) => e.to_string(),
            ExprOp::Index(e) => format!("index({e})"),
            ExprOp::Load(l) => {
                if l.guard.is_empty() {
                    format!("{}[{}]", l.buffer, l.index)
                } else {
                    format!(
                        "({}[{}] if {} else {})",
                        l.buffer,
                        l.index,
                        guard(&l.guard),
                        l.other
                    )
                }
            }
            ExprOp::CheckedIndex {
                value,
                extent,
                guard: g,
            } => {
                if g.is_empty() {
                    format!("checked({}, 0..{extent})", self.expr(*value))
                } else {
                    format!(
                        "checked({}, 0..{extent}) if {} else 0",
                        self.expr(*value),
                        guard(g)
                    )
                }
            }
            ExprOp::Unary(u, a) => format!("{}({})", unary_name(*u), self.expr(*a)),
            ExprOp::Binary(b, x, y) => match infix(*b) {
                Some(sym) => {
                    let p = precedence(&n.op);
                    format!("{} {sym} {}", self.operand(*x, p), self.operand(*y, p + 1))
                }
                None => format!("{}({}, {})", b.name(), self.expr(*x), self.expr(*y)),
            },
            ExprOp::Where(c, a, b) => {
                format!(
                    "where({}, {}, {})",
                    self.expr(*c),
                    self.expr(*a),
                    self.expr(*b)
                )
            }
            ExprOp::Cast(a) => format!("{}({})", n.dtype, self.expr(*a)),
        }
    }
}

/// A constant as written for its dtype: floats in their shortest f32 form (`0.7`, not
/// `0.699999988079071`; every float dtype but f64 fits in an f32), f64 in its shortest
/// f64 form, with a `_dtype` suffix unless
/// the dtype is its literal's default (`f32` for floats, `i64` for integers), so the
/// text says the constant's dtype (`0.5_f16`, `3_i32`).
fn constant(v: super::Value, dtype: DType) -> String {
    let text = match v {
        super::Value::Float(x) if x.is_finite() && dtype == DType::F64 => format!("{x:?}"),
        super::Value::Float(x) if x.is_finite() && dtype.is_float() => format!("{:?}", x as f32),
        _ => v.to_string(),
    };
    if dtype == default_dtype(v) {
        text
    } else {
        format!("{text}_{dtype}")
    }
}

/// The dtype of a constant written without a suffix.
pub(super) fn default_dtype(v: super::Value) -> DType {
    match v {
        super::Value::Float(_) => DType::F32,
        super::Value::Int(_) => DType::I64,
        super::Value::Bool(_) => DType::Bool,
    }
}

/// Whether index expression `e` prints starting with a loop variable (`i0`, `i1*4`,
/// `r0 // 2`): such an index value is written bare in a scalar expression. Any other
/// (`index(i0 + 1)`, `index(3)`, `index(t2)`) is wrapped, so it cannot be mistaken for
/// a parenthesized expression, an integer constant or a bound node.
pub(super) fn starts_with_var(e: &IndexExpr) -> bool {
    match e {
        IndexExpr::Var(_) => true,
        IndexExpr::Mul(x, _) => {
            !matches!(
                **x,
                IndexExpr::Sum(_) | IndexExpr::FloorDiv(..) | IndexExpr::Mod(..)
            ) && starts_with_var(x)
        }
        IndexExpr::FloorDiv(x, _) | IndexExpr::Mod(x, _) => {
            !matches!(**x, IndexExpr::Sum(_)) && starts_with_var(x)
        }
        _ => false,
    }
}

fn guard(bounds: &[super::Bound]) -> String {
    bounds
        .iter()
        .map(|b| format!("{} <= {} < {}", b.lo, b.expr, b.hi))
        .collect::<Vec<_>>()
        .join(" and ")
}
