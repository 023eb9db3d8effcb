//! Loop domains and coordinates of graph shapes: extent-1 axes are dropped, and a
//! reduction's shape says which axes are outer and which are reduced.

use ferrite_ir::infer::reduced_axes;
use ferrite_ir::loops::{IndexExpr, ReduceKind, Var};
use ferrite_ir::types::normalize_axis;
use ferrite_ir::{ArgReduceOp, Graph, Op, ReduceOp, ValueId};

/// Drops extent-1 axes: the loop domain of a shape.
pub(super) fn squeeze(shape: &[usize]) -> Vec<usize> {
    shape.iter().copied().filter(|&d| d != 1).collect()
}

/// Variables for the non-1 axes of `shape`, in order (`make(k)` names the k-th), and 0
/// for extent-1 axes.
pub(super) fn coords_of(shape: &[usize], make: impl Fn(usize) -> Var) -> Vec<IndexExpr> {
    let mut next = 0;
    shape
        .iter()
        .map(|&d| {
            if d == 1 {
                IndexExpr::Const(0)
            } else {
                next += 1;
                IndexExpr::Var(make(next - 1))
            }
        })
        .collect()
}

/// The reduction structure of a graph node: input shape, reduced axes and kind.
pub(super) struct ReductionShape {
    pub input: Vec<usize>,
    pub axes: Vec<usize>,
    pub kind: ReduceKind,
}

pub(super) fn reduction_shape(g: &Graph, v: ValueId) -> Option<ReductionShape> {
    let n = g.node(v);
    let input = || g.ty(n.inputs[0]).shape.clone();
    match &n.op {
        Op::Reduce { op, axes, .. } => {
            let shape = input();
            let axes = reduced_axes(op.name(), axes.as_deref(), shape.len()).ok()?;
            let kind = match op {
                ReduceOp::Sum | ReduceOp::Mean => ReduceKind::Sum,
                ReduceOp::Max => ReduceKind::Max,
                ReduceOp::Min => ReduceKind::Min,
                ReduceOp::Prod => ReduceKind::Prod,
            };
            Some(ReductionShape {
                input: shape,
                axes,
                kind,
            })
        }
        Op::ArgReduce { op, axis, .. } => {
            let shape = input();
            let axes = match axis {
                None => (0..shape.len()).collect(),
                Some(a) if shape.is_empty() => {
                    normalize_axis(*a, 0).ok()?;
                    vec![]
                }
                Some(a) => vec![normalize_axis(*a, shape.len()).ok()?],
            };
            let kind = match op {
                ArgReduceOp::ArgMax => ReduceKind::ArgMax,
                ArgReduceOp::ArgMin => ReduceKind::ArgMin,
            };
            Some(ReductionShape {
                input: shape,
                axes,
                kind,
            })
        }
        _ => None,
    }
}

pub(super) fn is_reduction(op: &Op) -> bool {
    matches!(op, Op::Reduce { .. } | Op::ArgReduce { .. } | Op::MatMul)
}
