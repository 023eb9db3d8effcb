//! Loop-IR scalar ops as tile expressions, with the loop IR's semantics.
//!
//! Each node of a stage body computes in its dtype and rounds once, as the
//! reference interpreter does; tile operations round every result to their
//! dtype too, so a direct op maps to a direct op. Ops the tile language has no
//! builtin for are expanded into ones it has, computed in f32 for half-precision
//! values so the expansion rounds once at the end:
//!
//! ```text
//! reciprocal(x) -> 1.0 / x            sign(x)  -> where(x > 0, 1, where(x < 0, -1, x - x))
//! gelu(x)       -> 0.5*x*(1 + erf(x/sqrt 2))         silu(x) -> x * sigmoid(x)
//! pow(x, y)     -> x*x, 1/x for the exponents 2, -1; else pow(x, y), the
//!                  builtin (C99/IEEE special values, as the interpreter)
//! trunc_divide, fmod of integers -> x / y, x % y (C's, toward zero)
//! floor_divide, remainder of integers -> q - 1, r + y where r != 0 and the signs
//!                  of r and y differ (a zero divisor: the kernel's check; those
//!                  lanes divide by 1)
//! floor_divide, trunc_divide, remainder, fmod of floats -> in f64 from x % y
//!                  (fmod), CPython's formulas, rounded once to the dtype
//! not(x)        -> x == 0 (numbers)   and/or of numbers -> (x != 0) & (y != 0)
//! max/min/mul of bools -> | & &
//! ```
//!
//! Constants are [`Val::Lit`]s: ops of constants fold with the loop IR's own
//! scalar semantics, and a constant next to a tile is written as a bare literal,
//! which the tile language gives the tile's dtype. A constant on its own is
//! written with an explicit dtype ([`typed_lit`]).

use super::builder::{
    self as tb, and, bin, boolean, call, cast, div, float, int, lt, mul, neg, where_, Builder,
    Depth, E,
};
use crate::error::{Error, Result};
use crate::tile::ast::{BinaryOp as TBin, Builtin};
use ferrite_ir::loops::{scalar, Value};
use ferrite_ir::{BinaryOp, DType, UnaryOp};

/// A tile value of a stage body.
#[derive(Clone, Debug)]
pub(super) struct TileVal {
    /// The expression (a name once bound).
    pub e: E,
    /// The dtype the expression has in the tile language. It equals the loop-IR
    /// node's dtype except for index arithmetic, computed in i32 when offsets fit
    /// and standing in for the loop IR's i64 index values.
    pub dtype: DType,
    /// The tile axes it varies along.
    pub deps: u8,
    /// How deeply the expression nests operations written in place.
    pub depth: Depth,
}

/// A value of a stage body: a constant or a tile.
#[derive(Clone, Debug)]
pub(super) enum Val {
    /// A constant of the dtype.
    Lit(Value, DType),
    /// A computed tile.
    Tile(TileVal),
}

impl Val {
    /// The tile axes the value varies along.
    pub fn deps(&self) -> u8 {
        match self {
            Val::Lit(..) => 0,
            Val::Tile(t) => t.deps,
        }
    }

    /// The dtype of the value as the tile language sees it.
    pub fn dtype(&self) -> DType {
        match self {
            Val::Lit(_, d) => *d,
            Val::Tile(t) => t.dtype,
        }
    }
}

/// A tile value computed from `parts`.
pub(super) fn tile(e: E, dtype: DType, parts: &[&Val]) -> Val {
    Val::Tile(TileVal {
        e,
        dtype,
        deps: parts.iter().fold(0, |d, v| d | v.deps()),
        depth: Depth::over(parts.iter().filter_map(|v| match v {
            Val::Tile(t) => Some(&t.depth),
            Val::Lit(..) => None,
        })),
    })
}

/// A bare literal: it takes the dtype of the tile it meets.
pub(super) fn lit(v: Value) -> E {
    match v {
        Value::Float(x) => float(x),
        Value::Int(x) => int(x as i64),
        Value::Bool(b) => boolean(b),
    }
}

/// A bare literal that meets a tile of dtype `d`: [`lit`], but f64 values keep
/// every bit.
pub(super) fn lit_as(v: Value, d: DType) -> E {
    match v {
        Value::Float(x) if d == DType::F64 => tb::float_exact(x),
        _ => lit(v),
    }
}

