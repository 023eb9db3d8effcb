//! Row calls: reduce stages that one rustc-compiled routine of [`crate::wide`] runs at full
//! vector width, in the order of the JIT's `f32x4x4` loop ([`crate::row_order`]), so the
//! bits do not change.
//!
//! - **Row reductions**: a stage whose only work is one `f32` sum, max or min of a
//!   unit-stride row (`acc = max(r0 < n) x[base + r0]`, a softmax's first pass, a mean's
//!   sum) is one call of [`crate::wide::row_routine`].
//! - **Exp-sums**: after `wide.rs` splits a softmax row, its middle is three stages: the
//!   argument `s[j0] = x[base + j0] - c` into a scratch row, the exp applied in place, and
//!   the sum of the row. They become one reduce stage, `t = exp(x[base + r0] - c);
//!   s[r0] = t; acc = sum(t)` (the shape `stash.rs` gives such a stage before the split),
//!   which one call of [`crate::wide::exp_sum_routine`] runs.
//! - **Exp-sums of long rows**: a reduce stage `acc = sum(r0) exp(x[base + r0] - c)` that
//!   `wide.rs` did not split (rows over 4096, a log-softmax's sum) is the same routine,
//!   storing nothing or into the stash row that keeps the exps.
//! - **Offset rows**: a store stage `out = (x - a) - b` (a log-softmax's last pass, `b` a
//!   `log(acc)`) is one call of [`crate::wide::offset_routine`].
//! - **Scaled rows**: a store stage `out[base + j0] = w * k` (or `w / k`) with `w` a value
//!   `v` or `where(v < c, z, v)`, `v` a unit-stride row or `exp(row - c)` (a row too long
//!   to keep its exps), and `k` an accumulator, its reciprocal or a constant (a softmax's
//!   last pass) is one call of [`crate::wide::scale_routine`].
//! - **Chain rows** (rows of at least [`MIN_CHAIN_ROW`]): any other stage of one `f32`
//!   sum (no stores) or of unit-stride `f32` stores whose nodes that vary along the loop are a chain of `+ - * /` from one
//!   unit-stride row, each link's other operand a node fixed over the loop or the same
//!   point of another row (or the link itself, a square), every store a link of the chain
//!   and the sum the last one: a layer or RMS norm's passes, a residual add in front. One
//!   call of [`crate::wide::chain_routine`], the fixed nodes computed first as the loop's
//!   own code computes them ([`ChainRow`]). Links may also be `maximum`/`minimum` with a
//!   constant (a ReLU, a clamp) in the JIT's one-instruction forms. A pointwise kernel's
//!   store stage is a chain along its last axis too ([`chain_along`]): an epilogue's bias,
//!   residual and clamp, one call per segment of a row that generated code runs, so a GEMM
//!   or stencil still runs it on each block it computes; a stored row may be read back at
//!   its own element (in place) when it is the one store, of the last link.
//!
//! The stages stay loop IR that the evaluator and, on a CPU without the width, the JIT
//! run to the same values; the schedule records the call. Both need rows of at least
//! [`MIN_POINTS`] (shorter ones keep the inline code) and the default unroll of four.

use super::analysis::live_nodes;
use super::analysis::split_linear;
use super::wide::{
    varies_with, ChainLink, ChainOperand, ChainRow, Factor, ScaleRow, WideCall, WideOp,
    MIN_CHAIN_ROW, MIN_POINTS,
};
use crate::wide::{ChainOp, MAX_CHAIN_STEPS};
use crate::wide::{Isa, RowReduce};
use ferrite_ir::loops::{
    Block, Buffer, BufferId, ExprNode, ExprOp, ExprRef, IndexExpr, Kernel, Load, ReduceKind,
    Reduction, Stage, StoreOp, Value, Var, VarKind,
};
use ferrite_ir::{BinaryOp, DType, UnaryOp};

use super::analysis::substitute;
use super::stash::flat_index;

