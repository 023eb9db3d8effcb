//! Scalar semantics of loop-IR nodes: what each op computes on one [`Value`].
//!
//! The per-element definitions are the reference interpreter's own (the crate's
//! `scalar_ops` module, which both use); this module dispatches on the value's domain
//! and rounds once to the node's dtype: floats compute in f64 and round with
//! [`round_to_dtype`], integers compute in wrapping i128 and wrap to the node's dtype,
//! casts truncate and saturate from float to integer. The evaluator uses them, and
//! backends can use them to fold constants.

use super::expr::Value;
use crate::op::{BinaryOp, UnaryOp};
use crate::round_to_dtype;
use crate::scalar_ops as ops;
use crate::tensor::i128_to_f64_round_odd;
use crate::{Category, DType};
use crate::{Error, Result};

/// Rounds a float to `dtype`, wraps an integer into `dtype`, and leaves every other
/// value as it is.
pub fn round_to(v: Value, dtype: DType) -> Value {
    match v {
        Value::Float(x) if dtype.is_float() => Value::Float(round_to_dtype(x, dtype)),
        Value::Int(x) if dtype.is_int() => Value::Int(dtype.wrap_int(x)),
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
/// saturates into the dtype's range (NaN is 0), integers wrap into their dtype,
/// anything to bool is `!= 0`, and conversions into floats round once to nearest even.
pub fn cast(v: Value, to: DType) -> Value {
    match (v, to.category()) {
        (Value::Float(x), Category::Float) => round_to(Value::Float(x), to),
        (Value::Float(x), Category::Int) => Value::Int(to.saturate_int(x as i128)),
        // i128 to f64 is one rounding; to a narrower float, rounding to odd first
        // keeps the second rounding exact.
        (Value::Int(x), Category::Float) if to == DType::F64 => Value::Float(x as f64),
        (Value::Int(x), Category::Float) => round_to(Value::Float(i128_to_f64_round_odd(x)), to),
        (Value::Int(x), Category::Int) => round_to(Value::Int(x), to),
        (Value::Bool(b), Category::Float) => Value::Float(b as u8 as f64),
        (Value::Bool(b), Category::Int) => Value::Int(b as i128),
        (_, Category::Bool) => Value::Bool(truth(v)),
    }
}

/// A unary op producing a value of `dtype` (the operand has `dtype` too, except for
/// `not`, which reads any operand as a truth value and yields bool).
pub fn unary(u: UnaryOp, x: Value, dtype: DType) -> Result<Value> {
    if u == UnaryOp::Not {
        return Ok(Value::Bool(!truth(x)));
    }
    let r = match x {
        Value::Float(v) => Value::Float(ops::float_unary(u, v)),
        Value::Int(v) => Value::Int(ops::int_unary(u, v)?),
        Value::Bool(v) => Value::Bool(ops::bool_unary(u, v)?),
    };
    Ok(round_to(r, dtype))
}

/// `x << s` on integer values (of any dtype up to 64 bits, before the wrap into it): a
/// shift outside `[0, bits)` gives 0 (`bitwise_left_shift`; the simulator's `<<` too).
pub fn shift_left(x: i128, s: i128) -> i128 {
    ops::shift_left(x, s)
}

/// `x >> s` on integer values, arithmetic: a shift outside `[0, bits)` gives the sign
/// fill (`bitwise_right_shift`; the simulator's `>>` too).
pub fn shift_right(x: i128, s: i128) -> i128 {
    ops::shift_right(x, s)
}

/// A binary op on two operands of one dtype; `dtype` is the result's (bool for
/// comparisons and logic).
pub fn binary(b: BinaryOp, x: Value, y: Value, dtype: DType) -> Result<Value> {
    if b.is_logical() {
        return Ok(Value::Bool(ops::logical(b, truth(x), truth(y))));
    }
    let r = match (x, y) {
        (Value::Float(p), Value::Float(q)) if b.is_comparison() => {
            Value::Bool(ops::compare(b, p, q))
        }
        (Value::Int(p), Value::Int(q)) if b.is_comparison() => Value::Bool(ops::compare(b, p, q)),
        (Value::Bool(p), Value::Bool(q)) if b.is_comparison() => Value::Bool(ops::compare(b, p, q)),
        (Value::Float(p), Value::Float(q)) => Value::Float(ops::float_binary(b, p, q)?),
        (Value::Int(p), Value::Int(q)) => Value::Int(ops::int_binary(b, p, q)?),
        (Value::Bool(p), Value::Bool(q)) => Value::Bool(ops::bool_binary(b, p, q)?),
        _ => {
            return Err(Error::internal(format!(
                "{}: operands of different domains",
                b.name()
            )))
        }
    };
    Ok(round_to(r, dtype))
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
            Value::Int(i32::MAX as i128)
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
                Value::Int(i32::MAX as i128),
                Value::Int(1),
                DType::I32
            )
            .unwrap(),
            Value::Int(i32::MIN as i128)
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
