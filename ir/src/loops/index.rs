//! Index expressions: the integer arithmetic that addresses buffers.
//!
//! An [`IndexExpr`] is affine over loop variables with constant multiplication,
//! addition, floor division and modulo, plus a data-dependent form
//! ([`IndexExpr::Dynamic`]) for `index_select`/`gather`. Every movement op
//! (reshape, permute, expand, slice, pad, concat) lowers to these, so views never copy.
//!
//! [`IndexExpr::simplify`] puts an expression in a canonical sum-of-terms form and
//! applies the rules that make composed views readable again, using the known
//! ranges of the loop variables:
//!
//! ```text
//! x*1 -> x, x + 0 -> x, constants fold
//! (a*n + b) // n -> a + b // n            b // n -> k when k*n <= b < (k+1)*n
//! (a*n + b) % n  -> b % n                 b % n  -> b - k*n under the same range
//! (x // a) // b  -> x // (a*b)            (g*x) // (g*m) -> x // m, (g*x) % (g*m) -> g*(x % m)
//! ((x // c) % b)*k + (x // (c*b))*(k*b) -> (x // c)*k      (undoes an unflatten + flatten)
//! a variable whose loop has extent 1 -> 0
//! ```
//!
//! [`IndexExpr::range`] bounds an expression from the loop-variable ranges, which is
//! how a backend proves at compile time that an access stays in bounds.
//!
//! Division and modulo are floor division and floor modulo by a positive constant
//! (the result of `%` is in `0..n`), so the rules hold for negative operands too,
//! which appear under the guards of padded loads.

use super::ids::ExprRef;
use crate::Error;
use std::fmt;

/// Which loop a variable belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum VarKind {
    /// An axis of a kernel's outer, parallel domain (`i0, i1, ..`).
    Outer,
    /// An axis of a reduction stage's inner domain (`r0, r1, ..`).
    Reduce,
    /// An axis of a store stage's inner domain (`j0, j1, ..`).
    Store,
}

/// A loop variable; prints as its text syntax (`i0`, `r1`, `j0`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Var {
    /// The loop it belongs to.
    pub kind: VarKind,
    /// The axis within that loop nest, outermost first.
    pub index: u32,
}

impl Var {
    /// Outer variable `i{index}`.
    pub fn outer(index: usize) -> Var {
        Var {
            kind: VarKind::Outer,
            index: index as u32,
        }
    }

    /// Reduction variable `r{index}`.
    pub fn reduce(index: usize) -> Var {
        Var {
            kind: VarKind::Reduce,
            index: index as u32,
        }
    }

    /// Store-loop variable `j{index}`.
    pub fn store(index: usize) -> Var {
        Var {
            kind: VarKind::Store,
            index: index as u32,
        }
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self.kind {
            VarKind::Outer => "i",
            VarKind::Reduce => "r",
            VarKind::Store => "j",
        };
        write!(f, "{p}{}", self.index)
    }
}

/// The extents of the loop variables in scope: a kernel's outer domain plus the
/// inner domain of the stage being looked at.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Extents {
    /// Extents of `i0, i1, ..`.
    pub outer: Vec<usize>,
    /// Extents of `r0, r1, ..` (empty outside a reduction stage).
    pub reduce: Vec<usize>,
    /// Extents of `j0, j1, ..` (empty outside a store stage with an inner loop).
    pub store: Vec<usize>,
}

impl Extents {
    /// The extent of `v`'s loop, or `None` if `v` is not in scope.
    pub fn extent(&self, v: Var) -> Option<usize> {
        let list = match v.kind {
            VarKind::Outer => &self.outer,
            VarKind::Reduce => &self.reduce,
            VarKind::Store => &self.store,
        };
        list.get(v.index as usize).copied()
    }
}

/// An integer index expression over loop variables.
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum IndexExpr {
    /// A constant.
    Const(i64),
    /// A loop variable.
    Var(Var),
    /// The sum of the terms.
    Sum(Vec<IndexExpr>),
    /// The expression times a constant.
    Mul(Box<IndexExpr>, i64),
    /// Floor division by a positive constant.
    FloorDiv(Box<IndexExpr>, i64),
    /// Floor modulo by a positive constant (result in `0..n`).
    Mod(Box<IndexExpr>, i64),
    /// A value computed in the same block: the result of a
    /// [`CheckedIndex`](super::ExprOp::CheckedIndex) node, so it is known to be in `0..extent`.
    Dynamic {
        /// The block node holding the (checked) index value.
        value: ExprRef,
        /// The exclusive upper bound the value was checked against.
        extent: u64,
    },
}

