//! The printer: a [`TileKernel`] as canonical `.tile` text.
//!
//! Two-space indentation, one statement per line, single spaces around infix
//! operators, and only the parentheses precedence needs, so `parse(print(k)) == k`
//! for every kernel (a property test checks it). [`print_located`] also records
//! in every node's span where it was printed, so that the errors of a kernel built
//! in code point into its printed text.

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
    print_located(&mut kernel.clone())
}

/// The canonical text of a kernel, with every span of `kernel` set to where its
/// node is in that text (as if the kernel had been parsed from it).
pub fn print_located(kernel: &mut TileKernel) -> String {
    let mut p = Printer::default();
    for c in &kernel.comments {
        p.comment(c);
        p.out.push('\n');
    }
    p.out += "kernel ";
    let start = p.out.len();
    p.out += &kernel.name;
    kernel.span = Span::new(start, p.out.len());
    p.out.push('(');
    for (i, param) in kernel.params.iter_mut().enumerate() {
        if i > 0 {
            p.out += ", ";
        }
        let start = p.out.len();
        let _ = match param.ty {
            ParamType::Ptr(d) => write!(p.out, "{}: *{d}", param.name),
            ParamType::Scalar(d) => write!(p.out, "{}: {d}", param.name),
        };
        param.span = Span::new(start, p.out.len());
    }
    p.out += ") {\n";
    p.block(&mut kernel.body, 1);
    p.out += "}\n";
    p.out
}

/// The canonical text of one expression (used in messages about it).
pub fn print_expr(e: &Expr) -> String {
    let mut p = Printer::default();
    p.expr(&mut e.clone(), 0);
    p.out
}

#[derive(Default)]
struct Printer {
    out: String,
}

/// Binding strength of prefix operators and of postfix indexing.
const UNARY: u8 = 8;
const POSTFIX: u8 = 9;

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
    leading_literal(e).is_some()
}

/// Whether the number `e` starts with is negative (it prints with its minus).
fn leading_literal(e: &Expr) -> Option<bool> {
    match &e.kind {
        ExprKind::Int(v) => Some(*v < 0),
        ExprKind::Float(v) => Some(v.is_sign_negative()),
        ExprKind::Index(base, _) => leading_literal(base),
        _ => None,
    }
}

impl Printer {
    fn comment(&mut self, text: &str) {
        self.out.push('#');
        if !text.is_empty() {
            self.out.push(' ');
            self.out += text;
        }
    }

    fn block(&mut self, body: &mut [Stmt], level: usize) {
        for s in body {
            self.out.extend(std::iter::repeat_n("  ", level));
            let start = self.out.len();
            match &mut s.kind {
                StmtKind::Const { name, value } => {
                    let _ = write!(self.out, "const {name} = ");
                    self.expr(value, 0);
                }
                StmtKind::Assign { name, value } => {
                    let _ = write!(self.out, "{name} = ");
                    self.expr(value, 0);
                }
                StmtKind::For {
                    var,
                    start: first,
                    end,
                    step,
                    body,
                } => {
                    let _ = write!(self.out, "for {var} in range(");
                    self.expr(first, 0);
                    self.out.push_str(", ");
                    self.expr(end, 0);
                    if let Some(step) = step {
                        self.out.push_str(", ");
                        self.expr(step, 0);
                    }
                    self.out.push_str(") {");
                    s.span = Span::new(start, self.out.len());
                    self.out.push('\n');
                    self.block(body, level + 1);
                    self.out.extend(std::iter::repeat_n("  ", level));
                    self.out.push_str("}\n");
                    continue;
                }
                StmtKind::Expr(e) => self.expr(e, 0),
                StmtKind::Comment(text) => self.comment(text),
            }
            s.span = Span::new(start, self.out.len());
            self.out.push('\n');
        }
    }

    /// Prints `e`, parenthesized when it binds looser than `min`.
    fn expr(&mut self, e: &mut Expr, min: u8) {
        if precedence(e) < min {
            self.out.push('(');
            self.expr(e, 0);
            self.out.push(')');
            return;
        }
        let start = self.out.len();
        match &mut e.kind {
            ExprKind::Int(v) => {
                let _ = write!(self.out, "{v}");
            }
            ExprKind::Float(v) => self.float(*v),
            ExprKind::Bool(b) => {
                let _ = write!(self.out, "{b}");
            }
            ExprKind::Name(n) => self.out.push_str(n),
            ExprKind::DType(d) => self.out.push_str(d.name()),
            ExprKind::Tuple(items) => {
                self.out.push('(');
                let one = items.len() == 1;
                self.list(items);
                if one {
                    self.out.push(',');
                }
                self.out.push(')');
            }
            ExprKind::Unary(op, x) => {
                self.out.push(match op {
                    UnaryOp::Neg => '-',
                    UnaryOp::Not => '!',
                });
                if *op == UnaryOp::Neg && leading_literal(x) == Some(true) {
                    // `- -3` reads back as the negation of the literal -3, with no
                    // parentheses, which would add a level of nesting the source did
                    // not have (a kernel at the nesting limit would not read back).
                    self.out.push(' ');
                    self.expr(x, UNARY);
                } else if *op == UnaryOp::Neg && starts_with_number(x) {
                    self.out.push('(');
                    self.expr(x, 0);
                    self.out.push(')');
                } else {
                    self.expr(x, UNARY);
                }
            }
            ExprKind::Binary(op, l, r) => {
                let p = op.precedence();
                // Left-associative; comparisons do not chain, so a comparison on the
                // left of another needs parentheses too.
                self.expr(l, if op.is_comparison() { p + 1 } else { p });
                let _ = write!(self.out, " {} ", op.symbol());
                self.expr(r, p + 1);
            }
            ExprKind::Index(base, items) => {
                self.expr(base, POSTFIX);
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.out.push_str(match item {
                        IndexItem::Full => ":",
                        IndexItem::NewAxis => "None",
                    });
                }
                self.out.push(']');
            }
            ExprKind::Call { func, args, kwargs } => {
                self.out.push_str(func.name());
                self.out.push('(');
                let positional = !args.is_empty();
                self.list(args);
                for (i, (k, v)) in kwargs.iter_mut().enumerate() {
                    if i > 0 || positional {
                        self.out.push_str(", ");
                    }
                    let _ = write!(self.out, "{k}=");
                    self.expr(v, 0);
                }
                self.out.push(')');
            }
        }
        e.span = Span::new(start, self.out.len());
    }

    fn list(&mut self, items: &mut [Expr]) {
        for (i, x) in items.iter_mut().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.expr(x, 0);
        }
    }

    /// Floats print so they read back bit for bit: Rust's shortest round-trip form
    /// (always with a `.` or an exponent, so it lexes as a float), or `inf`/`nan`.
    fn float(&mut self, v: f64) {
        let sign = if v.is_sign_negative() { "-" } else { "" };
        if v.is_nan() {
            self.out.push_str("nan");
        } else if v.is_infinite() {
            let _ = write!(self.out, "{sign}inf");
        } else {
            let _ = write!(self.out, "{v:?}");
        }
    }
}