/// A constant written with its dtype, for where no tile gives it one.
pub(super) fn typed_lit(v: Value, d: DType) -> E {
    match d {
        DType::F32 | DType::Bool => lit(v),
        DType::I32 => int(integer(v)),
        DType::F16 | DType::Bf16 => cast(lit(v), d),
        // A literal alone is f32: an f64 constant is a filled scalar, to keep its bits.
        DType::F64 => call(
            Builtin::Full,
            vec![E::Tuple(Vec::new()), lit_as(v, d), tb::dtype(d)],
        ),
        _ => {
            // A `u64` beyond `i64::MAX` is written as its bits.
            let x = integer(v);
            if i32::try_from(x).is_ok() {
                cast(int(x), d)
            } else {
                // Too wide for a literal on its own (which is i32): a filled scalar.
                call(
                    Builtin::Full,
                    vec![E::Tuple(Vec::new()), int(x), tb::dtype(d)],
                )
            }
        }
    }
}

/// An integer constant's value (exact: `as_f64` would round wide values; a `u64`
/// beyond `i64::MAX` gives its bits).
fn integer(v: Value) -> i64 {
    match v {
        Value::Int(x) => x as i64,
        Value::Bool(b) => b as i64,
        Value::Float(x) => x as i64,
    }
}

/// `v` as an expression of exactly dtype `want` (a cast when it has another).
pub(super) fn typed(v: &Val, want: DType) -> E {
    match v {
        Val::Lit(x, _) => typed_lit(scalar::cast(*x, want), want),
        Val::Tile(t) if t.dtype == want => t.e.clone(),
        Val::Tile(t) => cast(t.e.clone(), want),
    }
}

/// `v` of dtype `want`, bound to a name when it is compound, for formulas that
/// use an operand more than once.
fn named(b: &mut Builder, v: &Val, want: DType) -> E {
    b.bind("t", typed(v, want))
}

/// Two operands of one dtype `want`: a constant beside a tile stays a bare
/// literal (it takes the tile's dtype).
fn pair(x: &Val, y: &Val, want: DType) -> (E, E) {
    match (x, y) {
        (Val::Lit(a, _), Val::Tile(_)) => (lit_as(*a, want), typed(y, want)),
        (Val::Tile(_), Val::Lit(c, _)) => (typed(x, want), lit_as(*c, want)),
        (Val::Lit(..), Val::Lit(c, _)) => (typed(x, want), lit_as(*c, want)),
        _ => (typed(x, want), typed(y, want)),
    }
}

/// Operands of a comparison. Integer tiles compare equal across i32 and i64, so
/// index arithmetic computed in i32 is compared as it is, unless a constant
/// beside it does not fit its dtype.
fn compare_pair(x: &Val, y: &Val, want: DType) -> (E, E) {
    let loose = |v: &Val, other: &Val| -> E {
        match (v, other) {
            (Val::Tile(t), Val::Lit(Value::Int(c), _))
                if t.dtype == DType::I32 && i32::try_from(*c).is_err() =>
            {
                typed(v, want)
            }
            (Val::Tile(t), _) if is_index(t.dtype) && is_index(want) => t.e.clone(),
            _ => typed(v, want),
        }
    };
    match (x, y) {
        (Val::Lit(a, _), Val::Tile(_)) => (lit_as(*a, want), loose(y, x)),
        (Val::Tile(_), Val::Lit(c, _)) => (loose(x, y), lit_as(*c, want)),
        _ => (loose(x, y), loose(y, x)),
    }
}

/// True for the dtypes index arithmetic computes in.
fn is_index(d: DType) -> bool {
    matches!(d, DType::I32 | DType::I64)
}

/// The value as a bool: numbers are true when non-zero (NaN included).
fn truth(x: &Val) -> E {
    match x {
        Val::Lit(v, _) => boolean(scalar::truth(*v)),
        Val::Tile(t) if t.dtype == DType::Bool => t.e.clone(),
        Val::Tile(t) => bin(TBin::Ne, t.e.clone(), lit(Value::zero(t.dtype))),
    }
}

fn builtin(f: Builtin, x: E) -> E {
    call(f, vec![x])
}