/// Whether `l` reads a contiguous `f32` row along `v` (`rest + 1*v`, `rest` free of `v`
/// and of every other inner variable), unguarded.
fn unit_row(l: &Load, v: Var, buffers: &[Buffer]) -> bool {
    let f32_buffer = buffers
        .get(l.buffer.index())
        .is_some_and(|b| b.ty.dtype == DType::F32);
    let Some((rest, 1)) = split_linear(&l.index, v) else {
        return false;
    };
    let mut inner = false;
    rest.for_each_var(&mut |x| inner |= x.kind != VarKind::Outer);
    f32_buffer && l.guard.is_empty() && !inner
}

/// The live nodes of `stage`, by index.
fn live_set(stage: &Stage) -> Vec<usize> {
    live_nodes(stage)
        .iter()
        .enumerate()
        .filter_map(|(i, &l)| l.then_some(i))
        .collect()
}

/// A reduce stage over one loop with one `f32` reduction (no dot product): its extent,
/// body, reduction and stores, if `stage` is one.
fn one_reduction(stage: &Stage) -> Option<(usize, &Block, &Reduction, &[StoreOp])> {
    let Stage::Reduce {
        domain,
        body,
        reductions,
        stores,
    } = stage
    else {
        return None;
    };
    let ([n], [r]) = (domain.as_slice(), reductions.as_slice()) else {
        return None;
    };
    (r.dtype == DType::F32 && r.rhs.is_none()).then_some((*n, body, r, stores.as_slice()))
}

/// The row reduction `stage` is, if it is one: one float sum, max or min of a unit-stride
/// row.
fn row_reduction(stage: &Stage, buffers: &[Buffer]) -> Option<WideOp> {
    let (n, body, r, stores) = one_reduction(stage)?;
    if n < MIN_POINTS || !stores.is_empty() || live_set(stage) != [r.value.index()] {
        return None;
    }
    let kind = match r.kind {
        ReduceKind::Sum => RowReduce::Sum,
        ReduceKind::Max => RowReduce::Max,
        ReduceKind::Min => RowReduce::Min,
        _ => return None,
    };
    Some(WideOp::Reduce {
        kind,
        src: row_load(body, r.value, Var::reduce(0), None, buffers)?,
        acc: r.acc,
    })
}

/// Marks every stage of `k` that has no call yet, is vector code and is one of the row
/// patterns of the module docs (a row reduction, a long row's exp-sum, a scaled or an
/// offset row) as its row call; true when one was.
pub fn mark_row_calls(
    k: &Kernel,
    calls: &mut [Option<WideCall>],
    isa: Isa,
    buffers: &[Buffer],
    vectorizes: &dyn Fn(&Kernel, usize, &[Buffer]) -> bool,
) -> bool {
    let mut any = false;
    for (si, stage) in k.stages.iter().enumerate() {
        if calls[si].is_some() {
            continue;
        }
        let op = row_reduction(stage, buffers)
            .or_else(|| long_exp_sum(stage, buffers))
            .or_else(|| scale_row(stage, buffers).map(WideOp::Scale))
            .or_else(|| offset_row(stage, buffers))
            .or_else(|| chain_row(stage, buffers).map(WideOp::Chain));
        let Some(op) = op else { continue };
        if !vectorizes(k, si, buffers) {
            continue;
        }
        calls[si] = Some(WideCall {
            op,
            isa,
            len: stage.domain()[0],
        });
        any = true;
    }
    any
}

/// The argument stage of an exp-sum: `s[j0] = x[base + j0] - c` (or `= x[...]`) over one
/// loop, its only store into `row`. Returns the load and the offset.
fn exp_argument(stage: &Stage, row: BufferId, buffers: &[Buffer]) -> Option<(Load, Factor)> {
    let Stage::Store {
        domain,
        body,
        stores,
    } = stage
    else {
        return None;
    };
    let [st] = stores.as_slice() else {
        return None;
    };
    if domain.len() != 1 || st.buffer != row || st.index != flat_index(domain, VarKind::Store) {
        return None;
    }
    let (src, offset, mut used) = exp_arg(body, st.value, Var::store(0), Some(row), buffers)?;
    used.sort_unstable();
    (live_set(stage) == used).then_some((src, offset))
}

