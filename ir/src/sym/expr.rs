//! Shape expressions: integer polynomials over size symbols, in one canonical form.
//!
//! An [`Expr`] is a sum of terms, each an integer coefficient times a product of
//! atoms; an atom is a symbol or one of the few non-polynomial forms the typing
//! rules need (`floordiv`, `mod`, `min`, `max`), whose operands are expressions
//! themselves. The sum is kept as a sorted map from monomials to non-zero
//! coefficients, so two expressions that are equal as polynomials are equal as
//! values (`B*T + T == T*(B + 1)`), and `Display` prints the canonical form, which
//! the `.fg` reader reads back.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A size symbol's name (`T`, `batch`). Cheap to clone.
pub type Symbol = Arc<str>;

/// A factor of a monomial that is not a plain integer.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Atom {
    /// A size symbol.
    Sym(Symbol),
    /// `floordiv(a, b)`: division rounded toward negative infinity.
    FloorDiv(Box<Expr>, Box<Expr>),
    /// `mod(a, b)`: the remainder of `floordiv`, with the sign of `b`.
    Mod(Box<Expr>, Box<Expr>),
    /// `min(a, b)`.
    Min(Box<Expr>, Box<Expr>),
    /// `max(a, b)`.
    Max(Box<Expr>, Box<Expr>),
}

/// A product of atoms, each with its power; sorted by atom, powers >= 1.
pub type Monomial = Vec<(Atom, u32)>;

/// An integer expression over size symbols, in canonical form.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Expr {
    /// Monomial (the empty one is the constant term) to its non-zero coefficient.
    terms: BTreeMap<Monomial, i128>,
}

/// Why an expression has no value under a binding.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum EvalError {
    /// A symbol the binding does not give.
    Unbound(Symbol),
    /// A `floordiv` or `mod` by zero.
    DivisionByZero(String),
    /// A value beyond i64.
    Overflow(String),
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::Unbound(s) => write!(f, "size symbol `{s}` is not bound"),
            EvalError::DivisionByZero(e) => write!(f, "`{e}` divides by zero"),
            EvalError::Overflow(e) => write!(f, "`{e}` overflows a 64-bit integer"),
        }
    }
}

impl Expr {
    /// The constant `n`.
    pub fn int(n: i64) -> Expr {
        Expr::from_terms([(Vec::new(), n as i128)])
    }

    /// The constant extent `n`.
    pub fn from_size(n: usize) -> Expr {
        Expr::from_terms([(Vec::new(), n as i128)])
    }

    /// The symbol `name`.
    pub fn sym(name: impl Into<Symbol>) -> Expr {
        Expr::atom(Atom::Sym(name.into()))
    }

    fn atom(a: Atom) -> Expr {
        Expr::from_terms([(vec![(a, 1)], 1)])
    }

    fn from_terms(terms: impl IntoIterator<Item = (Monomial, i128)>) -> Expr {
        let mut out = BTreeMap::new();
        for (m, c) in terms {
            add_term(&mut out, m, c);
        }
        Expr { terms: out }
    }

