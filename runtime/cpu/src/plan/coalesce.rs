//! Merging the innermost outer axes of a pointwise kernel, so short rows vectorize.
//!
//! A pointwise kernel runs its innermost outer axis as the vector loop, one row at a
//! time; with a short last axis (`[4096, 3]`) every row is a scalar tail. When every
//! index in the kernel is the same function of the last two axes `i_a, i_b` (extent
//! `d`) as of one merged axis `f = i_a*d + i_b` (that is, after substituting
//! `i_a = f // d, i_b = f % d` and simplifying, no floor division or modulo of `f` is
//! left), the two axes become one. Repeated, a contiguous elementwise kernel of any
//! shape becomes a single loop. Broadcasts along the last axis (`bias[i_b]`) keep the
//! axes apart, as they must.

use super::analysis::{mentions, split_linear, substitute};
use ferrite_ir::loops::{Block, Extents, IndexExpr, Kernel, Stage, StoreOp, Var};

/// `kernel` with its innermost outer axes merged where that keeps every index affine, or
/// `None` when nothing merges (or the kernel is not a single store stage without
/// inner loops).
pub fn coalesce_pointwise(kernel: &Kernel) -> Option<Kernel> {
    let pointwise = kernel.stages.len() == 1
        && matches!(&kernel.stages[0], Stage::Store { domain, .. } if domain.is_empty());
    if !pointwise {
        return None;
    }
    let mut current = kernel.clone();
    let mut merged = false;
    while current.domain.len() >= 2 {
        match merge_last_two(&current) {
            Some(k) => {
                current = k;
                merged = true;
            }
            None => break,
        }
    }
    merged.then_some(current)
}

/// Merges the last two outer axes, or `None` if some index would stop being affine.
fn merge_last_two(kernel: &Kernel) -> Option<Kernel> {
    let n = kernel.domain.len();
    let (a, b) = (n - 2, n - 1);
    let d = kernel.domain[b] as i64;
    let mut domain = kernel.domain.clone();
    domain[a] = kernel.domain[a].checked_mul(kernel.domain[b])?;
    domain.pop();
    let ext = Extents {
        outer: domain.clone(),
        reduce: vec![],
        store: vec![],
    };
    let f = Var::outer(a);
    let rewrite = |e: &IndexExpr| -> Option<IndexExpr> {
        let s = substitute(e, &|v| {
            if v == Var::outer(a) {
                Some(IndexExpr::Var(f).floor_div(d))
            } else if v == Var::outer(b) {
                Some(IndexExpr::Var(f).modulo(d))
            } else {
                None
            }
        })
        .simplify(&ext);
        // Still affine in the merged variable: it can be the vector loop.
        (!mentions(&s, f) || split_linear(&s, f).is_some()).then_some(s)
    };
    reindex_pointwise(kernel, domain, rewrite)
}

/// The single-store-stage `kernel` over a new outer `domain`, with every index expression
/// (loads, guards, iotas, stores) rewritten by `rewrite`; `None` if it refuses one.
pub fn reindex_pointwise(
    kernel: &Kernel,
    domain: Vec<usize>,
    mut rewrite: impl FnMut(&IndexExpr) -> Option<IndexExpr>,
) -> Option<Kernel> {
    let Stage::Store {
        domain: inner,
        body,
        stores,
    } = kernel.stages.first()?
    else {
        return None;
    };
    let nodes = body
        .nodes
        .iter()
        .map(|n| n.try_map_indices(&mut rewrite))
        .collect::<Option<Vec<_>>>()?;
    let stores = stores
        .iter()
        .map(|s| {
            Some(StoreOp {
                index: rewrite(&s.index)?,
                ..s.clone()
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Kernel {
        domain,
        stages: vec![Stage::Store {
            domain: inner.clone(),
            body: Block { nodes },
            stores,
        }],
        ..kernel.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_ir::loops::{BufferId, ExprNode, ExprOp, KernelId, Load, Value};
    use ferrite_ir::DType;

    fn kernel(domain: Vec<usize>, load: IndexExpr, store: IndexExpr) -> Kernel {
        let mut body = Block::default();
        let v = body.push(ExprNode {
            dtype: DType::F32,
            op: ExprOp::Load(Load {
                buffer: BufferId(0),
                index: load,
                guard: vec![],
                other: Value::Float(0.0),
            }),
        });
        Kernel {
            id: KernelId(0),
            name: "k".into(),
            nodes: vec![],
            domain,
            stages: vec![Stage::Store {
                domain: vec![],
                body,
                stores: vec![StoreOp {
                    buffer: BufferId(1),
                    index: store,
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
    fn contiguous_axes_merge_and_broadcasts_do_not() {
        let flat = i(0) * 12 + i(1) * 3 + i(2);
        let k = coalesce_pointwise(&kernel(vec![5, 4, 3], flat.clone(), flat)).unwrap();
        assert_eq!(k.domain, vec![60]);
        let Stage::Store { stores, .. } = &k.stages[0] else {
            panic!()
        };
        assert_eq!(stores[0].index, i(0));
        // A broadcast along the last axis stops the merge.
        let flat = i(0) * 3 + i(1);
        assert!(coalesce_pointwise(&kernel(vec![5, 3], i(1), flat)).is_none());
        // A transpose does not merge either.
        assert!(
            coalesce_pointwise(&kernel(vec![5, 3], i(1) * 5 + i(0), i(0) * 3 + i(1))).is_none()
        );
    }
}
