//! Index checks that no kernel of the result would make: an `index_select` whose result is
//! empty (another axis of its input has extent 0) still checks every element of its index,
//! as the interpreter and PyTorch do, but a kernel over an empty result never runs.
//!
//! So before scheduling, such a node's value `y` is replaced by `where(max(t) >= 0, y, y)`
//! with `t = index_select(arange(n), reshape(index, [-1]))`: the values are unchanged (`y`
//! either way), and the reduction `max(t)`, whose domain is the whole index, cannot join the
//! empty kernel (their domains differ), so it is a kernel of its own that checks every index
//! against the extent `n` when the program runs. Nothing optimizes after scheduling, so the
//! check stays.

use crate::error::{Error, Result};
use ferrite_ir::op::{BinaryOp, Op, ReduceOp, Scalar};
use ferrite_ir::{DType, Graph, Node, ValueId};

/// The graph with a check added for every `index_select` whose result is empty but whose
/// index is not, or `None` when there is none (the common case: nothing is copied).
pub fn add_empty_result_index_checks(g: &Graph) -> Result<Option<Graph>> {
    let needs = |v: usize| {
        let n = &g.nodes[v];
        matches!(n.op, Op::IndexSelect { .. }) && n.ty.numel() == 0 && g.ty(n.inputs[1]).numel() > 0
    };
    if !(0..g.nodes.len()).any(needs) {
        return Ok(None);
    }
    let internal = |e: ferrite_ir::Error| Error::Internal(format!("index checks: {e}"));
    let mut out = Graph {
        name: g.name.clone(),
        declared_outputs: g.declared_outputs.clone(),
        ..Graph::default()
    };
    let mut remap: Vec<ValueId> = Vec::with_capacity(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        let inputs: Vec<ValueId> = n.inputs.iter().map(|x| remap[x.index()]).collect();
        let v = match &n.op {
            op @ Op::IndexSelect { axis } if needs(i) => {
                let y = out.add(op.clone(), &inputs, None).map_err(internal)?;
                let x_ty = g.ty(n.inputs[0]);
                let a = ferrite_ir::types::normalize_axis(*axis, x_ty.rank())
                    .map_err(|e| Error::Internal(format!("index checks: {e}")))?;
                let checked = check_all(&mut out, inputs[1], x_ty.shape[a]).map_err(internal)?;
                out.add(Op::Where, &[checked, y, y], n.name.clone())
                    .map_err(internal)?
            }
            op => {
                // Copied as it is (typed already).
                let v = ValueId(out.nodes.len() as u32);
                if matches!(op, Op::Param { .. }) {
                    out.params.push(v);
                }
                out.nodes.push(Node {
                    inputs,
                    ..n.clone()
                });
                v
            }
        };
        remap.push(v);
    }
    out.outputs = g.outputs.iter().map(|o| remap[o.index()]).collect();
    Ok(Some(out))
}

/// `max(index_select(arange(extent), reshape(index, [-1]))) >= 0`: true, once every index
/// element has been checked against `extent`.
fn check_all(g: &mut Graph, index: ValueId, extent: usize) -> ferrite_ir::Result<ValueId> {
    let positions = g.add(
        Op::Arange {
            start: 0.0,
            end: extent as f64,
            step: 1.0,
            dtype: DType::I64,
        },
        &[],
        None,
    )?;
    let flat = g.add(Op::Reshape { shape: vec![-1] }, &[index], None)?;
    let picked = g.add(Op::IndexSelect { axis: 0 }, &[positions, flat], None)?;
    let largest = g.add(
        Op::Reduce {
            op: ReduceOp::Max,
            axes: None,
            keepdim: false,
        },
        &[picked],
        None,
    )?;
    let zero = g.add_literal(Scalar::Int(0), DType::I64)?;
    g.add(Op::Binary(BinaryOp::Ge), &[largest, zero], None)
}