impl IndexExpr {
    /// `self // n` for `n > 0` (unsimplified).
    pub fn floor_div(self, n: i64) -> IndexExpr {
        IndexExpr::FloorDiv(Box::new(self), n)
    }

    /// `self % n` for `n > 0` (unsimplified).
    pub fn modulo(self, n: i64) -> IndexExpr {
        IndexExpr::Mod(Box::new(self), n)
    }

    /// Calls `f` on every variable the expression mentions.
    pub fn for_each_var(&self, f: &mut impl FnMut(Var)) {
        match self {
            IndexExpr::Const(_) | IndexExpr::Dynamic { .. } => {}
            IndexExpr::Var(v) => f(*v),
            IndexExpr::Sum(ts) => ts.iter().for_each(|t| t.for_each_var(f)),
            IndexExpr::Mul(e, _) | IndexExpr::FloorDiv(e, _) | IndexExpr::Mod(e, _) => {
                e.for_each_var(f)
            }
        }
    }

    /// Calls `f` on every block node the expression refers to (dynamic indices).
    pub fn for_each_ref(&self, f: &mut impl FnMut(ExprRef)) {
        match self {
            IndexExpr::Const(_) | IndexExpr::Var(_) => {}
            IndexExpr::Dynamic { value, .. } => f(*value),
            IndexExpr::Sum(ts) => ts.iter().for_each(|t| t.for_each_ref(f)),
            IndexExpr::Mul(e, _) | IndexExpr::FloorDiv(e, _) | IndexExpr::Mod(e, _) => {
                e.for_each_ref(f)
            }
        }
    }

    /// Rewrites every block reference through `f` (used when a block is compacted).
    pub fn map_refs(&self, f: &impl Fn(ExprRef) -> ExprRef) -> IndexExpr {
        match self {
            IndexExpr::Const(_) | IndexExpr::Var(_) => self.clone(),
            IndexExpr::Dynamic { value, extent } => IndexExpr::Dynamic {
                value: f(*value),
                extent: *extent,
            },
            IndexExpr::Sum(ts) => IndexExpr::Sum(ts.iter().map(|t| t.map_refs(f)).collect()),
            IndexExpr::Mul(e, c) => IndexExpr::Mul(Box::new(e.map_refs(f)), *c),
            IndexExpr::FloorDiv(e, c) => IndexExpr::FloorDiv(Box::new(e.map_refs(f)), *c),
            IndexExpr::Mod(e, c) => IndexExpr::Mod(Box::new(e.map_refs(f)), *c),
        }
    }

    /// Evaluates the expression. `var` gives each variable's value and `dynamic` each
    /// referenced block node's (already checked) value. Overflow and a non-positive
    /// divisor are errors.
    pub fn eval(
        &self,
        var: &impl Fn(Var) -> Option<i64>,
        dynamic: &impl Fn(ExprRef) -> Option<i64>,
    ) -> crate::Result<i64> {
        let overflow = || Error::Eval(format!("index arithmetic overflows in `{self}`"));
        Ok(match self {
            IndexExpr::Const(c) => *c,
            IndexExpr::Var(v) => {
                var(*v).ok_or_else(|| Error::internal(format!("variable {v} is not in scope")))?
            }
            IndexExpr::Dynamic { value, .. } => dynamic(*value)
                .ok_or_else(|| Error::internal(format!("{value} has no index value")))?,
            IndexExpr::Sum(ts) => {
                let mut s: i64 = 0;
                for t in ts {
                    s = s.checked_add(t.eval(var, dynamic)?).ok_or_else(overflow)?;
                }
                s
            }
            IndexExpr::Mul(e, c) => e.eval(var, dynamic)?.checked_mul(*c).ok_or_else(overflow)?,
            IndexExpr::FloorDiv(e, n) | IndexExpr::Mod(e, n) => {
                if *n <= 0 {
                    return Err(Error::InvalidProgram(format!(
                        "non-positive divisor in `{self}`"
                    )));
                }
                let x = e.eval(var, dynamic)?;
                if matches!(self, IndexExpr::FloorDiv(..)) {
                    x.div_euclid(*n)
                } else {
                    x.rem_euclid(*n)
                }
            }
        })
    }

