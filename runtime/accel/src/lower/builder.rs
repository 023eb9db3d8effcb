//! Writing a tile kernel as text: statements, comments, loops, and the names of
//! bound values.
//!
//! Expressions are built as [`Expr`] trees and printed with the language's own
//! printer, so precedence and literal syntax are always right; statements are
//! laid out here so the lowered kernels can carry comments (the dump of a
//! compiled program is this text, and it is what the simulator's error
//! messages point into).
//!
//! Binding is common-subexpression elimination by text: binding an expression
//! whose printed form is already bound in a visible scope returns the existing
//! name. That is what makes a row read by three stages of a fused softmax load
//! once when the row fits one tile.

use crate::tile::ast::{BinaryOp, Builtin, Expr, ExprKind, IndexItem, UnaryOp};
use crate::tile::print_expr;
use ferrite_ir::DType;
use std::collections::{HashMap, HashSet};

/// The lines of a kernel body under construction.
#[derive(Default)]
pub(super) struct Builder {
    lines: Vec<String>,
    depth: usize,
    /// Per open scope (the body, then each loop): printed expression -> name.
    scopes: Vec<HashMap<String, String>>,
    /// Every name used so far: names are never reused, so no binding can shadow
    /// another or change type inside a loop by accident.
    taken: HashSet<String>,
    /// Expressions asked about by [`Builder::shared`], by text, with counts.
    asked: HashMap<String, usize>,
    /// Expressions to bind when met (those asked about more than once by
    /// earlier emissions of the same kernel).
    repeated: HashSet<String>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder {
            scopes: vec![HashMap::new()],
            depth: 1,
            ..Builder::default()
        }
    }

    fn push_line(&mut self, text: String) {
        let mut line = "  ".repeat(self.depth);
        line.push_str(&text);
        self.lines.push(line);
    }

    /// A builder that binds the expressions in `repeated` when it meets them.
    pub fn binding(repeated: HashSet<String>) -> Builder {
        Builder {
            repeated,
            ..Builder::new()
        }
    }

    /// The expressions this emission was asked about ([`Builder::shared`]) more
    /// than once: emitting the kernel again with them bound
    /// ([`Builder::binding`]) makes stages that compute the same value (the
    /// `exp` of a softmax's sum and of its store) share one binding.
    pub fn repeated(&self) -> impl Iterator<Item = &String> {
        self.asked.iter().filter(|(_, &n)| n > 1).map(|(t, _)| t)
    }

    /// True when `e` should be bound although it is used once here, because it
    /// is computed elsewhere in the kernel too. Records the question for
    /// [`Builder::repeated`].
    pub fn shared(&mut self, e: &Expr) -> bool {
        let text = print_expr(e);
        let hit = self.repeated.contains(&text);
        *self.asked.entry(text).or_insert(0) += 1;
        hit
    }

    /// A `# comment` line.
    pub fn comment(&mut self, text: &str) {
        self.push_line(format!("# {text}"));
    }

    /// Reserves `name` (a parameter) so no binding takes it.
    pub fn reserve(&mut self, name: &str) {
        self.taken.insert(name.to_string());
    }

    /// A fresh name starting with `hint`: the hint itself when free, else
    /// `hint1`, `hint2`, ...
    pub fn fresh(&mut self, hint: &str) -> String {
        let mut name = hint.to_string();
        let mut n = 1;
        while self.taken.contains(&name) {
            name = format!("{hint}{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        name
    }

    /// `const NAME = value`.
    pub fn constant(&mut self, hint: &str, value: i64) -> Expr {
        let name = self.fresh(hint);
        self.push_line(format!("const {name} = {value}"));
        name_expr(&name)
    }

    /// Binds `e` to a name (or finds the name it is already bound to) and returns
    /// the name as an expression. Names and literals are returned as they are.
    pub fn bind(&mut self, hint: &str, e: Expr) -> Expr {
        if matches!(
            e.kind,
            ExprKind::Name(_) | ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_)
        ) {
            return e;
        }
        let text = print_expr(&e);
        for scope in self.scopes.iter().rev() {
            if let Some(n) = scope.get(&text) {
                return name_expr(n);
            }
        }
        let name = self.fresh(hint);
        self.push_line(format!("{name} = {text}"));
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(text, name.clone());
        }
        name_expr(&name)
    }

    /// Binds `e` to a new name, never reusing an earlier binding (for values that
    /// are reassigned later, like accumulators).
    pub fn bind_new(&mut self, hint: &str, e: Expr) -> String {
        let name = self.fresh(hint);
        self.push_line(format!("{name} = {}", print_expr(&e)));
        name
    }

    /// Reassigns an existing name (a loop-carried value). Bindings whose text
    /// mentions the name are forgotten: they hold the old value.
    pub fn assign(&mut self, name: &str, e: Expr) {
        self.push_line(format!("{name} = {}", print_expr(&e)));
        for scope in &mut self.scopes {
            scope.retain(|text, _| !mentions(text, name));
        }
    }

    /// A statement (`store`, `dma_wait`).
    pub fn stmt(&mut self, e: Expr) {
        self.push_line(print_expr(&e));
    }

    /// Opens `for var in range(start, end, step) {`; returns the loop variable.
    pub fn open_loop(&mut self, hint: &str, start: Expr, end: Expr, step: Expr) -> Expr {
        let var = self.fresh(hint);
        self.push_line(format!(
            "for {var} in range({}, {}, {}) {{",
            print_expr(&start),
            print_expr(&end),
            print_expr(&step)
        ));
        self.depth += 1;
        self.scopes.push(HashMap::new());
        name_expr(&var)
    }

    /// Closes the innermost loop; names bound inside it end with it.
    pub fn close_loop(&mut self) {
        self.scopes.pop();
        self.depth = self.depth.saturating_sub(1);
        self.push_line("}".to_string());
    }

    /// The whole kernel: header comment lines, signature and body.
    pub fn finish(self, header: &[String], name: &str, params: &[(String, DType)]) -> String {
        let mut out = String::new();
        for h in header {
            out.push_str("# ");
            out.push_str(h);
            out.push('\n');
        }
        let sig: Vec<String> = params.iter().map(|(n, d)| format!("{n}: *{d}")).collect();
        out.push_str(&format!("kernel {name}({}) {{\n", sig.join(", ")));
        for l in self.lines {
            out.push_str(&l);
            out.push('\n');
        }
        out.push_str("}\n");
        out
    }
}

