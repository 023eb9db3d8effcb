//! Size symbols: dimensions known only as names until a run binds them.
//!
//! A symbolic shape is a list of [`Expr`]s over named symbols (`[B, T, 256]`,
//! `[B*T, 256]`). Typing a graph over such shapes runs the one typing rule,
//! [`crate::infer::infer_dims`], with [`Expr`] as its dimension type
//! ([`Dim`]); where the rule needs a fact it cannot decide from the symbols'
//! ranges (two extents equal, an element count divisible), it records the fact
//! as a [`Constraint`] in [`Facts`] and goes on assuming it. A [`Binding`]
//! gives each symbol a value; [`Facts::check`] checks every range and constraint
//! under it, with a message naming the symbols, their values and the place that
//! needs the fact, before the graph is instantiated with those numbers.

mod attention;
mod dim;
mod expr;
mod generalize;
pub mod graph;
mod rows;
mod segments;

pub use attention::AttentionSite;
pub use dim::{Dim, SymAttrs};
pub use expr::{Atom, EvalError, Expr, Monomial, Symbol};
pub use generalize::trace_bindings;
pub use graph::{is_symbolic_attribute, SymGraph, SYMBOLIC_ATTRIBUTES};
pub use rows::RowForm;
pub use segments::{Segment, Segments, Source};

use std::collections::BTreeMap;
use std::fmt;

/// The default upper bound of a symbol: a tensor's element limit.
pub const DEFAULT_MAX: i64 = crate::types::MAX_ELEMENTS as i64;

/// A symbol's declared range `lo..=hi` and where it was declared or first seen.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SymbolInfo {
    /// The symbol.
    pub name: Symbol,
    /// The smallest value it may take (1 unless declared otherwise).
    pub lo: i64,
    /// The largest value it may take.
    pub hi: i64,
    /// Whether a `dims` line declared it (so it prints there).
    pub declared: bool,
    /// Where it was declared or first used (`file:line:col`), for messages.
    pub at: Option<String>,
}

/// Values of size symbols.
#[derive(Clone, PartialEq, Eq, Debug, Default, Hash, PartialOrd, Ord)]
pub struct Binding {
    values: BTreeMap<Symbol, i64>,
}

impl Binding {
    /// An empty binding.
    pub fn new() -> Binding {
        Binding::default()
    }

    /// Binds `name` to `value` (replacing an earlier value).
    pub fn set(&mut self, name: impl Into<Symbol>, value: i64) {
        self.values.insert(name.into(), value);
    }

    /// The value of `name`, if bound.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.values.get(name).copied()
    }

    /// The bound symbols and their values, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&Symbol, i64)> {
        self.values.iter().map(|(s, v)| (s, *v))
    }

    /// The value of `e` under this binding.
    pub fn eval(&self, e: &Expr) -> Result<i64, EvalError> {
        e.eval_with(&|s| self.get(s))
    }

    /// `T = 7, B = 2` for the symbols of `e`.
    fn describe(&self, symbols: &[Symbol]) -> String {
        symbols
            .iter()
            .map(|s| match self.get(s) {
                Some(v) => format!("{s} = {v}"),
                None => format!("{s} unbound"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .values
            .iter()
            .map(|(s, v)| format!("{s}={v}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// A fact about sizes that a graph relies on.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Fact {
    /// The two extents are equal.
    Eq(Expr, Expr),
    /// The first divides the second.
    Divides(Expr, Expr),
    /// The extent is at least the bound.
    AtLeast(Expr, i64),
}

impl Fact {
    fn symbols(&self) -> Vec<Symbol> {
        let mut s = match self {
            Fact::Eq(a, b) | Fact::Divides(a, b) => {
                let mut s = a.symbols();
                s.extend(b.symbols());
                s
            }
            Fact::AtLeast(a, _) => a.symbols(),
        };
        s.sort();
        s.dedup();
        s
    }

    /// Whether the fact holds under `b`.
    pub fn holds(&self, b: &Binding) -> Result<bool, EvalError> {
        Ok(match self {
            Fact::Eq(x, y) => b.eval(x)? == b.eval(y)?,
            Fact::Divides(d, n) => {
                let (d, n) = (b.eval(d)?, b.eval(n)?);
                d != 0 && n % d == 0
            }
            Fact::AtLeast(x, k) => b.eval(x)? >= *k,
        })
    }
}

impl fmt::Display for Fact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fact::Eq(a, b) => write!(f, "{a} equal to {b}"),
            Fact::Divides(d, n) => write!(f, "{n} divisible by {d}"),
            Fact::AtLeast(a, k) => write!(f, "{a} >= {k}"),
        }
    }
}

/// A fact, the op that needs it, and where.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Constraint {
    /// What must hold.
    pub fact: Fact,
    /// Who needs it (`matmul`, `reshape`).
    pub why: String,
    /// Where (`file:line:col`), when known.
    pub at: Option<String>,
}

/// What symbolic typing knows and assumes: the symbols with their ranges, and the
/// constraints recorded so far.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Facts {
    /// Every symbol, in the order first seen.
    pub symbols: Vec<SymbolInfo>,
    /// The constraints recorded, in the order recorded, each once.
    pub constraints: Vec<Constraint>,
    /// Symbolic attribute values of the node being typed (read by [`Dim`]).
    pub(crate) attrs: SymAttrs,
    /// Where the node being typed is, attached to the constraints it records.
    pub(crate) at: Option<String>,
}

/// A large value standing for "unbounded" in interval arithmetic.
const HUGE: i128 = 1 << 100;

impl Facts {
    /// No symbols, no constraints.
    pub fn new() -> Facts {
        Facts::default()
    }

