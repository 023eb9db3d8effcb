//! The printer: a [`TileKernel`] as canonical `.tile` text.
//!
//! Two-space indentation, one statement per line, single spaces around infix
//! operators, and only the parentheses precedence needs, so `parse(print(k)) == k`
//! for every kernel (a property test checks it).

use super::ast::*;
use std::fmt::Write;

/// The canonical text of a kernel.
///
/// ```
/// use ferrite_accel::tile;
/// let src = "kernel k(x:*f32,n:i32){\n o=arange(0,4)\n store(x+o,cast(o,f32)*-2.0,mask=o<n)}";
/// let text = tile::print(&tile::parse("k.tile", src).unwrap());
/// assert_eq!(text, "kernel k(x: *f32, n: i32) {\n  o = arange(0, 4)\n  store(x + o, cast(o, f32) * -2.0, mask=o < n)\n}\n");
/// ```
pub fn print(kernel: &TileKernel) -> String {
    let mut out = format!("kernel {}(", kernel.name);
    for (i, p) in kernel.params.iter().enumerate() {
        if i > 0 {
            out += ", ";
        }
        let _ = match p.ty {
            ParamType::Ptr(d) => write!(out, "{}: *{d}", p.name),
            ParamType::Scalar(d) => write!(out, "{}: {d}", p.name),
        };
    }
    out += ") {\n";
    block(&mut out, &kernel.body, 1);
    out += "}\n";
    out
}

/// The canonical text of one expression (used in messages about it).
pub fn print_expr(e: &Expr) -> String {
    let mut out = String::new();
    expr(&mut out, e, 0);
    out
}

fn block(out: &mut String, body: &[Stmt], level: usize) {
    for s in body {
        out.extend(std::iter::repeat_n("  ", level));
        match &s.kind {
            StmtKind::Const { name, value } => {
                let _ = write!(out, "const {name} = ");
                expr(out, value, 0);
            }
            StmtKind::Assign { name, value } => {
                let _ = write!(out, "{name} = ");
                expr(out, value, 0);
            }
            StmtKind::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let _ = write!(out, "for {var} in range(");
                expr(out, start, 0);
                out.push_str(", ");
                expr(out, end, 0);
                if let Some(step) = step {
                    out.push_str(", ");
                    expr(out, step, 0);
                }
                out.push_str(") {\n");
                block(out, body, level + 1);
                out.extend(std::iter::repeat_n("  ", level));
                out.push('}');
            }
            StmtKind::Expr(e) => expr(out, e, 0),
        }
        out.push('\n');
    }
}

/// Binding strength of prefix operators and of postfix indexing.
const UNARY: u8 = 6;
const POSTFIX: u8 = 7;

fn precedence(e: &Expr) -> u8 {
    match &e.kind {
        ExprKind::Binary(op, ..) => op.precedence(),
        ExprKind::Unary(..) => UNARY,
        ExprKind::Index(..) => POSTFIX,
        _ => POSTFIX + 1,
    }
}

/// True when the printed expression starts with a number, which a `-` in front
/// of it would fuse with into a negative literal.
fn starts_with_number(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Int(_) | ExprKind::Float(_) => true,
        ExprKind::Index(base, _) => starts_with_number(base),
        _ => false,
    }
}

/// Prints `e`, parenthesized when it binds looser than `min`.
fn expr(out: &mut String, e: &Expr, min: u8) {
    if precedence(e) < min {
        out.push('(');
        expr(out, e, 0);
        out.push(')');
        return;
    }
    match &e.kind {
        ExprKind::Int(v) => {
            let _ = write!(out, "{v}");
        }
        ExprKind::Float(v) => float(out, *v),
        ExprKind::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        ExprKind::Name(n) => out.push_str(n),
        ExprKind::DType(d) => out.push_str(d.name()),
        ExprKind::Tuple(items) => {
            out.push('(');
            list(out, items);
            if items.len() == 1 {
                out.push(',');
            }
            out.push(')');
        }
        ExprKind::Unary(op, x) => {
            out.push(match op {
                UnaryOp::Neg => '-',
                UnaryOp::Not => '!',
            });
            if *op == UnaryOp::Neg && starts_with_number(x) {
                out.push('(');
                expr(out, x, 0);
                out.push(')');
            } else {
                expr(out, x, UNARY);
            }
        }
        ExprKind::Binary(op, l, r) => {
            let p = op.precedence();
            // Left-associative; comparisons do not chain, so a comparison on the
            // left of another needs parentheses too.
            expr(out, l, if op.is_comparison() { p + 1 } else { p });
            let _ = write!(out, " {} ", op.symbol());
            expr(out, r, p + 1);
        }
        ExprKind::Index(base, items) => {
            expr(out, base, POSTFIX);
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(match item {
                    IndexItem::Full => ":",
                    IndexItem::NewAxis => "None",
                });
            }
            out.push(']');
        }
        ExprKind::Call { func, args, kwargs } => {
            out.push_str(func.name());
            out.push('(');
            list(out, args);
            for (i, (k, v)) in kwargs.iter().enumerate() {
                if i > 0 || !args.is_empty() {
                    out.push_str(", ");
                }
                let _ = write!(out, "{k}=");
                expr(out, v, 0);
            }
            out.push(')');
        }
    }
}

fn list(out: &mut String, items: &[Expr]) {
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        expr(out, x, 0);
    }
}

/// Floats print so they read back bit for bit: Rust's shortest round-trip form
/// (always with a `.` or an exponent, so it lexes as a float), or `inf`/`nan`.
fn float(out: &mut String, v: f64) {
    let sign = if v.is_sign_negative() { "-" } else { "" };
    if v.is_nan() {
        out.push_str("nan");
    } else if v.is_infinite() {
        let _ = write!(out, "{sign}inf");
    } else {
        let _ = write!(out, "{v:?}");
    }
}