/// True when `text` uses `name` as a whole identifier.
fn mentions(text: &str, name: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| w == name)
}

// Expression constructors, so lowering code reads like the kernels it writes.

pub(super) fn name_expr(n: &str) -> Expr {
    Expr::new(ExprKind::Name(n.to_string()))
}

pub(super) fn int(v: i64) -> Expr {
    Expr::new(ExprKind::Int(v))
}

pub(super) fn boolean(v: bool) -> Expr {
    Expr::new(ExprKind::Bool(v))
}

/// A float literal. Values that are exactly an f32 print in f32's shortest form
/// (`1.4285715`, as the loop IR prints them) when that form reads back to the
/// same f32; others print in f64's.
pub(super) fn float(v: f64) -> Expr {
    let f = v as f32;
    if v.is_finite() && f as f64 == v {
        if let Ok(short) = format!("{f:?}").parse::<f64>() {
            if short as f32 == f {
                return Expr::new(ExprKind::Float(short));
            }
        }
    }
    Expr::new(ExprKind::Float(v))
}

pub(super) fn dtype(d: DType) -> Expr {
    Expr::new(ExprKind::DType(d))
}

pub(super) fn tuple(items: &[usize]) -> Expr {
    Expr::new(ExprKind::Tuple(
        items.iter().map(|&v| int(v as i64)).collect(),
    ))
}

pub(super) fn bin(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    Expr::new(ExprKind::Binary(op, Box::new(a), Box::new(b)))
}

pub(super) fn add(a: Expr, b: Expr) -> Expr {
    bin(BinaryOp::Add, a, b)
}

pub(super) fn sub(a: Expr, b: Expr) -> Expr {
    bin(BinaryOp::Sub, a, b)
}

pub(super) fn mul(a: Expr, b: Expr) -> Expr {
    bin(BinaryOp::Mul, a, b)
}

pub(super) fn div(a: Expr, b: Expr) -> Expr {
    bin(BinaryOp::Div, a, b)
}

pub(super) fn rem(a: Expr, b: Expr) -> Expr {
    bin(BinaryOp::Rem, a, b)
}

pub(super) fn and(a: Expr, b: Expr) -> Expr {
    bin(BinaryOp::And, a, b)
}

pub(super) fn or(a: Expr, b: Expr) -> Expr {
    bin(BinaryOp::Or, a, b)
}

pub(super) fn lt(a: Expr, b: Expr) -> Expr {
    bin(BinaryOp::Lt, a, b)
}

