//! Whether a kernel's outer points may run on different threads: do they write disjoint
//! elements?
//!
//! The outer domain is split across threads, so two outer points must never write the
//! same element (that would be a data race, and the last writer would depend on timing).
//! A store index is written `Σ c_k * i_k + rest`, with `rest` free of outer variables
//! and bounded to a span of `w` elements; the outer points then write disjoint elements
//! when, with the axes ordered by `|c_k|`, every stride steps over everything the smaller
//! axes and `rest` can reach (the criterion `gemm.rs` uses for its output). Stores to the
//! same buffer must share the outer coefficients, and their spans are merged; where
//! the merged span is too wide (a concat stored one operand per stage, whose stores
//! differ by an offset), the stores are read as one index with the offset a variable
//! ([`offsets_step_over`]). Kernels that fail the test run on one thread.

use super::analysis::split_linear;
use ferrite_ir::hash::HashMap;
use ferrite_ir::loops::{gcd, BufferId, Kernel, Stage, Var, VarKind};

/// True when distinct outer points of `kernel` provably write distinct elements.
pub fn outer_points_write_disjoint(kernel: &Kernel) -> bool {
    let n = kernel.domain.len();
    // buffer -> (outer coefficients, lowest and highest offset of the rest)
    let mut shapes: HashMap<BufferId, (Vec<i64>, i64, i64)> = HashMap::default();
    // buffer -> per store, the constant and the (extent, stride) of every inner variable
    // of its index, None once an index is not affine.
    let mut whole: HashMap<BufferId, Option<Vec<Affine>>> = HashMap::default();
    for stage in &kernel.stages {
        let Stage::Store { stores, .. } = stage else {
            continue;
        };
        let ext = stage.extents(&kernel.domain);
        for s in stores {
            let mut rest = s.index.clone();
            let mut coeffs = vec![0i64; n];
            for (k, c) in coeffs.iter_mut().enumerate() {
                match split_linear(&rest, Var::outer(k)) {
                    Some((r, ck)) => {
                        *c = ck;
                        rest = r;
                    }
                    None => return false,
                }
            }
            let Some((lo, hi)) = rest.range(&ext) else {
                return false;
            };
            // Inner variables count only where they appear (a point may write an element
            // repeatedly).
            let affine = s.index.as_affine(&ext).and_then(|(constant, terms)| {
                let inner = terms
                    .iter()
                    .filter(|(v, _)| v.kind != VarKind::Outer)
                    .map(|&(v, c)| Some((ext.extent(v)? as u128, c.unsigned_abs() as u128)))
                    .collect::<Option<Vec<_>>>()?;
                Some(Affine { constant, inner })
            });
            let entry = whole.entry(s.buffer).or_insert_with(|| Some(Vec::new()));
            match (entry.as_mut(), affine) {
                (Some(list), Some(a)) => list.push(a),
                _ => *entry = None,
            }
            match shapes.get_mut(&s.buffer) {
                Some((cs, l, h)) => {
                    if *cs != coeffs {
                        return false;
                    }
                    *l = (*l).min(lo);
                    *h = (*h).max(hi);
                }
                None => {
                    shapes.insert(s.buffer, (coeffs, lo, hi));
                }
            }
        }
    }
    shapes.iter().all(|(buffer, (coeffs, lo, hi))| {
        let dims: Vec<(u128, u128)> = kernel
            .domain
            .iter()
            .zip(coeffs)
            .map(|(&d, &c)| (d as u128, c.unsigned_abs() as u128))
            .collect();
        let span = (*hi as i128 - *lo as i128).max(0) as u128;
        // Either the outer strides step over everything the rest reaches, or the whole
        // index (outer and inner variables) is injective, so no two points of the full
        // domain, let alone of different outer points, share an element
        // (`i1 + 256*j0 + 65536*i0` of a softmax over a middle axis).
        strides_step_over(dims.clone(), span)
            || matches!(whole.get(buffer), Some(Some(all)) if offsets_step_over(&dims, all))
    })
}