    /// An inclusive bound `(lo, hi)` on the expression's value when every variable `v`
    /// is in `0..extent(v)` and every dynamic index in `0..extent`; `None` when a
    /// variable is out of scope or the arithmetic overflows. (For a loop of extent 0
    /// the bound is vacuous: the loop body never runs.)
    pub fn range(&self, ext: &Extents) -> Option<(i64, i64)> {
        range128(self, ext)
            .and_then(|(lo, hi)| Some((i64::try_from(lo).ok()?, i64::try_from(hi).ok()?)))
    }

    /// The canonical, simplified form (see the module docs for the rules). The result
    /// evaluates to the same value as `self` wherever the variables are in range.
    pub fn simplify(&self, ext: &Extents) -> IndexExpr {
        // A constant and a variable of a loop longer than 1 are already canonical (the
        // common coordinates); skip building their linear form.
        match self {
            IndexExpr::Const(_) => return self.clone(),
            IndexExpr::Var(v) if ext.extent(*v) != Some(1) => return self.clone(),
            _ => {}
        }
        match linear(self, ext) {
            Some(l) => l.into_expr(),
            None => self.clone(),
        }
    }

    /// `Σ coords[i] * strides[i]` simplified (a row-major offset): the same expression as
    /// `IndexExpr::Sum(coords[i].clone() * strides[i]).simplify(ext)`, without cloning
    /// the coordinates to build the sum first.
    pub fn simplified_dot(coords: &[IndexExpr], strides: &[i64], ext: &Extents) -> IndexExpr {
        // `linear` of that sum, term by term: each `Mul` scaled and recombined, then the
        // whole recombined.
        let dot = || {
            let mut out = Linear::constant(0);
            for (c, &s) in coords.iter().zip(strides) {
                let mut term = linear(c, ext)?.scaled(s)?;
                term.recombine(ext)?;
                out.add_linear(term, 1)?;
            }
            out.recombine(ext)?;
            Some(out)
        };
        let sum = || {
            IndexExpr::Sum(
                coords
                    .iter()
                    .zip(strides)
                    .map(|(c, &s)| c.clone() * s)
                    .collect(),
            )
        };
        let out = match dot() {
            Some(l) => l.into_expr(),
            None => sum(),
        };
        debug_assert_eq!(
            out,
            sum().simplify(ext),
            "simplified_dot differs from simplify"
        );
        out
    }

    /// The expression as `constant + Σ coefficient * variable`, if it is affine in
    /// the loop variables (no division, modulo or dynamic part left after
    /// simplification). The variables come out sorted, each once, with non-zero
    /// coefficients. This is the form a GEMM operand or a vectorized access needs.
    pub fn as_affine(&self, ext: &Extents) -> Option<(i64, Vec<(Var, i64)>)> {
        let l = linear(self, ext)?;
        let mut terms = Vec::with_capacity(l.terms.len());
        for (atom, c) in l.terms {
            match atom {
                IndexExpr::Var(v) => terms.push((v, c)),
                _ => return None,
            }
        }
        Some((l.constant, terms))
    }
}

/// `a + b` (unsimplified).
impl std::ops::Add for IndexExpr {
    type Output = IndexExpr;

    fn add(self, other: IndexExpr) -> IndexExpr {
        IndexExpr::Sum(vec![self, other])
    }
}

/// `a * c` for a constant `c` (unsimplified).
impl std::ops::Mul<i64> for IndexExpr {
    type Output = IndexExpr;

    fn mul(self, c: i64) -> IndexExpr {
        IndexExpr::Mul(Box::new(self), c)
    }
}

/// Interval bound of an expression in i128 (no overflow for any IR-sized values).
fn range128(e: &IndexExpr, ext: &Extents) -> Option<(i128, i128)> {
    Some(match e {
        IndexExpr::Const(c) => (*c as i128, *c as i128),
        IndexExpr::Var(v) => (0, (ext.extent(*v)? as i128 - 1).max(0)),
        IndexExpr::Dynamic { extent, .. } => (0, (*extent as i128 - 1).max(0)),
        IndexExpr::Sum(ts) => {
            let (mut lo, mut hi) = (0i128, 0i128);
            for t in ts {
                let (a, b) = range128(t, ext)?;
                lo = lo.checked_add(a)?;
                hi = hi.checked_add(b)?;
            }
            (lo, hi)
        }
        IndexExpr::Mul(x, c) => {
            let (a, b) = range128(x, ext)?;
            let (p, q) = (a.checked_mul(*c as i128)?, b.checked_mul(*c as i128)?);
            (p.min(q), p.max(q))
        }
        IndexExpr::FloorDiv(x, n) => {
            if *n <= 0 {
                return None;
            }
            let (a, b) = range128(x, ext)?;
            (a.div_euclid(*n as i128), b.div_euclid(*n as i128))
        }
        IndexExpr::Mod(x, n) => {
            if *n <= 0 {
                return None;
            }
            let n = *n as i128;
            let (a, b) = range128(x, ext)?;
            if a.div_euclid(n) == b.div_euclid(n) {
                (a.rem_euclid(n), b.rem_euclid(n))
            } else {
                (0, n - 1)
            }
        }
    })
}

