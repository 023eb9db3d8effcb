//! Movement and layout: composing and cancelling views.
//!
//! All of these are exact: they only re-index elements.

use super::{dims, Ctx, Rule, Term};
use crate::optimize::language::{Kind, TensorLang};
use egg::Id;
use ferrite_ir::infer::permutation;
use ferrite_ir::Op;

const PERMUTE: &[Kind] = &[Kind::Permute];
const RESHAPE: &[Kind] = &[Kind::Reshape];
const EXPAND: &[Kind] = &[Kind::Expand];
const SLICE: &[Kind] = &[Kind::Slice];
const CONCAT: &[Kind] = &[Kind::Concat];
const PAD: &[Kind] = &[Kind::Pad];

/// The movement rules.
#[rustfmt::skip]
pub fn rules() -> Vec<Rule> {
    vec![
        Rule::new("permute-identity",   PERMUTE, permute_identity),   // permute(x, [0, 1, ..]) -> x
        Rule::new("permute-permute",    PERMUTE, permute_permute),    // permute(permute(x, p), q) -> permute(x, p∘q)
        Rule::new("permute-as-reshape", PERMUTE, permute_as_reshape), // permute moving only extent-1 axes -> reshape
        Rule::new("reshape-identity",   RESHAPE, reshape_identity),   // reshape(x, shape of x) -> x
        Rule::new("reshape-reshape",    RESHAPE, reshape_reshape),    // reshape(reshape(x, s1), s2) -> reshape(x, s2)
        Rule::new("expand-identity",    EXPAND,  expand_identity),    // expand(x, shape of x) -> x
        Rule::new("expand-expand",      EXPAND,  expand_expand),      // expand(expand(x, s1), s2) -> expand(x, s2)
        Rule::new("slice-identity",     SLICE,   slice_identity),     // slice covering the whole axis -> x
        Rule::new("concat-single",      CONCAT,  concat_single),      // concat(x) -> x
        Rule::new("pad-zero",           PAD,     pad_zero),           // pad(x, [0, 0, ..]) -> x
    ]
}

/// The normalized permutation of a permute node whose operand has rank `rank`.
fn perm_of(ctx: &Ctx, n: &TensorLang) -> Option<Vec<usize>> {
    let Op::Permute { dims } = ctx.op(n) else {
        return None;
    };
    permutation("permute", dims, ctx.ty(n.children[0])?.rank()).ok()
}

fn is_identity(p: &[usize]) -> bool {
    p.iter().enumerate().all(|(i, &d)| i == d)
}

/// `x` if the class has exactly `x`'s type (the view changed nothing).
fn same_as_operand(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let x = n.children[0];
    if ctx.ty(class).is_some() && ctx.ty(class) == ctx.ty(x) {
        out.push(Term::Class(x));
    }
}

fn permute_identity(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    if perm_of(ctx, n).is_some_and(|p| is_identity(&p)) {
        out.push(Term::Class(n.children[0]));
    }
}

fn permute_permute(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let Some(q) = perm_of(ctx, n) else { return };
    for inner in ctx.nodes(n.children[0], Kind::Permute) {
        let Some(p) = perm_of(ctx, inner) else {
            continue;
        };
        // Result axis i is inner axis q[i], which is x axis p[q[i]].
        let composed: Vec<usize> = q.iter().map(|&i| p[i]).collect();
        let x = Term::Class(inner.children[0]);
        out.push(if is_identity(&composed) {
            x
        } else {
            let dims = composed.iter().map(|&d| d as i64).collect();
            Term::apply(Op::Permute { dims }, x)
        });
    }
}

fn permute_as_reshape(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (Some(p), Some(x), Some(ty)) = (perm_of(ctx, n), ctx.ty(n.children[0]), ctx.ty(class))
    else {
        return;
    };
    if is_identity(&p) {
        return;
    }
    // Moving extent-1 axes around does not change the row-major order of the elements.
    let moved: Vec<usize> = p.iter().copied().filter(|&d| x.shape[d] != 1).collect();
    if moved.windows(2).all(|w| w[0] < w[1]) {
        let shape = dims(&ty.shape);
        out.push(Term::apply(
            Op::Reshape { shape },
            Term::Class(n.children[0]),
        ));
    }
}

fn reshape_identity(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    same_as_operand(ctx, class, n, out);
}

fn reshape_reshape(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let Some(ty) = ctx.ty(class) else { return };
    for inner in ctx.nodes(n.children[0], Kind::Reshape) {
        let shape = dims(&ty.shape);
        out.push(Term::apply(
            Op::Reshape { shape },
            Term::Class(inner.children[0]),
        ));
    }
}

fn expand_identity(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    same_as_operand(ctx, class, n, out);
}

fn expand_expand(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let Some(ty) = ctx.ty(class) else { return };
    for inner in ctx.nodes(n.children[0], Kind::Expand) {
        // Broadcasting composes: x broadcasts straight to the final shape (the type check
        // confirms it, axis by axis).
        let shape = dims(&ty.shape);
        out.push(Term::apply(
            Op::Expand { shape },
            Term::Class(inner.children[0]),
        ));
    }
}

fn slice_identity(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    // With step >= 1, a slice as long as its axis starts at 0 and takes every element.
    same_as_operand(ctx, class, n, out);
}

fn concat_single(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    if n.children.len() == 1 {
        same_as_operand(ctx, class, n, out);
    }
}

fn pad_zero(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    if matches!(ctx.op(n), Op::Pad { pads, .. } if pads.iter().all(|&p| p == 0)) {
        same_as_operand(ctx, class, n, out);
    }
}
