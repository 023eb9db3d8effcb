//! What each elementwise op computes on one element: the single definition that the
//! reference interpreter (whole tensors, `interp`) and the loop IR (one
//! [`Value`](crate::loops::Value) at a time, [`crate::loops::scalar`]) both apply, so
//! that the fused programs the differential tests compare bit for bit against the
//! interpreter cannot drift from it.
//!
//! Each op is defined per computation domain: floats in f64, integers in wrapping
//! i128 (which holds every value of every integer dtype, `u64` included), bools as bools. Callers convert the operands into the domain first and round
//! the result to its dtype afterwards (floats with [`round_to_dtype`], integers by
//! wrapping into their dtype, [`DType::wrap_int`]), once per op.
//!
//! [`DType::wrap_int`]: crate::DType::wrap_int
//!
//! [`round_to_dtype`]: crate::round_to_dtype

use crate::interp::{erf, erfc};
use crate::op::{BinaryOp, UnaryOp};
use crate::{Error, Result};

/// A unary op on a float. `not` gives its truth value as 0 or 1 (NaN is true), for
/// completeness; callers compute it on truth values directly.
pub(crate) fn float_unary(u: UnaryOp, x: f64) -> f64 {
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
        // where(x >= 0, 1, e) / (1 + e) with e = exp(-|x|): nothing overflows, and for
        // x << 0 the result is e / (1 + e), not 1 / inf. NaN takes the e branch.
        UnaryOp::Sigmoid => {
            let e = (-x.abs()).exp();
            let numer = if x >= 0.0 { 1.0 } else { e };
            numer / (1.0 + e)
        }
        // NaN passes through, as PyTorch's relu propagates it.
        UnaryOp::Relu => {
            if x > 0.0 || x.is_nan() {
                x
            } else {
                0.0
            }
        }
        // x * Phi(x) with Phi through erfc, which does not cancel for x << 0 as
        // 1 + erf(x / sqrt 2) does.
        UnaryOp::Gelu => 0.5 * x * erfc(-x * FRAC_1_SQRT_2),
        // 0.5 * x * (1 + tanh(u)) = x * sigmoid(2u), again without the cancellation.
        UnaryOp::GeluTanh => {
            let u2 = 2.0 * FRAC_2_PI.sqrt() * (x + 0.044715 * x * x * x);
            let e = (-u2.abs()).exp();
            let numer = if u2 >= 0.0 { 1.0 } else { e };
            x * (numer / (1.0 + e))
        }
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Erf => erf(x),
        UnaryOp::Erfc => erfc(x),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        // f64::signum maps ±0 to ±1; PyTorch's sign gives 0 there.
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
        // Typing rejects float operands of bitwise ops: no value is right here.
        UnaryOp::BitwiseNot => f64::NAN,
    }
}

/// A unary op on an integer, wrapping on overflow (`abs(i64::MIN)` is itself).
/// Transcendental ops have no integer form: their result dtype is a float, so the
/// caller converts the operand first.
pub(crate) fn int_unary(u: UnaryOp, x: i128) -> Result<i128> {
    Ok(match u {
        UnaryOp::Neg => x.wrapping_neg(),
        UnaryOp::Abs => x.wrapping_abs(),
        UnaryOp::Relu => x.max(0),
        UnaryOp::Sign => x.signum(),
        UnaryOp::Floor | UnaryOp::Ceil => x,
        UnaryOp::Not => (x == 0) as i128,
        // Two's complement on i128 is the dtype's own: `!x` wrapped into the dtype is
        // its bitwise not, signed or unsigned.
        UnaryOp::BitwiseNot => !x,
        _ => {
            return Err(Error::internal(format!(
                "{} has no integer form (its result is a float)",
                u.name()
            )))
        }
    })
}

