//! Elementwise arithmetic: identities, strength reduction, constant chains, factoring, casts.
//!
//! Float caveats, each tested against the interpreter with the tolerance its test states:
//! `x + 0 -> x` turns `-0 + 0 = +0` into `-0` (equal values); `pow(x, 0.5) -> sqrt(x)` differs at
//! `x = -inf`; there is deliberately no `pow(x, -0.5) -> rsqrt(x)`, which would differ in more than
//! a sign of zero (`rsqrt(-0) = -inf` where `pow` gives `+inf`, NaN at `-inf` where `pow` gives
//! `+0`: reliability finding F15), and `reciprocal(sqrt(x)) -> rsqrt(x)` is exact; in f32, dividing by a constant that is not a power of two becomes a multiply by its
//! rounded reciprocal, and chained constants fold into one rounded constant (one rounding each;
//! in f16 and bf16 these new constants must be exact); constant chains and factoring re-round,
//! and can avoid an intermediate overflow the original had, or turn `inf - inf` into `inf * 0`.
//! `x * 0 -> 0` is integers only: for floats it is wrong at inf and NaN.

use super::{operands, with_constant, Ctx, Rule, Term};
use crate::optimize::analysis::fit;
use crate::optimize::language::{Kind, TensorLang};
use egg::Id;
use ferrite_ir::{BinaryOp as B, DType, TensorType, UnaryOp as U};

const ADD: &[Kind] = &[Kind::Binary(B::Add)];
const SUB: &[Kind] = &[Kind::Binary(B::Sub)];
const MUL: &[Kind] = &[Kind::Binary(B::Mul)];
const DIV: &[Kind] = &[Kind::Binary(B::Div)];
const POW: &[Kind] = &[Kind::Binary(B::Pow)];
const ADD_SUB: &[Kind] = &[Kind::Binary(B::Add), Kind::Binary(B::Sub)];
const NEG: &[Kind] = &[Kind::Unary(U::Neg)];
const ABS: &[Kind] = &[Kind::Unary(U::Abs)];
const RECIPROCAL: &[Kind] = &[Kind::Unary(U::Reciprocal)];
const CAST: &[Kind] = &[Kind::Cast];

/// The arithmetic rules.
#[rustfmt::skip]
pub fn rules() -> Vec<Rule> {
    vec![
        Rule::new("mul-one",          MUL,        mul_one),          // x * 1 -> x
        Rule::new("add-zero",         ADD,        add_zero),         // x + 0 -> x (floats: x + -0.0)
        Rule::new("sub-zero",         SUB,        sub_zero),         // x - 0 -> x (floats: x - +0.0)
        Rule::new("div-one",          DIV,        div_one),          // x / 1 -> x
        Rule::new("neg-neg",          NEG,        neg_neg),          // -(-x) -> x
        Rule::new("mul-zero-int",     MUL,        mul_zero_int),     // x * 0 -> 0 (integers and bools)
        Rule::new("sub-self-int",     SUB,        sub_self_int),     // x - x -> 0 (integers)
        Rule::new("mul-neg-one",      MUL,        mul_neg_one),      // x * -1 -> -x
        Rule::new("zero-sub",         SUB,        zero_sub),         // 0 - x -> -x (floats: -0.0 - x)
        Rule::new("add-neg",          ADD,        add_neg),          // x + -y -> x - y
        Rule::new("sub-neg",          SUB,        sub_neg),          // x - -y -> x + y
        Rule::new("neg-sub",          NEG,        neg_sub),          // -(x - y) -> y - x
        Rule::new("abs-abs",          ABS,        abs_abs),          // |(|x|)| -> |x|
        Rule::new("abs-neg",          ABS,        abs_neg),          // |-x| -> |x|
        Rule::new("pow-zero",         POW,        pow_zero),         // x ** 0 -> 1
        Rule::new("pow-one",          POW,        pow_one),          // x ** 1 -> x
        Rule::new("pow-two",          POW,        pow_two),          // x ** 2 -> x * x
        Rule::new("pow-neg-one",      POW,        pow_neg_one),      // x ** -1 -> reciprocal(x) (floats)
        Rule::new("one-div",          DIV,        one_div),          // 1 / x -> reciprocal(x)
        Rule::new("reciprocal-sqrt",  RECIPROCAL, reciprocal_sqrt),  // reciprocal(sqrt(x)) -> rsqrt(x)
        Rule::new("div-sqrt",         DIV,        div_sqrt),         // y / sqrt(x) -> y * rsqrt(x) (floats)
        Rule::new("div-const",        DIV,        div_const),        // x / c -> x * (1/c) (floats, c a power of two)
        Rule::new("mul-const-chain",  MUL,        mul_const_chain),  // (x * c1) * c2 -> x * (c1*c2) (floats: exact scalings only)
        Rule::new("add-const-chain",  ADD_SUB,    add_const_chain),  // (x ± c1) ± c2 -> x + (±c1 ± c2) (integers)
        Rule::new("factor-mul",       ADD_SUB,    factor_mul),       // a*b ± a*c -> a * (b ± c) (integers)
        Rule::new("cast-same",        CAST,       cast_same),        // cast(x, to=dtype of x) -> x
        Rule::new("cast-cast",        CAST,       cast_cast),        // cast(cast(x, to=a), to=b) -> cast(x, to=b) (x -> a exact)
    ]
}