    /// The value, if the expression is a constant that fits i64.
    pub fn as_const(&self) -> Option<i64> {
        match self.terms.len() {
            0 => Some(0),
            1 => {
                let (m, c) = self.terms.iter().next()?;
                if m.is_empty() {
                    i64::try_from(*c).ok()
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    /// The symbol, if the expression is exactly one symbol.
    pub fn as_symbol(&self) -> Option<&Symbol> {
        let mut it = self.terms.iter();
        match (it.next(), it.next()) {
            (Some((m, 1)), None) => match m.as_slice() {
                [(Atom::Sym(s), 1)] => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether no symbol occurs in it.
    pub fn is_const(&self) -> bool {
        self.terms.keys().all(|m| m.is_empty())
    }

    /// The symbols that occur in it, sorted, each once.
    pub fn symbols(&self) -> Vec<Symbol> {
        let mut out = Vec::new();
        self.collect_symbols(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_symbols(&self, out: &mut Vec<Symbol>) {
        for m in self.terms.keys() {
            for (a, _) in m {
                match a {
                    Atom::Sym(s) => out.push(s.clone()),
                    Atom::FloorDiv(x, y) | Atom::Mod(x, y) | Atom::Min(x, y) | Atom::Max(x, y) => {
                        x.collect_symbols(out);
                        y.collect_symbols(out);
                    }
                }
            }
        }
    }

    /// `self + other`.
    pub fn add(&self, other: &Expr) -> Expr {
        let mut terms = self.terms.clone();
        for (m, c) in &other.terms {
            add_term(&mut terms, m.clone(), *c);
        }
        Expr { terms }
    }

    /// `self - other`.
    pub fn sub(&self, other: &Expr) -> Expr {
        self.add(&other.scale(-1))
    }

    /// `k * self`.
    pub fn scale(&self, k: i128) -> Expr {
        Expr::from_terms(self.terms.iter().map(|(m, c)| (m.clone(), c * k)))
    }

    /// `self * other`.
    pub fn mul(&self, other: &Expr) -> Expr {
        let mut terms = BTreeMap::new();
        for (ma, ca) in &self.terms {
            for (mb, cb) in &other.terms {
                add_term(&mut terms, mul_monomials(ma, mb), ca.saturating_mul(*cb));
            }
        }
        Expr { terms }
    }

    /// `floordiv(self, d)`, simplified: constants fold, and a polynomial whose every
    /// coefficient `d` divides is divided term by term.
    pub fn floor_div(&self, d: &Expr) -> Expr {
        if let Some(k) = d.as_const() {
            if k == 1 {
                return self.clone();
            }
            if k != 0 {
                if let Some(n) = self.as_const() {
                    return Expr::int(n.div_euclid(k) - i64::from(n.rem_euclid(k) != 0 && k < 0));
                }
                let k = k as i128;
                if self.terms.values().all(|c| c % k == 0) {
                    return Expr::from_terms(self.terms.iter().map(|(m, c)| (m.clone(), c / k)));
                }
            }
        }
        if let Some(q) = self.exact_quotient(d) {
            return q;
        }
        Expr::atom(Atom::FloorDiv(Box::new(self.clone()), Box::new(d.clone())))
    }

    /// `self / d` when `d` is one term (`4*T`) that divides every term of `self`
    /// (`256*B*T / T = 256*B`). A symbol in `d` is taken to be non-zero, as a size
    /// that a typing rule divides by is (the concrete rule checks the instance).
    fn exact_quotient(&self, d: &Expr) -> Option<Expr> {
        let mut it = d.terms.iter();
        let (dm, &dc) = match (it.next(), it.next()) {
            (Some(t), None) => t,
            _ => return None,
        };
        if dm.is_empty() || dc == 0 {
            return None;
        }
        let mut out = Vec::with_capacity(self.terms.len());
        for (m, &c) in &self.terms {
            if c % dc != 0 {
                return None;
            }
            let mut q: Monomial = m.clone();
            for (atom, k) in dm {
                let entry = q.iter_mut().find(|(a, _)| a == atom)?;
                if entry.1 < *k {
                    return None;
                }
                entry.1 -= k;
            }
            q.retain(|(_, k)| *k > 0);
            out.push((q, c / dc));
        }
        Some(Expr::from_terms(out))
    }

    /// `ceil(self / d)`, as `floordiv(self + d - 1, d)` for a positive `d`.
    pub fn ceil_div(&self, d: &Expr) -> Expr {
        self.add(d).sub(&Expr::int(1)).floor_div(d)
    }

    /// `mod(self, d)`, simplified like [`Expr::floor_div`].
    pub fn modulo(&self, d: &Expr) -> Expr {
        if let Some(k) = d.as_const() {
            if k == 1 || k == -1 {
                return Expr::int(0);
            }
            if k != 0 {
                if let Some(n) = self.as_const() {
                    return Expr::int(floor_mod(n, k));
                }
                let k = k as i128;
                if self.terms.values().all(|c| c % k == 0) {
                    return Expr::int(0);
                }
            }
        }
        if self.exact_quotient(d).is_some() {
            return Expr::int(0);
        }
        Expr::atom(Atom::Mod(Box::new(self.clone()), Box::new(d.clone())))
    }

    /// `min(self, other)`; equal or constant operands fold, operands are ordered.
    pub fn minimum(&self, other: &Expr) -> Expr {
        match (self.as_const(), other.as_const()) {
            (Some(a), Some(b)) => return Expr::int(a.min(b)),
            _ if self == other => return self.clone(),
            _ => {}
        }
        if let Some(k) = self.sub(other).as_const() {
            return if k <= 0 { self.clone() } else { other.clone() };
        }
        let (a, b) = ordered(self, other);
        Expr::atom(Atom::Min(Box::new(a), Box::new(b)))
    }

    /// `max(self, other)`; like [`Expr::minimum`].
    pub fn maximum(&self, other: &Expr) -> Expr {
        match (self.as_const(), other.as_const()) {
            (Some(a), Some(b)) => return Expr::int(a.max(b)),
            _ if self == other => return self.clone(),
            _ => {}
        }
        if let Some(k) = self.sub(other).as_const() {
            return if k >= 0 { self.clone() } else { other.clone() };
        }
        let (a, b) = ordered(self, other);
        Expr::atom(Atom::Max(Box::new(a), Box::new(b)))
    }

    /// The value under `value_of` (a symbol's value, or `None` if unbound).
    pub fn eval_with(&self, value_of: &dyn Fn(&str) -> Option<i64>) -> Result<i64, EvalError> {
        let overflow = || EvalError::Overflow(self.to_string());
        let mut sum: i128 = 0;
        for (m, c) in &self.terms {
            let mut p: i128 = *c;
            for (a, k) in m {
                let v = atom_value(a, value_of)? as i128;
                for _ in 0..*k {
                    p = p.checked_mul(v).ok_or_else(overflow)?;
                }
            }
            sum = sum.checked_add(p).ok_or_else(overflow)?;
        }
        i64::try_from(sum).map_err(|_| overflow())
    }

    /// The expression with the symbols `value_of` gives replaced by their values.
    pub fn substitute(&self, value_of: &dyn Fn(&str) -> Option<i64>) -> Expr {
        let mut out = Expr::default();
        for (m, c) in &self.terms {
            let mut term = Expr::from_terms([(Vec::new(), *c)]);
            for (a, k) in m {
                let f = match a {
                    Atom::Sym(s) => match value_of(s) {
                        Some(v) => Expr::int(v),
                        None => Expr::atom(a.clone()),
                    },
                    Atom::FloorDiv(x, y) => {
                        x.substitute(value_of).floor_div(&y.substitute(value_of))
                    }
                    Atom::Mod(x, y) => x.substitute(value_of).modulo(&y.substitute(value_of)),
                    Atom::Min(x, y) => x.substitute(value_of).minimum(&y.substitute(value_of)),
                    Atom::Max(x, y) => x.substitute(value_of).maximum(&y.substitute(value_of)),
                };
                for _ in 0..*k {
                    term = term.mul(&f);
                }
            }
            out = out.add(&term);
        }
        out
    }

    /// The terms, for interval reasoning: monomial and coefficient.
    pub(crate) fn terms(&self) -> impl Iterator<Item = (&Monomial, i128)> {
        self.terms.iter().map(|(m, c)| (m, *c))
    }
}

fn ordered(a: &Expr, b: &Expr) -> (Expr, Expr) {
    if a <= b {
        (a.clone(), b.clone())
    } else {
        (b.clone(), a.clone())
    }
}

fn floor_mod(n: i64, k: i64) -> i64 {
    let r = n.rem_euclid(k);
    if k < 0 && r != 0 {
        r + k
    } else {
        r
    }
}

fn atom_value(a: &Atom, value_of: &dyn Fn(&str) -> Option<i64>) -> Result<i64, EvalError> {
    let pair = |x: &Expr, y: &Expr| -> Result<(i64, i64), EvalError> {
        Ok((x.eval_with(value_of)?, y.eval_with(value_of)?))
    };
    Ok(match a {
        Atom::Sym(s) => value_of(s).ok_or_else(|| EvalError::Unbound(s.clone()))?,
        Atom::FloorDiv(x, y) => {
            let (n, k) = pair(x, y)?;
            if k == 0 {
                return Err(EvalError::DivisionByZero(Expr::atom(a.clone()).to_string()));
            }
            n.checked_div_euclid(k)
                .map(|q| q - i64::from(k < 0 && n.rem_euclid(k) != 0))
                .ok_or_else(|| EvalError::Overflow(Expr::atom(a.clone()).to_string()))?
        }
        Atom::Mod(x, y) => {
            let (n, k) = pair(x, y)?;
            if k == 0 {
                return Err(EvalError::DivisionByZero(Expr::atom(a.clone()).to_string()));
            }
            if k == -1 {
                0
            } else {
                floor_mod(n, k)
            }
        }
        Atom::Min(x, y) => {
            let (p, q) = pair(x, y)?;
            p.min(q)
        }
        Atom::Max(x, y) => {
            let (p, q) = pair(x, y)?;
            p.max(q)
        }
    })
}

fn add_term(terms: &mut BTreeMap<Monomial, i128>, m: Monomial, c: i128) {
    if c == 0 {
        return;
    }
    match terms.get_mut(&m) {
        Some(e) => {
            *e = e.saturating_add(c);
            if *e == 0 {
                terms.remove(&m);
            }
        }
        None => {
            terms.insert(m, c);
        }
    }
}

fn mul_monomials(a: &Monomial, b: &Monomial) -> Monomial {
    let mut out: Monomial = a.clone();
    for (atom, k) in b {
        match out.iter_mut().find(|(x, _)| x == atom) {
            Some((_, p)) => *p += k,
            None => out.push((atom.clone(), *k)),
        }
    }
    out.sort();
    out
}

impl From<i64> for Expr {
    fn from(n: i64) -> Expr {
        Expr::int(n)
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Sym(s) => f.write_str(s),
            Atom::FloorDiv(a, b) => write!(f, "floordiv({a}, {b})"),
            Atom::Mod(a, b) => write!(f, "mod({a}, {b})"),
            Atom::Min(a, b) => write!(f, "min({a}, {b})"),
            Atom::Max(a, b) => write!(f, "max({a}, {b})"),
        }
    }
}

/// The canonical text: terms by decreasing degree then by their atoms, constant last,
/// `2*B*T + T - 1`. The `.fg` reader reads it back to the same expression.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        let degree = |m: &Monomial| m.iter().map(|(_, k)| *k).sum::<u32>();
        let mut terms = self.terms_vec();
        terms.sort_by(|(a, _), (b, _)| degree(b).cmp(&degree(a)).then(a.cmp(b)));
        for (i, (m, c)) in terms.into_iter().enumerate() {
            let (neg, mag) = (c < 0, c.unsigned_abs());
            match (i, neg) {
                (0, true) => f.write_str("-")?,
                (0, false) => {}
                (_, true) => f.write_str(" - ")?,
                (_, false) => f.write_str(" + ")?,
            }
            if m.is_empty() {
                write!(f, "{mag}")?;
                continue;
            }
            if mag != 1 {
                write!(f, "{mag}*")?;
            }
            let mut first = true;
            for (a, k) in m {
                for _ in 0..*k {
                    if !first {
                        f.write_str("*")?;
                    }
                    first = false;
                    write!(f, "{a}")?;
                }
            }
        }
        Ok(())
    }
}

impl Expr {
    fn terms_vec(&self) -> Vec<(&Monomial, i128)> {
        self.terms.iter().map(|(m, c)| (m, *c)).collect()
    }
}
