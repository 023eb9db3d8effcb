//! Matrix products: transposes folded into operands, scalar factors moved in and out.
//!
//! `(a @ b)^T = b^T @ a^T` is exact (the same dot products); moving a scalar factor through a
//! product re-rounds (`(a*c) @ b` rounds each scaled element, `(a @ b) * c` each dot product).

use super::{operands, scalar_factors, Ctx, Rule, Term};
use crate::optimize::language::{Kind, TensorLang};
use egg::Id;
use ferrite_ir::infer::permutation;
use ferrite_ir::{BinaryOp as B, Op};

const PERMUTE: &[Kind] = &[Kind::Permute];
const MATMUL: &[Kind] = &[Kind::MatMul];
const MUL: &[Kind] = &[Kind::Binary(B::Mul)];

/// The matmul rules.
#[rustfmt::skip]
pub fn rules() -> Vec<Rule> {
    vec![
        Rule::new("matmul-transpose",    PERMUTE, matmul_transpose),    // (a @ b)^T -> b^T @ a^T
        Rule::new("matmul-scalar-out",   MATMUL,  matmul_scalar_out),   // (a * c) @ b -> (a @ b) * c
        Rule::new("matmul-scalar-in",    MUL,     matmul_scalar_in),    // (a @ b) * c -> (a * c) @ b, a @ (b * c)
    ]
}

/// `permute` dims swapping the last two of `rank` axes.
fn swap_last_two(rank: usize) -> Vec<i64> {
    let mut d: Vec<i64> = (0..rank as i64).collect();
    d.swap(rank - 2, rank - 1);
    d
}

fn matmul_transpose(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let m = n.children[0];
    let (Some(mt), Op::Permute { dims }) = (ctx.ty(m), ctx.op(n)) else {
        return;
    };
    let rank = mt.rank();
    let swaps_last_two = rank >= 2
        && permutation("permute", dims, rank)
            .is_ok_and(|p| p.iter().map(|&d| d as i64).eq(swap_last_two(rank)));
    if !swaps_last_two {
        return;
    }
    for mm in ctx.nodes(m, Kind::MatMul) {
        let (a, b) = operands(mm);
        let (Some(ta), Some(tb)) = (ctx.ty(a), ctx.ty(b)) else {
            continue;
        };
        // 1-D operands have no transpose.
        if ta.rank() < 2 || tb.rank() < 2 {
            continue;
        }
        let t = |x: Id, r: usize| {
            Term::apply(
                Op::Permute {
                    dims: swap_last_two(r),
                },
                Term::Class(x),
            )
        };
        out.push(Term::Op(Op::MatMul, vec![t(b, tb.rank()), t(a, ta.rank())]));
    }
}

fn matmul_scalar_out(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (a, b) = operands(n);
    for mul in ctx.nodes(a, Kind::Binary(B::Mul)) {
        for (x, c) in scalar_factors(ctx, mul) {
            let mm = Term::Op(Op::MatMul, vec![Term::Class(x), Term::Class(b)]);
            out.push(Term::binary(B::Mul, mm, c));
        }
    }
    for mul in ctx.nodes(b, Kind::Binary(B::Mul)) {
        for (x, c) in scalar_factors(ctx, mul) {
            let mm = Term::Op(Op::MatMul, vec![Term::Class(a), Term::Class(x)]);
            out.push(Term::binary(B::Mul, mm, c));
        }
    }
}

fn matmul_scalar_in(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    for (m, c) in scalar_factors(ctx, n) {
        for mm in ctx.nodes(m, Kind::MatMul) {
            let (a, b) = operands(mm);
            let scaled = |x: Id| Term::binary(B::Mul, Term::Class(x), c.clone());
            out.push(Term::Op(Op::MatMul, vec![scaled(a), Term::Class(b)]));
            out.push(Term::Op(Op::MatMul, vec![Term::Class(a), scaled(b)]));
        }
    }
}
