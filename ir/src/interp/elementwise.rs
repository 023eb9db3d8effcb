//! Elementwise ops: unary, binary (broadcasting, promoting), `where` and `cast`.
//!
//! Operands are first cast to the dtype the op computes in (the promoted common dtype,
//! or the float result dtype of `div` and transcendental ops on integers, as PyTorch's
//! TensorIterator does), then computed in one of three domains: f64 for floats
//! (rounded once to the result dtype), wrapping i64 for integers, or bool.

use super::erf::erf;
use super::strided::{broadcast_offsets, concat_data, pick};
use crate::op::{BinaryOp, UnaryOp};
use crate::types::TensorType;
use crate::{promote, Category, DType, Data, Tensor};

/// A tensor's elements in its computation domain, exactly.
enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bool(Vec<bool>),
}

fn values(t: &Tensor) -> Values {
    match &t.data {
        Data::Bool(v) => Values::Bool(v.clone()),
        Data::I32(_) | Data::I64(_) => Values::Int(t.to_i64()),
        _ => Values::Float(t.to_f64()),
    }
}

/// Each element read as a truth value: nonzero (NaN included) is true.
fn truth(t: &Tensor) -> Vec<bool> {
    match values(t) {
        Values::Float(v) => v.into_iter().map(|x| x != 0.0).collect(),
        Values::Int(v) => v.into_iter().map(|x| x != 0).collect(),
        Values::Bool(v) => v,
    }
}

/// Converts `t` to dtype `to`, as `cast` and implicit promotion do. Floats to integers
/// truncate toward zero and saturate (NaN is 0); integers wrap into `i32`; anything to
/// `bool` is `!= 0`; every conversion into a float dtype rounds once, to nearest even.
pub(super) fn cast(t: &Tensor, to: DType) -> Tensor {
    let ty = t.ty.with_dtype(to);
    if t.ty.dtype == to {
        return t.clone();
    }
    match (&t.data, to.category()) {
        // i64 -> f64 may round, and a second rounding to f32/bf16 could then land on a
        // tie the exact value was not on; rounding to odd first makes the pair exact.
        (Data::I64(v), Category::Float) => {
            let wide: Vec<f64> = v.iter().map(|&x| i64_to_f64_round_odd(x)).collect();
            Tensor::from_f64(&ty, &wide)
        }
        (Data::I32(_) | Data::I64(_) | Data::Bool(_), _) => Tensor::from_i64(&ty, &t.to_i64()),
        // Float sources widen to f64 exactly; `from_f64` then rounds once (floats),
        // saturates and truncates (`as` casts to integers), or tests `!= 0` (bool).
        _ => Tensor::from_f64(&ty, &t.to_f64()),
    }
}

/// `v` as an f64 rounded to odd: exact below 2^53, otherwise truncated to 53 bits
/// with the last bit set when anything was cut off. Rounding that value again to a
/// format of at most 51 bits gives the correctly rounded result of `v`.
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
    // `kept` has 53 bits, so it and the power of two are exact in f64.
    let magnitude = kept as f64 * (1u64 << shift) as f64;
    if v < 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// A unary op with result type `out`.
pub(super) fn unary(u: UnaryOp, x: &Tensor, out: &TensorType) -> Result<Tensor, String> {
    if u == UnaryOp::Not {
        let v: Vec<i64> = truth(x).into_iter().map(|b| !b as i64).collect();
        return Ok(Tensor::from_i64(out, &v));
    }
    match out.dtype.category() {
        Category::Float => {
            let v: Vec<f64> = cast(x, out.dtype)
                .to_f64()
                .into_iter()
                .map(|v| float_unary(u, v))
                .collect();
            Ok(Tensor::from_f64(out, &v))
        }
        Category::Int => {
            let v = x
                .to_i64()
                .into_iter()
                .map(|v| int_unary(u, v))
                .collect::<Result<Vec<i64>, String>>()?;
            Ok(Tensor::from_i64(out, &v))
        }
        // Rounding a bool is the identity; typing rejects the rest.
        Category::Bool if matches!(u, UnaryOp::Floor | UnaryOp::Ceil) => Ok(x.clone()),
        Category::Bool => Err(format!("{} is not defined for bool tensors", u.name())),
    }
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
        // Handled before dispatching on the domain.
        UnaryOp::Not => (x == 0.0) as u8 as f64,
    }
}

fn int_unary(u: UnaryOp, x: i64) -> Result<i64, String> {
    Ok(match u {
        UnaryOp::Neg => x.wrapping_neg(),
        UnaryOp::Abs => x.wrapping_abs(),
        UnaryOp::Relu => x.max(0),
        UnaryOp::Sign => x.signum(),
        UnaryOp::Floor | UnaryOp::Ceil => x,
        UnaryOp::Not => (x == 0) as i64,
        _ => {
            return Err(format!(
                "{} has no integer form (its result is a float)",
                u.name()
            ))
        }
    })
}