fn mul_one(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    for (x, c) in with_constant(ctx, n) {
        if ctx.is(c, 1.0) {
            out.push(Term::Class(x));
        }
    }
}

/// Whether `c` is a zero that leaves `x` unchanged: for floats only the zero of the
/// given sign does (`-0 + +0` is `+0`, so `x + 0` is not `x`; `x + -0` is, and so is
/// `x - +0`).
fn is_identity_zero(ctx: &Ctx, x: Id, c: Id, negative: bool) -> bool {
    match ctx.konst(c) {
        Some(v) if v == 0.0 => !ctx.is_float(x) || v.is_sign_negative() == negative,
        _ => false,
    }
}

fn add_zero(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    for (x, c) in with_constant(ctx, n) {
        if is_identity_zero(ctx, x, c, true) {
            out.push(Term::Class(x));
        }
    }
}

fn sub_zero(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (x, c) = operands(n);
    if is_identity_zero(ctx, x, c, false) {
        out.push(Term::Class(x));
    }
}

fn div_one(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (x, c) = operands(n);
    if ctx.is(c, 1.0) {
        out.push(Term::Class(x));
    }
}

fn neg_neg(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    for inner in ctx.nodes(n.children[0], Kind::Unary(U::Neg)) {
        out.push(Term::Class(inner.children[0]));
    }
}

/// The zero of the class's type, for integer and bool classes.
fn int_zero(ctx: &Ctx, class: Id) -> Option<Term> {
    let ty = ctx.ty(class)?;
    (!ty.dtype.is_float()).then(|| Term::constant(0.0, ty))
}

fn mul_zero_int(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    if with_constant(ctx, n).iter().any(|&(_, c)| ctx.is(c, 0.0)) {
        out.extend(int_zero(ctx, class));
    }
}

fn sub_self_int(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (a, b) = operands(n);
    if a == b {
        out.extend(int_zero(ctx, class));
    }
}

fn mul_neg_one(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    for (x, c) in with_constant(ctx, n) {
        if ctx.is(c, -1.0) {
            out.push(Term::unary(U::Neg, Term::Class(x)));
        }
    }
}

fn zero_sub(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (c, x) = operands(n);
    // Floats: `+0 - +0` is `+0`, not `-(+0)`; `-0 - x` is `-x` for every x.
    if is_identity_zero(ctx, x, c, true) {
        out.push(Term::unary(U::Neg, Term::Class(x)));
    }
}

