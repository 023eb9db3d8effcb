//! The reference interpreter: evaluates a graph op by op with PyTorch semantics.
//!
//! It is the oracle every compiler target is tested against, so it is written to be
//! plainly correct rather than fast:
//!
//! - float ops compute in f64 and round to the result dtype once per op;
//! - integer ops compute in i64 with wrapping arithmetic, then wrap to the result dtype;
//! - primitive reductions and matmul accumulate in f64 (i64 for integers) and round
//!   once;
//! - the composites built on reductions (`mean`, `softmax`, `log_softmax`,
//!   `layer_norm`, `rms_norm`) are evaluated as the primitive ops `decompose` makes
//!   of them, each rounded to its dtype (`composite.rs`), so an intermediate that
//!   overflows f32 overflows here where it does in PyTorch and in every backend;
//! - every result has exactly the type [`infer`] gives.
//!
//! Choices where PyTorch is undefined or platform-dependent:
//!
//! - `cast` from float to integer truncates toward zero and saturates at the
//!   integer range; NaN becomes 0. Casting i64 to a float dtype rounds correctly
//!   (to nearest, ties to even), even above 2^53.
//! - `full` and `pad` reject fill values that do not fit the dtype (integers out of
//!   range, finite values that overflow a float dtype), as PyTorch's checked scalar
//!   conversion does; integer literals wrap to `i32` like any other integer result.
//! - `arange` with an integer dtype truncates `start` and `step` to integers first
//!   and computes `start + i * step` in i64, as PyTorch's CPU kernel does; float
//!   dtypes compute `start + i * step` in f64.
//! - `pow` of integers with a negative exponent is an error, as in PyTorch.
//! - `maximum` and `minimum` are IEEE 754-2019's: NaN wins, and `-0 < +0`, so two
//!   zeros give the same answer in either order (PyTorch's scalar and vector
//!   kernels disagree there).
//! - `index_select` and `gather` reject negative indices as out of range.
//! - `index_add` rounds to the dtype after each addition, in index order (PyTorch's
//!   kernel adds in the dtype); `embedding_bag` is computed in f64 and rounded once,
//!   and its offsets are checked as PyTorch checks them (the first is 0, none
//!   decreases or passes the end).

mod bag;
mod composite;
mod elementwise;
mod erf;
mod linalg;
mod movement;
mod reduce;
mod strided;
mod window;

pub use erf::{erf, erfc};

use crate::infer::infer;
use crate::op::{Op, ReduceOp, Scalar};
use crate::types::TensorType;
use crate::{verify, DType, Error, Graph, Result, Tensor};
use std::borrow::Cow;