/// The canonical form: `constant + Σ coefficient * atom`, where an atom is a
/// variable, a floor division, a modulo or a dynamic index, atoms sorted and
/// distinct, coefficients non-zero.
#[derive(Clone, Debug)]
struct Linear {
    constant: i64,
    terms: Vec<(IndexExpr, i64)>,
}

impl Linear {
    fn constant(c: i64) -> Linear {
        Linear {
            constant: c,
            terms: Vec::new(),
        }
    }

    fn atom(a: IndexExpr) -> Linear {
        Linear {
            constant: 0,
            terms: vec![(a, 1)],
        }
    }

    fn as_expr_range(&self, ext: &Extents) -> Option<(i128, i128)> {
        let mut lo = self.constant as i128;
        let mut hi = lo;
        for (a, c) in &self.terms {
            let (p, q) = range128(a, ext)?;
            let (p, q) = (p.checked_mul(*c as i128)?, q.checked_mul(*c as i128)?);
            lo = lo.checked_add(p.min(q))?;
            hi = hi.checked_add(p.max(q))?;
        }
        Some((lo, hi))
    }

    /// `self + c * atom`, merging an equal atom (taking `atom` by value, so nothing is
    /// cloned or allocated beyond the insertion).
    fn add_atom(&mut self, a: IndexExpr, c: i64) -> Option<()> {
        match self.terms.binary_search_by(|(b, _)| b.cmp(&a)) {
            Ok(i) => {
                self.terms[i].1 = self.terms[i].1.checked_add(c)?;
                if self.terms[i].1 == 0 {
                    self.terms.remove(i);
                }
            }
            Err(i) => {
                if c != 0 {
                    self.terms.insert(i, (a, c));
                }
            }
        }
        Some(())
    }

    /// `self + k * other`, consuming `other` (its atoms move instead of being cloned).
    /// The same result as [`Linear::add_scaled`].
    fn add_linear(&mut self, other: Linear, k: i64) -> Option<()> {
        if self.terms.is_empty() && k == 1 {
            // Adding to a constant: `other`'s atoms are sorted, distinct and non-zero.
            self.constant = self.constant.checked_add(other.constant)?;
            self.terms = other.terms;
            return Some(());
        }
        self.constant = self.constant.checked_add(other.constant.checked_mul(k)?)?;
        for (a, c) in other.terms {
            self.add_atom(a, c.checked_mul(k)?)?;
        }
        Some(())
    }

    /// `self + k * other`, merging equal atoms.
    fn add_scaled(&mut self, other: &Linear, k: i64) -> Option<()> {
        self.constant = self.constant.checked_add(other.constant.checked_mul(k)?)?;
        for (a, c) in &other.terms {
            let c = c.checked_mul(k)?;
            match self.terms.binary_search_by(|(b, _)| b.cmp(a)) {
                Ok(i) => {
                    self.terms[i].1 = self.terms[i].1.checked_add(c)?;
                    if self.terms[i].1 == 0 {
                        self.terms.remove(i);
                    }
                }
                Err(i) => {
                    if c != 0 {
                        self.terms.insert(i, (a.clone(), c));
                    }
                }
            }
        }
        Some(())
    }

    fn scale(&self, k: i64) -> Option<Linear> {
        let mut out = Linear::constant(0);
        out.add_scaled(self, k)?;
        Some(out)
    }

    /// `k * self`, consuming `self`: the same result as [`Linear::scale`] (the terms stay
    /// sorted and distinct; every coefficient is non-zero unless `k` is), without cloning
    /// the atoms.
    fn scaled(mut self, k: i64) -> Option<Linear> {
        if k == 0 {
            return Some(Linear::constant(0));
        }
        self.constant = self.constant.checked_mul(k)?;
        for (_, c) in &mut self.terms {
            *c = c.checked_mul(k)?;
        }
        Some(self)
    }

