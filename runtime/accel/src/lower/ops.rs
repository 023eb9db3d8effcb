//! Loop-IR scalar ops as tile expressions, with the loop IR's semantics.
//!
//! Each node of a stage body computes in its dtype and rounds once, as the
//! reference interpreter does; tile operations round every result to their
//! dtype too, so a direct op maps to a direct op. Ops the tile language has no
//! builtin for are expanded into ones it has, computed in f32 for half-precision
//! values so the expansion rounds once at the end:
//!
//! ```text
//! reciprocal(x) -> 1.0 / x            sign(x)  -> where(x > 0, 1, where(x < 0, -1, x))
//! gelu(x)       -> 0.5*x*(1 + erf(x/sqrt 2))         silu(x) -> x * sigmoid(x)
//! pow(x, y)     -> x*x, sqrt(x), 1/x, .. for constant exponents; else
//!                  exp(y * log|x|) with the sign of an odd integral y, NaN for a
//!                  negative base and a fractional y, and 1 for y == 0 or x == 1
//! not(x)        -> x == 0 (numbers)   and/or of numbers -> (x != 0) & (y != 0)
//! max/min/mul of bools -> | & &
//! ```
//!
//! Constants are [`Val::Lit`]s: ops of constants fold with the loop IR's own
//! scalar semantics, and a constant next to a tile is written as a bare literal,
//! which the tile language gives the tile's dtype. A constant on its own is
//! written with an explicit dtype ([`typed_lit`]).

use super::builder::{
    self as tb, bin, boolean, call, cast, div, float, int, mul, neg, where_, Builder, Depth, E,
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
        Value::Int(x) => int(x),
        Value::Bool(b) => boolean(b),
    }
}

/// A constant written with its dtype, for where no tile gives it one.
pub(super) fn typed_lit(v: Value, d: DType) -> E {
    match d {
        DType::F32 | DType::Bool => lit(v),
        DType::I32 => int(integer(v)),
        DType::F16 | DType::Bf16 => cast(lit(v), d),
        DType::I64 => {
            let x = integer(v);
            if i32::try_from(x).is_ok() {
                cast(int(x), DType::I64)
            } else {
                // Too wide for a literal on its own (which is i32): a filled scalar.
                call(
                    Builtin::Full,
                    vec![E::Tuple(Vec::new()), int(x), tb::dtype(DType::I64)],
                )
            }
        }
    }
}

