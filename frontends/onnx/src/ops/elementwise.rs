//! Elementwise ops, activations (as decompositions into IR primitives),
//! comparisons and logic, variadic Sum/Mean/Max/Min, Where, Cast, Clip.

use super::{dtype_attr, one};
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, UnaryOp as U};

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    let unary = match op {
        "Neg" => Some(U::Neg),
        "Abs" => Some(U::Abs),
        "Exp" => Some(U::Exp),
        "Log" => Some(U::Log),
        "Sqrt" => Some(U::Sqrt),
        "Reciprocal" => Some(U::Reciprocal),
        "Sin" => Some(U::Sin),
        "Cos" => Some(U::Cos),
        "Tanh" => Some(U::Tanh),
        "Sigmoid" => Some(U::Sigmoid),
        "Relu" => Some(U::Relu),
        "Erf" => Some(U::Erf),
        "Floor" => Some(U::Floor),
        "Ceil" => Some(U::Ceil),
        "Sign" => Some(U::Sign),
        "Not" => Some(U::Not),
        _ => None,
    };
    if let Some(u) = unary {
        let x = n.input(0)?;
        return one(ctx.un(u, x)?);
    }
    let binary = match op {
        "Add" => Some(B::Add),
        "Sub" => Some(B::Sub),
        "Mul" => Some(B::Mul),
        "Equal" => Some(B::Eq),
        "Less" => Some(B::Lt),
        "LessOrEqual" => Some(B::Le),
        "Greater" => Some(B::Gt),
        "GreaterOrEqual" => Some(B::Ge),
        "And" => Some(B::And),
        "Or" => Some(B::Or),
        "Xor" => Some(B::Ne),
        _ => None,
    };
    if let Some(b) = binary {
        let (x, y) = (n.input(0)?, n.input(1)?);
        same_dtype(ctx, op, x, y)?;
        if n.opset < 7 && n.has("broadcast") {
            unsupported!("the legacy `broadcast` attribute is not supported");
        }
        return one(ctx.bin(b, x, y)?);
    }
    let x = match n.opt(0) {
        Some(x) => x.clone(),
        None if op == "Constant" => return Ok(None),
        None => return Ok(None),
    };
    let dt = ctx.dtype(&x);
    let y = match op {
        "Div" => {
            let y = n.input(1)?;
            same_dtype(ctx, op, &x, y)?;
            if dt.is_float() {
                ctx.div(&x, y)?
            } else {
                // C's division of integers: toward zero; by zero a run-time error.
                ctx.bin(B::TruncDivide, &x, y)?
            }
        }
        "Mod" => {
            let y = n.input(1)?;
            same_dtype(ctx, op, &x, y)?;
            // fmod=1: C's fmod (the dividend's sign); else Python's % (the divisor's).
            let b = if n.int("fmod", 0)? != 0 {
                B::Fmod
            } else {
                B::Remainder
            };
            ctx.bin(b, &x, y)?
        }
        "Pow" => {
            let y = n.input(1)?;
            let ydt = ctx.dtype(y);
            if dt == DType::Bool || ydt == DType::Bool {
                invalid!("Pow takes numbers, not bool");
            }
            if dt.is_float() {
                let y = ctx.cast(y, dt)?;
                ctx.bin(B::Pow, &x, &y)?
            } else if ydt.is_float() {
                // numpy: an integer array to a float power is f64, then cast back (truncated).
                let xf = ctx.cast(&x, DType::F64)?;
                let yf = ctx.cast(y, DType::F64)?;
                let p = ctx.bin(B::Pow, &xf, &yf)?;
                ctx.cast(&p, dt)?
            } else if ydt == dt {
                // Integer powers wrap in the dtype; a negative exponent is a run-time error.
                ctx.bin(B::Pow, &x, y)?
            } else {
                // Mixed integer types: in i64, whose wrapping agrees with x's on its bits.
                let xi = ctx.cast(&x, DType::I64)?;
                let yi = ctx.cast(y, DType::I64)?;
                let p = ctx.bin(B::Pow, &xi, &yi)?;
                ctx.cast(&p, dt)?
            }
        }
        "Sum" | "Mean" | "Max" | "Min" => {
            let all = n.all()?;
            let b = match op {
                "Max" => B::Maximum,
                "Min" => B::Minimum,
                _ => B::Add,
            };
            let Some(first) = all.first() else {
                invalid!("{op} needs at least one input");
            };
            let mut acc = (*first).clone();
            for v in &all[1..] {
                same_dtype(ctx, op, &acc, v)?;
                acc = ctx.bin(b, &acc, v)?;
            }
            if op == "Mean" {
                if !dt.is_float() {
                    unsupported!("Mean of integers is not supported");
                }
                acc = ctx.bin_s(B::Div, &acc, all.len() as f64)?;
            }
            acc
        }
        "Identity" => x,
        "Atan" | "Asin" | "Acos" => {
            float(op, dt)?;
            if dt == DType::F64 {
                unsupported!("{op} of f64 is not supported (the composition is accurate to f32)");
            }
            let xf = ctx.cast(&x, DType::F32)?;
            let one = ctx.scalar(1.0, DType::F32);
            let y = match op {
                "Atan" => atan(ctx, &xf)?,
                // asin(x) = atan(x / sqrt((1 - x)(1 + x))): +-pi/2 at +-1, NaN past them.
                "Asin" => {
                    let a = ctx.sub(&one, &xf)?;
                    let b = ctx.add(&one, &xf)?;
                    let p = ctx.mul(&a, &b)?;
                    let r = ctx.un(U::Sqrt, &p)?;
                    let q = ctx.div(&xf, &r)?;
                    atan(ctx, &q)?
                }
                // acos(x) = 2 atan(sqrt((1 - x) / (1 + x))): no cancellation near 1; pi at -1.
                _ => {
                    let a = ctx.sub(&one, &xf)?;
                    let b = ctx.add(&one, &xf)?;
                    let q = ctx.div(&a, &b)?;
                    let r = ctx.un(U::Sqrt, &q)?;
                    let t = atan(ctx, &r)?;
                    ctx.bin_s(B::Mul, &t, 2.0)?
                }
            };
            ctx.cast(&y, dt)?
        }
        "Tan" => {
            float(op, dt)?;
            let s = ctx.un(U::Sin, &x)?;
            let c = ctx.un(U::Cos, &x)?;
            ctx.div(&s, &c)?
        }
        "Sinh" | "Cosh" => {
            float(op, dt)?;
            let e = ctx.un(U::Exp, &x)?;
            let nx = ctx.un(U::Neg, &x)?;
            let en = ctx.un(U::Exp, &nx)?;
            let s = if op == "Sinh" {
                ctx.sub(&e, &en)?
            } else {
                ctx.add(&e, &en)?
            };
            ctx.bin_s(B::Mul, &s, 0.5)?
        }
        "Asinh" | "Acosh" => {
            float(op, dt)?;
            // log(x + sqrt(x^2 +- 1))
            let sq = ctx.mul(&x, &x)?;
            let sq = ctx.bin_s(if op == "Asinh" { B::Add } else { B::Sub }, &sq, 1.0)?;
            let r = ctx.un(U::Sqrt, &sq)?;
            let s = ctx.add(&x, &r)?;
            ctx.un(U::Log, &s)?
        }
        "Atanh" => {
            float(op, dt)?;
            // 0.5 * log((1 + x) / (1 - x))
            let one = ctx.scalar(1.0, dt);
            let a = ctx.add(&one, &x)?;
            let b = ctx.sub(&one, &x)?;
            let q = ctx.div(&a, &b)?;
            let l = ctx.un(U::Log, &q)?;
            ctx.bin_s(B::Mul, &l, 0.5)?
        }
        "IsNaN" => ctx.bin(B::Ne, &x, &x)?,
        "IsInf" => {
            float(op, dt)?;
            let pos = n.int("detect_positive", 1)? != 0;
            let neg = n.int("detect_negative", 1)? != 0;
            let p = ctx.bin_s(B::Eq, &x, f64::INFINITY)?;
            let m = ctx.bin_s(B::Eq, &x, f64::NEG_INFINITY)?;
            match (pos, neg) {
                (true, true) => ctx.bin(B::Or, &p, &m)?,
                (true, false) => p,
                (false, true) => m,
                (false, false) => {
                    let f = ctx.scalar(0.0, DType::Bool);
                    ctx.bin(B::And, &p, &f)?
                }
            }
        }
        "Round" => {
            float(op, dt)?;
            round_half_even(ctx, &x)?
        }
        "LeakyRelu" => {
            let alpha = n.float("alpha", 0.01)?;
            let neg = ctx.bin_s(B::Lt, &x, 0.0)?;
            let ax = ctx.bin_s(B::Mul, &x, alpha)?;
            ctx.select(&neg, &ax, &x)?
        }
        "PRelu" => {
            let slope = n.input(1)?;
            let neg = ctx.bin_s(B::Lt, &x, 0.0)?;
            let ax = ctx.mul(&x, slope)?;
            ctx.select(&neg, &ax, &x)?
        }
        "ThresholdedRelu" => {
            let alpha = n.float("alpha", 1.0)?;
            let keep = ctx.bin_s(B::Gt, &x, alpha)?;
            let zero = ctx.scalar(0.0, dt);
            ctx.select(&keep, &x, &zero)?
        }
        "Elu" | "Selu" => {
            float(op, dt)?;
            let (alpha, gamma) = if op == "Elu" {
                (n.float("alpha", 1.0)?, 1.0)
            } else {
                (
                    n.float("alpha", 1.673_263_192_176_818_8)?,
                    n.float("gamma", 1.050_701_022_148_132_3)?,
                )
            };
            let pos = ctx.bin_s(B::Gt, &x, 0.0)?;
            let e = ctx.un(U::Exp, &x)?;
            let em1 = ctx.bin_s(B::Sub, &e, 1.0)?;
            let neg = ctx.bin_s(B::Mul, &em1, alpha)?;
            let y = ctx.select(&pos, &x, &neg)?;
            if gamma == 1.0 {
                y
            } else {
                ctx.bin_s(B::Mul, &y, gamma)?
            }
        }
        "Celu" => {
            float(op, dt)?;
            // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
            let alpha = n.float("alpha", 1.0)?;
            let xa = ctx.bin_s(B::Div, &x, alpha)?;
            let e = ctx.un(U::Exp, &xa)?;
            let em1 = ctx.bin_s(B::Sub, &e, 1.0)?;
            let neg = ctx.bin_s(B::Mul, &em1, alpha)?;
            let neg = ctx.bin_s(B::Minimum, &neg, 0.0)?;
            let pos = ctx.bin_s(B::Maximum, &x, 0.0)?;
            ctx.add(&pos, &neg)?
        }
        "HardSigmoid" | "HardSwish" => {
            float(op, dt)?;
            let (alpha, beta) = if op == "HardSigmoid" {
                (n.float("alpha", 0.2)?, n.float("beta", 0.5)?)
            } else {
                (1.0 / 6.0, 0.5)
            };
            let a = ctx.bin_s(B::Mul, &x, alpha)?;
            let a = ctx.bin_s(B::Add, &a, beta)?;
            let a = ctx.bin_s(B::Maximum, &a, 0.0)?;
            let h = ctx.bin_s(B::Minimum, &a, 1.0)?;
            if op == "HardSwish" {
                ctx.mul(&x, &h)?
            } else {
                h
            }
        }
        "Softplus" => {
            float(op, dt)?;
            softplus(ctx, &x)?
        }
        "Softsign" => {
            float(op, dt)?;
            let a = ctx.un(U::Abs, &x)?;
            let d = ctx.bin_s(B::Add, &a, 1.0)?;
            ctx.div(&x, &d)?
        }
        "Mish" => {
            float(op, dt)?;
            let sp = softplus(ctx, &x)?;
            let t = ctx.un(U::Tanh, &sp)?;
            ctx.mul(&x, &t)?
        }
        "Swish" => {
            float(op, dt)?;
            let alpha = n.float("alpha", 1.0)?;
            let ax = ctx.bin_s(B::Mul, &x, alpha)?;
            let s = ctx.un(U::Sigmoid, &ax)?;
            ctx.mul(&x, &s)?
        }
        "Gelu" => {
            float(op, dt)?;
            match n.string("approximate", "none")?.as_str() {
                "none" => ctx.un(U::Gelu, &x)?,
                "tanh" => ctx.un(U::GeluTanh, &x)?,
                a => invalid!("approximate=\"{a}\" is not `none` or `tanh`"),
            }
        }
        "Shrink" => {
            let lambd = n.float("lambd", 0.5)?;
            let bias = n.float("bias", 0.0)?;
            if !dt.is_float() {
                unsupported!("Shrink of integers is not supported");
            }
            let lo = ctx.bin_s(B::Lt, &x, -lambd)?;
            let hi = ctx.bin_s(B::Gt, &x, lambd)?;
            let xp = ctx.bin_s(B::Add, &x, bias)?;
            let xm = ctx.bin_s(B::Sub, &x, bias)?;
            let zero = ctx.scalar(0.0, dt);
            let h = ctx.select(&hi, &xm, &zero)?;
            ctx.select(&lo, &xp, &h)?
        }
        "Clip" => {
            let (lo, hi) = if n.opset < 11 {
                let lo = n.float("min", f64::NEG_INFINITY)?;
                let hi = n.float("max", f64::INFINITY)?;
                (Some(ctx.scalar(lo, dt)), Some(ctx.scalar(hi, dt)))
            } else {
                (n.opt(1).cloned(), n.opt(2).cloned())
            };
            let mut y = x.clone();
            if let Some(lo) = lo {
                y = ctx.bin(B::Maximum, &y, &lo)?;
            }
            if let Some(hi) = hi {
                y = ctx.bin(B::Minimum, &y, &hi)?;
            }
            y
        }
        "Where" => {
            let (a, b) = (n.input(1)?, n.input(2)?);
            same_dtype(ctx, op, a, b)?;
            ctx.select(&x, a, b)?
        }
        "Cast" => {
            if n.int("saturate", 1)? != 1 {
                unsupported!("saturate=0 is not supported");
            }
            let to = dtype_attr(n, "to", None)?;
            ctx.cast(&x, to)?
        }
        "CastLike" => {
            let to = ctx.dtype(n.input(1)?);
            ctx.cast(&x, to)?
        }
        _ => return Ok(None),
    };
    one(y)
}

