//! Index checks that no kernel of the result would make. The interpreter, like PyTorch,
//! checks every element of an `index_select` or `gather` index, but a fused kernel computes
//! only the elements its consumers read:
//! - an `index_select` whose result is empty (another axis of its input has extent 0) has a
//!   kernel that never runs;
//! - an index op whose result is read only in part (it reaches a `slice`, a cropping `pad`,
//!   or the data operand of another index op, through elementwise and movement ops) has a
//!   kernel that evaluates only the picked positions, so an out-of-range index elsewhere
//!   would go unnoticed;
//! - an `index_add` whose result is empty adds nothing, so its kernel reads no index;
//! - an index op over an axis of extent 1 whose data operand is fused into its kernel reads
//!   position 0, the only one in range, without the index (found by the ONNX model fuzzer:
//!   SoftmaxCrossEntropyLoss over one class).
//!
//! So before scheduling, such a node's value `y` is replaced by `where(max(t) >= 0, y, y)`
//! with `t = index_select(arange(n), reshape(index, [-1]))`: the values are unchanged (`y`
//! either way), and the reduction `max(t)` needs every element of `t`, so whatever kernel
//! computes it checks every index against the extent `n` when the program runs. Nothing
//! optimizes after scheduling, so the check stays.

use crate::error::{Error, Result};
use ferrite_ir::op::{BinaryOp, Op, ReduceOp, Scalar};
use ferrite_ir::{DType, Graph, Node, ValueId};

/// The graph with a check added for every index op that [`needs_check`], or `None` when
/// there is none (the common case: nothing is copied).
pub fn add_index_checks(g: &Graph) -> Result<Option<Graph>> {
    let needs = needs_check(g);
    if !needs.iter().any(|&b| b) {
        return Ok(None);
    }
    let internal = |e: ferrite_ir::Error| Error::Internal(format!("index checks: {e}"));
    let mut out = Graph::new(g.name.clone());
    out.declared_outputs = g.declared_outputs.clone();
    let mut remap: Vec<ValueId> = Vec::with_capacity(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        let inputs: Vec<ValueId> = n.inputs.iter().map(|x| remap[x.index()]).collect();
        let v = match &n.op {
            op @ (Op::IndexSelect { axis } | Op::Gather { axis } | Op::IndexAdd { axis })
                if needs[i] =>
            {
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

/// Which nodes are index ops (`index_select`, `gather`) with a non-empty index whose every
/// element no kernel would otherwise check: their result is empty, or read only in part.
fn needs_check(g: &Graph) -> Vec<bool> {
    let n = g.nodes.len();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (u, node) in g.nodes.iter().enumerate() {
        for x in &node.inputs {
            users[x.index()].push(u);
        }
    }
    let is_output: Vec<bool> = {
        let mut o = vec![false; n];
        for v in &g.outputs {
            o[v.index()] = true;
        }
        o
    };
    // `partial[v]`: some kernel may read only some elements of `v`. Users come after their
    // operands, so one pass from the end sees every user first.
    let mut partial = vec![false; n];
    for v in (0..n).rev() {
        if is_output[v] {
            continue;
        }
        partial[v] = users[v].iter().any(|&u| {
            let user = &g.nodes[u];
            match &user.op {
                Op::Slice { .. } => true,
                Op::Pad { pads, .. } if pads.iter().any(|&p| p < 0) => true,
                Op::IndexSelect { .. } | Op::Gather { .. } => {
                    user.inputs[0].index() == v || partial[u]
                }
                // Elementwise and movement ops compute (or view) exactly the elements
                // their own consumers read.
                Op::Unary(_)
                | Op::Binary(_)
                | Op::Where
                | Op::Cast { .. }
                | Op::Reshape { .. }
                | Op::Permute { .. }
                | Op::Transpose { .. }
                | Op::Expand { .. }
                | Op::Squeeze { .. }
                | Op::Unsqueeze { .. }
                | Op::Concat { .. }
                | Op::Pad { .. } => partial[u],
                // Reductions, normalizations and matmul read all of their operands.
                _ => false,
            }
        });
    }
    (0..n)
        .map(|v| {
            let node = &g.nodes[v];
            let axis = match node.op {
                Op::IndexSelect { axis } | Op::Gather { axis } => axis,
                // Its kernel walks the whole index, unless the result is empty.
                Op::IndexAdd { .. } => {
                    return g.ty(node.inputs[1]).numel() > 0 && node.ty.numel() == 0
                }
                _ => return false,
            };
            g.ty(node.inputs[1]).numel() > 0
                && (node.ty.numel() == 0 || partial[v] || unit_axis(g, node, axis))
                && !constant_in_range(g, node, axis)
        })
        .collect()
}

/// Whether `node` indexes an axis of extent 1: the only position in range is 0, so a
/// kernel that computes the data operand inline (fused with its producer) reads position
/// 0 without looking at the index at all.
fn unit_axis(g: &Graph, node: &Node, axis: i64) -> bool {
    let x = g.ty(node.inputs[0]);
    ferrite_ir::types::normalize_axis(axis, x.rank()).is_ok_and(|a| x.shape[a] == 1)
}

/// Whether the index of `node` is a constant whose every element is in range: nothing to
/// check at run time.
fn constant_in_range(g: &Graph, node: &Node, axis: i64) -> bool {
    let x = g.ty(node.inputs[0]);
    let Ok(a) = ferrite_ir::types::normalize_axis(axis, x.rank()) else {
        return false;
    };
    let extent = x.shape[a] as i64;
    match &g.nodes[node.inputs[1].index()].op {
        Op::Constant(c) => c
            .tensor()
            .to_i64()
            .iter()
            .all(|&i| (0..extent).contains(&i)),
        _ => false,
    }
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