/// A broadcasting binary op with result type `out`.
pub(super) fn binary(
    b: BinaryOp,
    x: &Tensor,
    y: &Tensor,
    out: &TensorType,
) -> Result<Tensor, String> {
    // Comparisons and logic compute in the common dtype; arithmetic in the result dtype,
    // which is the common dtype except for integer `div` (computed in f32).
    let compute = if b.is_comparison() || b.is_logical() {
        promote(x.ty.dtype, y.ty.dtype)
    } else {
        out.dtype
    };
    let (xs, ys) = (cast(x, compute), cast(y, compute));
    let pairs =
        broadcast_offsets(&x.ty.shape, &out.shape).zip(broadcast_offsets(&y.ty.shape, &out.shape));
    if b.is_logical() {
        let (p, q) = (truth(&xs), truth(&ys));
        let v: Vec<i64> = pairs
            .map(|(i, j)| match b {
                BinaryOp::And => (p[i] && q[j]) as i64,
                _ => (p[i] || q[j]) as i64,
            })
            .collect();
        return Ok(Tensor::from_i64(out, &v));
    }
    match (values(&xs), values(&ys)) {
        (Values::Float(p), Values::Float(q)) => {
            if b.is_comparison() {
                let v: Vec<i64> = pairs.map(|(i, j)| compare(b, p[i], q[j]) as i64).collect();
                return Ok(Tensor::from_i64(out, &v));
            }
            let v: Vec<f64> = pairs.map(|(i, j)| float_binary(b, p[i], q[j])).collect();
            Ok(Tensor::from_f64(out, &v))
        }
        (Values::Int(p), Values::Int(q)) => {
            let v = if b.is_comparison() {
                pairs.map(|(i, j)| compare(b, p[i], q[j]) as i64).collect()
            } else {
                pairs
                    .map(|(i, j)| int_binary(b, p[i], q[j]))
                    .collect::<Result<Vec<i64>, String>>()?
            };
            Ok(Tensor::from_i64(out, &v))
        }
        (Values::Bool(p), Values::Bool(q)) => {
            let v = pairs
                .map(|(i, j)| match b {
                    _ if b.is_comparison() => Ok(compare(b, p[i], q[j])),
                    BinaryOp::Maximum => Ok(p[i] || q[j]),
                    BinaryOp::Minimum | BinaryOp::Mul => Ok(p[i] && q[j]),
                    _ => Err(format!("{} is not defined for bool tensors", b.name())),
                })
                .map(|r| r.map(|v| v as i64))
                .collect::<Result<Vec<i64>, String>>()?;
            Ok(Tensor::from_i64(out, &v))
        }
        _ => Err(format!(
            "{}: operands did not convert to one dtype",
            b.name()
        )),
    }
}

/// A comparison; with floats, every comparison involving NaN is false except `ne`.
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

fn float_binary(b: BinaryOp, x: f64, y: f64) -> f64 {
    match b {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Pow => x.powf(y),
        // f64::max/min ignore a NaN operand; PyTorch's maximum/minimum propagate it.
        BinaryOp::Maximum if x.is_nan() || y.is_nan() => f64::NAN,
        BinaryOp::Minimum if x.is_nan() || y.is_nan() => f64::NAN,
        BinaryOp::Maximum => x.max(y),
        BinaryOp::Minimum => x.min(y),
        // Comparisons and logic return before reaching here.
        _ => f64::NAN,
    }
}

fn int_binary(b: BinaryOp, x: i64, y: i64) -> Result<i64, String> {
    Ok(match b {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::Pow => int_pow(x, y)?,
        BinaryOp::Maximum => x.max(y),
        BinaryOp::Minimum => x.min(y),
        _ => return Err(format!("{} has no integer form", b.name())),
    })
}

/// `x ** y` for integers by repeated squaring, wrapping on overflow as PyTorch does.
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

/// `where(cond, a, b)`: all three broadcast; `a` and `b` are cast to the result dtype.
pub(super) fn select(
    cond: &Tensor,
    a: &Tensor,
    b: &Tensor,
    out: &TensorType,
) -> Result<Tensor, String> {
    let c = truth(cond);
    let (a2, b2) = (cast(a, out.dtype), cast(b, out.dtype));
    // Picking from `a` followed by `b` keeps values bit-exact in their dtype.
    let both = concat_data(&[&a2.data, &b2.data])?;
    let na = a2.len();
    let src = broadcast_offsets(&cond.ty.shape, &out.shape)
        .zip(broadcast_offsets(&a.ty.shape, &out.shape))
        .zip(broadcast_offsets(&b.ty.shape, &out.shape))
        .map(|((k, i), j)| if c[k] { i } else { na + j });
    Ok(Tensor {
        ty: out.clone(),
        data: pick(&both, src),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_to_odd_keeps_sticky_bits() {
        assert_eq!(i64_to_f64_round_odd(5), 5.0);
        assert_eq!(i64_to_f64_round_odd(-(1 << 60)), -(2f64.powi(60)));
        // 2^60 + 1 keeps a set last bit: 2^60 + 2^(60-52).
        assert_eq!(i64_to_f64_round_odd((1 << 60) + 1), 2f64.powi(60) + 256.0);
        assert_eq!(i64_to_f64_round_odd(i64::MIN), -(2f64.powi(63)));
        assert_eq!(i64_to_f64_round_odd(i64::MAX), 2f64.powi(63) - 1024.0);
    }

    #[test]
    fn integer_powers() {
        assert_eq!(int_pow(3, 4).unwrap(), 81);
        assert_eq!(int_pow(-2, 3).unwrap(), -8);
        assert_eq!(int_pow(7, 0).unwrap(), 1);
        assert_eq!(int_pow(2, 64).unwrap(), 0);
        assert!(int_pow(2, -1).is_err());
    }
}