    fn into_expr(mut self) -> IndexExpr {
        // One atom with coefficient 1 and no constant, or only a constant: no sum.
        if self.terms.is_empty() {
            return IndexExpr::Const(self.constant);
        }
        if self.constant == 0 && self.terms.len() == 1 && self.terms[0].1 == 1 {
            if let Some((a, _)) = self.terms.pop() {
                return a;
            }
        }
        let mut parts: Vec<IndexExpr> = self
            .terms
            .into_iter()
            .map(|(a, c)| {
                if c == 1 {
                    a
                } else {
                    IndexExpr::Mul(Box::new(a), c)
                }
            })
            .collect();
        if self.constant != 0 || parts.is_empty() {
            parts.push(IndexExpr::Const(self.constant));
        }
        if parts.len() == 1 {
            parts.pop().unwrap_or(IndexExpr::Const(0))
        } else {
            IndexExpr::Sum(parts)
        }
    }

    /// The gcd of every coefficient and the constant (0 when all are 0).
    fn content(&self) -> i64 {
        self.terms.iter().map(|(_, c)| *c).fold(self.constant, gcd)
    }

    /// Undoes unflatten-then-flatten: `((x // c) % b)*k + (x // (c*b))*(k*b)` becomes
    /// `(x // c)*k` (with `x // 1` being `x`), repeated to a fixed point.
    fn recombine(&mut self, ext: &Extents) -> Option<()> {
        'again: loop {
            for i in 0..self.terms.len() {
                let (IndexExpr::Mod(inner, b), k) = &self.terms[i] else {
                    continue;
                };
                let (b, k) = (*b, *k);
                let (x, c) = match inner.as_ref() {
                    IndexExpr::FloorDiv(x, c) => ((**x).clone(), *c),
                    other => (other.clone(), 1),
                };
                let Some(cb) = c.checked_mul(b) else { continue };
                let Some(kb) = k.checked_mul(b) else { continue };
                let partner = IndexExpr::FloorDiv(Box::new(x.clone()), cb);
                let Some(j) = self
                    .terms
                    .iter()
                    .position(|(a, kk)| *a == partner && *kk == kb)
                else {
                    continue;
                };
                // Remove both (higher index first), then add (x // c) * k.
                let (hi, lo) = if i > j { (i, j) } else { (j, i) };
                self.terms.remove(hi);
                self.terms.remove(lo);
                let replacement = if c == 1 {
                    linear(&x, ext)?
                } else {
                    floor_div(linear(&x, ext)?, c, ext)?
                };
                self.add_scaled(&replacement, k)?;
                continue 'again;
            }
            return Some(());
        }
    }
}

/// The greatest common divisor of `|a|` and `|b|` (`gcd(0, 0) = 0`).
pub fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    i64::try_from(a).unwrap_or(1)
}

/// Simplifies `e` into canonical linear form; `None` on overflow.
fn linear(e: &IndexExpr, ext: &Extents) -> Option<Linear> {
    Some(match e {
        IndexExpr::Const(c) => Linear::constant(*c),
        IndexExpr::Var(v) => match ext.extent(*v) {
            // A loop of extent 1 only ever has the value 0.
            Some(1) => Linear::constant(0),
            _ => Linear::atom(e.clone()),
        },
        IndexExpr::Dynamic { .. } => Linear::atom(e.clone()),
        IndexExpr::Sum(ts) => {
            let mut out = Linear::constant(0);
            for t in ts {
                out.add_linear(linear(t, ext)?, 1)?;
            }
            out.recombine(ext)?;
            out
        }
        IndexExpr::Mul(x, c) => {
            let mut out = linear(x, ext)?.scaled(*c)?;
            out.recombine(ext)?;
            out
        }
        IndexExpr::FloorDiv(x, n) => {
            if *n <= 0 {
                return None;
            }
            floor_div(linear(x, ext)?, *n, ext)?
        }
        IndexExpr::Mod(x, n) => {
            if *n <= 0 {
                return None;
            }
            modulo(linear(x, ext)?, *n, ext)?
        }
    })
}