/// A unary op on a bool: rounding is the identity and `not` negates; typing rejects
/// the arithmetic ones.
pub(crate) fn bool_unary(u: UnaryOp, x: bool) -> Result<bool> {
    match u {
        UnaryOp::Floor | UnaryOp::Ceil => Ok(x),
        UnaryOp::Not | UnaryOp::BitwiseNot => Ok(!x),
        _ => Err(Error::internal(format!(
            "{} is not defined for bool",
            u.name()
        ))),
    }
}

/// A comparison; with floats, every comparison involving NaN is false except `ne`.
/// `b` must be a comparison ([`BinaryOp::is_comparison`]).
pub(crate) fn compare<T: PartialOrd>(b: BinaryOp, x: T, y: T) -> bool {
    match b {
        BinaryOp::Eq => x == y,
        BinaryOp::Ne => x != y,
        BinaryOp::Lt => x < y,
        BinaryOp::Le => x <= y,
        BinaryOp::Gt => x > y,
        _ => x >= y,
    }
}

/// `and` / `or` of two truth values. `b` must be logical ([`BinaryOp::is_logical`]).
pub(crate) fn logical(b: BinaryOp, x: bool, y: bool) -> bool {
    if b == BinaryOp::And {
        x && y
    } else {
        x || y
    }
}

/// An arithmetic binary op on floats (comparisons and logic are not arithmetic:
/// see [`compare`] and [`logical`]).
pub(crate) fn float_binary(b: BinaryOp, x: f64, y: f64) -> Result<f64> {
    Ok(match b {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Pow => x.powf(y),
        BinaryOp::FloorDivide => float_floor_divide(x, y),
        BinaryOp::TruncDivide => (x / y).trunc(),
        BinaryOp::Remainder => float_remainder(x, y),
        BinaryOp::Fmod => x % y,
        // IEEE 754-2019 maximum/minimum: a NaN operand gives NaN (f64::max/min would
        // ignore it; PyTorch's maximum/minimum propagate it), and -0 < +0, so the
        // result of two zeros does not depend on their order.
        BinaryOp::Maximum | BinaryOp::Minimum if x.is_nan() || y.is_nan() => f64::NAN,
        BinaryOp::Maximum if x == y => f64::from_bits(x.to_bits() & y.to_bits()),
        BinaryOp::Minimum if x == y => f64::from_bits(x.to_bits() | y.to_bits()),
        BinaryOp::Maximum => {
            if x > y {
                x
            } else {
                y
            }
        }
        BinaryOp::Minimum => {
            if x < y {
                x
            } else {
                y
            }
        }
        _ => return Err(Error::internal(format!("{} is not arithmetic", b.name()))),
    })
}

/// `x // y` on floats, as PyTorch (and CPython) compute it: from the exact `fmod`, so
/// that `floor_divide(x, y) * y + remainder(x, y)` is as close to `x` as rounding allows,
/// rounded to the nearest integer where the quotient of the remainder's removal is not
/// one; a zero divisor gives IEEE's `x / y` (an infinity or NaN).
fn float_floor_divide(x: f64, y: f64) -> f64 {
    if y == 0.0 {
        return x / y;
    }
    let r = x % y;
    let mut q = (x - r) / y;
    if r != 0.0 && (y < 0.0) != (r < 0.0) {
        q -= 1.0;
    }
    if q == 0.0 {
        return 0f64.copysign(x / y);
    }
    let f = q.floor();
    if q - f > 0.5 {
        f + 1.0
    } else {
        f
    }
}

/// `x % y` with the sign of `y` on floats (`torch.remainder`): `fmod`, moved by one
/// divisor when the signs differ.
fn float_remainder(x: f64, y: f64) -> f64 {
    let r = x % y;
    if r != 0.0 && (y < 0.0) != (r < 0.0) {
        r + y
    } else {
        r
    }
}

