//! The frame of a lowered program: what each tile axis enumerates, and how the
//! loop IR's index expressions become tile arithmetic on it.
//!
//! A program's tiles have one or two axes. Each loop-IR variable is rewritten
//! in terms of the frame's flat variables (`i1 = o % 512` when the outer domain
//! `[64, 512]` is flattened into `o`), the result is simplified with the loop
//! IR's own rules (which undo the flattening where they can: `i0*512 + i1`
//! becomes `o`), and the simplified expression is printed as integer tile
//! arithmetic. Every value carries its *dependence*, the set of tile axes it
//! varies along, so it is computed at the smallest shape that holds it: a bias
//! indexed by the column alone is loaded as a `[1, BN]` row, not a full tile.
//!
//! Floor division and modulo (`//`, `%` in the loop IR) are floor operations,
//! while the tile language's `/` and `%` truncate toward zero. They agree on
//! non-negative operands; where the loop IR's ranges allow a negative operand
//! (under a pad's guard), the operand is shifted by a multiple of the divisor
//! that makes it non-negative first: `(x + k*n) // n - k`.

use super::builder::{add, bin, int, mul, sub, Builder, E};
use crate::error::{Error, Result};
use crate::tile::ast::BinaryOp;
use ferrite_ir::loops::{ExprRef, Extents, IndexExpr, Var};
use std::collections::HashMap;

/// Dependence on tile axis 0.
pub(super) const AXIS0: u8 = 1;
/// Dependence on tile axis 1.
pub(super) const AXIS1: u8 = 2;

/// The tile axes of a program and what the loop variables are in terms of them.
#[derive(Clone, Debug)]
pub(super) struct Frame {
    /// 1 or 2.
    pub rank: usize,
    /// The tile extent along each axis (the second unused at rank 1).
    pub blocks: [usize; 2],
    /// Per axis, the bool tile of lanes inside the domain (`None`: every lane is).
    pub masks: [Option<E>; 2],
    /// Loop-IR variables rewritten in the frame's variables (absent: unchanged).
    pub subst: HashMap<Var, IndexExpr>,
    /// Extents of the frame's variables, for simplification and ranges.
    pub ext: Extents,
    /// The frame's variables as tile expressions, with their dependence.
    pub leaves: HashMap<Var, (E, u8)>,
}

impl Frame {
    /// The shape of a value with dependence `deps` (a scalar when it has none).
    pub fn shape(&self, deps: u8) -> Vec<usize> {
        if deps == 0 {
            return Vec::new();
        }
        if self.rank == 1 {
            return vec![self.blocks[0]];
        }
        vec![
            if deps & AXIS0 != 0 { self.blocks[0] } else { 1 },
            if deps & AXIS1 != 0 { self.blocks[1] } else { 1 },
        ]
    }

    /// The domain mask of a value with dependence `deps`, if any lane can be
    /// outside the domain.
    pub fn mask(&self, deps: u8) -> Option<E> {
        let mut out: Option<E> = None;
        for (axis, bit) in [(0, AXIS0), (1, AXIS1)] {
            if deps & bit != 0 {
                if let Some(m) = &self.masks[axis] {
                    out = Some(match out {
                        None => m.clone(),
                        Some(o) => super::builder::and(o, m.clone()),
                    });
                }
            }
        }
        out
    }

    /// `e` with the loop variables rewritten in the frame's variables, simplified.
    pub fn rewrite(&self, e: &IndexExpr) -> IndexExpr {
        substitute(e, &self.subst).simplify(&self.ext)
    }
}

fn substitute(e: &IndexExpr, subst: &HashMap<Var, IndexExpr>) -> IndexExpr {
    match e {
        IndexExpr::Var(v) => subst.get(v).cloned().unwrap_or_else(|| e.clone()),
        IndexExpr::Const(_) | IndexExpr::Dynamic { .. } => e.clone(),
        IndexExpr::Sum(ts) => IndexExpr::Sum(ts.iter().map(|t| substitute(t, subst)).collect()),
        IndexExpr::Mul(x, c) => IndexExpr::Mul(Box::new(substitute(x, subst)), *c),
        IndexExpr::FloorDiv(x, n) => IndexExpr::FloorDiv(Box::new(substitute(x, subst)), *n),
        IndexExpr::Mod(x, n) => IndexExpr::Mod(Box::new(substitute(x, subst)), *n),
    }
}