/// The sum stage of an exp-sum: `acc = sum(r0) row[r0]`, nothing else.
fn row_sum_of(stage: &Stage, row: BufferId) -> Option<ferrite_ir::loops::AccId> {
    let (n, body, r, stores) = one_reduction(stage)?;
    if !stores.is_empty() || r.kind != ReduceKind::Sum || live_set(stage) != [r.value.index()] {
        return None;
    }
    match &body.get(r.value)?.op {
        ExprOp::Load(l)
            if l.buffer == row
                && l.guard.is_empty()
                && l.index == flat_index(&[n], VarKind::Reduce) =>
        {
            Some(r.acc)
        }
        _ => None,
    }
}

/// Merges every argument, exp and sum stage triple of `k` into one exp-sum stage (see
/// the module docs). Returns where each old stage went, or `None` when none merged.
pub fn merge_exp_sums(
    k: &mut Kernel,
    calls: &mut Vec<Option<WideCall>>,
    isa: Isa,
    buffers: &[Buffer],
) -> Option<Vec<usize>> {
    let n = k.stages.len();
    let mut map: Vec<usize> = (0..n).collect();
    let mut stages = Vec::with_capacity(n);
    let mut new_calls = Vec::with_capacity(n);
    let mut any = false;
    let mut si = 0;
    while si < n {
        if si + 2 < n {
            if let Some((stage, call)) =
                exp_sum(&k.stages[si..si + 3], &calls[si..si + 3], isa, buffers)
            {
                for m in &mut map[si..si + 3] {
                    *m = stages.len();
                }
                stages.push(stage);
                new_calls.push(Some(call));
                any = true;
                si += 3;
                continue;
            }
        }
        map[si] = stages.len();
        stages.push(k.stages[si].clone());
        new_calls.push(calls[si].clone());
        si += 1;
    }
    if !any {
        return None;
    }
    k.stages = stages;
    *calls = new_calls;
    Some(map)
}

/// The exp-sum stage and its call that `three` stages make, if they are one.
fn exp_sum(
    three: &[Stage],
    calls: &[Option<WideCall>],
    isa: Isa,
    buffers: &[Buffer],
) -> Option<(Stage, WideCall)> {
    let (None, Some(apply), None) = (&calls[0], &calls[1], &calls[2]) else {
        return None;
    };
    let WideOp::Apply {
        f: crate::vmath::UnaryFn::Exp,
        buffer: row,
    } = apply.op
    else {
        return None;
    };
    let len = apply.len;
    if len < MIN_POINTS || three[1].domain() != [len] || three[2].domain() != [len] {
        return None;
    }
    let (src, offset) = exp_argument(&three[0], row, buffers)?;
    let acc = row_sum_of(&three[2], row)?;
    let r = |e: &IndexExpr| {
        substitute(e, &|v: Var| {
            (v.kind == VarKind::Store).then(|| IndexExpr::Var(Var::reduce(v.index as usize)))
        })
    };
    let reduce_src = Load {
        index: r(&src.index),
        ..src.clone()
    };
    let mut body = Block { nodes: Vec::new() };
    let x = body.push(ExprNode {
        dtype: DType::F32,
        op: ExprOp::Load(reduce_src.clone()),
    });
    let arg = match offset {
        Factor::Const(c) if c == 0.0 && c.is_sign_positive() => x,
        _ => {
            let c = push_factor(&mut body, offset);
            body.push(ExprNode {
                dtype: DType::F32,
                op: ExprOp::Binary(BinaryOp::Sub, x, c),
            })
        }
    };
    let e = body.push(ExprNode {
        dtype: DType::F32,
        op: ExprOp::Unary(UnaryOp::Exp, arg),
    });
    let domain = vec![len];
    let stage = Stage::Reduce {
        stores: vec![StoreOp {
            buffer: row,
            index: flat_index(&domain, VarKind::Reduce),
            value: e,
        }],
        domain,
        body,
        reductions: vec![Reduction {
            acc,
            kind: ReduceKind::Sum,
            dtype: DType::F32,
            value: e,
            rhs: None,
        }],
    };
    let call = WideCall {
        op: WideOp::ExpSum {
            src: reduce_src,
            offset,
            out: Some(row),
            acc,
        },
        isa,
        len,
    };
    Some((stage, call))
}

