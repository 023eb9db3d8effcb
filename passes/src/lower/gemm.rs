//! The GEMM description of a matmul kernel: how its operands are read through strides,
//! so a backend can call a matrix-multiply routine instead of the loops.

use super::domain::coords_of;
use super::refusal::{LowerError, Refusal};
use crate::error::Error;
use ferrite_ir::loops::{ExprOp, ExprRef, Extents, GemmInfo, GemmOperand, IndexExpr, Stage, Var};
use ferrite_ir::{Graph, ValueId};

/// The GEMM description of matmul `r`, whose reduction is stage `si` of a kernel with
/// outer domain `outer`.
pub(super) fn gemm_info(
    g: &Graph,
    outer: &[usize],
    stages: &[Stage],
    si: usize,
    r: ValueId,
) -> Result<GemmInfo, LowerError> {
    let node = g.node(r);
    let (ash, bsh) = (&g.ty(node.inputs[0]).shape, &g.ty(node.inputs[1]).shape);
    let out = &node.ty.shape;
    let Some(Stage::Reduce {
        domain,
        body,
        reductions,
        ..
    }) = stages.get(si)
    else {
        return Err(Error::internal("the matmul's stage is not a reduction").into());
    };
    let ext = Extents {
        outer: outer.to_vec(),
        reduce: domain.clone(),
        store: vec![],
    };
    let red = &reductions[0];
    let (x, Some(y)) = (red.value, red.rhs) else {
        return Err(Error::internal("the matmul's reduction is not a dot product").into());
    };
    let nb = out.len() - (ash.len() >= 2) as usize - (bsh.len() >= 2) as usize;
    // Outer axis of each of batch.., m, n (None for extent 1).
    let oc = coords_of(out, Var::outer);
    let axis_var = |c: &IndexExpr| match c {
        IndexExpr::Var(v) => Some(v.index as usize),
        _ => None,
    };
    let mut outer_axes: Vec<Option<usize>> = oc[..nb].iter().map(axis_var).collect();
    outer_axes.push(if ash.len() >= 2 {
        axis_var(&oc[nb])
    } else {
        None
    });
    outer_axes.push(if bsh.len() >= 2 {
        axis_var(&oc[out.len() - 1])
    } else {
        None
    });
    let operand = |e: ExprRef, culprit: ValueId, is_lhs: bool| {
        let which = if is_lhs { "left" } else { "right" };
        let refuse = |why: &str| {
            LowerError::Refused(Refusal {
                rule: "gemm-operand-not-strided",
                detail: format!("the {which} operand of %{} {why}", r.0),
                culprit: Some(culprit),
            })
        };
        let ExprOp::Load(l) = &body.nodes[e.index()].op else {
            return Err(refuse("is computed, not loaded"));
        };
        if !l.guard.is_empty() {
            return Err(refuse("is a guarded (padded) load"));
        }
        let Some((offset, terms)) = l.index.as_affine(&ext) else {
            return Err(refuse("is not an affine view of a buffer"));
        };
        let stride_of = |axis: Option<usize>, kind_reduce: bool| -> i64 {
            let var = match (axis, kind_reduce) {
                (_, true) if domain.is_empty() => return 0,
                (_, true) => Var::reduce(0),
                (Some(a), false) => Var::outer(a),
                (None, false) => return 0,
            };
            terms.iter().find(|(v, _)| *v == var).map_or(0, |(_, c)| *c)
        };
        let batch_strides = outer_axes[..nb]
            .iter()
            .map(|&a| stride_of(a, false))
            .collect();
        let (row_stride, col_stride) = if is_lhs {
            // [m, k]: rows along the outer m axis, columns along the reduction.
            (stride_of(outer_axes[nb], false), stride_of(None, true))
        } else {
            // [k, n]: rows along the reduction, columns along the outer n axis.
            (stride_of(None, true), stride_of(outer_axes[nb + 1], false))
        };
        Ok(GemmOperand {
            buffer: l.buffer,
            offset,
            batch_strides,
            row_stride,
            col_stride,
        })
    };
    let lhs = operand(x, node.inputs[0], true)?;
    let rhs = operand(y, node.inputs[1], false)?;
    let m = if ash.len() >= 2 {
        ash[ash.len() - 2]
    } else {
        1
    };
    let n = if bsh.len() >= 2 {
        bsh[bsh.len() - 1]
    } else {
        1
    };
    Ok(GemmInfo {
        batch: out[..nb].to_vec(),
        m,
        n,
        k: *ash.last().unwrap_or(&1),
        lhs,
        rhs,
        stage: si,
        acc: red.acc,
        outer_axes,
    })
}