/// A unary op producing dtype `d`.
pub(super) fn unary(b: &mut Builder, u: UnaryOp, x: &Val, d: DType) -> Result<Val> {
    if let Val::Lit(v, _) = x {
        return Ok(Val::Lit(
            scalar::unary(u, *v, d).map_err(|e| Error::Unsupported(e.to_string()))?,
            d,
        ));
    }
    let xd = x.dtype();
    let float_only = |f: Builtin| -> Result<Val> {
        if !d.is_float() {
            return Err(Error::unsupported(format!("{} of {d} values", u.name())));
        }
        Ok(tile(builtin(f, typed(x, d)), d, &[x]))
    };
    match u {
        UnaryOp::Not => Ok(tile(
            if xd == DType::Bool {
                tb::not(typed(x, DType::Bool))
            } else {
                let (a, z) = compare_pair(x, &Val::Lit(Value::zero(xd), xd), xd);
                bin(TBin::Eq, a, z)
            },
            DType::Bool,
            &[x],
        )),
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu if d == DType::Bool => {
            Err(Error::unsupported(format!("{} of bool values", u.name())))
        }
        // The tile language's `!` is logical of bools and bitwise of integers.
        UnaryOp::BitwiseNot if !d.is_float() => Ok(tile(tb::not(typed(x, d)), d, &[x])),
        UnaryOp::Neg => Ok(tile(neg(typed(x, d)), d, &[x])),
        UnaryOp::Abs => Ok(tile(builtin(Builtin::Abs, typed(x, d)), d, &[x])),
        UnaryOp::Relu => Ok(tile(builtin(Builtin::Relu, typed(x, d)), d, &[x])),
        UnaryOp::Exp => float_only(Builtin::Exp),
        UnaryOp::Log => float_only(Builtin::Log),
        UnaryOp::Sqrt => float_only(Builtin::Sqrt),
        UnaryOp::Rsqrt => float_only(Builtin::Rsqrt),
        UnaryOp::Tanh => float_only(Builtin::Tanh),
        UnaryOp::Erf => float_only(Builtin::Erf),
        UnaryOp::Erfc => float_only(Builtin::Erfc),
        UnaryOp::Sigmoid => float_only(Builtin::Sigmoid),
        UnaryOp::Sin => float_only(Builtin::Sin),
        UnaryOp::Cos => float_only(Builtin::Cos),
        UnaryOp::Floor if d.is_float() => float_only(Builtin::Floor),
        UnaryOp::Ceil if d.is_float() => float_only(Builtin::Ceil),
        // Integers and bools are their own floor and ceiling.
        UnaryOp::Floor | UnaryOp::Ceil => Ok(x.clone()),
        UnaryOp::Reciprocal if d.is_float() => Ok(tile(div(float(1.0), typed(x, d)), d, &[x])),
        UnaryOp::Sign if d.is_float() => {
            // `t - t` is +0 for either zero and NaN for NaN.
            let t = named(b, x, d);
            let inner = where_(
                bin(TBin::Lt, t.clone(), float(0.0)),
                float(-1.0),
                tb::sub(t.clone(), t.clone()),
            );
            Ok(tile(
                where_(bin(TBin::Gt, t, float(0.0)), float(1.0), inner),
                d,
                &[x],
            ))
        }
        UnaryOp::Sign if d.is_int() => {
            let t = named(b, x, d);
            let pos = cast(bin(TBin::Gt, t.clone(), int(0)), d);
            let negative = cast(bin(TBin::Lt, t, int(0)), d);
            Ok(tile(tb::sub(pos, negative), d, &[x]))
        }
        UnaryOp::Gelu | UnaryOp::GeluTanh | UnaryOp::Silu if d.is_float() => {
            // In f32 (f64 for f64), rounded once to a half dtype at the end.
            let t = named(b, x, wide(d));
            let half_x = mul(float(0.5), t.clone());
            let e = match u {
                // erfc(-x / sqrt 2) does not cancel for x << 0 as 1 + erf(x / sqrt 2) does.
                UnaryOp::Gelu => mul(
                    half_x,
                    builtin(
                        Builtin::Erfc,
                        mul(t, float(-std::f64::consts::FRAC_1_SQRT_2)),
                    ),
                ),
                UnaryOp::GeluTanh => {
                    let cube = mul(mul(mul(float(0.044715), t.clone()), t.clone()), t.clone());
                    let inner = mul(float(std::f64::consts::FRAC_2_PI.sqrt()), tb::add(t, cube));
                    mul(half_x, tb::add(float(1.0), builtin(Builtin::Tanh, inner)))
                }
                _ => mul(t.clone(), builtin(Builtin::Sigmoid, t)),
            };
            Ok(tile(narrow(e, d), d, &[x]))
        }
        _ => Err(Error::unsupported(format!("{} of {d} values", u.name()))),
    }
}