fn add_neg(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (a, b) = operands(n);
    for (x, y) in [(a, b), (b, a)] {
        for neg in ctx.nodes(y, Kind::Unary(U::Neg)) {
            out.push(Term::binary(
                B::Sub,
                Term::Class(x),
                Term::Class(neg.children[0]),
            ));
        }
    }
}

fn sub_neg(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (x, y) = operands(n);
    for neg in ctx.nodes(y, Kind::Unary(U::Neg)) {
        out.push(Term::binary(
            B::Add,
            Term::Class(x),
            Term::Class(neg.children[0]),
        ));
    }
}

fn neg_sub(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    for sub in ctx.nodes(n.children[0], Kind::Binary(B::Sub)) {
        let (x, y) = operands(sub);
        out.push(Term::binary(B::Sub, Term::Class(y), Term::Class(x)));
    }
}

fn abs_abs(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let x = n.children[0];
    if ctx.nodes(x, Kind::Unary(U::Abs)).next().is_some() {
        out.push(Term::Class(x));
    }
}

fn abs_neg(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    for neg in ctx.nodes(n.children[0], Kind::Unary(U::Neg)) {
        out.push(Term::unary(U::Abs, Term::Class(neg.children[0])));
    }
}

/// `pow(x, c)` with the constant exponent `c == e`: the base.
fn pow_base(ctx: &Ctx, n: &TensorLang, e: f64) -> Option<Id> {
    let (x, c) = operands(n);
    ctx.is(c, e).then_some(x)
}

fn pow_zero(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    // IEEE pow(x, 0) is 1 for every x, NaN included; so is integer x ** 0.
    if pow_base(ctx, n, 0.0).is_some() {
        if let Some(ty) = ctx.ty(class) {
            out.push(Term::constant(1.0, ty));
        }
    }
}

fn pow_one(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    out.extend(pow_base(ctx, n, 1.0).map(Term::Class));
}

fn pow_two(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    if let Some(x) = pow_base(ctx, n, 2.0) {
        out.push(Term::binary(B::Mul, Term::Class(x), Term::Class(x)));
    }
}

fn pow_neg_one(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    // Integer x ** -1 is a run-time error, which a reciprocal would hide.
    match pow_base(ctx, n, -1.0) {
        Some(x) if ctx.is_float(x) => out.push(Term::unary(U::Reciprocal, Term::Class(x))),
        _ => {}
    }
}

fn one_div(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (c, x) = operands(n);
    if ctx.is(c, 1.0) {
        out.push(Term::unary(U::Reciprocal, Term::Class(x)));
    }
}

fn reciprocal_sqrt(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    for sqrt in ctx.nodes(n.children[0], Kind::Unary(U::Sqrt)) {
        out.push(Term::unary(U::Rsqrt, Term::Class(sqrt.children[0])));
    }
}

fn div_sqrt(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    if !ctx.is_float(class) {
        return;
    }
    let (y, s) = operands(n);
    for sqrt in ctx.nodes(s, Kind::Unary(U::Sqrt)) {
        let rsqrt = Term::unary(U::Rsqrt, Term::Class(sqrt.children[0]));
        out.push(Term::binary(B::Mul, Term::Class(y), rsqrt));
    }
}

/// The smallest positive normal number of a float dtype: reciprocals below it lose precision.
fn min_normal(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 6.103515625e-5,
        DType::Bf16 | DType::F32 => f32::MIN_POSITIVE as f64,
        _ => f64::MIN_POSITIVE,
    }
}

