//! Reductions: scalar factors moved out, reductions of broadcasts, nested reductions merged.
//!
//! Float caveat: moving a factor out of a sum, or merging two sums, re-rounds (the interpreter
//! rounds each sum once, to the result dtype); the max/min rules are exact, because multiplying
//! by a positive number is monotonic even after rounding.

use super::{dims, fit_to, scalar_factors, Ctx, Rule, Term};
use crate::optimize::analysis::fit;
use crate::optimize::language::{Kind, TensorLang};
use egg::Id;
use ferrite_ir::infer::reduced_axes;
use ferrite_ir::{BinaryOp as B, DType, Op, ReduceOp as R, TensorType};

const SUM: &[Kind] = &[Kind::Reduce(R::Sum)];
const MAX_MIN: &[Kind] = &[Kind::Reduce(R::Max), Kind::Reduce(R::Min)];
const SUM_MAX_MIN: &[Kind] = &[
    Kind::Reduce(R::Sum),
    Kind::Reduce(R::Max),
    Kind::Reduce(R::Min),
];
const ALL_REDUCE: &[Kind] = &[
    Kind::Reduce(R::Sum),
    Kind::Reduce(R::Max),
    Kind::Reduce(R::Min),
    Kind::Reduce(R::Prod),
    Kind::Reduce(R::Mean),
];

/// The reduction rules.
#[rustfmt::skip]
pub fn rules() -> Vec<Rule> {
    vec![
        Rule::new("sum-scalar-factor",    SUM,         sum_scalar_factor),    // sum(x * c) -> sum(x) * c (c a scalar; floats: |c| >= 1)
        Rule::new("extremum-pos-factor",  MAX_MIN,     extremum_pos_factor),  // max(x * c) -> max(x) * c (c > 0 constant)
        Rule::new("sum-of-broadcast",     SUM,         sum_of_broadcast),     // sum(expand(x)) over expanded axes -> sum(x) * n
        Rule::new("reduce-reduce",        SUM_MAX_MIN, reduce_reduce),        // sum(sum(x, a1), a2) -> sum(x, a1 ∪ a2)
        Rule::new("reduce-unit-axes",     ALL_REDUCE,  reduce_unit_axes),     // sum(x) over extent-1 axes -> reshape(x)
    ]
}

/// The reduction op and its attributes.
fn reduce_of(ctx: &Ctx, n: &TensorLang) -> Option<(R, Option<Vec<i64>>, bool)> {
    match ctx.op(n) {
        Op::Reduce { op, axes, keepdim } => Some((*op, axes.clone(), *keepdim)),
        _ => None,
    }
}

fn sum_scalar_factor(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let m = n.children[0];
    // Integer sums widen to i64 while the product wraps in its own dtype; only floats and i64
    // (where both wrap alike) keep the product's value.
    if !ctx
        .dtype(m)
        .is_some_and(|d| d.is_float() || d == DType::I64)
    {
        return;
    }
    let float = ctx.is_float(m);
    let op = ctx.op(n).clone();
    for mul in ctx.nodes(m, Kind::Binary(B::Mul)) {
        for (x, c) in scalar_factors(ctx, mul) {
            // A float factor below 1 in magnitude would move an f32 overflow into the
            // sum (`sum(x * 0.125)` fits where `sum(x)` does not); at or above 1 every
            // partial sum of the original is the larger, so none is introduced.
            if float && !constant_of(ctx, &c).is_some_and(|v| v.is_finite() && v.abs() >= 1.0) {
                continue;
            }
            let sum = Term::apply(op.clone(), Term::Class(x));
            out.push(Term::binary(B::Mul, sum, c));
        }
    }
}

/// The value of a constant factor, if it is one.
fn constant_of(ctx: &Ctx, c: &Term) -> Option<f64> {
    match c {
        Term::Class(id) => ctx.konst(*id),
        Term::Const { value, .. } => Some(*value),
        Term::Op(..) => None,
    }
}

fn extremum_pos_factor(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let m = n.children[0];
    if !ctx.is_float(m) {
        return;
    }
    let op = ctx.op(n).clone();
    for mul in ctx.nodes(m, Kind::Binary(B::Mul)) {
        for (x, c) in scalar_factors(ctx, mul) {
            let positive = constant_of(ctx, &c).is_some_and(|v| v > 0.0 && v.is_finite());
            if positive {
                out.push(Term::binary(
                    B::Mul,
                    Term::apply(op.clone(), Term::Class(x)),
                    c,
                ));
            }
        }
    }
}