/// An integer division or remainder ([`BinaryOp::is_integer_division`]) of operands of
/// one integer dtype. A zero divisor is a run-time error, as in PyTorch; the quotient
/// `MIN / -1` is `-MIN`, which the caller's wrap into the dtype makes `MIN` again.
pub(crate) fn int_division(b: BinaryOp, x: i128, y: i128) -> Result<i128> {
    if y == 0 {
        return Err(Error::Eval(format!(
            "integer division by zero in {} ({x} by {y})",
            b.name()
        )));
    }
    // Every operand lies in a dtype of at most 64 bits, so nothing here overflows i128.
    let (q, r) = (x / y, x % y);
    let signs_differ = r != 0 && ((r < 0) != (y < 0));
    Ok(match b {
        BinaryOp::TruncDivide => q,
        BinaryOp::Fmod => r,
        BinaryOp::FloorDivide if signs_differ => q - 1,
        BinaryOp::FloorDivide => q,
        BinaryOp::Remainder if signs_differ => r + y,
        BinaryOp::Remainder => r,
        _ => return Err(Error::internal(format!("{} is not a division", b.name()))),
    })
}

/// An arithmetic binary op on integers, wrapping on overflow. `div` has no integer
/// form (its result is a float), nor do comparisons and logic.
pub(crate) fn int_binary(b: BinaryOp, x: i128, y: i128) -> Result<i128> {
    Ok(match b {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::Pow => int_pow(x, y)?,
        _ if b.is_integer_division() => int_division(b, x, y)?,
        BinaryOp::Maximum => x.max(y),
        BinaryOp::Minimum => x.min(y),
        BinaryOp::BitwiseAnd => x & y,
        BinaryOp::BitwiseOr => x | y,
        BinaryOp::BitwiseXor => x ^ y,
        BinaryOp::LeftShift => shift_left(x, y),
        BinaryOp::RightShift => shift_right(x, y),
        _ => return Err(Error::internal(format!("{} has no integer form", b.name()))),
    })
}

/// `x << s` of an integer of at most 64 bits, before the caller's wrap into its
/// dtype (PyTorch's and numpy's rule): a shift outside `[0, bits)` gives 0. A shift
/// in `[bits, 128)` leaves no bit in the dtype's width, so only the i128's own bound
/// needs a test, and the rule needs no dtype.
pub(crate) fn shift_left(x: i128, s: i128) -> i128 {
    if (0..128).contains(&s) {
        x << s
    } else {
        0
    }
}

/// `x >> s` of an integer of at most 64 bits, arithmetic (an unsigned value is
/// non-negative in i128, so its shift is logical): a shift outside `[0, bits)` gives
/// the sign fill, 0 or -1, which a shift by 127 gives too.
pub(crate) fn shift_right(x: i128, s: i128) -> i128 {
    if (0..128).contains(&s) {
        x >> s
    } else {
        x >> 127
    }
}

/// The arithmetic binary ops PyTorch defines on bools: `maximum` is `or`, `minimum`
/// and `mul` are `and`; the bitwise ops are the logical ones.
pub(crate) fn bool_binary(b: BinaryOp, x: bool, y: bool) -> Result<bool> {
    match b {
        BinaryOp::Maximum | BinaryOp::BitwiseOr => Ok(x || y),
        BinaryOp::Minimum | BinaryOp::Mul | BinaryOp::BitwiseAnd => Ok(x && y),
        BinaryOp::BitwiseXor => Ok(x != y),
        _ => Err(Error::internal(format!(
            "{} is not defined for bool",
            b.name()
        ))),
    }
}