/// `l // n` for `n > 0`, simplified.
fn floor_div(l: Linear, n: i64, ext: &Extents) -> Option<Linear> {
    if n == 1 {
        return Some(l);
    }
    // (g*x) // (g*m) = x // m when g divides every coefficient and the constant.
    let g = gcd(l.content(), n);
    if g > 1 {
        let reduced = Linear {
            constant: l.constant / g,
            terms: l.terms.iter().map(|(a, c)| (a.clone(), c / g)).collect(),
        };
        return floor_div(reduced, n / g, ext);
    }
    // Split off the multiples of n: (q*n + r) // n = q + r // n.
    let mut q = Linear::constant(l.constant.div_euclid(n));
    let mut r = Linear::constant(l.constant.rem_euclid(n));
    for (a, c) in l.terms {
        if c % n == 0 {
            q.add_atom(a, c / n)?;
        } else {
            r.add_atom(a, c)?;
        }
    }
    if let Some((lo, hi)) = r.as_expr_range(ext) {
        let n128 = n as i128;
        if lo.div_euclid(n128) == hi.div_euclid(n128) {
            let k = i64::try_from(lo.div_euclid(n128)).ok()?;
            q.add_scaled(&Linear::constant(k), 1)?;
            return Some(q);
        }
    }
    // (x // a) // b = x // (a*b).
    let rest = if r.constant == 0 && r.terms.len() == 1 && r.terms[0].1 == 1 {
        match &r.terms[0].0 {
            IndexExpr::FloorDiv(x, a) => match a.checked_mul(n) {
                Some(an) => IndexExpr::FloorDiv(x.clone(), an),
                None => IndexExpr::FloorDiv(Box::new(r.into_expr()), n),
            },
            _ => IndexExpr::FloorDiv(Box::new(r.into_expr()), n),
        }
    } else {
        IndexExpr::FloorDiv(Box::new(r.into_expr()), n)
    };
    q.add_atom(rest, 1)?;
    Some(q)
}

/// `l % n` for `n > 0`, simplified.
fn modulo(l: Linear, n: i64, ext: &Extents) -> Option<Linear> {
    if n == 1 {
        return Some(Linear::constant(0));
    }
    // Multiples of n vanish: (q*n + r) % n = r % n.
    let mut r = Linear::constant(l.constant.rem_euclid(n));
    for (a, c) in l.terms {
        if c % n != 0 {
            r.add_atom(a, c)?;
        }
    }
    // (g*x) % (g*m) = g * (x % m).
    let g = gcd(r.content(), n);
    if g > 1 {
        let reduced = Linear {
            constant: r.constant / g,
            terms: r.terms.iter().map(|(a, c)| (a.clone(), c / g)).collect(),
        };
        return modulo(reduced, n / g, ext)?.scale(g);
    }
    if let Some((lo, hi)) = r.as_expr_range(ext) {
        let n128 = n as i128;
        if lo.div_euclid(n128) == hi.div_euclid(n128) {
            let k = i64::try_from(lo.div_euclid(n128)).ok()?;
            r.add_scaled(&Linear::constant(k.checked_mul(n)?), -1)?;
            return Some(r);
        }
    }
    // (x % m) % n = x % n when n divides m.
    if r.constant == 0 && r.terms.len() == 1 && r.terms[0].1 == 1 {
        if let IndexExpr::Mod(x, m) = &r.terms[0].0 {
            if m % n == 0 {
                return Some(Linear::atom(IndexExpr::Mod(x.clone(), n)));
            }
        }
    }
    Some(Linear::atom(IndexExpr::Mod(Box::new(r.into_expr()), n)))
}

