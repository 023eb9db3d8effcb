//! Whether a kernel's outer points may run on different threads: do they write disjoint
//! elements?
//!
//! The outer domain is split across threads, so two outer points must never write the
//! same element (that would be a data race, and the last writer would depend on timing).
//! A store index is written `Σ c_k * i_k + rest`, with `rest` free of outer variables
//! and bounded to a span of `w` elements; the outer points then write disjoint elements
//! when, with the axes ordered by `|c_k|`, every stride steps over everything the smaller
//! axes and `rest` can reach (the criterion `gemm.rs` uses for its output). Stores to the
//! same buffer must share the outer coefficients, and their spans are merged. Kernels
//! that fail the test run on one thread.

use super::analysis::split_linear;
use ferrite_ir::loops::{BufferId, Kernel, Stage, Var, VarKind};
use std::collections::HashMap;

/// True when distinct outer points of `kernel` provably write distinct elements.
pub fn outer_points_write_disjoint(kernel: &Kernel) -> bool {
    let n = kernel.domain.len();
    // buffer -> (outer coefficients, lowest and highest offset of the rest)
    let mut shapes: HashMap<BufferId, (Vec<i64>, i64, i64)> = HashMap::new();
    // buffer -> the (extent, stride) of every variable of its store index, when the
    // buffer has one store and its index is affine.
    let mut whole: HashMap<BufferId, Option<Vec<(u128, u128)>>> = HashMap::new();
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
            // Every outer variable counts (one missing from the index has stride 0); inner
            // variables only where they appear (a point may write an element repeatedly).
            let dims = s.index.as_affine(&ext).and_then(|(_, terms)| {
                let inner = terms
                    .iter()
                    .filter(|(v, _)| v.kind != VarKind::Outer)
                    .map(|&(v, c)| Some((ext.extent(v)? as u128, c.unsigned_abs() as u128)));
                let outer = kernel
                    .domain
                    .iter()
                    .zip(&coeffs)
                    .map(|(&d, &c)| Some((d as u128, c.unsigned_abs() as u128)));
                outer.chain(inner).collect::<Option<Vec<_>>>()
            });
            whole
                .entry(s.buffer)
                .and_modify(|d| *d = None)
                .or_insert(dims);
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
        strides_step_over(dims, span)
            || matches!(whole.get(buffer), Some(Some(all)) if strides_step_over(all.clone(), 0))
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
        // Division of an outer variable: not provable.
        assert!(!outer_points_write_disjoint(&kernel(
            vec![8],
            vec![],
            i(0).floor_div(2)
        )));
    }
}