pub(super) fn ge(a: Expr, b: Expr) -> Expr {
    bin(BinaryOp::Ge, a, b)
}

pub(super) fn not(a: Expr) -> Expr {
    Expr::new(ExprKind::Unary(UnaryOp::Not, Box::new(a)))
}

pub(super) fn neg(a: Expr) -> Expr {
    Expr::new(ExprKind::Unary(UnaryOp::Neg, Box::new(a)))
}

pub(super) fn call(func: Builtin, args: Vec<Expr>) -> Expr {
    Expr::new(ExprKind::Call {
        func,
        args,
        kwargs: Vec::new(),
    })
}

pub(super) fn call_kw(func: Builtin, args: Vec<Expr>, kwargs: Vec<(&str, Expr)>) -> Expr {
    Expr::new(ExprKind::Call {
        func,
        args,
        kwargs: kwargs
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    })
}

pub(super) fn cast(e: Expr, d: DType) -> Expr {
    call(Builtin::Cast, vec![e, dtype(d)])
}

pub(super) fn where_(c: Expr, a: Expr, b: Expr) -> Expr {
    call(Builtin::Where, vec![c, a, b])
}

/// `e[:, None]`: a row of values as a column.
pub(super) fn column(e: Expr) -> Expr {
    Expr::new(ExprKind::Index(
        Box::new(e),
        vec![IndexItem::Full, IndexItem::NewAxis],
    ))
}

/// `e[None, :]`: a 1-D tile as a row.
pub(super) fn row(e: Expr) -> Expr {
    Expr::new(ExprKind::Index(
        Box::new(e),
        vec![IndexItem::NewAxis, IndexItem::Full],
    ))
}

/// `arange(0, n)`.
pub(super) fn arange(n: usize) -> Expr {
    call(Builtin::Arange, vec![int(0), int(n as i64)])
}

/// `program_id(axis)`.
pub(super) fn program_id(axis: usize) -> Expr {
    call(Builtin::ProgramId, vec![int(axis as i64)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_reuses_equal_text_within_visible_scopes() {
        let mut b = Builder::new();
        let x = b.bind("x", add(name_expr("p"), int(1)));
        let y = b.bind("y", add(name_expr("p"), int(1)));
        assert_eq!(print_expr(&x), "x");
        assert_eq!(print_expr(&y), "x");
        let v = b.open_loop("k", int(0), int(8), int(2));
        let z = b.bind("z", mul(v.clone(), int(3)));
        assert_eq!(print_expr(&z), "z");
        b.close_loop();
        // The loop's bindings ended with it: a new name.
        let z2 = b.bind("z", mul(v, int(3)));
        assert_eq!(print_expr(&z2), "z1");
        let text = b.finish(&["doc".into()], "k", &[("p".into(), DType::F32)]);
        assert_eq!(
            text,
            "# doc\nkernel k(p: *f32) {\n  x = p + 1\n  for k in range(0, 8, 2) {\n    \
             z = k * 3\n  }\n  z1 = k * 3\n}\n"
        );
    }

    #[test]
    fn expressions_repeated_in_a_first_emission_are_bound_in_the_second() {
        let e = add(name_expr("p"), int(1));
        let mut first = Builder::new();
        assert!(!first.shared(&e));
        assert!(!first.shared(&e));
        assert!(!first.shared(&int(2)));
        let mut second = Builder::binding(first.repeated().cloned().collect());
        assert!(second.shared(&e));
        assert!(!second.shared(&mul(name_expr("p"), int(1))));
    }

    #[test]
    fn reassignment_forgets_stale_bindings() {
        let mut b = Builder::new();
        let acc = b.bind_new("acc", int(0));
        let t = b.bind("t", add(name_expr(&acc), int(1)));
        assert_eq!(print_expr(&t), "t");
        b.assign(&acc, int(5));
        let t2 = b.bind("t", add(name_expr(&acc), int(1)));
        assert_eq!(print_expr(&t2), "t1");
        assert!(mentions("acc + 1", "acc"));
        assert!(!mentions("acc1 + 1", "acc"));
    }

    #[test]
    fn floats_print_in_their_shortest_f32_form() {
        let v = (1.0f32 / 0.7f32) as f64;
        assert_eq!(print_expr(&float(v)), "1.4285715");
        assert_eq!(print_expr(&float(0.1)), "0.1");
        assert_eq!(print_expr(&float(f64::NEG_INFINITY)), "-inf");
        assert_eq!(print_expr(&float(1e-5f32 as f64)), "1e-5");
    }
}