/// `x ** y` for integers by repeated squaring, wrapping on overflow as PyTorch does;
/// a negative exponent is an error, as in PyTorch.
fn int_pow(x: i128, y: i128) -> Result<i128> {
    if y < 0 {
        return Err(Error::Eval(format!(
            "integers to negative integer powers are not allowed ({x} ** {y})"
        )));
    }
    // Wrapping modulo 2^128 is wrapping modulo 2^64 and below, so the caller's wrap
    // into the result dtype gives the result of the dtype's own wrapping arithmetic.
    let (mut base, mut exp, mut acc) = (x, y as u128, 1i128);
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
    fn round_to_odd_keeps_sticky_bits() {
        assert_eq!(crate::i128_to_f64_round_odd(5), 5.0);
        assert_eq!(
            crate::i128_to_f64_round_odd(-(1i128 << 60)),
            -(2f64.powi(60))
        );
        // 2^60 + 1 keeps a set last bit: 2^60 + 2^(60-52).
        assert_eq!(
            crate::i128_to_f64_round_odd((1 << 60) + 1),
            2f64.powi(60) + 256.0
        );
        assert_eq!(
            crate::i128_to_f64_round_odd(i64::MIN as i128),
            -(2f64.powi(63))
        );
        assert_eq!(
            crate::i128_to_f64_round_odd(i64::MAX as i128),
            2f64.powi(63) - 1024.0
        );
    }

    #[test]
    fn integer_powers() {
        assert_eq!(int_pow(3, 4).unwrap(), 81);
        assert_eq!(int_pow(-2, 3).unwrap(), -8);
        assert_eq!(int_pow(7, 0).unwrap(), 1);
        assert_eq!(crate::DType::I64.wrap_int(int_pow(2, 64).unwrap()), 0);
        assert_eq!(
            crate::DType::U8.wrap_int(int_pow(3, 7).unwrap()),
            2187 % 256
        );
        assert_eq!(
            crate::DType::U64.wrap_int(int_pow(-1, 3).unwrap()),
            u64::MAX as i128
        );
        assert!(int_pow(2, -1).is_err());
    }

    #[test]
    fn nan_and_signed_zero_follow_pytorch() {
        assert!(float_binary(BinaryOp::Minimum, 1.0, f64::NAN)
            .unwrap()
            .is_nan());
        assert!(float_unary(UnaryOp::Relu, f64::NAN).is_nan());
        for (x, y) in [(0.0, -0.0), (-0.0, 0.0)] {
            let max = float_binary(BinaryOp::Maximum, x, y).unwrap();
            let min = float_binary(BinaryOp::Minimum, x, y).unwrap();
            assert_eq!((max.to_bits(), min.to_bits()), (0, (-0.0f64).to_bits()));
        }
        assert_eq!(float_unary(UnaryOp::Relu, -0.0).to_bits(), 0);
        assert_eq!(float_unary(UnaryOp::Sign, -0.0).to_bits(), 0);
        assert!(!compare(BinaryOp::Le, f64::NAN, f64::NAN));
        assert!(compare(BinaryOp::Ne, f64::NAN, f64::NAN));
    }

    #[test]
    fn integer_division_rounds_as_pytorch() {
        use BinaryOp::{FloorDivide as F, Fmod as M, Remainder as R, TruncDivide as T};
        let cases = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-6, 3), (0, -5)];
        let want = [
            (3, 3, 1, 1),
            (-4, -3, 1, -1),
            (-4, -3, -1, 1),
            (3, 3, -1, -1),
            (2, 2, 0, 0),
            (-2, -2, 0, 0),
            (0, 0, 0, 0),
        ];
        for ((x, y), (f, t, r, m)) in cases.into_iter().zip(want) {
            let got = [F, T, R, M].map(|b| int_division(b, x, y).unwrap());
            assert_eq!(got, [f, t, r, m], "{x} by {y}");
        }
        // MIN / -1 wraps; its remainders are 0.
        let min = i64::MIN as i128;
        for b in [F, T] {
            let q = int_division(b, min, -1).unwrap();
            assert_eq!(crate::DType::I64.wrap_int(q), min);
        }
        assert_eq!(int_division(R, min, -1).unwrap(), 0);
        for b in [F, T, R, M] {
            let e = int_division(b, 3, 0).unwrap_err().to_string();
            assert!(
                e.contains("division by zero") && e.contains(b.name()),
                "{e}"
            );
        }
    }

    #[test]
    fn bitwise_ops_follow_the_dtype_after_the_wrap() {
        use crate::DType::{I64, I8, U64, U8};
        let int = |b, x, y| int_binary(b, x, y).unwrap();
        assert_eq!(I8.wrap_int(int(BinaryOp::BitwiseAnd, -1, 0x5a)), 0x5a);
        assert_eq!(I8.wrap_int(int(BinaryOp::BitwiseXor, -128, -1)), 127);
        assert_eq!(U8.wrap_int(int_unary(UnaryOp::BitwiseNot, 5).unwrap()), 250);
        assert_eq!(I64.wrap_int(int_unary(UnaryOp::BitwiseNot, 0).unwrap()), -1);
        let umax = u64::MAX as i128;
        assert_eq!(
            U64.wrap_int(int_unary(UnaryOp::BitwiseNot, umax).unwrap()),
            0
        );
        // Shifts: in range, at the width and beyond it, and negative.
        let (l, r) = (BinaryOp::LeftShift, BinaryOp::RightShift);
        assert_eq!(U8.wrap_int(int(l, 0xff, 7)), 0x80);
        assert_eq!(U8.wrap_int(int(l, 0xff, 8)), 0);
        assert_eq!(U8.wrap_int(int(l, 1, -1)), 0);
        assert_eq!(I8.wrap_int(int(l, 1, 7)), -128);
        assert_eq!(U64.wrap_int(int(l, umax, 63)), 1 << 63);
        assert_eq!(U64.wrap_int(int(l, umax, 64)), 0);
        assert_eq!(U64.wrap_int(int(l, 1, umax)), 0);
        assert_eq!(U64.wrap_int(int(r, umax, 63)), 1);
        assert_eq!(U64.wrap_int(int(r, umax, 64)), 0);
        assert_eq!(U64.wrap_int(int(r, umax, umax)), 0);
        assert_eq!(I8.wrap_int(int(r, -128, 7)), -1);
        assert_eq!(I8.wrap_int(int(r, -128, 8)), -1);
        assert_eq!(I8.wrap_int(int(r, -128, -1)), -1);
        assert_eq!(I8.wrap_int(int(r, 127, 9)), 0);
        assert_eq!(I64.wrap_int(int(r, i64::MIN as i128, 200)), -1);
        assert!(bool_binary(BinaryOp::BitwiseXor, true, false).unwrap());
        assert!(!bool_unary(UnaryOp::BitwiseNot, true).unwrap());
    }

    #[test]
    fn float_division_rounds_as_pytorch() {
        use BinaryOp::{FloorDivide as F, Fmod as M, Remainder as R, TruncDivide as T};
        let f = |b, x, y| float_binary(b, x, y).unwrap();
        assert_eq!(f(F, -7.5, 2.0), -4.0);
        assert_eq!(f(T, -7.5, 2.0), -3.0);
        assert_eq!(f(R, -7.5, 2.0), 0.5);
        assert_eq!(f(M, -7.5, 2.0), -1.5);
        assert_eq!(f(R, 5.0, -3.0), -1.0);
        assert_eq!(f(F, 1.0, 0.0), f64::INFINITY);
        assert!(f(R, 1.0, 0.0).is_nan() && f(M, 1.0, 0.0).is_nan());
        // A zero quotient keeps the sign of the true quotient.
        assert_eq!(f(F, 0.0, -3.0).to_bits(), (-0.0f64).to_bits());
        // Python: 0.3 // 0.1 == 2.0 (0.3 is a little less than three 0.1s).
        assert_eq!(f(F, 0.3, 0.1), 2.0);
    }

    #[test]
    fn ops_outside_their_domain_are_errors() {
        assert!(float_binary(BinaryOp::Eq, 1.0, 1.0).is_err());
        assert!(int_binary(BinaryOp::Div, 1, 1).is_err());
        assert!(int_unary(UnaryOp::Exp, 1).is_err());
        assert!(bool_unary(UnaryOp::Neg, true).is_err());
        assert!(bool_binary(BinaryOp::Add, true, true).is_err());
        let abs_min = int_unary(UnaryOp::Abs, i64::MIN as i128).unwrap();
        assert_eq!(crate::DType::I64.wrap_int(abs_min), i64::MIN as i128);
        assert!(bool_binary(BinaryOp::Maximum, false, true).unwrap());
    }
}