/// Writes `e` as the left operand of `*`, `//` or `%`: parenthesized when it is a sum,
/// and also when it is a division or modulo under a multiplication (`(i0 % 2)*4`).
fn fmt_operand(e: &IndexExpr, f: &mut fmt::Formatter<'_>, under_mul: bool) -> fmt::Result {
    let wrap = match e {
        IndexExpr::Sum(_) => true,
        IndexExpr::FloorDiv(..) | IndexExpr::Mod(..) => under_mul,
        _ => false,
    };
    if wrap {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

impl fmt::Display for IndexExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexExpr::Const(c) => write!(f, "{c}"),
            IndexExpr::Var(v) => write!(f, "{v}"),
            IndexExpr::Dynamic { value, .. } => write!(f, "{value}"),
            IndexExpr::Sum(ts) => {
                for (i, t) in ts.iter().enumerate() {
                    // `a + -3` reads better as `a - 3`.
                    match (i, t) {
                        (0, _) => write!(f, "{t}")?,
                        (_, IndexExpr::Const(c)) if *c < 0 => write!(f, " - {}", c.unsigned_abs())?,
                        (_, IndexExpr::Mul(x, c)) if *c < 0 => {
                            f.write_str(" - ")?;
                            fmt_operand(x, f, true)?;
                            if *c != -1 {
                                write!(f, "*{}", c.unsigned_abs())?;
                            }
                        }
                        _ => write!(f, " + {t}")?,
                    }
                }
                Ok(())
            }
            IndexExpr::Mul(x, c) => {
                fmt_operand(x, f, true)?;
                write!(f, "*{c}")
            }
            IndexExpr::FloorDiv(x, n) => {
                fmt_operand(x, f, false)?;
                write!(f, " // {n}")
            }
            IndexExpr::Mod(x, n) => {
                fmt_operand(x, f, false)?;
                write!(f, " % {n}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(k: usize) -> IndexExpr {
        IndexExpr::Var(Var::outer(k))
    }

    fn r(k: usize) -> IndexExpr {
        IndexExpr::Var(Var::reduce(k))
    }

    fn ext(outer: &[usize], reduce: &[usize]) -> Extents {
        Extents {
            outer: outer.to_vec(),
            reduce: reduce.to_vec(),
            store: vec![],
        }
    }

    /// Checks that `e` and its simplification agree on every point of the domain.
    fn same_everywhere(e: &IndexExpr, ext: &Extents) {
        let s = e.simplify(ext);
        let n: usize = ext.outer.iter().chain(&ext.reduce).product();
        for p in 0..n {
            let mut rest = p;
            let mut vals = Vec::new();
            for &d in ext.outer.iter().chain(&ext.reduce).rev() {
                vals.push((rest % d) as i64);
                rest /= d;
            }
            vals.reverse();
            let no = ext.outer.len();
            let var = |v: Var| match v.kind {
                VarKind::Outer => vals.get(v.index as usize).copied(),
                VarKind::Reduce => vals.get(no + v.index as usize).copied(),
                VarKind::Store => None,
            };
            let a = e.eval(&var, &|_| None).unwrap();
            let b = s.eval(&var, &|_| None).unwrap();
            assert_eq!(a, b, "{e} vs {s} at {vals:?}");
            let (lo, hi) = e.range(ext).unwrap();
            assert!(lo <= a && a <= hi, "{a} outside range ({lo}, {hi}) of {e}");
        }
    }

    #[test]
    fn folds_identities_and_constants() {
        let e = ext(&[4, 8], &[]);
        let x = IndexExpr::Mul(Box::new(i(0)), 1)
            + IndexExpr::Const(0)
            + IndexExpr::Mul(Box::new(i(1)), 0);
        assert_eq!(x.simplify(&e), i(0));
        let y = (IndexExpr::Const(3) + IndexExpr::Const(4)) * 2;
        assert_eq!(y.simplify(&e), IndexExpr::Const(14));
        assert_eq!((i(0) + i(0)).simplify(&e).to_string(), "i0*2");
    }

    #[test]
    fn row_index_prints_readably() {
        let e = ext(&[64], &[512]);
        let x = i(0) * 512 + r(0);
        assert_eq!(x.simplify(&e).to_string(), "i0*512 + r0");
        let neg = i(0) + IndexExpr::Const(-1);
        assert_eq!(neg.simplify(&e).to_string(), "i0 - 1");
    }

    #[test]
    fn div_and_mod_use_ranges() {
        let e = ext(&[64], &[512]);
        let flat = i(0) * 512 + r(0);
        assert_eq!(flat.clone().floor_div(512).simplify(&e), i(0));
        assert_eq!(flat.clone().modulo(512).simplify(&e), r(0));
        // r0 // 512 is 0 and r0 % 512 is r0.
        assert_eq!(r(0).floor_div(512).simplify(&e), IndexExpr::Const(0));
        // Not provable: stays.
        assert_eq!(r(0).floor_div(256).simplify(&e).to_string(), "r0 // 256");
        same_everywhere(&flat.clone().floor_div(7), &e);
        same_everywhere(&flat.modulo(7), &e);
    }

    #[test]
    fn unflatten_then_flatten_is_the_identity() {
        // [2, 3, 4] viewed flat then reshaped back: coords of flat index f.
        let e = ext(&[24], &[]);
        let f = i(0);
        let c0 = f.clone().floor_div(12);
        let c1 = f.clone().floor_div(4).modulo(3);
        let c2 = f.clone().modulo(4);
        let back = c0 * 12 + c1 * 4 + c2;
        assert_eq!(back.simplify(&e), i(0));
        same_everywhere(&back, &e);
    }

    #[test]
    fn nested_division_and_gcd() {
        let e = ext(&[100], &[]);
        assert_eq!(
            i(0).floor_div(3).floor_div(5).simplify(&e).to_string(),
            "i0 // 15"
        );
        assert_eq!((i(0) * 4).floor_div(8).simplify(&e).to_string(), "i0 // 2");
        assert_eq!((i(0) * 4).modulo(8).simplify(&e).to_string(), "(i0 % 2)*4");
        assert_eq!(i(0).modulo(12).modulo(4).simplify(&e).to_string(), "i0 % 4");
        for x in [
            i(0).floor_div(3).floor_div(5),
            (i(0) * 4).floor_div(8),
            (i(0) * 4).modulo(8),
            i(0).modulo(12).modulo(4),
            (i(0) + IndexExpr::Const(-7)).floor_div(5),
            (i(0) + IndexExpr::Const(-7)).modulo(5),
        ] {
            same_everywhere(&x, &e);
        }
    }

    #[test]
    fn moving_adds_match_cloning_adds() {
        // `add_linear` (moves atoms, short cut onto a constant) and `add_atom` must give
        // exactly what `add_scaled` gives, for every pair and scale.
        let e = ext(&[6, 4], &[3]);
        let pieces = [
            i(0) * 4 + i(1),
            i(0).floor_div(2) + IndexExpr::Const(5),
            i(1) * -1 + r(0) * 3,
            i(0) * 4 + i(1).modulo(3) * 2 + IndexExpr::Const(-1),
            IndexExpr::Const(7),
        ];
        let lin: Vec<Linear> = pieces.iter().map(|p| linear(p, &e).unwrap()).collect();
        for a in &lin {
            for b in &lin {
                for k in [-2, -1, 0, 1, 3] {
                    let mut want = a.clone();
                    want.add_scaled(b, k).unwrap();
                    let mut got = a.clone();
                    got.add_linear(b.clone(), k).unwrap();
                    assert_eq!((got.constant, &got.terms), (want.constant, &want.terms));
                    let mut atoms = a.clone();
                    atoms.constant += b.constant * k;
                    for (t, c) in &b.terms {
                        atoms.add_atom(t.clone(), c * k).unwrap();
                    }
                    assert_eq!((atoms.constant, &atoms.terms), (want.constant, &want.terms));
                }
            }
        }
        // The short cuts of `simplify` and `into_expr` keep the canonical forms.
        assert_eq!(i(1).simplify(&e), i(1));
        assert_eq!(IndexExpr::Const(-3).simplify(&e), IndexExpr::Const(-3));
        assert_eq!(
            IndexExpr::Var(Var::store(0)).simplify(&e),
            IndexExpr::Var(Var::store(0))
        );
        assert_eq!(Linear::atom(i(0)).into_expr(), i(0));
        assert_eq!(Linear::constant(4).into_expr(), IndexExpr::Const(4));
        assert_eq!(
            (i(0) + IndexExpr::Const(2)).simplify(&e).to_string(),
            "i0 + 2"
        );
    }

    #[test]
    fn extent_one_variables_vanish() {
        let e = ext(&[1, 8], &[]);
        assert_eq!((i(0) * 8 + i(1)).simplify(&e), i(1));
    }

    #[test]
    fn ranges_bound_values() {
        let e = ext(&[4, 6], &[]);
        let x = i(0) * 6 + i(1) + IndexExpr::Const(-2);
        assert_eq!(x.range(&e), Some((-2, 21)));
        assert_eq!(i(1).modulo(4).range(&e), Some((0, 3)));
        assert_eq!(i(1).modulo(8).range(&e), Some((0, 5)));
        assert_eq!(i(1).floor_div(4).range(&e), Some((0, 1)));
        assert_eq!(IndexExpr::Var(Var::store(0)).range(&e), None);
        let big = i(0) * i64::MAX * i64::MAX;
        assert_eq!(big.range(&e), None);
        // Overflow in evaluation is an error, not a panic.
        assert!(big.eval(&|_| Some(3), &|_| None).is_err());
    }

    #[test]
    fn affine_form() {
        let e = ext(&[4, 6], &[5]);
        let x = i(1) + i(0) * 30 + r(0) * 6 + IndexExpr::Const(2);
        let (c, terms) = x.as_affine(&e).unwrap();
        assert_eq!(c, 2);
        assert_eq!(
            terms,
            vec![(Var::outer(0), 30), (Var::outer(1), 1), (Var::reduce(0), 6)]
        );
        assert!(i(0).floor_div(3).as_affine(&e).is_none());
    }
}
