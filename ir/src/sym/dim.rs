//! The dimension abstraction of the typing rule.
//!
//! [`crate::infer::infer_dims`] is written once over a dimension type `D:
//! Dim`. With `usize` every question it asks has an answer and nothing is
//! recorded: that is [`crate::infer::infer`], the concrete rule, unchanged. With
//! [`Expr`] a question the symbols' ranges cannot answer (is `T` equal to `K`?)
//! is answered "yes" and the answer recorded in [`Facts`] as a constraint, which
//! a binding is checked against before the graph runs.

use super::{Expr, Fact, Facts};
use crate::types::{check_shape, TensorType, MAX_RANK};
use crate::TypeError;
use std::borrow::Cow;
use std::fmt;

/// Symbolic values of a node's integer attributes (`shape=[B*T, 256]`,
/// `end=T`), by attribute name; every other attribute is the op's own.
pub type SymAttrs = Vec<(String, Vec<Expr>)>;

/// A dimension the typing rule computes with: a number, or an expression.
pub trait Dim: Clone + PartialEq + fmt::Display + fmt::Debug + Sized {
    /// What typing needs beside the operands: nothing for numbers, the
    /// [`Facts`] (symbols, constraints, the node's symbolic attributes) for expressions.
    type Cx;
    /// An integer attribute's value: `i64` for numbers, [`Expr`] for expressions.
    type Int: Clone + fmt::Display;

    /// The extent `n`.
    fn lit(n: usize) -> Self;
    /// The extent, when it is a number.
    fn number(&self) -> Option<usize>;
    /// `a + b`.
    fn plus(&self, b: &Self) -> Self;
    /// `a * b`, or `None` past the element limit (numbers only).
    fn times(&self, b: &Self) -> Option<Self>;
    /// `n / d` where `d` divides `n`.
    fn div_exact(n: &Self, d: &Self) -> Self;

    /// Whether `a == b`; an expression the ranges do not decide is assumed equal and
    /// the equality recorded for `why`.
    fn same(cx: &mut Self::Cx, a: &Self, b: &Self, why: &str) -> bool;
    /// Whether the extent is 1, when known (`None`: it may or may not be).
    fn is_one(cx: &Self::Cx, d: &Self) -> Option<bool>;
    /// Whether the extent is not 0; an undecided expression is assumed non-zero and
    /// `d >= 1` recorded.
    fn nonzero(cx: &mut Self::Cx, d: &Self, why: &str) -> bool;
    /// Whether `d` divides `n` (and is non-zero); an undecided one is assumed and recorded.
    fn divides(cx: &mut Self::Cx, d: &Self, n: &Self, why: &str) -> bool;

    /// The extents of an integer-list attribute `key` (`full`'s `shape`).
    fn dims_attr<'a>(cx: &'a Self::Cx, key: &str, concrete: &'a [usize]) -> Cow<'a, [Self]>;
    /// The values of an integer attribute `key` (`reshape`'s `shape`, `slice`'s `end`).
    fn ints_attr<'a>(cx: &'a Self::Cx, key: &str, concrete: &'a [i64]) -> Cow<'a, [Self::Int]>;
    /// An integer attribute's value, when it is a known number.
    fn int_value(i: &Self::Int) -> Option<i64>;
    /// A non-negative integer attribute as an extent.
    fn int_dim(i: &Self::Int) -> Self;

    /// The extent of `slice(start, end, step)` of an axis of extent `len`
    /// (Python's clamping, [`crate::infer::slice_bounds`]).
    fn slice_len(
        cx: &mut Self::Cx,
        len: &Self,
        start: &Self::Int,
        end: &Self::Int,
        step: usize,
    ) -> Self;

    /// `arange`'s length `ceil((end - start) / step)` for a symbolic `end` and a
    /// positive `step` (never reached for numbers, whose length the rule computes).
    fn range_len(cx: &mut Self::Cx, end: &Self::Int, start: i64, step: i64) -> Self;

    /// Checks a shape against the rank and element limits (an expression's elements
    /// are checked when it is bound).
    fn check(shape: &[Self]) -> Result<(), TypeError>;

    /// Runs `rule`, which only knows numbers, on these operands: the identity for
    /// numbers; for expressions, an error naming `op` unless every extent is a number.
    fn with_numbers(
        op: &str,
        inputs: &[&TensorType<Self>],
        rule: &dyn Fn(&[&TensorType]) -> Result<TensorType, TypeError>,
    ) -> Result<TensorType<Self>, TypeError>;
}

impl Dim for usize {
    type Cx = ();
    type Int = i64;