/// Evaluates `g` on `inputs` (one tensor per parameter, in order) and returns one tensor
/// per entry of `g.outputs`.
///
/// The graph is verified first, and every input must have exactly its parameter's type;
/// errors name the offending parameter or node. Intermediates are dropped after their
/// last use, so peak memory is what the graph needs, not the sum of all values.
pub fn interpret(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    verify(g).map_err(|e| e.context(format!("graph `{}` is invalid", g.name)))?;
    if inputs.len() != g.params.len() {
        return Err(Error::Input(format!(
            "graph `{}` takes {} input{}, got {}",
            g.name,
            g.params.len(),
            if g.params.len() == 1 { "" } else { "s" },
            inputs.len()
        )));
    }
    for (i, (&p, t)) in g.params.iter().zip(inputs).enumerate() {
        let name = g.node(p).name.as_deref().unwrap_or("?");
        let declared = g.ty(p);
        if &t.ty != declared {
            return Err(Error::Input(format!(
                "input {i} (`{name}`) has type {} but the parameter is declared {declared}",
                t.ty
            )));
        }
        check_data(t).map_err(|e| e.context(format_args!("input {i} (`{name}`)")))?;
    }

    // The last node that reads each value; outputs are read "after" every node.
    let mut last_use = vec![0usize; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for x in &n.inputs {
            last_use[x.index()] = i;
        }
    }
    for o in &g.outputs {
        last_use[o.index()] = usize::MAX;
    }

    let mut values: Vec<Option<Cow<'_, Tensor>>> = (0..g.nodes.len()).map(|_| None).collect();
    for (i, node) in g.nodes.iter().enumerate() {
        let label = match &node.name {
            Some(name) => format!("`{name}` ({})", node.op.name()),
            None => format!("%{i} ({})", node.op.name()),
        };
        let value = match node.op {
            Op::Param { index } => Cow::Borrowed(inputs.get(index).ok_or_else(|| {
                Error::internal(format!("{label}: no input for parameter {index}"))
            })?),
            Op::Constant(ref c) => {
                check_data(c.tensor()).map_err(|e| e.context(&label))?;
                Cow::Borrowed(c.tensor())
            }
            _ => {
                let args = node
                    .inputs
                    .iter()
                    .map(|x| {
                        values
                            .get(x.index())
                            .and_then(|v| v.as_deref())
                            .ok_or_else(|| {
                                Error::internal(format!("{label}: operand {x} has no value"))
                            })
                    })
                    .collect::<Result<Vec<&Tensor>>>()?;
                let out = eval_node(&node.op, &args, &node.ty).map_err(|e| e.context(&label))?;
                Cow::Owned(out)
            }
        };
        values[i] = Some(value);
        for x in &node.inputs {
            if last_use[x.index()] == i {
                values[x.index()] = None;
            }
        }
    }
    g.outputs
        .iter()
        .map(|o| {
            values[o.index()]
                .as_ref()
                .map(|v| v.clone().into_owned())
                .ok_or_else(|| Error::internal(format!("output {o} has no value")))
        })
        .collect()
}

/// Evaluates one op on operand values, producing a tensor of type `out` (the node's
/// recorded type). `Op::Literal` produces its value as a rank-0 tensor of `out`'s dtype;
/// `Op::Param` is an error, since a parameter's value comes from outside the node.
///
/// The operands are checked against the op's typing rule, and `out` must be the type
/// [`infer`] gives, so a mismatched call is an error rather than a wrong answer.
pub fn eval_node(op: &Op, inputs: &[&Tensor], out: &TensorType) -> Result<Tensor> {
    for (i, t) in inputs.iter().enumerate() {
        check_data(t).map_err(|e| e.context(format_args!("{}: operand {i}", op.name())))?;
    }
    match op {
        Op::Param { index } => Err(Error::Input(format!(
            "parameter {index} has no value of its own (give it as an input to `interpret`)"
        ))),
        Op::Literal { value } => {
            if !inputs.is_empty() {
                return Err(Error::Input("a literal takes no operands".into()));
            }
            literal(*value, out)
        }
        _ => {
            let types: Vec<&TensorType> = inputs.iter().map(|t| &t.ty).collect();
            let inferred = infer(op, &types)?;
            if &inferred != out {
                return Err(Error::Input(format!(
                    "{}: requested result type {out} differs from the inferred {inferred}",
                    op.name()
                )));
            }
            let result = dispatch(op, inputs, out)?;
            if &result.ty != out || check_data(&result).is_err() {
                return Err(Error::internal(format!(
                    "{} produced {} instead of {out}",
                    op.name(),
                    result.ty
                )));
            }
            Ok(result)
        }
    }
}