    /// The symbol `name`, if known.
    pub fn symbol(&self, name: &str) -> Option<&SymbolInfo> {
        self.symbols.iter().find(|s| &*s.name == name)
    }

    /// Adds a symbol with the default range `1..=DEFAULT_MAX` unless already known.
    pub fn add_symbol(&mut self, name: &str, at: Option<String>) -> Symbol {
        if let Some(s) = self.symbol(name) {
            return s.name.clone();
        }
        let name: Symbol = name.into();
        self.symbols.push(SymbolInfo {
            name: name.clone(),
            lo: 1,
            hi: DEFAULT_MAX,
            declared: false,
            at,
        });
        name
    }

    /// Sets where the constraints recorded next come from, and the node's symbolic
    /// attributes.
    pub fn at_node(&mut self, at: Option<String>, attrs: SymAttrs) {
        self.at = at;
        self.attrs = attrs;
    }

    /// Records `fact` for `why`, unless it is already recorded.
    pub fn require(&mut self, fact: Fact, why: &str) {
        if self.constraints.iter().any(|c| c.fact == fact) {
            return;
        }
        self.constraints.push(Constraint {
            fact,
            why: why.to_string(),
            at: self.at.clone(),
        });
    }

    /// Bounds `[lo, hi]` of `e` over the symbols' ranges (saturating at a huge value).
    pub fn bounds(&self, e: &Expr) -> (i128, i128) {
        let (mut lo, mut hi) = (0i128, 0i128);
        for (m, c) in e.terms() {
            let (mut a, mut b) = (1i128, 1i128);
            for (atom, k) in m {
                let (p, q) = self.atom_bounds(atom);
                for _ in 0..*k {
                    (a, b) = mul_interval((a, b), (p, q));
                }
            }
            let (a, b) = mul_interval((a, b), (c, c));
            lo = (lo + a).clamp(-HUGE, HUGE);
            hi = (hi + b).clamp(-HUGE, HUGE);
        }
        (lo, hi)
    }

    fn atom_bounds(&self, a: &Atom) -> (i128, i128) {
        match a {
            Atom::Sym(s) => match self.symbol(s) {
                Some(i) => (i.lo as i128, i.hi as i128),
                None => (-HUGE, HUGE),
            },
            Atom::FloorDiv(x, y) => match y.as_const() {
                Some(k) if k > 0 => {
                    let (p, q) = self.bounds(x);
                    (p.div_euclid(k as i128), q.div_euclid(k as i128))
                }
                _ => (-HUGE, HUGE),
            },
            Atom::Mod(_, y) => match y.as_const() {
                Some(k) if k > 0 => (0, k as i128 - 1),
                _ => (-HUGE, HUGE),
            },
            Atom::Min(x, y) => {
                let ((a, b), (c, d)) = (self.bounds(x), self.bounds(y));
                (a.min(c), b.min(d))
            }
            Atom::Max(x, y) => {
                let ((a, b), (c, d)) = (self.bounds(x), self.bounds(y));
                (a.max(c), b.max(d))
            }
        }
    }

    /// Whether `a == b` for every value of the symbols: `Some` when the ranges
    /// decide it, `None` when they do not.
    pub fn decide_eq(&self, a: &Expr, b: &Expr) -> Option<bool> {
        let d = a.sub(b);
        if let Some(k) = d.as_const() {
            return Some(k == 0);
        }
        let (lo, hi) = self.bounds(&d);
        (lo > 0 || hi < 0).then_some(false)
    }

    /// Whether `e >= k` for every value of the symbols, when the ranges decide it.
    pub fn decide_at_least(&self, e: &Expr, k: i64) -> Option<bool> {
        let (lo, hi) = self.bounds(e);
        if lo >= k as i128 {
            Some(true)
        } else if hi < k as i128 {
            Some(false)
        } else {
            None
        }
    }

    /// Checks every symbol's range and every constraint under `b`: the first that
    /// fails gives `T = 7 but reshape needs T divisible by 4 (x.fg:3:9)`.
    pub fn check(&self, b: &Binding) -> Result<(), String> {
        for s in &self.symbols {
            let Some(v) = b.get(&s.name) else {
                return Err(format!(
                    "size symbol `{}` is not bound{}",
                    s.name,
                    place(&s.at)
                ));
            };
            if v < s.lo || v > s.hi {
                let range = if s.hi == DEFAULT_MAX {
                    format!("at least {}", s.lo)
                } else {
                    format!("in {}..={}", s.lo, s.hi)
                };
                return Err(format!(
                    "{} = {v} but {} must be {range}{}",
                    s.name,
                    s.name,
                    place(&s.at)
                ));
            }
        }
        for c in &self.constraints {
            match c.fact.holds(b) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(format!(
                        "{} but {} needs {}{}",
                        b.describe(&c.fact.symbols()),
                        c.why,
                        c.fact,
                        place(&c.at)
                    ))
                }
                Err(e) => return Err(format!("{}: {e}{}", c.why, place(&c.at))),
            }
        }
        Ok(())
    }
}

fn place(at: &Option<String>) -> String {
    at.as_ref().map_or(String::new(), |a| format!(" ({a})"))
}

fn mul_interval((a, b): (i128, i128), (c, d): (i128, i128)) -> (i128, i128) {
    let ps = [
        a.saturating_mul(c),
        a.saturating_mul(d),
        b.saturating_mul(c),
        b.saturating_mul(d),
    ];
    let lo = ps.iter().copied().min().unwrap_or(0).clamp(-HUGE, HUGE);
    let hi = ps.iter().copied().max().unwrap_or(0).clamp(-HUGE, HUGE);
    (lo, hi)
}

#[cfg(test)]
mod tests;