fn div_const(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let (x, c) = operands(n);
    let (Some(ty), Some(cv), Some(tc)) = (ctx.ty(class), ctx.konst(c), ctx.ty(c)) else {
        return;
    };
    // Floats only: int / int is a true division of exact integers, which a rounded
    // reciprocal would not reproduce.
    if !ctx.is_float(x) || !ty.dtype.is_float() || !cv.is_finite() || cv == 0.0 {
        return;
    }
    let Some(r) = fit(1.0 / cv, ty.dtype) else {
        return;
    };
    // Only an exact reciprocal (c a power of two, no mantissa bits): `x * (1/c)` then rounds the same
    // real number `x / c` does, so the result is bit for bit the division's; a rounded
    // reciprocal would be an ulp off (`x / 3`).
    if r.is_finite()
        && r.abs() >= min_normal(ty.dtype)
        && r == 1.0 / cv
        && cv.abs().to_bits() << 12 == 0
    {
        let recip = Term::constant(r, &tc.with_dtype(ty.dtype));
        out.push(Term::binary(B::Mul, Term::Class(x), recip));
    }
}

/// Whether a new constant `rounded` (the dtype's value for `exact`) may replace a computation.
/// In f32 one rounding is within the stated tolerance; in f16 and bf16 an ulp is 0.1% to 0.4%,
/// an error the original did not make, so there the constant must be exact.
fn precise_enough(rounded: f64, exact: f64, dtype: DType) -> bool {
    dtype == DType::F32 || !dtype.is_float() || rounded == exact
}

/// A rank-0 constant: the constants that chain rules combine.
fn scalar_const(ctx: &Ctx, id: Id) -> Option<f64> {
    ctx.ty(id).filter(|t| t.rank() == 0)?;
    ctx.konst(id)
}

/// Folds two chained constants into one of the class's dtype, refusing results that overflow
/// or vanish where the chain did not.
fn combine(ctx: &Ctx, class: Id, v: f64) -> Option<Term> {
    let dtype = ctx.dtype(class)?;
    let folded = fit(v, dtype)?;
    (folded.is_finite() && (folded != 0.0 || v == 0.0) && precise_enough(folded, v, dtype))
        .then(|| Term::constant(folded, &TensorType::scalar(dtype)))
}

/// True when `(x * c1) * c2` is `x * (c1 * c2)` bit for bit for every float `x`, special
/// values included: when one factor is ±1 (negation is exact and rounding symmetric), or
/// both are powers of two of magnitude at least 1 (scaling up is exact until it overflows,
/// and the chain overflows where the single product does). Anything else rounds twice or
/// overflows or underflows in the middle (`(x * 1e30) * 1e-30`, `(x * 0.5) * 0.5` on a
/// subnormal), so the integer-only rule would not be the interpreter's answer.
fn exact_float_scaling(v1: f64, v2: f64) -> bool {
    let power_of_two_up = |v: f64| v.is_finite() && v.abs() >= 1.0 && v.abs().to_bits() << 12 == 0;
    v1.abs() == 1.0 || v2.abs() == 1.0 || (power_of_two_up(v1) && power_of_two_up(v2))
}

fn mul_const_chain(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let Some(dtype) = ctx.dtype(class) else {
        return;
    };
    let (a, b) = operands(n);
    for (inner, c2) in [(a, b), (b, a)] {
        let Some(v2) = scalar_const(ctx, c2) else {
            continue;
        };
        for m in ctx.nodes(inner, Kind::Binary(B::Mul)) {
            let (p, q) = operands(m);
            for (x, c1) in [(p, q), (q, p)] {
                let folded = scalar_const(ctx, c1)
                    .filter(|&v1| !dtype.is_float() || exact_float_scaling(v1, v2))
                    .and_then(|v1| combine(ctx, class, v1 * v2));
                if let Some(c) = folded {
                    out.push(Term::binary(B::Mul, Term::Class(x), c));
                }
            }
        }
    }
}

/// `(x, c)` with `node = x + c` (either order) or `x - c`, and the sign `c` enters with.
fn offsets(ctx: &Ctx, node: &TensorLang) -> Vec<(Id, f64)> {
    let (a, b) = operands(node);
    let mut out = Vec::new();
    if node.kind == Kind::Binary(B::Sub) {
        if let Some(v) = scalar_const(ctx, b) {
            out.push((a, -v));
        }
    } else {
        for (x, c) in [(a, b), (b, a)] {
            if let Some(v) = scalar_const(ctx, c) {
                out.push((x, v));
            }
        }
    }
    out
}

