//! Control flow, resolved at import: `If` on a condition known at import time
//! inlines the branch taken; `If` on a computed condition whose branches compute the
//! same types selects between both branches elementwise (`where`); `Loop` with a
//! trip count and conditions known at import time and `Scan` (whose length is a
//! static dim) unroll into the outer graph. A subgraph reads outer values by name.
//! Anything whose control depends on data stays an error naming the node.

use crate::error::{invalid, unsupported, Error, OpError, OpResult};
use crate::import::{import_nodes, Ctx, Env, NodeIn, Scope, Val};
use crate::proto::GraphProto;
use crate::tensor::to_tensor;
use ferrite_ir::{DType, Op, Tensor, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

/// At most this many iterations of one `Loop` or `Scan` are unrolled.
pub const MAX_UNROLL: usize = 4096;

pub(crate) fn import(
    ctx: &mut Ctx,
    n: &NodeIn,
    env: &mut Env,
    scope: &Scope,
) -> OpResult<Vec<Option<Val>>> {
    match n.proto.op_type() {
        "If" => if_(ctx, n, env, scope),
        "Loop" => loop_(ctx, n, env, scope),
        _ => scan(ctx, n, env, scope),
    }
}

/// Imports `body` once with `inputs` bound to its declared inputs (in order) and
/// returns its outputs.
fn run_body(
    ctx: &mut Ctx,
    what: &str,
    body: &GraphProto,
    inputs: &[Val],
    env: &mut Env,
    scope: &Scope,
) -> OpResult<Vec<Val>> {
    if body.input.len() != inputs.len() {
        invalid!(
            "`{what}` declares {} inputs, but {} are bound to it",
            body.input.len(),
            inputs.len()
        );
    }
    if !body.sparse_initializer.is_empty() {
        unsupported!("`{what}` has sparse initializers, which are not supported");
    }
    let mut vals = HashMap::new();
    for init in &body.initializer {
        let t = to_tensor(init, env.ext).map_err(|e| inner(what, e))?;
        vals.insert(init.name().to_string(), Val::Const(Arc::new(t)));
    }
    for (vi, v) in body.input.iter().zip(inputs) {
        vals.insert(vi.name().to_string(), v.clone());
    }
    let mut child = Scope {
        vals,
        parent: Some(scope),
    };
    import_nodes(ctx, &body.node, env, &mut child).map_err(|e| inner(what, e))?;
    body.output
        .iter()
        .map(|o| match child.get(o.name()) {
            Some(v) => Ok(v),
            None => invalid!("`{what}` output `{}` is never computed", o.name()),
        })
        .collect()
}

/// An error inside a subgraph, with the subgraph named.
fn inner(what: &str, e: Error) -> OpError {
    match e {
        Error::Node {
            node,
            message,
            unsupported: true,
        } => OpError::Unsupported(format!("in `{what}`, {node}: {message}")),
        Error::Node { node, message, .. } => {
            OpError::Invalid(format!("in `{what}`, {node}: {message}"))
        }
        Error::Internal(m) => OpError::Other(Error::Internal(m)),
        Error::Unsupported(m) => OpError::Unsupported(format!("in `{what}`: {m}")),
        e @ (Error::NeedsValue { .. } | Error::SymbolicDim { .. }) => OpError::Other(e),
        e => OpError::Invalid(format!("in `{what}`: {e}")),
    }
}

/// The one boolean of a condition, if it is known at import time.
fn known_bool(ctx: &Ctx, v: &Val, role: &str) -> OpResult<Option<bool>> {
    let t = match v {
        Val::Const(t) => t,
        Val::Ir(_) => return Ok(None),
    };
    if t.len() != 1 {
        invalid!("`{role}` must hold one value, not {}", ctx.ty(v));
    }
    Ok(Some(t.to_f64()[0] != 0.0))
}

fn if_(ctx: &mut Ctx, n: &NodeIn, env: &mut Env, scope: &Scope) -> OpResult<Vec<Option<Val>>> {
    let cond = n.input(0)?;
    if ctx.dtype(cond) != DType::Bool {
        invalid!("the condition must be bool, not {}", ctx.ty(cond));
    }
    let then_g = n.graph("then_branch")?;
    let else_g = n.graph("else_branch")?;
    if let Some(c) = known_bool(ctx, cond, "cond")? {
        let (what, g) = if c {
            ("then_branch", then_g)
        } else {
            ("else_branch", else_g)
        };
        let outs = run_body(ctx, what, g, &[], env, scope)?;
        return Ok(outs.into_iter().map(Some).collect());
    }
    // A computed condition: both branches, then an elementwise choice. Exact where the
    // branches compute values of one type (a branch has no effects to avoid).
    if ctx.ty(cond).numel() != 1 {
        invalid!("the condition must hold one value, not {}", ctx.ty(cond));
    }
    let t = run_body(ctx, "then_branch", then_g, &[], env, scope)?;
    let e = run_body(ctx, "else_branch", else_g, &[], env, scope)?;
    if t.len() != e.len() {
        invalid!("the branches compute {} and {} outputs", t.len(), e.len());
    }
    let c = ctx.reshape(cond, &[])?;
    let mut outs = Vec::with_capacity(t.len());
    for (i, (t, e)) in t.iter().zip(&e).enumerate() {
        let (tt, et) = (ctx.ty(t), ctx.ty(e));
        if tt != et {
            unsupported!(
                "output {i}: the branches compute {tt} and {et}, and the condition is computed by the graph (Ferrite needs one static type)"
            );
        }
        outs.push(Some(ctx.select(&c, t, e)?));
    }
    Ok(outs)
}

/// Stacks the per-iteration values of one scan output along `axis` (of the result).
fn stack(ctx: &mut Ctx, parts: &[Val], axis: usize) -> OpResult<Val> {
    let mut ups = Vec::with_capacity(parts.len());
    for p in parts {
        if ctx.ty(p) != ctx.ty(&parts[0]) {
            unsupported!(
                "a scan output is {} in one iteration and {} in another",
                ctx.ty(&parts[0]),
                ctx.ty(p)
            );
        }
        ups.push(ctx.op(Op::Unsqueeze { axis: axis as i64 }, &[p])?);
    }
    let refs: Vec<&Val> = ups.iter().collect();
    if refs.len() == 1 {
        return Ok(ups[0].clone());
    }
    ctx.op(Op::Concat { axis: axis as i64 }, &refs)
}

fn loop_(ctx: &mut Ctx, n: &NodeIn, env: &mut Env, scope: &Scope) -> OpResult<Vec<Option<Val>>> {
    let body = n.graph("body")?;
    let trips = match n.opt(0) {
        None => None,
        Some(m) => {
            // Needed at import time: from a graph input, it folds once that input is given.
            let t = ctx.constant(m, "M")?;
            if t.len() != 1 {
                invalid!("the trip count must hold one value, not {}", t.ty);
            }
            Some(t.to_i64()[0].max(0) as u64)
        }
    };
    let mut cond = match n.opt(1) {
        None => true,
        Some(c) => {
            let t = ctx.constant(c, "cond")?;
            known_bool(ctx, &Val::Const(t), "cond")?.unwrap_or(true)
        }
    };
    let mut carried: Vec<Val> = (2..n.inputs.len())
        .map(|i| n.input(i).cloned())
        .collect::<OpResult<_>>()?;
    let n_carried = carried.len();
    if body.output.len() < 1 + n_carried {
        invalid!(
            "the body has {} outputs, fewer than the condition and {n_carried} loop-carried values",
            body.output.len()
        );
    }
    let n_scan = body.output.len() - 1 - n_carried;
    let mut scans: Vec<Vec<Val>> = vec![Vec::new(); n_scan];
    let mut i: u64 = 0;
    while cond && trips.is_none_or(|m| i < m) {
        if i as usize >= MAX_UNROLL {
            unsupported!(
                "the loop runs more than {MAX_UNROLL} iterations, more than Ferrite unrolls"
            );
        }
        let iter = Val::Const(Arc::new(Tensor::from_i64(
            &TensorType::scalar(DType::I64),
            &[i as i64],
        )));
        let c = Val::Const(Arc::new(bool_scalar(cond)));
        let mut args = vec![iter, c];
        args.extend(carried.iter().cloned());
        let outs = run_body(ctx, "body", body, &args, env, scope)?;
        cond = match known_bool(ctx, &outs[0], "cond_out")? {
            Some(c) => c,
            None => unsupported!(
                "the body's condition output is computed by the graph; Ferrite unrolls loops whose condition is known at import time"
            ),
        };
        carried = outs[1..=n_carried].to_vec();
        for (k, v) in outs[1 + n_carried..].iter().enumerate() {
            scans[k].push(v.clone());
        }
        i += 1;
    }
    let mut result: Vec<Option<Val>> = carried.into_iter().map(Some).collect();
    for parts in &scans {
        if parts.is_empty() {
            unsupported!(
                "the loop runs no iteration, so its scan outputs have no known element shape"
            );
        }
        result.push(Some(stack(ctx, parts, 0)?));
    }
    Ok(result)
}

fn bool_scalar(b: bool) -> Tensor {
    Tensor::from_i64(&TensorType::scalar(DType::Bool), &[b as i64])
}

/// One attribute list of Scan (axes or directions), one entry per input or output.
fn per(n: &NodeIn, name: &str, count: usize, legacy: Option<&str>) -> OpResult<Vec<i64>> {
    let v = match n.ints(name)? {
        Some(v) => Some(v),
        None => match legacy {
            Some(l) => n.ints(l)?,
            None => None,
        },
    };
    match v {
        None => Ok(vec![0; count]),
        Some(v) if v.len() == count => Ok(v),
        Some(v) => invalid!(
            "attribute `{name}` has {} entries, expected {count}",
            v.len()
        ),
    }
}

fn scan(ctx: &mut Ctx, n: &NodeIn, env: &mut Env, scope: &Scope) -> OpResult<Vec<Option<Val>>> {
    let body = n.graph("body")?;
    let m = n.int("num_scan_inputs", -1)?;
    // Opset 8 has a leading optional `sequence_lens` and a batch axis on everything.
    let v8 = n.opset < 9;
    let first = usize::from(v8);
    let operands: Vec<Val> = (first..n.inputs.len())
        .map(|i| n.input(i).cloned())
        .collect::<OpResult<_>>()?;
    if m < 1 || m as usize > operands.len() {
        invalid!(
            "attribute `num_scan_inputs` is {m}, but the node has {} operands",
            operands.len()
        );
    }
    let m = m as usize;
    let n_state = operands.len() - m;
    if body.output.len() < n_state {
        invalid!(
            "the body has {} outputs, fewer than the {n_state} states",
            body.output.len()
        );
    }
    let k = body.output.len() - n_state;
    if v8 {
        let dirs = per(n, "directions", m, None)?;
        let batch = operands
            .first()
            .map(|v| ctx.shape(v).first().copied().unwrap_or(0))
            .unwrap_or(0);
        let mut per_batch: Vec<Vec<Val>> = vec![Vec::new(); n_state + k];
        for b in 0..batch {
            let mut ops = Vec::with_capacity(operands.len());
            for v in &operands {
                if ctx.shape(v).first() != Some(&batch) {
                    invalid!(
                        "every operand must have the batch size {batch}, not {}",
                        ctx.ty(v)
                    );
                }
                ops.push(take(ctx, v, 0, b)?);
            }
            let outs = scan_once(
                ctx,
                body,
                &ops,
                n_state,
                &vec![0; m],
                &dirs,
                &vec![0; k],
                &vec![0; k],
                env,
                scope,
            )?;
            if let Some(l) = n.opt(0) {
                let lens = ctx.constant(l, "sequence_lens")?.to_i64();
                let len = ctx.dim(&ops[n_state], 0)? as i64;
                if lens.get(b) != Some(&len) {
                    unsupported!(
                        "`sequence_lens` is {lens:?}; Ferrite needs every sequence at full length {len}"
                    );
                }
            }
            for (j, v) in outs.into_iter().enumerate() {
                per_batch[j].push(v);
            }
        }
        if batch == 0 {
            unsupported!("the batch is empty, so the outputs have no known shape");
        }
        return per_batch
            .iter()
            .map(|parts| stack(ctx, parts, 0).map(Some))
            .collect();
    }
    let in_axes = per(n, "scan_input_axes", m, None)?;
    let in_dirs = per(n, "scan_input_directions", m, None)?;
    let out_axes = per(n, "scan_output_axes", k, None)?;
    let out_dirs = per(n, "scan_output_directions", k, None)?;
    Ok(scan_once(
        ctx, body, &operands, n_state, &in_axes, &in_dirs, &out_axes, &out_dirs, env, scope,
    )?
    .into_iter()
    .map(Some)
    .collect())
}

/// `x` indexed at `i` along `axis`, the axis removed.
fn take(ctx: &mut Ctx, x: &Val, axis: usize, i: usize) -> OpResult<Val> {
    let s = ctx.op(
        Op::Slice {
            axis: axis as i64,
            start: i as i64,
            end: i as i64 + 1,
            step: 1,
        },
        &[x],
    )?;
    ctx.op(
        Op::Squeeze {
            axes: Some(vec![axis as i64]),
        },
        &[&s],
    )
}

/// One scan (opset 9 and later semantics) over `operands`: `n_state` states, then the scan inputs.
#[allow(clippy::too_many_arguments)]
fn scan_once(
    ctx: &mut Ctx,
    body: &GraphProto,
    operands: &[Val],
    n_state: usize,
    in_axes: &[i64],
    in_dirs: &[i64],
    out_axes: &[i64],
    out_dirs: &[i64],
    env: &mut Env,
    scope: &Scope,
) -> OpResult<Vec<Val>> {
    let inputs = &operands[n_state..];
    let mut axes = Vec::with_capacity(inputs.len());
    let mut len = None;
    for (j, x) in inputs.iter().enumerate() {
        let a = crate::ops::axis(in_axes[j], ctx.rank(x), "scan input axis")?;
        let l = ctx.dim(x, a)?;
        if len.is_some_and(|len| len != l) {
            invalid!("the scan inputs have different lengths");
        }
        len = Some(l);
        axes.push(a);
    }
    let len = len.unwrap_or(0);
    if len > MAX_UNROLL {
        unsupported!("the scan runs {len} iterations, more than the {MAX_UNROLL} Ferrite unrolls");
    }
    let k = out_axes.len();
    let mut state: Vec<Val> = operands[..n_state].to_vec();
    let mut scans: Vec<Vec<Val>> = vec![Vec::new(); k];
    for t in 0..len {
        let mut args = state.clone();
        for (j, x) in inputs.iter().enumerate() {
            let at = match in_dirs[j] {
                0 => t,
                1 => len - 1 - t,
                d => invalid!("scan input direction {d} is neither 0 nor 1"),
            };
            args.push(take(ctx, x, axes[j], at)?);
        }
        let outs = run_body(ctx, "body", body, &args, env, scope)?;
        state = outs[..n_state].to_vec();
        for (j, v) in outs[n_state..].iter().enumerate() {
            scans[j].push(v.clone());
        }
    }
    let mut result = state;
    for (j, mut parts) in scans.into_iter().enumerate() {
        if parts.is_empty() {
            unsupported!("the scan runs no iteration, so its outputs have no known shape");
        }
        match out_dirs[j] {
            0 => {}
            1 => parts.reverse(),
            d => invalid!("scan output direction {d} is neither 0 nor 1"),
        }
        let a = crate::ops::axis(out_axes[j], ctx.rank(&parts[0]) + 1, "scan output axis")?;
        result.push(stack(ctx, &parts, a)?);
    }
    Ok(result)
}