/// A store index `constant + Σ stride * v` over inner variables `v` (the outer ones are
/// the buffer's shared coefficients): `inner` holds each variable's (extent, stride).
struct Affine {
    constant: i64,
    inner: Vec<(u128, u128)>,
}

/// Whether stores `all` to one buffer, each `outer + constant + inner`, write distinct
/// elements for distinct points of the whole domain (outer, store, inner). One store:
/// its strides step over each other. Several (a concat stored one operand per stage,
/// `c*28224 + i1*56 + j0 + 3136*t` for tap `t`): for some stride `d` that divides every
/// difference of the constants, store `s` covers `[constant_s / d, + e_s)` along a
/// variable of stride `d` (`e_s` that variable's extent, 1 without one), the rest of
/// its inner variables are the same as every other store's, and the intervals do not
/// overlap; then the stores are one index whose stride-`d` variable runs over their
/// union, and that index's strides must step over each other.
fn offsets_step_over(outer: &[(u128, u128)], all: &[Affine]) -> bool {
    let Some(first) = all.first() else {
        return true;
    };
    if all.len() == 1 {
        return strides_step_over([outer, &first.inner[..]].concat(), 0);
    }
    let base = all.iter().map(|a| a.constant).min().unwrap_or(0);
    let gap = all.iter().fold(0, |g, a| gcd(g, a.constant - base)) as u128;
    let mut candidates: Vec<u128> = all
        .iter()
        .flat_map(|a| a.inner.iter().map(|&(_, d)| d))
        .chain(std::iter::once(gap))
        .filter(|&d| d > 0)
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    candidates.into_iter().any(|d| {
        let mut others: Option<Vec<(u128, u128)>> = None;
        let mut intervals = Vec::with_capacity(all.len());
        for a in all {
            let offset = (a.constant - base).unsigned_abs() as u128;
            if !offset.is_multiple_of(d) {
                return false;
            }
            let mut rest: Vec<(u128, u128)> =
                a.inner.iter().copied().filter(|&(e, _)| e > 1).collect();
            let along = rest.iter().position(|&(_, s)| s == d);
            let extent = along.map_or(1, |i| rest.remove(i).0);
            rest.sort_unstable();
            match &others {
                Some(o) if *o != rest => return false,
                Some(_) => {}
                None => others = Some(rest),
            }
            intervals.push((offset / d, offset / d + extent));
        }
        intervals.sort_unstable();
        if intervals.windows(2).any(|w| w[1].0 < w[0].1) {
            return false;
        }
        let reach = intervals.last().map_or(0, |i| i.1);
        let mut dims = others.unwrap_or_default();
        dims.push((reach, d));
        dims.extend_from_slice(outer);
        strides_step_over(dims, 0)
    })
}

