//! Scalar semantics of loop-IR nodes: what each op computes on one [`Value`].
//!
//! These follow the reference interpreter exactly (see `interp`): floats compute in
//! f64 and round once to the node's dtype, integers compute in wrapping i64 and wrap
//! to the node's dtype, casts truncate and saturate from float to integer. The
//! evaluator uses them, and backends can use them to fold constants.

use super::expr::Value;
use crate::interp::erf;
use crate::op::{BinaryOp, UnaryOp};
use crate::{Category, DType, Tensor, TensorType};

/// Rounds a float to `dtype` (f32/f16/bf16), wraps an integer to `i32`, and leaves
/// every other value as it is.
pub fn round_to(v: Value, dtype: DType) -> Value {
    match (v, dtype) {
        (Value::Float(x), DType::F32) => Value::Float(x as f32 as f64),
        // Half types round exactly as host tensors do (half's own `from_f64` rounds
        // some values just above a tie down), so evaluator and interpreter agree.
        (Value::Float(x), DType::F16 | DType::Bf16) => {
            let t = Tensor::from_f64(&TensorType::scalar(dtype), &[x]);
            Value::Float(t.to_f64().first().copied().unwrap_or(f64::NAN))
        }
        (Value::Int(x), DType::I32) => Value::Int(x as i32 as i64),
        _ => v,
    }
}

/// The value read as a truth value: non-zero (NaN included) is true.
pub fn truth(v: Value) -> bool {
    match v {
        Value::Float(x) => x != 0.0,
        Value::Int(x) => x != 0,
        Value::Bool(b) => b,
    }
}

/// Converts `v` to `to`, as `cast` does: float to integer truncates toward zero and
/// saturates (NaN is 0), integers wrap into `i32`, anything to bool is `!= 0`, and
/// conversions into floats round once to nearest even.
pub fn cast(v: Value, to: DType) -> Value {
    match (v, to.category()) {
        (Value::Float(x), Category::Float) => round_to(Value::Float(x), to),
        (Value::Float(x), Category::Int) => Value::Int(if to == DType::I32 {
            x as i32 as i64
        } else {
            x as i64
        }),
        (Value::Int(x), Category::Float) => round_to(Value::Float(i64_to_f64_round_odd(x)), to),
        (Value::Int(x), Category::Int) => round_to(Value::Int(x), to),
        (Value::Bool(b), Category::Float) => Value::Float(b as u8 as f64),
        (Value::Bool(b), Category::Int) => Value::Int(b as i64),
        (_, Category::Bool) => Value::Bool(truth(v)),
    }
}

/// `v` as an f64 rounded to odd (exact below 2^53), so that a second rounding to a
/// narrower float gives the correctly rounded result of the integer.
fn i64_to_f64_round_odd(v: i64) -> f64 {
    let m = v.unsigned_abs();
    let bits = 64 - m.leading_zeros();
    if bits <= 53 {
        return v as f64;
    }
    let shift = bits - 53;
    let mut kept = m >> shift;
    if m & ((1u64 << shift) - 1) != 0 {
        kept |= 1;
    }
    let magnitude = kept as f64 * (1u64 << shift) as f64;
    if v < 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// A unary op producing a value of `dtype` (the operand has `dtype` too, except for
/// `not`, which reads any operand as a truth value and yields bool).
pub fn unary(u: UnaryOp, x: Value, dtype: DType) -> Result<Value, String> {
    if u == UnaryOp::Not {
        return Ok(Value::Bool(!truth(x)));
    }
    let r = match x {
        Value::Float(v) => Value::Float(float_unary(u, v)),
        Value::Int(v) => Value::Int(match u {
            UnaryOp::Neg => v.wrapping_neg(),
            UnaryOp::Abs => v.wrapping_abs(),
            UnaryOp::Relu => v.max(0),
            UnaryOp::Sign => v.signum(),
            UnaryOp::Floor | UnaryOp::Ceil => v,
            _ => return Err(format!("{} has no integer form", u.name())),
        }),
        Value::Bool(_) if matches!(u, UnaryOp::Floor | UnaryOp::Ceil) => x,
        Value::Bool(_) => return Err(format!("{} is not defined for bool", u.name())),
    };
    Ok(round_to(r, dtype))
}

fn float_unary(u: UnaryOp, x: f64) -> f64 {
    use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_PI};
    match u {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Reciprocal => 1.0 / x,
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Relu => {
            if x > 0.0 || x.is_nan() {
                x
            } else {
                0.0
            }
        }
        UnaryOp::Gelu => 0.5 * x * (1.0 + erf(x * FRAC_1_SQRT_2)),
        UnaryOp::GeluTanh => {
            let inner = FRAC_2_PI.sqrt() * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + inner.tanh())
        }
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Erf => erf(x),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else if x.is_nan() {
                x
            } else {
                0.0
            }
        }
        UnaryOp::Not => (x == 0.0) as u8 as f64,
    }
}