/// `i` of a row-major domain `dims` in terms of its flat index `flat`:
/// `(flat // stride) % extent` per axis.
pub(super) fn unflatten(dims: &[usize], flat: &IndexExpr) -> Vec<IndexExpr> {
    let mut out = Vec::with_capacity(dims.len());
    for (k, &d) in dims.iter().enumerate() {
        let stride: usize = dims[k + 1..].iter().product();
        out.push(
            flat.clone()
                .floor_div(stride.max(1) as i64)
                .modulo(d.max(1) as i64),
        );
    }
    out
}

/// An integer tile expression and the tile axes it depends on.
pub(super) type Int = (E, u8);

/// Looks up the tile value of a data-dependent index node.
pub(super) type Dynamic<'a> = dyn Fn(ExprRef) -> Option<Int> + 'a;

/// The terms of a (rewritten) index expression, for pointer arithmetic:
/// `buf + t1 + t2 + ..` costs nothing on the machine (address generation), so
/// a sum is kept as separate terms rather than added up as a tile.
pub(super) fn terms(
    b: &mut Builder,
    frame: &Frame,
    e: &IndexExpr,
    dynamic: &Dynamic,
) -> Result<Vec<Int>> {
    match e {
        IndexExpr::Sum(ts) => {
            let mut out = Vec::new();
            for t in ts {
                out.extend(terms(b, frame, t, dynamic)?);
            }
            Ok(out)
        }
        IndexExpr::Const(0) => Ok(Vec::new()),
        _ => Ok(vec![int_tile(b, frame, e, dynamic)?]),
    }
}

/// `a + b`, written `a - c` when `b` is the negative constant `-c`.
pub(super) fn plus(a: E, b: E) -> E {
    match b {
        E::Int(c) if c < 0 && c != i64::MIN => sub(a, int(-c)),
        _ => add(a, b),
    }
}

/// The terms added up into one integer tile (0 when there are none).
pub(super) fn sum_terms(ts: Vec<Int>) -> Int {
    let mut it = ts.into_iter();
    match it.next() {
        None => (int(0), 0),
        Some(first) => it.fold(first, |(a, da), (b, db)| (plus(a, b), da | db)),
    }
}

/// A (rewritten) index expression as an integer tile. Divisions and modulos
/// (the coordinates of a flattened domain, mostly) are bound to names, so each
/// is computed once however many accesses use it.
pub(super) fn int_tile(
    b: &mut Builder,
    frame: &Frame,
    e: &IndexExpr,
    dynamic: &Dynamic,
) -> Result<Int> {
    Ok(match e {
        IndexExpr::Const(c) => (int(*c), 0),
        IndexExpr::Var(v) => frame
            .leaves
            .get(v)
            .cloned()
            .ok_or_else(|| Error::internal(format!("loop variable {v} has no tile")))?,
        IndexExpr::Dynamic { value, .. } => dynamic(*value)
            .ok_or_else(|| Error::internal(format!("index {value} was not computed")))?,
        IndexExpr::Sum(ts) => {
            let mut parts = Vec::new();
            for t in ts {
                parts.push(int_tile(b, frame, t, dynamic)?);
            }
            sum_terms(parts)
        }
        IndexExpr::Mul(x, c) => {
            let (a, d) = int_tile(b, frame, x, dynamic)?;
            (mul(a, int(*c)), d)
        }
        IndexExpr::FloorDiv(x, n) | IndexExpr::Mod(x, n) => {
            let (a, d) = int_tile(b, frame, x, dynamic)?;
            let lo = x.range(&frame.ext).map_or(i64::MIN, |(lo, _)| lo);
            // A shift by k*n makes the operand non-negative, where truncating and
            // floor division agree.
            let k = if lo >= 0 {
                0
            } else if lo == i64::MIN {
                return Err(Error::unsupported(format!(
                    "cannot bound `{x}` to divide it"
                )));
            } else {
                (-lo + n - 1) / n
            };
            let shifted = if k == 0 {
                a
            } else {
                add(
                    a,
                    int(k
                        .checked_mul(*n)
                        .ok_or_else(|| Error::unsupported("index arithmetic overflows"))?),
                )
            };
            let op = if matches!(e, IndexExpr::FloorDiv(..)) {
                BinaryOp::Div
            } else {
                BinaryOp::Rem
            };
            let q = bin(op, shifted, int(*n));
            let q = if k != 0 && op == BinaryOp::Div {
                sub(q, int(k))
            } else {
                q
            };
            (b.bind("i", q), d)
        }
    })
}