/// The dtype formulas on `d` values compute in: f32 for the half dtypes and f32,
/// f64 for f64.
fn wide(d: DType) -> DType {
    if d == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// An expression computed in [`wide`]`(d)` rounded to `d` when `d` is a half dtype.
fn narrow(e: E, d: DType) -> E {
    if d == wide(d) {
        e
    } else {
        cast(e, d)
    }
}

/// A binary op on operands of dtype `operand` producing dtype `d`.
pub(super) fn binary(
    b: &mut Builder,
    op: BinaryOp,
    x: &Val,
    y: &Val,
    operand: DType,
    d: DType,
) -> Result<Val> {
    if let (Val::Lit(p, _), Val::Lit(q, _)) = (x, y) {
        let checked = op == BinaryOp::Pow || op.is_integer_division();
        if checked && d.is_int() && scalar::binary(op, *p, *q, d).is_err() {
            // A negative exponent or a zero divisor: the kernel's `check` fails first.
            return Ok(Val::Lit(Value::Int(0), d));
        }
        return Ok(Val::Lit(
            scalar::binary(op, *p, *q, d).map_err(|e| Error::Unsupported(e.to_string()))?,
            d,
        ));
    }
    if op.is_comparison() {
        let (a, c) = compare_pair(x, y, operand);
        let t = match op {
            BinaryOp::Eq => TBin::Eq,
            BinaryOp::Ne => TBin::Ne,
            BinaryOp::Lt => TBin::Lt,
            BinaryOp::Le => TBin::Le,
            BinaryOp::Gt => TBin::Gt,
            _ => TBin::Ge,
        };
        return Ok(tile(bin(t, a, c), DType::Bool, &[x, y]));
    }
    if op.is_logical() {
        let t = if op == BinaryOp::And {
            TBin::And
        } else {
            TBin::Or
        };
        return Ok(tile(bin(t, truth(x), truth(y)), DType::Bool, &[x, y]));
    }
    if op.is_bitwise() && !d.is_float() && (d != DType::Bool || !op.is_shift()) {
        let t = match op {
            BinaryOp::BitwiseAnd => TBin::And,
            BinaryOp::BitwiseOr => TBin::Or,
            BinaryOp::BitwiseXor => TBin::Xor,
            BinaryOp::LeftShift => TBin::Shl,
            _ => TBin::Shr,
        };
        let (a, c) = pair(x, y, d);
        return Ok(tile(bin(t, a, c), d, &[x, y]));
    }
    if operand == DType::Bool {
        let t = match op {
            BinaryOp::Maximum => TBin::Or,
            BinaryOp::Minimum | BinaryOp::Mul => TBin::And,
            _ => return Err(Error::unsupported(format!("{} of bool values", op.name()))),
        };
        let (a, c) = pair(x, y, DType::Bool);
        return Ok(tile(bin(t, a, c), DType::Bool, &[x, y]));
    }
    let arith = |t: TBin| -> Val {
        let (a, c) = pair(x, y, d);
        tile(bin(t, a, c), d, &[x, y])
    };
    Ok(match op {
        BinaryOp::Add => arith(TBin::Add),
        BinaryOp::Sub => arith(TBin::Sub),
        BinaryOp::Mul => arith(TBin::Mul),
        BinaryOp::Div if d.is_float() => arith(TBin::Div),
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let f = if op == BinaryOp::Maximum {
                Builtin::Maximum
            } else {
                Builtin::Minimum
            };
            let (a, c) = pair(x, y, d);
            tile(call(f, vec![a, c]), d, &[x, y])
        }
        BinaryOp::Pow if d.is_float() => float_pow(b, x, y, d)?,
        BinaryOp::Pow => int_pow(b, x, y, d)?,
        _ if op.is_integer_division() && d.is_int() => int_division(b, op, x, y, d),
        _ if op.is_integer_division() && d.is_float() => float_division(b, op, x, y, d),
        _ => return Err(Error::unsupported(format!("{} of {d} values", op.name()))),
    })
}