/// Routes an op to its implementation; operands and `out` are already type-checked.
fn dispatch(op: &Op, x: &[&Tensor], out: &TensorType) -> Result<Tensor> {
    match op {
        Op::Param { .. } | Op::Literal { .. } => {
            Err(Error::internal(format!("{} is not computed", op.name())))
        }
        Op::Constant(c) => {
            check_data(c.tensor())?;
            Ok(c.tensor().clone())
        }
        Op::Unary(u) => elementwise::unary(*u, x[0], out),
        Op::Binary(b) => elementwise::binary(*b, x[0], x[1], out),
        Op::Where => elementwise::select(x[0], x[1], x[2], out),
        Op::Cast { to } => Ok(elementwise::cast(x[0], *to)),
        Op::Reduce {
            op: ReduceOp::Mean,
            axes,
            keepdim,
        } => composite::mean(axes.as_deref(), *keepdim, x[0]),
        Op::Reduce { op: r, axes, .. } => reduce::reduce(*r, axes.as_deref(), x[0], out),
        Op::ArgReduce { op: r, axis, .. } => reduce::arg_reduce(*r, *axis, x[0], out),
        Op::Softmax { axis } => composite::softmax(*axis, false, x[0], out),
        Op::LogSoftmax { axis } => composite::softmax(*axis, true, x[0], out),
        Op::LayerNorm { eps } => composite::layer_norm(x[0], x[1], Some(x[2]), *eps, out),
        Op::RmsNorm { eps } => composite::layer_norm(x[0], x[1], None, *eps, out),
        Op::MatMul => linalg::matmul(x[0], x[1], out),
        Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => Ok(Tensor {
            ty: out.clone(),
            data: x[0].data.clone(),
        }),
        Op::Permute { dims } => movement::permute(dims, x[0], out),
        Op::Transpose { dim0, dim1 } => movement::transpose(*dim0, *dim1, x[0], out),
        Op::Expand { .. } => Ok(movement::expand(x[0], out)),
        Op::Slice {
            axis,
            start,
            end,
            step,
        } => movement::slice(*axis, *start, *end, *step, x[0], out),
        Op::Concat { axis } => movement::concat(*axis, x, out),
        Op::Pad { pads, value } => movement::pad(pads, *value, x[0], out),
        Op::IndexSelect { axis } => movement::index_select(*axis, x[0], x[1], out),
        Op::Gather { axis } => movement::gather(*axis, x[0], x[1], out),
        Op::IndexAdd { axis } => bag::index_add(*axis, x[0], x[1], x[2], out),
        Op::IndexReduce {
            axis,
            reduce,
            include_self,
        } => bag::index_reduce(*axis, *reduce, *include_self, x[0], x[1], x[2], out),
        Op::EmbeddingBag {
            mode,
            include_last_offset,
            padding_idx,
        } => bag::embedding_bag(*mode, *include_last_offset, *padding_idx, x, out),
        Op::Full { value, .. } => movement::full(*value, out),
        Op::Arange { start, step, .. } => Ok(movement::arange(*start, *step, out)),
        Op::Conv { .. } => window::conv(op, x[0], x[1], out),
        Op::ConvTranspose { .. } => window::conv_transpose(op, x[0], x[1], out),
        Op::MaxPool { .. } | Op::AvgPool { .. } => window::pool(op, x[0], out),
        Op::BatchNorm { eps } => composite::batch_norm(x, *eps),
        Op::Clip { min, max } => composite::clip(x[0], *min, *max),
    }
}

/// A literal's value as a rank-0 tensor of `out`'s dtype. Integer literals wrap into
/// `i32` like any integer result; a float literal cannot be an integer or bool.
fn literal(value: Scalar, out: &TensorType) -> Result<Tensor> {
    if out.rank() != 0 {
        return Err(Error::Input(format!("a literal is rank 0, not {out}")));
    }
    match value {
        Scalar::Float(v) if out.dtype.is_float() => Ok(Tensor::from_f64(out, &[v])),
        Scalar::Float(v) => Err(Error::Input(format!(
            "literal {v} cannot be a {}",
            out.dtype
        ))),
        Scalar::Int(v) => Ok(elementwise::cast(
            &Tensor::from_i64(&TensorType::scalar(DType::I64), &[v]),
            out.dtype,
        )),
        Scalar::Bool(b) => Ok(Tensor::from_i64(out, &[b as i64])),
    }
}

/// Checks that a tensor's storage matches its type (the fields are public, so a
/// hand-built tensor can disagree with itself).
fn check_data(t: &Tensor) -> Result<()> {
    let (dtype, len) = (t.data.dtype(), t.data.len());
    if dtype != t.ty.dtype {
        return Err(Error::Input(format!(
            "the tensor is typed {} but stores {dtype} elements",
            t.ty
        )));
    }
    if len != t.ty.numel() {
        return Err(Error::Input(format!(
            "the tensor is typed {} ({} elements) but stores {len}",
            t.ty,
            t.ty.numel()
        )));
    }
    Ok(())
}