/// The largest absolute value any part of `e` takes over `ext` (for choosing
/// 32- or 64-bit offsets); `None` when unbounded.
pub(super) fn magnitude(e: &IndexExpr, ext: &Extents) -> Option<i128> {
    let (lo, hi) = e.range(ext)?;
    let own = (lo as i128).abs().max((hi as i128).abs());
    let inner = match e {
        IndexExpr::Sum(ts) => ts
            .iter()
            .map(|t| magnitude(t, ext))
            .try_fold(0i128, |m, x| x.map(|x| m.max(x)))?,
        IndexExpr::Mul(x, _) | IndexExpr::FloorDiv(x, _) | IndexExpr::Mod(x, _) => {
            magnitude(x, ext)?
        }
        _ => 0,
    };
    Some(own.max(inner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tile::print;
    use ferrite_ir::loops::VarKind;

    fn var(kind: VarKind, index: u32) -> IndexExpr {
        IndexExpr::Var(Var { kind, index })
    }

    fn flat_frame(outer: usize) -> Frame {
        let o = Var::outer(0);
        let mut leaves = HashMap::new();
        leaves.insert(o, (super::super::builder::param("o"), AXIS0));
        Frame {
            rank: 1,
            blocks: [128, 1],
            masks: [None, None],
            subst: HashMap::new(),
            ext: Extents {
                outer: vec![outer],
                reduce: vec![],
                store: vec![],
            },
            leaves,
        }
    }

    #[test]
    fn flattened_row_major_index_collapses_to_the_flat_variable() {
        let mut f = flat_frame(64 * 512);
        let o = var(VarKind::Outer, 0);
        let coords = unflatten(&[64, 512], &o);
        f.subst.insert(Var::outer(0), coords[0].clone());
        f.subst.insert(Var::outer(1), coords[1].clone());
        // i0*512 + i1 over [64, 512] is o itself; i1 alone is o % 512.
        let idx = var(VarKind::Outer, 0) * 512 + var(VarKind::Outer, 1);
        assert_eq!(f.rewrite(&idx), o);
        let col = f.rewrite(&var(VarKind::Outer, 1));
        let mut b = Builder::new();
        let (e, deps) = int_tile(&mut b, &f, &col, &|_| None).unwrap();
        assert!(matches!(e, E::Def(_)));
        assert!(print(&b.finish(vec![], "k", &[])).contains("  i = o % 512\n"));
        assert_eq!(deps, AXIS0);
    }

    #[test]
    fn floor_division_of_negative_operands_is_shifted() {
        let f = flat_frame(10);
        // (o - 3) // 4 and (o - 3) % 4 with o in 0..10: operand range -3..6.
        let x = var(VarKind::Outer, 0) + IndexExpr::Const(-3);
        let mut b = Builder::new();
        int_tile(&mut b, &f, &x.clone().floor_div(4), &|_| None).unwrap();
        int_tile(&mut b, &f, &x.modulo(4), &|_| None).unwrap();
        let text = print(&b.finish(vec![], "k", &[]));
        assert!(text.contains("i = (o - 3 + 4) / 4 - 1"), "{text}");
        assert!(text.contains("i1 = (o - 3 + 4) % 4"), "{text}");
        // Check the identity numerically for the whole range.
        for o in 0i64..10 {
            let x = o - 3;
            assert_eq!((x + 4) / 4 - 1, x.div_euclid(4));
            assert_eq!((x + 4) % 4, x.rem_euclid(4));
        }
    }

    #[test]
    fn magnitudes_bound_every_part() {
        let ext = Extents {
            outer: vec![100],
            reduce: vec![],
            store: vec![],
        };
        let e = var(VarKind::Outer, 0) * 1000 + IndexExpr::Const(-99_000);
        assert_eq!(magnitude(&e, &ext), Some(99_000));
    }
}