/// `where(c, x, y)` of dtype `d`.
pub(super) fn select(c: &Val, x: &Val, y: &Val, d: DType) -> Val {
    if let Val::Lit(v, _) = c {
        return if scalar::truth(*v) {
            x.clone()
        } else {
            y.clone()
        };
    }
    let (a, e) = pair(x, y, d);
    tile(where_(truth(c), a, e), d, &[c, x, y])
}

/// Conversion to `d`, as `cast` does.
pub(super) fn convert(x: &Val, d: DType) -> Val {
    match x {
        Val::Lit(v, _) => Val::Lit(scalar::cast(*v, d), d),
        Val::Tile(t) if t.dtype == d => x.clone(),
        Val::Tile(t) => tile(cast(t.e.clone(), d), d, &[x]),
    }
}

/// `floor_divide`, `trunc_divide`, `remainder` or `fmod` of integers of dtype `d`.
/// The tile language's `/` and `%` round toward zero (and wrap `MIN / -1` to
/// `MIN`, as the interpreter's wrap does); the floor forms move by one where the
/// remainder is not zero and its sign differs from the divisor's. A zero divisor
/// is the kernel's `check` (`body.rs`); the lanes that hold one divide by 1 so
/// that a masked-off lane cannot fault.
fn int_division(b: &mut Builder, op: BinaryOp, x: &Val, y: &Val, d: DType) -> Val {
    let xe = named(b, x, d);
    let ye = match y {
        Val::Lit(v, _) if scalar::truth(*v) => typed(y, d),
        Val::Lit(..) => typed_lit(Value::Int(1), d),
        Val::Tile(_) => {
            let t = named(b, y, d);
            b.bind("t", where_(bin(TBin::Eq, t.clone(), int(0)), int(1), t))
        }
    };
    let q = || div(xe.clone(), ye.clone());
    let r = || tb::rem(xe.clone(), ye.clone());
    let e = match op {
        BinaryOp::TruncDivide => q(),
        BinaryOp::Fmod => r(),
        BinaryOp::FloorDivide if d.is_unsigned() => q(),
        BinaryOp::Remainder if d.is_unsigned() => r(),
        _ => {
            let r = b.bind("r", r());
            let differ = and(
                bin(TBin::Ne, r.clone(), int(0)),
                bin(TBin::Ne, lt(r.clone(), int(0)), lt(ye.clone(), int(0))),
            );
            if op == BinaryOp::FloorDivide {
                where_(differ, tb::sub(q(), int(1)), q())
            } else {
                where_(differ, tb::add(r.clone(), ye), r)
            }
        }
    };
    tile(e, d, &[x, y])
}

/// `floor_divide`, `trunc_divide`, `remainder` or `fmod` of floats of dtype `d`,
/// computed in f64 with the interpreter's (CPython's) formulas and rounded once:
/// `fmod` is `%`; `floor_divide` comes from the exact `fmod`, its zero quotient
/// signed as `x / y`, and a zero divisor gives `x / y`.
fn float_division(b: &mut Builder, op: BinaryOp, x: &Val, y: &Val, d: DType) -> Val {
    let w = DType::F64;
    let (xe, ye) = (named(b, x, w), named(b, y, w));
    let zero = || float(0.0);
    let e = match op {
        BinaryOp::Fmod => tb::rem(xe, ye),
        BinaryOp::TruncDivide => {
            let q = b.bind("q", div(xe, ye));
            where_(
                lt(q.clone(), zero()),
                builtin(Builtin::Ceil, q.clone()),
                builtin(Builtin::Floor, q),
            )
        }
        BinaryOp::Remainder => {
            let r = b.bind("r", tb::rem(xe, ye.clone()));
            let differ = and(
                bin(TBin::Ne, r.clone(), zero()),
                bin(TBin::Ne, lt(ye.clone(), zero()), lt(r.clone(), zero())),
            );
            where_(differ, tb::add(r.clone(), ye), r)
        }
        _ => {
            let r = b.bind("r", tb::rem(xe.clone(), ye.clone()));
            let q0 = b.bind("q", div(tb::sub(xe.clone(), r.clone()), ye.clone()));
            let differ = and(
                bin(TBin::Ne, r.clone(), zero()),
                bin(TBin::Ne, lt(ye.clone(), zero()), lt(r, zero())),
            );
            let q1 = b.bind("q", where_(differ, tb::sub(q0.clone(), float(1.0)), q0));
            let f = b.bind("f", builtin(Builtin::Floor, q1.clone()));
            let rounded = where_(
                bin(TBin::Gt, tb::sub(q1.clone(), f.clone()), float(0.5)),
                tb::add(f.clone(), float(1.0)),
                f,
            );
            // The sign of x / y (finite and not NaN where the quotient is 0): that
            // of its reciprocal, which tells -0 from +0.
            let s = b.bind("s", div(xe, ye.clone()));
            let negative = lt(div(float(1.0), s.clone()), zero());
            let signed_zero = where_(negative, float(-0.0), zero());
            let q = where_(bin(TBin::Eq, q1, zero()), signed_zero, rounded);
            where_(bin(TBin::Eq, ye, zero()), s, q)
        }
    };
    tile(if d == w { e } else { cast(e, d) }, d, &[x, y])
}