/// An integer constant's value (exact: `as_f64` would round wide values).
fn integer(v: Value) -> i64 {
    match v {
        Value::Int(x) => x,
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
        (Val::Lit(a, _), Val::Tile(_)) => (lit(*a), typed(y, want)),
        (Val::Tile(_), Val::Lit(c, _)) => (typed(x, want), lit(*c)),
        (Val::Lit(..), Val::Lit(c, _)) => (typed(x, want), lit(*c)),
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
            (Val::Tile(t), _) if t.dtype.is_int() && want.is_int() => t.e.clone(),
            _ => typed(v, want),
        }
    };
    match (x, y) {
        (Val::Lit(a, _), Val::Tile(_)) => (lit(*a), loose(y, x)),
        (Val::Tile(_), Val::Lit(c, _)) => (loose(x, y), lit(*c)),
        _ => (loose(x, y), loose(y, x)),
    }
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
        UnaryOp::Neg => Ok(tile(neg(typed(x, d)), d, &[x])),
        UnaryOp::Abs => Ok(tile(builtin(Builtin::Abs, typed(x, d)), d, &[x])),
        UnaryOp::Relu => Ok(tile(builtin(Builtin::Relu, typed(x, d)), d, &[x])),
        UnaryOp::Exp => float_only(Builtin::Exp),
        UnaryOp::Log => float_only(Builtin::Log),
        UnaryOp::Sqrt => float_only(Builtin::Sqrt),
        UnaryOp::Rsqrt => float_only(Builtin::Rsqrt),
        UnaryOp::Tanh => float_only(Builtin::Tanh),
        UnaryOp::Erf => float_only(Builtin::Erf),
        UnaryOp::Sigmoid => float_only(Builtin::Sigmoid),
        UnaryOp::Sin => float_only(Builtin::Sin),
        UnaryOp::Cos => float_only(Builtin::Cos),
        UnaryOp::Floor if d.is_float() => float_only(Builtin::Floor),
        UnaryOp::Ceil if d.is_float() => float_only(Builtin::Ceil),
        // Integers and bools are their own floor and ceiling.
        UnaryOp::Floor | UnaryOp::Ceil => Ok(x.clone()),
        UnaryOp::Reciprocal if d.is_float() => Ok(tile(div(float(1.0), typed(x, d)), d, &[x])),
        UnaryOp::Sign if d.is_float() => {
            let t = named(b, x, d);
            let inner = where_(bin(TBin::Lt, t.clone(), float(0.0)), float(-1.0), t.clone());
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
            // In f32, rounded once to a half dtype at the end.
            let t = named(b, x, DType::F32);
            let half_x = mul(float(0.5), t.clone());
            let e = match u {
                UnaryOp::Gelu => mul(
                    half_x,
                    tb::add(
                        float(1.0),
                        builtin(Builtin::Erf, mul(t, float(std::f64::consts::FRAC_1_SQRT_2))),
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

/// An f32 expression rounded to `d` when `d` is a half dtype.
fn narrow(e: E, d: DType) -> E {
    if d == DType::F32 {
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

/// `x ** y` for floats.
fn float_pow(b: &mut Builder, x: &Val, y: &Val, d: DType) -> Result<Val> {
    let w = DType::F32;
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
        let t = named(b, x, w);
        let minus_inf = || bin(TBin::Eq, t.clone(), float(f64::NEG_INFINITY));
        let direct = if e == 0.5 {
            // IEEE pow(-inf, 0.5) is +inf, where sqrt gives NaN.
            Some(where_(
                minus_inf(),
                float(f64::INFINITY),
                builtin(Builtin::Sqrt, t.clone()),
            ))
        } else if e == -0.5 {
            // pow(-inf, -0.5) is +0 and pow(-0, -0.5) is +inf, where rsqrt gives NaN
            // and -inf.
            Some(where_(
                minus_inf(),
                float(0.0),
                where_(
                    bin(TBin::Eq, t.clone(), float(0.0)),
                    float(f64::INFINITY),
                    builtin(Builtin::Rsqrt, t.clone()),
                ),
            ))
        } else if e.fract() == 0.0 && e.abs() <= 64.0 {
            let p = int_power(b, t.clone(), e.abs() as u64);
            Some(if e < 0.0 { div(float(1.0), p) } else { p })
        } else {
            None
        };
        if let Some(e) = direct {
            return Ok(tile(narrow(e, d), d, &[x]));
        }
        if e.is_finite() {
            // exp(e * log|x|), negated for a negative base and an odd e, NaN for a
            // finite negative base and a fractional e (IEEE: pow(-inf, e) is the
            // magnitude for every e that is not an odd integer).
            let magnitude = builtin(
                Builtin::Exp,
                mul(
                    float(e),
                    builtin(Builtin::Log, builtin(Builtin::Abs, t.clone())),
                ),
            );
            let negative_base = bin(TBin::Lt, t.clone(), float(0.0));
            let r = if e.fract() != 0.0 {
                let finite_negative = tb::and(negative_base, tb::not(minus_inf()));
                where_(finite_negative, float(f64::NAN), magnitude)
            } else if (e / 2.0).fract() != 0.0 {
                let m = b.bind("t", magnitude);
                where_(negative_base, neg(m.clone()), m)
            } else {
                magnitude
            };
            return Ok(tile(narrow(r, d), d, &[x]));
        }
    }
    // The general case: both may vary.
    let xt = named(b, x, w);
    let yt = named(b, y, w);
    let magnitude = b.bind(
        "t",
        builtin(
            Builtin::Exp,
            mul(
                yt.clone(),
                builtin(Builtin::Log, builtin(Builtin::Abs, xt.clone())),
            ),
        ),
    );
    let integral = b.bind(
        "t",
        bin(TBin::Eq, builtin(Builtin::Floor, yt.clone()), yt.clone()),
    );
    let half = mul(yt.clone(), float(0.5));
    let odd = tb::and(
        integral.clone(),
        bin(TBin::Ne, builtin(Builtin::Floor, half.clone()), half),
    );
    // A fractional exponent of a negative base is NaN, except for a base of -inf (IEEE:
    // the magnitude). An infinite exponent counts as an even integer.
    let defined = tb::or(
        integral,
        bin(TBin::Eq, xt.clone(), float(f64::NEG_INFINITY)),
    );
    let negative = where_(
        defined,
        where_(odd, neg(magnitude.clone()), magnitude.clone()),
        float(f64::NAN),
    );
    let r = where_(bin(TBin::Lt, xt.clone(), float(0.0)), negative, magnitude);
    // pow(x, 0) and pow(1, y) are 1 even for NaN; so is pow(-1, +-inf), where
    // exp(inf * log 1) would be NaN.
    let unit_base_inf = tb::and(
        bin(TBin::Eq, builtin(Builtin::Abs, xt.clone()), float(1.0)),
        bin(
            TBin::Eq,
            builtin(Builtin::Abs, yt.clone()),
            float(f64::INFINITY),
        ),
    );
    let one = tb::or(
        tb::or(bin(TBin::Eq, yt, float(0.0)), bin(TBin::Eq, xt, float(1.0))),
        unit_base_inf,
    );
    let r = where_(one, float(1.0), r);
    Ok(tile(narrow(r, d), d, &[x, y]))
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
            return Err(Error::unsupported(format!(
                "integers to negative integer powers are not allowed (** {e})"
            )));
        }
        if *e == 0 {
            return Ok(Val::Lit(Value::Int(1), d));
        }
        let t = named(b, x, d);
        return Ok(tile(int_power(b, t, *e as u64), d, &[x]));
    }
    // A varying exponent: square-and-multiply over its bits in a scalar loop.
    let (xe, ye) = (typed(x, d), typed(y, d));
    let bits = if d == DType::I32 { 31 } else { 63 };
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