fn same_dtype(ctx: &Ctx, op: &str, x: &Val, y: &Val) -> OpResult<()> {
    let (a, b) = (ctx.dtype(x), ctx.dtype(y));
    if a != b {
        invalid!("{op} of {a} and {b}: ONNX needs operands of one type");
    }
    Ok(())
}

fn float(op: &str, dt: DType) -> OpResult<()> {
    if !dt.is_float() {
        invalid!("{op} takes a float tensor, not {dt}");
    }
    Ok(())
}

/// `log(1 + e^x)` without overflow: `max(x, 0) + log(1 + e^-|x|)`.
pub(super) fn softplus(ctx: &mut Ctx, x: &Val) -> OpResult<Val> {
    let a = ctx.un(U::Abs, x)?;
    let na = ctx.un(U::Neg, &a)?;
    let e = ctx.un(U::Exp, &na)?;
    let e1 = ctx.bin_s(B::Add, &e, 1.0)?;
    let l = ctx.un(U::Log, &e1)?;
    let m = ctx.bin_s(B::Maximum, x, 0.0)?;
    ctx.add(&m, &l)
}

/// Round half to even: `floor(x)`, plus one above the half, and at the half exactly
/// when the floor is odd. Every step is exact in the float type.
pub(super) fn round_half_even(ctx: &mut Ctx, x: &Val) -> OpResult<Val> {
    let f = ctx.un(U::Floor, x)?;
    let f1 = ctx.bin_s(B::Add, &f, 1.0)?;
    let diff = ctx.sub(x, &f)?;
    let half = ctx.bin_s(B::Mul, &f, 0.5)?;
    let fh = ctx.un(U::Floor, &half)?;
    let even = ctx.bin(B::Eq, &half, &fh)?;
    let tie = ctx.select(&even, &f, &f1)?;
    let below = ctx.bin_s(B::Lt, &diff, 0.5)?;
    let above = ctx.bin_s(B::Gt, &diff, 0.5)?;
    let r = ctx.select(&below, &f, &tie)?;
    let r = ctx.select(&above, &f1, &r)?;
    // floor(x) + 1 of NaN and infinities: keep x itself there.
    let finite = ctx.bin(B::Eq, &diff, &diff)?;
    ctx.select(&finite, &r, x)
}