/// Integers only: their addition wraps, so it re-associates exactly; float addition rounds
/// at every step (`(1 + 1e8) - 1e8` is 0 in f32, not 1).
fn add_const_chain(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    if ctx.dtype(class).is_none_or(|d| d.is_float()) {
        return;
    }
    for (inner, v2) in offsets(ctx, n) {
        for kind in [Kind::Binary(B::Add), Kind::Binary(B::Sub)] {
            for m in ctx.nodes(inner, kind) {
                for (x, v1) in offsets(ctx, m) {
                    if let Some(c) = combine(ctx, class, v1 + v2) {
                        out.push(Term::binary(B::Add, Term::Class(x), c));
                    }
                }
            }
        }
    }
}

/// The other operand of each `mul` node in class `id` that has `a` as an operand.
fn cofactors(ctx: &Ctx, id: Id, a: Id) -> Vec<Id> {
    let mut out = Vec::new();
    for m in ctx.nodes(id, Kind::Binary(B::Mul)) {
        let (p, q) = operands(m);
        if p == a {
            out.push(q);
        } else if q == a {
            out.push(p);
        }
    }
    out
}

/// Integers only: wrapping arithmetic distributes exactly; in floats `a*b + a*c` and
/// `a * (b + c)` round differently and overflow differently (`2*3e38 - 2*3e38` is NaN,
/// `2 * (3e38 - 3e38)` is 0).
fn factor_mul(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    if ctx.dtype(class).is_none_or(|d| d.is_float()) {
        return;
    }
    let op = if n.kind == Kind::Binary(B::Sub) {
        B::Sub
    } else {
        B::Add
    };
    let (left, right) = operands(n);
    let mut shared: Vec<Id> = Vec::new();
    for m in ctx.nodes(left, Kind::Binary(B::Mul)) {
        let (p, q) = operands(m);
        for a in [p, q] {
            if shared.contains(&a) {
                continue;
            }
            shared.push(a);
            let (bs, cs) = (cofactors(ctx, left, a), cofactors(ctx, right, a));
            if let (Some(&b), Some(&c)) = (bs.first(), cs.first()) {
                let sum = Term::binary(op, Term::Class(b), Term::Class(c));
                // Constants go on the right, as people write `x * 0.5`.
                out.push(if ctx.konst(a).is_some() {
                    Term::binary(B::Mul, sum, Term::Class(a))
                } else {
                    Term::binary(B::Mul, Term::Class(a), sum)
                });
            }
        }
    }
}

fn cast_same(ctx: &Ctx, class: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let x = n.children[0];
    if ctx.dtype(x).is_some() && ctx.dtype(x) == ctx.dtype(class) {
        out.push(Term::Class(x));
    }
}

/// True if every value of dtype `from` is exactly representable in `to`.
fn widens_exactly(from: DType, to: DType) -> bool {
    from == to
        || from == DType::Bool
        || matches!(
            (from, to),
            (DType::F16 | DType::Bf16, DType::F32) | (DType::I32, DType::I64)
        )
}

fn cast_cast(ctx: &Ctx, _: Id, n: &TensorLang, out: &mut Vec<Term>) {
    let ferrite_ir::Op::Cast { to } = ctx.op(n) else {
        return;
    };
    let mid = n.children[0];
    let Some(via) = ctx.dtype(mid) else { return };
    for inner in ctx.nodes(mid, Kind::Cast) {
        let x = inner.children[0];
        // An exact first cast loses nothing, so the second one sees x's own values.
        if ctx.dtype(x).is_some_and(|from| widens_exactly(from, via)) {
            out.push(Term::apply(
                ferrite_ir::Op::Cast { to: *to },
                Term::Class(x),
            ));
        }
    }
}