/// The body and the one store of a store stage over one loop of at least [`MIN_POINTS`]
/// points that writes a unit-stride `f32` row, if `stage` is one.
fn row_store<'s>(stage: &'s Stage, buffers: &[Buffer]) -> Option<(&'s Block, &'s StoreOp)> {
    let Stage::Store {
        domain,
        body,
        stores,
    } = stage
    else {
        return None;
    };
    let [st] = stores.as_slice() else {
        return None;
    };
    let out = Load {
        buffer: st.buffer,
        index: st.index.clone(),
        guard: vec![],
        other: Value::Float(0.0),
    };
    (domain.len() == 1 && domain[0] >= MIN_POINTS && unit_row(&out, Var::store(0), buffers))
        .then_some((body, st))
}

/// The scaled row `stage` is, if it is one (see the module docs).
fn scale_row(stage: &Stage, buffers: &[Buffer]) -> Option<ScaleRow> {
    let (body, st) = row_store(stage, buffers)?;
    let j = Var::store(0);
    let node = |r: ExprRef| body.get(r);
    let top = node(st.value)?;
    let (w, k, div) = match top.op {
        ExprOp::Binary(BinaryOp::Mul, a, b) => {
            // The factor is whichever side is not the row.
            if factor(node(b)?, body).is_some() {
                (a, b, false)
            } else {
                (b, a, false)
            }
        }
        ExprOp::Binary(BinaryOp::Div, a, b) => (a, b, true),
        _ => return None,
    };
    if top.dtype != DType::F32 {
        return None;
    }
    let (kf, k_nodes) = factor(node(k)?, body)?;
    let mut used = vec![st.value.index(), k.index()];
    used.extend(k_nodes);
    // The row's value: a load, or exp of a load's offset.
    let value_of = |r: ExprRef| -> Option<(Load, Option<Factor>, Vec<usize>)> {
        match &node(r)?.op {
            ExprOp::Unary(UnaryOp::Exp, arg) if node(r)?.dtype == DType::F32 => {
                let (l, c, mut nodes) = exp_arg(body, *arg, j, Some(st.buffer), buffers)?;
                nodes.push(r.index());
                Some((l, Some(c), nodes))
            }
            ExprOp::Load(_) => Some((
                row_load(body, r, j, Some(st.buffer), buffers)?,
                None,
                vec![r.index()],
            )),
            _ => None,
        }
    };
    let (src, exp, below, zero) = match &node(w)?.op {
        ExprOp::Where(c, z, x) => {
            let ExprOp::Binary(BinaryOp::Lt, x2, lim) = node(*c)?.op else {
                return None;
            };
            if x2 != *x {
                return None;
            }
            let (below, zero) = (f32_constant(body, lim)?, f32_constant(body, *z)?);
            let (src, exp, nodes) = value_of(*x)?;
            used.extend(nodes);
            used.extend([w.index(), c.index(), lim.index(), z.index()]);
            (src, exp, below, zero)
        }
        _ => {
            let (src, exp, nodes) = value_of(w)?;
            used.extend(nodes);
            (src, exp, f32::NEG_INFINITY, 0.0)
        }
    };
    used.sort_unstable();
    used.dedup();
    if live_set(stage) != used {
        return None;
    }
    Some(ScaleRow {
        src,
        exp,
        below,
        zero,
        k: kf,
        div,
        out: st.buffer,
        out_index: st.index.clone(),
    })
}

/// The value of node `r` of `body` if it is an `f32` constant.
fn f32_constant(body: &Block, r: ExprRef) -> Option<f32> {
    match body.get(r)? {
        ExprNode {
            dtype: DType::F32,
            op: ExprOp::Const(Value::Float(c)),
        } => Some(*c as f32),
        _ => None,
    }
}

/// A row's factor: an accumulator, its reciprocal or a constant, and the nodes it takes.
fn factor(n: &ExprNode, body: &Block) -> Option<(Factor, Vec<usize>)> {
    if n.dtype != DType::F32 {
        return None;
    }
    match &n.op {
        ExprOp::Acc(a) => Some((Factor::Acc(*a), vec![])),
        ExprOp::Const(Value::Float(c)) => Some((Factor::Const(*c as f32), vec![])),
        ExprOp::Unary(u @ (UnaryOp::Reciprocal | UnaryOp::Log), x) => match body.get(*x)? {
            ExprNode {
                dtype: DType::F32,
                op: ExprOp::Acc(a),
            } => Some((
                if *u == UnaryOp::Log {
                    Factor::Log(*a)
                } else {
                    Factor::Reciprocal(*a)
                },
                vec![x.index()],
            )),
            _ => None,
        },
        _ => None,
    }
}