    fn lit(n: usize) -> usize {
        n
    }
    fn number(&self) -> Option<usize> {
        Some(*self)
    }
    fn plus(&self, b: &usize) -> usize {
        self.saturating_add(*b)
    }
    fn times(&self, b: &usize) -> Option<usize> {
        self.checked_mul(*b)
            .filter(|&n| n <= crate::types::MAX_ELEMENTS)
    }
    fn div_exact(n: &usize, d: &usize) -> usize {
        n / d
    }
    fn same(_: &mut (), a: &usize, b: &usize, _: &str) -> bool {
        a == b
    }
    fn is_one(_: &(), d: &usize) -> Option<bool> {
        Some(*d == 1)
    }
    fn nonzero(_: &mut (), d: &usize, _: &str) -> bool {
        *d != 0
    }
    fn divides(_: &mut (), d: &usize, n: &usize, _: &str) -> bool {
        *d != 0 && n.is_multiple_of(*d)
    }
    fn dims_attr<'a>(_: &'a (), _: &str, concrete: &'a [usize]) -> Cow<'a, [usize]> {
        Cow::Borrowed(concrete)
    }
    fn ints_attr<'a>(_: &'a (), _: &str, concrete: &'a [i64]) -> Cow<'a, [i64]> {
        Cow::Borrowed(concrete)
    }
    fn int_value(i: &i64) -> Option<i64> {
        Some(*i)
    }
    fn int_dim(i: &i64) -> usize {
        (*i).max(0) as usize
    }
    fn slice_len(_: &mut (), len: &usize, start: &i64, end: &i64, step: usize) -> usize {
        let (lo, hi) = crate::infer::slice_bounds(*len, *start, *end);
        if hi > lo {
            (hi - lo).div_ceil(step)
        } else {
            0
        }
    }
    fn range_len(_: &mut (), end: &i64, start: i64, step: i64) -> usize {
        (end.saturating_sub(start).max(0) as usize).div_ceil(step.max(1) as usize)
    }
    fn check(shape: &[usize]) -> Result<(), TypeError> {
        check_shape(shape)
    }
    fn with_numbers(
        _: &str,
        inputs: &[&TensorType],
        rule: &dyn Fn(&[&TensorType]) -> Result<TensorType, TypeError>,
    ) -> Result<TensorType, TypeError> {
        rule(inputs)
    }
}

impl Dim for Expr {
    type Cx = Facts;
    type Int = Expr;