/// `x ** y` for floats: the `pow` builtin (computed as the interpreter computes
/// it, C99/IEEE special values included), or for the exponents whose direct
/// form rounds the same (0, 1, 2, -1), that form.
fn float_pow(b: &mut Builder, x: &Val, y: &Val, d: DType) -> Result<Val> {
    let w = wide(d);
    if let Val::Lit(Value::Float(xv), _) = x {
        if *xv == 1.0 {
            return Ok(Val::Lit(Value::Float(1.0), d));
        }
    }
    if let Val::Lit(Value::Float(e), _) = y {
        let e = *e;
        if e == 0.0 {
            return Ok(Val::Lit(Value::Float(1.0), d));
        }
        if e == 1.0 {
            return Ok(x.clone());
        }
        if e == 2.0 || e == -1.0 {
            let t = typed(x, d);
            let r = if e == 2.0 {
                let t = b.bind("t", t);
                mul(t.clone(), t)
            } else {
                div(float(1.0), t)
            };
            return Ok(tile(r, d, &[x]));
        }
    }
    let (xe, ye) = pair(x, y, w);
    Ok(tile(
        narrow(call(Builtin::Pow, vec![xe, ye]), d),
        d,
        &[x, y],
    ))
}

/// `base ** n` by repeated squaring (`base` is a name: it is used repeatedly).
fn int_power(b: &mut Builder, base: E, n: u64) -> E {
    let mut result: Option<E> = None;
    let mut square = base;
    let mut k = n;
    while k > 0 {
        if k & 1 == 1 {
            result = Some(match result {
                None => square.clone(),
                Some(r) => b.bind("t", mul(r, square.clone())),
            });
        }
        k >>= 1;
        if k > 0 {
            square = b.bind("t", mul(square.clone(), square));
        }
    }
    result.unwrap_or_else(|| int(1))
}

/// `x ** y` for integers, wrapping.
fn int_pow(b: &mut Builder, x: &Val, y: &Val, d: DType) -> Result<Val> {
    if let Val::Lit(Value::Int(e), _) = y {
        if *e < 0 {
            // Never stored: the kernel's `check` of the exponent fails first.
            return Ok(Val::Lit(Value::Int(0), d));
        }
        if *e == 0 {
            return Ok(Val::Lit(Value::Int(1), d));
        }
        let t = named(b, x, d);
        return Ok(tile(int_power(b, t, *e as u64), d, &[x]));
    }
    // A varying exponent: square-and-multiply over its bits in a scalar loop.
    let (xe, ye) = (typed(x, d), typed(y, d));
    // Every bit of a non-negative exponent (negative ones fail the kernel's check).
    let bits = 8 * d.size_bytes() as i64 - i64::from(!d.is_unsigned());
    let zero_x = mul(xe.clone(), int(0));
    let zero_y = mul(ye.clone(), int(0));
    let r = b.var(
        "pr",
        tb::add(tb::add(zero_x.clone(), zero_y.clone()), int(1)),
    );
    let base = b.var("pb", tb::add(xe, zero_y));
    let exp = b.var("pe", tb::add(ye, zero_x));
    let (rn, bn, en) = (E::Def(r), E::Def(base), E::Def(exp));
    b.open_loop("bit", int(0), int(bits), int(1));
    b.assign(
        r,
        where_(
            bin(TBin::Ne, tb::rem(en.clone(), int(2)), int(0)),
            mul(rn.clone(), bn.clone()),
            rn.clone(),
        ),
    );
    b.assign(base, mul(bn.clone(), bn));
    b.assign(exp, div(en, int(2)));
    b.close_loop();
    Ok(tile(rn, d, &[x, y]))
}