/// Pushes the nodes of `f` onto `body` (the inverse of [`factor`]), returning its value.
fn push_factor(body: &mut Block, f: Factor) -> ExprRef {
    let node = |op| ExprNode {
        dtype: DType::F32,
        op,
    };
    let (acc, unary) = match f {
        Factor::Const(c) => return body.push(node(ExprOp::Const(Value::Float(f64::from(c))))),
        Factor::Acc(a) => return body.push(node(ExprOp::Acc(a))),
        Factor::Reciprocal(a) => (a, UnaryOp::Reciprocal),
        Factor::Log(a) => (a, UnaryOp::Log),
    };
    let x = body.push(node(ExprOp::Acc(acc)));
    body.push(node(ExprOp::Unary(unary, x)))
}

/// The row `r` of `body` loads, if it is an unguarded unit-stride `f32` row along `v` of a
/// buffer other than `not`.
fn row_load(
    body: &Block,
    r: ExprRef,
    v: Var,
    not: Option<BufferId>,
    buffers: &[Buffer],
) -> Option<Load> {
    match body.get(r)? {
        ExprNode {
            dtype: DType::F32,
            op: ExprOp::Load(l),
        } if Some(l.buffer) != not && unit_row(l, v, buffers) => Some(l.clone()),
        _ => None,
    }
}

/// An exp's argument in `body`: `x[base + v]` or `x[...] - c` (`c` an accumulator or a
/// constant), `x` a unit-stride `f32` row other than `not`. Returns the load, the offset
/// and the nodes it takes.
fn exp_arg(
    body: &Block,
    arg: ExprRef,
    v: Var,
    not: Option<BufferId>,
    buffers: &[Buffer],
) -> Option<(Load, Factor, Vec<usize>)> {
    let node = body.get(arg)?;
    if node.dtype != DType::F32 {
        return None;
    }
    match &node.op {
        ExprOp::Load(_) => Some((
            row_load(body, arg, v, not, buffers)?,
            Factor::Const(0.0),
            vec![arg.index()],
        )),
        ExprOp::Binary(BinaryOp::Sub, a, c) => {
            let offset = match factor(body.get(*c)?, body)? {
                (f @ (Factor::Acc(_) | Factor::Const(_)), _) => f,
                _ => return None,
            };
            Some((
                row_load(body, *a, v, not, buffers)?,
                offset,
                vec![a.index(), c.index(), arg.index()],
            ))
        }
        _ => None,
    }
}

/// The exp-sum `stage` is, if it is a reduce stage `acc = sum(r0) exp(x[base + r0] - c)`
/// that `wide.rs` did not split (rows over 4096, a log-softmax's sum): storing nothing, or
/// the exps into the stash row the stage keeps them in.
fn long_exp_sum(stage: &Stage, buffers: &[Buffer]) -> Option<WideOp> {
    let (n, body, r, stores) = one_reduction(stage)?;
    if n < MIN_POINTS || r.kind != ReduceKind::Sum {
        return None;
    }
    let out = match stores {
        [] => None,
        [st] if st.value == r.value
            && st.index == flat_index(&[n], VarKind::Reduce)
            && buffers
                .get(st.buffer.index())
                .is_some_and(|b| b.kind == ferrite_ir::loops::BufferKind::Scratch) =>
        {
            Some(st.buffer)
        }
        _ => return None,
    };
    let ExprNode {
        dtype: DType::F32,
        op: ExprOp::Unary(UnaryOp::Exp, arg),
    } = body.get(r.value)?
    else {
        return None;
    };
    let (src, offset, mut used) = exp_arg(body, *arg, Var::reduce(0), out, buffers)?;
    used.push(r.value.index());
    used.sort_unstable();
    (live_set(stage) == used).then_some(WideOp::ExpSum {
        src,
        offset,
        out,
        acc: r.acc,
    })
}

