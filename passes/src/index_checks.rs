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
            op @ (Op::IndexSelect { axis }
            | Op::Gather { axis }
            | Op::IndexAdd { axis }
            | Op::IndexReduce { axis, .. })
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
                Op::IndexAdd { .. } | Op::IndexReduce { .. } => {
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

/// The optimized graph with a check added for every index op of `before` whose index no
/// index op of `after` still reads: the optimizer may remove an index op whose value
/// does not matter (`pow(gather(x, i), 0)` folds to 1; a dead op is dropped), but the
/// interpreter, like PyTorch, still checks its index, so an out-of-range index must stop
/// the compiled program too (found by the ONNX model fuzzer). The check, as in
/// [`add_index_checks`], is `max(index_select(arange(n), reshape(index, [-1]))) >= 0`
/// over a copy of the index's computation, tied to the first output through
/// `where(check, out, out)`; nothing optimizes after this, so it stays. `None` when every
/// index is still read (the common case: nothing is copied).
pub fn keep_dropped_index_checks(before: &Graph, after: &Graph) -> Result<Option<Graph>> {
    let index_ops = |g: &Graph| -> Vec<(ValueId, usize)> {
        g.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let axis = match n.op {
                    Op::IndexSelect { axis }
                    | Op::Gather { axis }
                    | Op::IndexAdd { axis }
                    | Op::IndexReduce { axis, .. } => axis,
                    _ => return None,
                };
                if g.ty(n.inputs[1]).numel() == 0 || constant_in_range(g, n, axis) {
                    return None;
                }
                let x = g.ty(n.inputs[0]);
                let a = ferrite_ir::types::normalize_axis(axis, x.rank()).ok()?;
                Some((ValueId(i as u32), x.shape[a]))
            })
            .collect()
    };
    let in_before = index_ops(before);
    if in_before.is_empty() || after.outputs.is_empty() {
        return Ok(None);
    }
    let in_after = index_ops(after);
    let index_of = |g: &Graph, ops: &[(ValueId, usize)]| -> Vec<ValueId> {
        ops.iter().map(|&(v, _)| g.node(v).inputs[1]).collect()
    };
    let mut classes = Classes::default();
    let before_class = classes.number(before, &index_of(before, &in_before));
    let after_class = classes.number(after, &index_of(after, &in_after));
    let read: Vec<(u32, usize)> = in_after
        .iter()
        .map(|&(v, e)| (after_class[after.node(v).inputs[1].index()], e))
        .collect();
    let dropped: Vec<(ValueId, usize)> = in_before
        .into_iter()
        .filter(|&(v, e)| !read.contains(&(before_class[before.node(v).inputs[1].index()], e)))
        .collect();
    if dropped.is_empty() {
        return Ok(None);
    }
    if before.params.len() != after.params.len() {
        return Err(Error::Internal(
            "index checks: the optimizer changed the parameters".into(),
        ));
    }
    let internal = |e: ferrite_ir::Error| Error::Internal(format!("index checks: {e}"));
    let mut out = after.clone();
    let copied = copy_values(before, &mut out, &index_of(before, &dropped));
    let mut all = None;
    for (v, extent) in dropped {
        let index = copied[before.node(v).inputs[1].index()]
            .ok_or_else(|| Error::Internal("index checks: an index was not copied".into()))?;
        let check = check_all(&mut out, index, extent).map_err(internal)?;
        all = Some(match all {
            None => check,
            Some(c) => out
                .add(Op::Binary(BinaryOp::And), &[c, check], None)
                .map_err(internal)?,
        });
    }
    let check = all.expect("at least one dropped index op");
    let first = out.outputs[0];
    let tied = out
        .add(Op::Where, &[check, first, first], None)
        .map_err(internal)?;
    // The returned value keeps its name (outputs are shown by it in dumps).
    if !matches!(out.node(first).op, Op::Param { .. }) {
        if let Some(name) = out.nodes[first.index()].name.take() {
            out.nodes[tied.index()].name = Some(name);
        }
    }
    for o in out.outputs.iter_mut() {
        if *o == first {
            *o = tied;
        }
    }
    Ok(Some(out))
}

/// The nodes that `roots` are computed from, `roots` included (a loop, not recursion, so
/// a hostile chain cannot exhaust the stack).
fn ancestors(g: &Graph, roots: &[ValueId]) -> Vec<bool> {
    let mut mark = vec![false; g.nodes.len()];
    for r in roots {
        mark[r.index()] = true;
    }
    for i in (0..g.nodes.len()).rev() {
        if mark[i] {
            for x in &g.nodes[i].inputs {
                mark[x.index()] = true;
            }
        }
    }
    mark
}

/// Structural classes of values, shared across graphs: two values get one class when
/// their ops, types and operand classes are equal (parameters by position), so an index
/// computed the same way in the graph before and after optimizing is recognized.
#[derive(Default)]
struct Classes {
    /// Class of each (op text, type text, operand classes); constants are not printed but
    /// numbered in `constants`.
    ids: std::collections::HashMap<(String, String, Vec<u32>), u32>,
    constants: Vec<ferrite_ir::Constant>,
}

impl Classes {
    /// The class of each ancestor of `roots` in `g` (`u32::MAX` for the others).
    fn number(&mut self, g: &Graph, roots: &[ValueId]) -> Vec<u32> {
        let mark = ancestors(g, roots);
        let mut class = vec![u32::MAX; g.nodes.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            if !mark[i] {
                continue;
            }
            let op = match &n.op {
                Op::Constant(c) => {
                    let k = match self.constants.iter().position(|d| d == c) {
                        Some(k) => k,
                        None => {
                            self.constants.push(c.clone());
                            self.constants.len() - 1
                        }
                    };
                    format!("constant #{k}")
                }
                op => format!("{op:?}"),
            };
            let operands = n.inputs.iter().map(|x| class[x.index()]).collect();
            let next = self.ids.len() as u32;
            class[i] = *self
                .ids
                .entry((op, n.ty.to_string(), operands))
                .or_insert(next);
        }
        class
    }
}

/// Copies the computation of `roots` in `from` into `to` (parameters map by position);
/// the copy of each value of `from` that was copied.
fn copy_values(from: &Graph, to: &mut Graph, roots: &[ValueId]) -> Vec<Option<ValueId>> {
    let mark = ancestors(from, roots);
    let mut copied: Vec<Option<ValueId>> = vec![None; from.nodes.len()];
    for (i, n) in from.nodes.iter().enumerate() {
        if !mark[i] {
            continue;
        }
        copied[i] = Some(match n.op {
            Op::Param { index } => to.params[index],
            _ => {
                let inputs = n
                    .inputs
                    .iter()
                    .map(|x| copied[x.index()].expect("operands come first"))
                    .collect();
                let c = ValueId(to.nodes.len() as u32);
                to.nodes.push(Node {
                    inputs,
                    name: None,
                    ..n.clone()
                });
                c
            }
        });
    }
    copied
}