/// atan of f32 as Cephes' `atanf` computes it (about 2 ulp over the whole range):
/// |x| reduced to [0, tan(pi/8)] by `-1/|x|` (above tan(3pi/8)) or `(|x|-1)/(|x|+1)`
/// (above tan(pi/8)), an odd polynomial there, the offset (pi/2 or pi/4) added back
/// and the sign restored. Infinities give +-pi/2, NaN stays NaN.
fn atan(ctx: &mut Ctx, x: &Val) -> OpResult<Val> {
    let dt = DType::F32;
    let ax = ctx.un(U::Abs, x)?;
    let big = ctx.bin_s(B::Gt, &ax, 2.414_213_562_373_095)?;
    let mid = ctx.bin_s(B::Gt, &ax, 0.414_213_562_373_095)?;
    let one = ctx.scalar(1.0, dt);
    let inv = ctx.div(&one, &ax)?;
    let inv = ctx.un(U::Neg, &inv)?;
    let num = ctx.sub(&ax, &one)?;
    let den = ctx.add(&ax, &one)?;
    let red = ctx.div(&num, &den)?;
    let r = ctx.select(&mid, &red, &ax)?;
    let r = ctx.select(&big, &inv, &r)?;
    let (pio2, pio4, zero) = (
        ctx.scalar(std::f64::consts::FRAC_PI_2, dt),
        ctx.scalar(std::f64::consts::FRAC_PI_4, dt),
        ctx.scalar(0.0, dt),
    );
    let off = ctx.select(&mid, &pio4, &zero)?;
    let off = ctx.select(&big, &pio2, &off)?;
    let z = ctx.mul(&r, &r)?;
    let p = ctx.bin_s(B::Mul, &z, 8.053_744_495_38e-2)?;
    let p = ctx.bin_s(B::Sub, &p, 1.387_768_560_32e-1)?;
    let p = ctx.mul(&p, &z)?;
    let p = ctx.bin_s(B::Add, &p, 1.997_771_064_78e-1)?;
    let p = ctx.mul(&p, &z)?;
    let p = ctx.bin_s(B::Sub, &p, 3.333_294_915_39e-1)?;
    let p = ctx.mul(&p, &z)?;
    let p = ctx.mul(&p, &r)?;
    let p = ctx.add(&p, &r)?;
    let y = ctx.add(&off, &p)?;
    // The sign of x (atan is odd); -0 gives +0, NaN stays NaN.
    let neg = ctx.bin_s(B::Lt, x, 0.0)?;
    let ny = ctx.un(U::Neg, &y)?;
    ctx.select(&neg, &ny, &y)
}