/// The offset row `stage` is, if it is one: `out[base + j0] = x[base' + j0] - a - b` (a
/// log-softmax's last pass; `a`, `b` accumulators, their logs or reciprocals, or
/// constants).
fn offset_row(stage: &Stage, buffers: &[Buffer]) -> Option<WideOp> {
    let (body, st) = row_store(stage, buffers)?;
    let j = Var::store(0);
    let top = body.get(st.value)?;
    let ExprOp::Binary(BinaryOp::Sub, inner, b) = top.op else {
        return None;
    };
    let inner_node = body.get(inner)?;
    let ExprOp::Binary(BinaryOp::Sub, x, a) = inner_node.op else {
        return None;
    };
    if top.dtype != DType::F32 || inner_node.dtype != DType::F32 {
        return None;
    }
    let src = row_load(body, x, j, Some(st.buffer), buffers)?;
    let (fa, a_nodes) = factor(body.get(a)?, body)?;
    let (fb, b_nodes) = factor(body.get(b)?, body)?;
    let mut used = vec![
        st.value.index(),
        inner.index(),
        x.index(),
        a.index(),
        b.index(),
    ];
    used.extend(a_nodes);
    used.extend(b_nodes);
    used.sort_unstable();
    used.dedup();
    if live_set(stage) != used {
        return None;
    }
    Some(WideOp::Offset2 {
        src,
        a: fa,
        b: fb,
        out: st.buffer,
        out_index: st.index.clone(),
    })
}

/// The chain row `stage` is, if it is one (see [`ChainRow`]): a reduce stage with one
/// `f32` sum and no stores, or a store stage of unit-stride `f32` rows, over one loop of
/// at least [`MIN_CHAIN_ROW`] points, whose nodes that vary along the loop are a chain of
/// `+ - * /` from one unit-stride row, each link's other operand a node fixed over the
/// loop or the same point of another row (or the link itself: a square). Every stored
/// value is a link of the chain; a stored row is read only at its own element, by the
/// one store, of the last link (the routine reads a block of every row before it stores
/// that block).
pub(super) fn chain_row(stage: &Stage, buffers: &[Buffer]) -> Option<ChainRow> {
    let v = match stage {
        Stage::Reduce { .. } => Var::reduce(0),
        Stage::Store { .. } => Var::store(0),
    };
    match stage.domain() {
        [n] if *n >= MIN_CHAIN_ROW => chain_along(stage, v, buffers),
        _ => None,
    }
}

/// The chain op of `op` with the chain's value as its first operand (`first`) or second.
fn arithmetic(op: BinaryOp, first: bool) -> Option<ChainOp> {
    Some(match (op, first) {
        (BinaryOp::Add, _) => ChainOp::Add,
        (BinaryOp::Mul, _) => ChainOp::Mul,
        (BinaryOp::Sub, true) => ChainOp::Sub,
        (BinaryOp::Sub, false) => ChainOp::SubFrom,
        (BinaryOp::Div, true) => ChainOp::Div,
        (BinaryOp::Div, false) => ChainOp::DivInto,
        _ => return None,
    })
}