    fn lit(n: usize) -> Expr {
        Expr::int(n as i64)
    }
    fn number(&self) -> Option<usize> {
        self.as_const().and_then(|n| usize::try_from(n).ok())
    }
    fn plus(&self, b: &Expr) -> Expr {
        self.add(b)
    }
    fn times(&self, b: &Expr) -> Option<Expr> {
        Some(self.mul(b))
    }
    fn div_exact(n: &Expr, d: &Expr) -> Expr {
        n.floor_div(d)
    }
    fn same(cx: &mut Facts, a: &Expr, b: &Expr, why: &str) -> bool {
        match cx.decide_eq(a, b) {
            Some(v) => v,
            None => {
                let (x, y) = if a <= b { (a, b) } else { (b, a) };
                cx.require(Fact::Eq(x.clone(), y.clone()), why);
                true
            }
        }
    }
    fn is_one(cx: &Facts, d: &Expr) -> Option<bool> {
        cx.decide_eq(d, &Expr::int(1))
    }
    fn nonzero(cx: &mut Facts, d: &Expr, why: &str) -> bool {
        match cx.decide_at_least(d, 1) {
            Some(v) => v,
            None => {
                cx.require(Fact::AtLeast(d.clone(), 1), why);
                true
            }
        }
    }
    fn divides(cx: &mut Facts, d: &Expr, n: &Expr, why: &str) -> bool {
        match (d.as_const(), n.as_const()) {
            (Some(0), _) => false,
            (Some(k), Some(m)) => m % k == 0,
            _ if n.modulo(d).as_const() == Some(0) => true,
            _ => {
                cx.require(Fact::Divides(d.clone(), n.clone()), why);
                true
            }
        }
    }
    fn dims_attr<'a>(cx: &'a Facts, key: &str, concrete: &'a [usize]) -> Cow<'a, [Expr]> {
        match cx.attrs.iter().find(|(k, _)| k == key) {
            Some((_, v)) => Cow::Borrowed(v),
            None => Cow::Owned(concrete.iter().map(|&d| Expr::lit(d)).collect()),
        }
    }
    fn ints_attr<'a>(cx: &'a Facts, key: &str, concrete: &'a [i64]) -> Cow<'a, [Expr]> {
        match cx.attrs.iter().find(|(k, _)| k == key) {
            Some((_, v)) => Cow::Borrowed(v),
            None => Cow::Owned(concrete.iter().map(|&d| Expr::int(d)).collect()),
        }
    }
    fn int_value(i: &Expr) -> Option<i64> {
        i.as_const()
    }
    fn int_dim(i: &Expr) -> Expr {
        match i.as_const() {
            Some(k) => Expr::int(k.max(0)),
            None => i.clone(),
        }
    }
    fn slice_len(cx: &mut Facts, len: &Expr, start: &Expr, end: &Expr, step: usize) -> Expr {
        if let (Some(n), Some(s), Some(e)) = (len.as_const(), start.as_const(), end.as_const()) {
            return Expr::lit(usize::slice_len(&mut (), &(n as usize), &s, &e, step));
        }
        // Python's clamping: a known negative bound counts from the end; any other
        // bound is clamped into 0..=len (a symbolic bound is a size, never negative).
        let clamp = |v: &Expr, cx: &mut Facts| match v.as_const() {
            Some(k) if k >= i64::MAX / 2 => len.clone(),
            Some(k) if k < 0 => len.add(&Expr::int(k)).maximum(&Expr::int(0)),
            _ => {
                if cx.decide_at_least(&len.sub(v), 0) == Some(true) {
                    v.clone()
                } else {
                    v.minimum(len)
                }
            }
        };
        let (lo, hi) = (clamp(start, cx), clamp(end, cx));
        let n = hi.sub(&lo).ceil_div(&Expr::lit(step));
        match cx.decide_at_least(&n, 0) {
            Some(true) => n,
            _ => n.maximum(&Expr::int(0)),
        }
    }
    fn range_len(cx: &mut Facts, end: &Expr, start: i64, step: i64) -> Expr {
        let n = end.sub(&Expr::int(start)).ceil_div(&Expr::int(step));
        match cx.decide_at_least(&n, 0) {
            Some(true) => n,
            _ => n.maximum(&Expr::int(0)),
        }
    }
    fn check(shape: &[Expr]) -> Result<(), TypeError> {
        if shape.len() > MAX_RANK {
            return Err(TypeError::new(format!(
                "rank {} exceeds the limit of {MAX_RANK} axes",
                shape.len()
            )));
        }
        match shape
            .iter()
            .map(Expr::as_const)
            .collect::<Option<Vec<i64>>>()
        {
            Some(ns) => check_shape(&ns.iter().map(|&n| n.max(0) as usize).collect::<Vec<_>>()),
            None => Ok(()),
        }
    }
    fn with_numbers(
        op: &str,
        inputs: &[&TensorType<Expr>],
        rule: &dyn Fn(&[&TensorType]) -> Result<TensorType, TypeError>,
    ) -> Result<TensorType<Expr>, TypeError> {
        let mut concrete = Vec::with_capacity(inputs.len());
        for (i, t) in inputs.iter().enumerate() {
            match t.concrete() {
                Some(c) => concrete.push(c),
                None => {
                    return Err(TypeError::new(format!(
                        "{op} does not take symbolic dimensions yet (operand {i} is {t})"
                    )))
                }
            }
        }
        let refs: Vec<&TensorType> = concrete.iter().collect();
        Ok(TensorType::<Expr>::from_concrete(&rule(&refs)?))
    }
}

impl TensorType<Expr> {
    /// The concrete type, when every extent is a number.
    pub fn concrete(&self) -> Option<TensorType> {
        let shape = self
            .shape
            .iter()
            .map(|d| d.as_const().and_then(|n| usize::try_from(n).ok()))
            .collect::<Option<Vec<usize>>>()?;
        Some(TensorType {
            dtype: self.dtype,
            shape,
        })
    }

    /// A concrete type as a symbolic one.
    pub fn from_concrete(t: &TensorType) -> TensorType<Expr> {
        TensorType {
            dtype: t.dtype,
            shape: t.shape.iter().map(|&d| Expr::lit(d)).collect(),
        }
    }

    /// The type under a binding of its symbols.
    pub fn bind(&self, b: &super::Binding) -> Result<TensorType, String> {
        let mut shape = Vec::with_capacity(self.shape.len());
        for d in &self.shape {
            let v = b.eval(d).map_err(|e| e.to_string())?;
            shape.push(usize::try_from(v).map_err(|_| format!("extent {d} is {v}"))?);
        }
        TensorType::new(self.dtype, shape).map_err(|e| e.message)
    }
}
