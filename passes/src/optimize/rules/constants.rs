//! Constants: folding, and selects decided by them.
//!
//! The analysis computes constant values (see `analysis.rs`); `fold-constants` is the rule that
//! makes them visible, by adding a literal or `full` node to every class known to be constant,
//! which extraction then prefers (constants cost nothing to compute).

use super::{fit_to, Ctx, Rule, Term};
use crate::optimize::language::{Kind, TensorLang};
use egg::Id;

const WHERE: &[Kind] = &[Kind::Where];

/// The constant rules.
#[rustfmt::skip]
pub fn rules() -> Vec<Rule> {
    vec![
        Rule::every_class("fold-constants", fold_constants),            // op(c1, c2) -> c
        Rule::new("where-const-cond", WHERE, where_const_cond),         // where(true, a, b) -> a
        Rule::new("where-same",       WHERE, where_same),               // where(c, a, a) -> a
    ]
}

fn fold_constants(ctx: &Ctx, class: Id, _: &TensorLang, out: &mut Vec<Term>) {
    let (Some(v), Some(ty)) = (ctx.konst(class), ctx.ty(class)) else {
        return;
    };
    let has_constant_node = ctx.eg[class]
        .nodes
        .iter()
        .any(|n| matches!(n.kind, Kind::Literal | Kind::Full));
    if !has_constant_node {
        out.push(Term::constant(v, ty));
    }
}

/// `branch` (a `where` operand) converted to the `where`'s result type.
fn branch(ctx: &Ctx, class: Id, branch: Id) -> Option<Term> {
    Some(fit_to(Term::Class(branch), ctx.ty(branch)?, ctx.ty(class)?))
}

fn where_const_cond(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (c, a, b) = (n.children[0], n.children[1], n.children[2]);
    if let Some(v) = ctx.konst(c) {
        out.extend(branch(ctx, class, if v != 0.0 { a } else { b }));
    }
}

fn where_same(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (a, b) = (n.children[1], n.children[2]);
    if a == b {
        out.extend(branch(ctx, class, a));
    }
}