/// [`chain_row`] of a stage whose points run along `v`: the stage's own loop, or (a
/// pointwise kernel's store stage) the kernel's last axis, whose rows generated code
/// cuts into segments at run time.
pub(super) fn chain_along(stage: &Stage, v: Var, buffers: &[Buffer]) -> Option<ChainRow> {
    let (body, end, acc, stores) = match stage {
        Stage::Reduce { .. } => {
            let (_, body, r, stores) = one_reduction(stage)?;
            if !stores.is_empty() || r.kind != ReduceKind::Sum {
                return None;
            }
            (body, r.value, Some(r.acc), stores)
        }
        Stage::Store { body, stores, .. } => {
            let end = stores.iter().map(|s| s.value).max()?;
            (body, end, None, stores.as_slice())
        }
    };
    let inner = varies_with(body, &|w| w == v);
    let stored: Vec<BufferId> = stores.iter().map(|s| s.buffer).collect();
    for st in stores {
        let out = Load {
            buffer: st.buffer,
            index: st.index.clone(),
            guard: vec![],
            other: Value::Float(0.0),
        };
        if !unit_row(&out, v, buffers) {
            return None;
        }
    }
    // A stored row read elsewhere than at the element stored (or by a stage of more than
    // one store) could be read after the routine stored it: the routine stores a block of
    // the last value after every read of that block, so one store read back at its own
    // element (an epilogue updating a GEMM's output in place) is safe.
    let reads_stored = body.nodes.iter().any(|n| match &n.op {
        ExprOp::Load(l) if stored.contains(&l.buffer) => match stores {
            [st] => st.value != end || st.index != l.index || !l.guard.is_empty(),
            _ => true,
        },
        _ => false,
    });
    if reads_stored {
        return None;
    }
    // A row operand: an unguarded unit-stride `f32` row along the loop.
    let row = |r: ExprRef| row_load(body, r, v, None, buffers);
    let scalar = |r: ExprRef| -> Option<ChainOperand> {
        let n = body.get(r)?;
        (n.dtype == DType::F32 && !inner[r.index()]).then(|| ChainOperand::Scalar {
            node: r,
            text: body.expr_text(r),
        })
    };
    let is_load = |r: ExprRef| matches!(body.get(r).map(|n| &n.op), Some(ExprOp::Load(_)));
    // Walk back from the last value to the row it starts from.
    let mut links = Vec::new();
    let mut chain_nodes = Vec::new();
    let mut used = Vec::new();
    let mut cur = end;
    let x = loop {
        let node = body.get(cur)?;
        if node.dtype != DType::F32 || !inner[cur.index()] {
            return None;
        }
        chain_nodes.push(cur);
        used.push(cur.index());
        let ExprOp::Binary(op, a, b) = node.op else {
            break row(cur)?;
        };
        // `maximum`/`minimum` with a constant, as the JIT's one-instruction forms.
        let extreme = match (op, inner[a.index()], inner[b.index()]) {
            (BinaryOp::Maximum | BinaryOp::Minimum, true, false) => Some((b, a)),
            (BinaryOp::Maximum | BinaryOp::Minimum, false, true) => Some((a, b)),
            _ => None,
        };
        let (op, operand, prev) = if let Some((c, v)) = extreme {
            let k = f32_constant(body, c)?;
            let plain = !k.is_nan() && k != 0.0;
            match op {
                BinaryOp::Maximum if k == 0.0 && k.is_sign_positive() => {
                    (ChainOp::Relu, ChainOperand::None, v)
                }
                BinaryOp::Maximum if plain => (ChainOp::MaxConst, scalar(c)?, v),
                BinaryOp::Minimum if plain => (ChainOp::MinConst, scalar(c)?, v),
                _ => return None,
            }
        } else if a == b {
            if op != BinaryOp::Mul {
                return None;
            }
            (ChainOp::Square, ChainOperand::None, a)
        } else {
            // The other operand: a scalar, or (both vary) a row; the chain goes on
            // through the one that is neither.
            let (other, prev, first) = match (inner[a.index()], inner[b.index()]) {
                (true, false) => (b, a, true),
                (false, true) => (a, b, false),
                _ if is_load(b) => (b, a, true),
                _ if is_load(a) => (a, b, false),
                _ => return None,
            };
            let operand = if inner[other.index()] {
                used.push(other.index());
                ChainOperand::Row(row(other)?)
            } else {
                scalar(other)?
            };
            (arithmetic(op, first)?, operand, prev)
        };
        links.push(ChainLink {
            op,
            operand,
            out: None,
        });
        cur = prev;
    };
    if links.is_empty() || links.len() > MAX_CHAIN_STEPS {
        return None;
    }
    links.reverse();
    chain_nodes.reverse();
    // `chain_nodes[0]` is the row; link `i` makes `chain_nodes[i + 1]`.
    for st in stores {
        let at = chain_nodes.iter().position(|&c| c == st.value)?;
        let link = links.get_mut(at.checked_sub(1)?)?;
        if link.out.is_some() {
            return None;
        }
        link.out = Some((st.buffer, st.index.clone()));
    }
    // Everything that varies along the loop is the chain or its rows.
    used.sort_unstable();
    used.dedup();
    let live = live_nodes(stage);
    let varying: Vec<usize> = (0..body.nodes.len())
        .filter(|&i| live[i] && inner[i])
        .collect();
    if varying != used {
        return None;
    }
    Some(ChainRow {
        x,
        steps: links,
        acc,
    })
}