/// Whether an index `Σ stride_k * v_k` (`v_k` in `0..extent_k`) plus a term spanning `span`
/// elements takes distinct values for distinct `v`: with the variables ordered by stride,
/// each stride exceeds everything the smaller ones (and the span) reach.
fn strides_step_over(mut dims: Vec<(u128, u128)>, span: u128) -> bool {
    dims.retain(|&(extent, _)| extent > 1);
    dims.sort_by_key(|&(_, stride)| stride);
    let mut reached = span;
    for (extent, stride) in dims {
        if stride <= reached {
            return false;
        }
        reached += (extent - 1) * stride;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_ir::loops::{Block, IndexExpr, KernelId, StoreOp};
    use ferrite_ir::loops::{ExprNode, ExprOp, Value};
    use ferrite_ir::DType;

    fn kernel(domain: Vec<usize>, store_domain: Vec<usize>, index: IndexExpr) -> Kernel {
        let mut body = Block::default();
        let v = body.push(ExprNode {
            dtype: DType::F32,
            op: ExprOp::Const(Value::Float(1.0)),
        });
        Kernel {
            id: KernelId(0),
            name: "k".into(),
            nodes: vec![],
            domain,
            stages: vec![Stage::Store {
                domain: store_domain,
                body,
                stores: vec![StoreOp {
                    buffer: BufferId(0),
                    index,
                    value: v,
                }],
            }],
            gemm: None,
            reads: vec![],
            writes: vec![],
        }
    }

    fn i(k: usize) -> IndexExpr {
        IndexExpr::Var(Var::outer(k))
    }

    #[test]
    fn rows_and_transposes_are_disjoint() {
        let j = IndexExpr::Var(Var::store(0));
        assert!(outer_points_write_disjoint(&kernel(
            vec![8],
            vec![16],
            i(0) * 16 + j.clone()
        )));
        assert!(outer_points_write_disjoint(&kernel(
            vec![8, 4],
            vec![],
            i(1) * 8 + i(0)
        )));
        // Rows overlapping by one element.
        assert!(!outer_points_write_disjoint(&kernel(
            vec![8],
            vec![16],
            i(0) * 15 + j
        )));
        // Every point writes element 0.
        assert!(!outer_points_write_disjoint(&kernel(
            vec![8],
            vec![],
            IndexExpr::Const(0)
        )));
        // A column of a middle axis: the row's span (j0*256) is wider than i1's stride,
        // but the whole index i1 + 256*j0 + 65536*i0 is injective.
        let j = IndexExpr::Var(Var::store(0));
        assert!(outer_points_write_disjoint(&kernel(
            vec![16, 256],
            vec![256],
            i(0) * 65536 + i(1) + j.clone() * 256
        )));
        // The same with rows interleaved so that points collide: i1 + 128*j0.
        assert!(!outer_points_write_disjoint(&kernel(
            vec![16, 256],
            vec![256],
            i(0) * 65536 + i(1) + j * 128
        )));
        // A concat stored one operand per stage: taps `t` at offsets 3136*t of rows
        // c*28224 + i1*56 + j0 ...
        let j = IndexExpr::Var(Var::store(0));
        let taps = |offsets: &[i64], row: i64| {
            let mut k = kernel(vec![64, 56], vec![56], IndexExpr::Const(0));
            let store = k.stages[0].clone();
            k.stages = offsets
                .iter()
                .map(|&o| {
                    let mut st = store.clone();
                    if let Stage::Store { stores, .. } = &mut st {
                        stores[0].index =
                            i(0) * 28224 + i(1) * row + j.clone() + IndexExpr::Const(o);
                    }
                    st
                })
                .collect();
            k
        };
        let nine: Vec<i64> = (0..9).map(|t| 3136 * t).collect();
        assert!(outer_points_write_disjoint(&taps(&nine, 56)));
        // ... not when two taps share an offset, or when rows overlap.
        let mut twice = nine.clone();
        twice[4] = 0;
        assert!(!outer_points_write_disjoint(&taps(&twice, 56)));
        assert!(!outer_points_write_disjoint(&taps(&nine, 55)));
        // Operands of unequal length along the last axis: i0*8 + j0 (3) and i0*8 + 3 + j0
        // (5); not when the second starts at 4 and reaches into the next row.
        let pair = |second_at: i64| {
            let mut k = kernel(vec![16], vec![3], i(0) * 8 + j.clone());
            let at = i(0) * 8 + j.clone() + IndexExpr::Const(second_at);
            k.stages
                .push(kernel(vec![16], vec![5], at).stages.remove(0));
            k
        };
        assert!(outer_points_write_disjoint(&pair(3)));
        assert!(!outer_points_write_disjoint(&pair(4)));
        // Division of an outer variable: not provable.
        assert!(!outer_points_write_disjoint(&kernel(
            vec![8],
            vec![],
            i(0).floor_div(2)
        )));
    }
}