fn sum_of_broadcast(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (Some((_, axes, keepdim)), Some(result)) = (reduce_of(ctx, n), ctx.ty(class)) else {
        return;
    };
    let e = n.children[0];
    let Some(big) = ctx.ty(e) else { return };
    let Ok(reduced) = reduced_axes("sum", axes.as_deref(), big.rank()) else {
        return;
    };
    for expand in ctx.nodes(e, Kind::Expand) {
        let x = expand.children[0];
        let Some(small) = ctx.ty(x) else { continue };
        // x aligned to the expanded rank: new leading axes have extent 1.
        let lead = big.rank() - small.rank();
        let aligned: Vec<usize> = (0..big.rank())
            .map(|i| if i < lead { 1 } else { small.shape[i - lead] })
            .collect();
        // Summing an axis that was stretched from 1 to n multiplies by n.
        let stretched: Vec<usize> = reduced
            .iter()
            .copied()
            .filter(|&i| aligned[i] == 1 && big.shape[i] != 1)
            .collect();
        if stretched.is_empty() {
            continue;
        }
        let factor: f64 = stretched.iter().map(|&i| big.shape[i] as f64).product();
        // The factor must be exact in the sum's dtype (large counts are not, in f16).
        if fit(factor, result.dtype) != Some(factor) {
            continue;
        }
        // Sum x itself over the reduced axes it has (if any has more than one element), keeping
        // them, then scale: the stretched axes contributed `factor` copies of each element.
        let own_axes: Vec<i64> = reduced
            .iter()
            .filter(|&&i| i >= lead && aligned[i] != 1)
            .map(|&i| (i - lead) as i64)
            .collect();
        let mut t = Term::Class(x);
        let mut shape = small.shape.clone();
        if !own_axes.is_empty() {
            for &a in &own_axes {
                shape[a as usize] = 1;
            }
            let sum = Op::Reduce {
                op: R::Sum,
                axes: Some(own_axes),
                keepdim: true,
            };
            t = Term::apply(sum, t);
        }
        let factor = Term::constant(factor, &TensorType::scalar(result.dtype));
        t = Term::binary(B::Mul, t, factor);
        // Then broadcast again along the axes that were expanded but not reduced, and drop the
        // reduced axes unless keepdim.
        let mut target: Vec<usize> = big.shape.clone();
        for &i in &reduced {
            target[i] = 1;
        }
        let final_shape = if keepdim { &target } else { &result.shape };
        let mut kept: Vec<usize> = vec![1; lead];
        kept.extend(&shape);
        if kept == target {
            t = reshape_to(t, &shape, final_shape);
        } else {
            t = reshape_to(t, &shape, &kept);
            t = Term::apply(
                Op::Expand {
                    shape: dims(&target),
                },
                t,
            );
            t = reshape_to(t, &target, final_shape);
        }
        out.push(t);
    }
}

fn reduce_reduce(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (Some((op, axes2, _)), Some(result)) = (reduce_of(ctx, n), ctx.ty(class)) else {
        return;
    };
    let m = n.children[0];
    let Some(mid) = ctx.ty(m) else { return };
    let Ok(a2) = reduced_axes(op.name(), axes2.as_deref(), mid.rank()) else {
        return;
    };
    for inner in ctx.nodes(m, Kind::Reduce(op)) {
        let Some((_, axes1, keep1)) = reduce_of(ctx, inner) else {
            continue;
        };
        let x = inner.children[0];
        let Some(xt) = ctx.ty(x) else { continue };
        let Ok(a1) = reduced_axes(op.name(), axes1.as_deref(), xt.rank()) else {
            continue;
        };
        // The outer reduction's axes, as axes of x.
        let remaining: Vec<usize> = (0..xt.rank())
            .filter(|i| keep1 || !a1.contains(i))
            .collect();
        let mut all: Vec<usize> = a1.clone();
        all.extend(a2.iter().filter_map(|&j| remaining.get(j).copied()));
        all.sort_unstable();
        all.dedup();
        let merged = Op::Reduce {
            op,
            axes: Some(all.iter().map(|&a| a as i64).collect()),
            keepdim: true,
        };
        let mut kept = xt.shape.clone();
        for &a in &all {
            kept[a] = 1;
        }
        let dropped: Vec<usize> = (0..xt.rank())
            .filter(|i| !all.contains(i))
            .map(|i| xt.shape[i])
            .collect();
        if result.shape == dropped {
            let merged = Op::Reduce {
                op,
                axes: Some(all.iter().map(|&a| a as i64).collect()),
                keepdim: false,
            };
            out.push(Term::apply(merged, Term::Class(x)));
        } else {
            let t = Term::apply(merged, Term::Class(x));
            out.push(reshape_to(t, &kept, &result.shape));
        }
    }
}

/// `reshape(t, to)`, or `t` itself when it already has that shape.
fn reshape_to(t: Term, from: &[usize], to: &[usize]) -> Term {
    if from == to {
        t
    } else {
        Term::apply(Op::Reshape { shape: dims(to) }, t)
    }
}

fn reduce_unit_axes(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (Some((op, axes, _)), Some(result)) = (reduce_of(ctx, n), ctx.ty(class)) else {
        return;
    };
    let x = n.children[0];
    let Some(xt) = ctx.ty(x) else { return };
    let Ok(reduced) = reduced_axes(op.name(), axes.as_deref(), xt.rank()) else {
        return;
    };
    // Reducing one element is that element (integer sums and products widen to i64).
    if reduced.iter().all(|&a| xt.shape[a] == 1) {
        let reshaped = reshape_to(Term::Class(x), &xt.shape, &result.shape);
        let from = xt.with_shape(result.shape.clone());
        out.push(fit_to(reshaped, &from, result));
    }
}