/// A binary op on two operands of one dtype; `dtype` is the result's (bool for
/// comparisons and logic).
pub fn binary(b: BinaryOp, x: Value, y: Value, dtype: DType) -> Result<Value, String> {
    if b.is_logical() {
        let (p, q) = (truth(x), truth(y));
        return Ok(Value::Bool(if b == BinaryOp::And {
            p && q
        } else {
            p || q
        }));
    }
    if b.is_comparison() {
        return Ok(Value::Bool(match (x, y) {
            (Value::Float(p), Value::Float(q)) => compare(b, p, q),
            (Value::Int(p), Value::Int(q)) => compare(b, p, q),
            (Value::Bool(p), Value::Bool(q)) => compare(b, p, q),
            _ => return Err(format!("{}: operands of different domains", b.name())),
        }));
    }
    let r = match (x, y) {
        (Value::Float(p), Value::Float(q)) => Value::Float(match b {
            BinaryOp::Add => p + q,
            BinaryOp::Sub => p - q,
            BinaryOp::Mul => p * q,
            BinaryOp::Div => p / q,
            BinaryOp::Pow => p.powf(q),
            BinaryOp::Maximum | BinaryOp::Minimum if p.is_nan() || q.is_nan() => f64::NAN,
            BinaryOp::Maximum => p.max(q),
            BinaryOp::Minimum => p.min(q),
            _ => return Err(format!("{} is not arithmetic", b.name())),
        }),
        (Value::Int(p), Value::Int(q)) => Value::Int(match b {
            BinaryOp::Add => p.wrapping_add(q),
            BinaryOp::Sub => p.wrapping_sub(q),
            BinaryOp::Mul => p.wrapping_mul(q),
            BinaryOp::Pow => int_pow(p, q)?,
            BinaryOp::Maximum => p.max(q),
            BinaryOp::Minimum => p.min(q),
            _ => return Err(format!("{} has no integer form", b.name())),
        }),
        (Value::Bool(p), Value::Bool(q)) => Value::Bool(match b {
            BinaryOp::Maximum => p || q,
            BinaryOp::Minimum | BinaryOp::Mul => p && q,
            _ => return Err(format!("{} is not defined for bool", b.name())),
        }),
        _ => return Err(format!("{}: operands of different domains", b.name())),
    };
    Ok(round_to(r, dtype))
}

/// A comparison; with floats every comparison involving NaN is false except `ne`.
fn compare<T: PartialOrd>(b: BinaryOp, x: T, y: T) -> bool {
    match b {
        BinaryOp::Eq => x == y,
        BinaryOp::Ne => x != y,
        BinaryOp::Lt => x < y,
        BinaryOp::Le => x <= y,
        BinaryOp::Gt => x > y,
        _ => x >= y,
    }
}

/// `x ** y` for integers, wrapping; a negative exponent is an error, as in PyTorch.
fn int_pow(x: i64, y: i64) -> Result<i64, String> {
    if y < 0 {
        return Err(format!(
            "integers to negative integer powers are not allowed ({x} ** {y})"
        ));
    }
    let (mut base, mut exp, mut acc) = (x, y as u64, 1i64);
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        exp >>= 1;
    }
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_follows_the_dtype() {
        assert_eq!(
            round_to(Value::Float(0.1), DType::F32),
            Value::Float(0.1f32 as f64)
        );
        assert_eq!(round_to(Value::Int(1 << 32), DType::I32), Value::Int(0));
        assert_eq!(cast(Value::Float(-2.7), DType::I64), Value::Int(-2));
        assert_eq!(
            cast(Value::Float(1e20), DType::I32),
            Value::Int(i32::MAX as i64)
        );
        assert_eq!(cast(Value::Float(f64::NAN), DType::Bool), Value::Bool(true));
        assert_eq!(cast(Value::Bool(true), DType::F16), Value::Float(1.0));
        // Just above a tie between two bf16 values: rounds up.
        let above_tie = 0.25878921151161194;
        assert_eq!(
            round_to(Value::Float(above_tie), DType::Bf16),
            Value::Float(0.259765625)
        );
        // 2^24 + 1 is not an f32: rounds to even.
        assert_eq!(
            cast(Value::Int((1 << 24) + 1), DType::F32),
            Value::Float(16777216.0)
        );
    }

    #[test]
    fn ops_match_pytorch() {
        let f = |v| Value::Float(v);
        assert_eq!(
            binary(BinaryOp::Maximum, f(f64::NAN), f(1.0), DType::F32).unwrap(),
            f(f64::NAN)
        );
        assert_eq!(
            binary(BinaryOp::Ne, f(f64::NAN), f(f64::NAN), DType::Bool).unwrap(),
            Value::Bool(true)
        );
        assert_eq!(
            binary(
                BinaryOp::Add,
                Value::Int(i32::MAX as i64),
                Value::Int(1),
                DType::I32
            )
            .unwrap(),
            Value::Int(i32::MIN as i64)
        );
        assert!(binary(BinaryOp::Pow, Value::Int(2), Value::Int(-1), DType::I64).is_err());
        assert_eq!(unary(UnaryOp::Sign, f(-0.0), DType::F32).unwrap(), f(0.0));
        assert_eq!(
            unary(UnaryOp::Not, Value::Int(3), DType::Bool).unwrap(),
            Value::Bool(false)
        );
        assert_eq!(
            binary(
                BinaryOp::Mul,
                Value::Bool(true),
                Value::Bool(false),
                DType::Bool
            )
            .unwrap(),
            Value::Bool(false)
        );
    }
}
