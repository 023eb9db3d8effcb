//! Scalar code for the dtypes beyond `f32`/`f16`/`bf16`/`i32`/`i64`/`bool`: `f64`, the
//! narrow integers (`i8 i16 u8 u16`) and the unsigned ones (`u32 u64`), every cast
//! between two dtypes, and the integer divisions (`floor_divide trunc_divide remainder
//! fmod`).
//!
//! These dtypes run as scalar code only (the plan's `vectorize` step gives them no
//! lanes). An integer lives in a register of its width (`i8` for `u8`, ...), holding its
//! two's-complement bits, so addition, subtraction and multiplication wrap as the
//! reference's wrap into the dtype does; what depends on signedness (comparisons,
//! `maximum`/`minimum`, widening, division, casts) reads the dtype.
//!
//! An `f64` lives in an `f64` register. Its add, sub, mul, div, sqrt, floor, ceil, relu,
//! sign, maximum and minimum are inline IEEE operations, exactly the reference's. Its
//! transcendental and composite ops (`exp log sin cos tanh erf sigmoid gelu silu`), `pow`
//! and the float divisions call the reference's own scalar definition
//! ([`ferrite_ir::loops::scalar`], Rust's libm) through a scalar helper: bit-identical
//! to the interpreter, never computed in `f32`, and slower than vector math (there is no
//! `f64` polynomial yet). Float `floor_divide`/`remainder`/`fmod`/`trunc_divide` of
//! `f32`/`f16`/`bf16` compute in `f64` through the same helper and round once, as the
//! reference does.

use super::convert::{bitcast, iconst, round_f64_to};
use super::expr::scalar_type;
use super::state::Emitter;
use crate::error::{Error, Result};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, SigRef, Signature, Type, Value};
use ferrite_ir::loops::{scalar, Value as Lit};
use ferrite_ir::{BinaryOp, Category, DType, UnaryOp};

/// `u(x)` on an `f64`, as the reference computes it; `code` indexes [`UnaryOp::ALL`].
extern "C" fn f64_unary(code: u32, x: f64) -> f64 {
    match UnaryOp::ALL.get(code as usize) {
        Some(&u) => match scalar::unary(u, Lit::Float(x), DType::F64) {
            Ok(Lit::Float(v)) => v,
            _ => f64::NAN,
        },
        None => f64::NAN,
    }
}

/// `b(x, y)` on `f64`s, as the reference computes it; `code` indexes [`BinaryOp::ALL`].
extern "C" fn f64_binary(code: u32, x: f64, y: f64) -> f64 {
    match BinaryOp::ALL.get(code as usize) {
        Some(&b) => match scalar::binary(b, Lit::Float(x), Lit::Float(y), DType::F64) {
            Ok(Lit::Float(v)) => v,
            _ => f64::NAN,
        },
        None => f64::NAN,
    }
}

/// An `i64` to the `f64` rounded to odd (see `i128_to_f64_round_odd` in `ferrite-ir`),
/// from which a second rounding to a narrower float is the correct single rounding.
extern "C" fn i64_to_f64_odd(x: i64) -> f64 {
    ferrite_ir::i128_to_f64_round_odd(x as i128)
}

/// A `u64` (its bits in an `i64`) to the `f64` rounded to odd.
extern "C" fn u64_to_f64_odd(x: i64) -> f64 {
    ferrite_ir::i128_to_f64_round_odd(x as u64 as i128)
}

/// `x ** y` for integers, wrapping, with an exponent read as unsigned (`u64`).
extern "C" fn uint_pow(x: i64, y: i64) -> i64 {
    let (mut base, mut exp, mut acc) = (x, y as u64, 1i64);
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        exp >>= 1;
    }
    acc
}

fn unary_code(u: UnaryOp) -> i64 {
    UnaryOp::ALL
        .iter()
        .position(|&v| v == u)
        .unwrap_or(usize::MAX) as i64
}

fn binary_code(b: BinaryOp) -> i64 {
    BinaryOp::ALL
        .iter()
        .position(|&v| v == b)
        .unwrap_or(usize::MAX) as i64
}

impl Emitter<'_, '_> {
    /// The signature of an extern function taking `params` and returning `ret`, imported
    /// once per function.
    pub(super) fn signature(&mut self, params: &[Type], ret: Option<Type>) -> SigRef {
        let key = (params.to_vec(), ret);
        if let Some(&s) = self.target.sigs.get(&key) {
            return s;
        }
        let mut sig = Signature::new(self.target.call_conv);
        sig.params.extend(params.iter().map(|&p| AbiParam::new(p)));
        sig.returns.extend(ret.map(AbiParam::new));
        let s = self.b.import_signature(sig);
        self.target.sigs.insert(key, s);
        s
    }

    /// Calls the extern helper at `f` with `args` (of types `params`), returning `ret`.
    pub(super) fn call_helper(
        &mut self,
        f: usize,
        params: &[Type],
        ret: Type,
        args: &[Value],
    ) -> Value {
        let sig = self.signature(params, Some(ret));
        let callee = self.b.ins().iconst(self.target.ptr_type, f as i64);
        let call = self.b.ins().call_indirect(sig, callee, args);
        self.b.inst_results(call)[0]
    }

    /// An integer register of `dtype` widened to `i64`: sign-extended for signed dtypes,
    /// zero-extended for unsigned ones and bools.
    pub(super) fn int_to_i64(&mut self, x: Value, dtype: DType) -> Value {
        match self.b.func.dfg.value_type(x) {
            types::I64 => x,
            _ if dtype.is_unsigned() || dtype == DType::Bool => self.b.ins().uextend(types::I64, x),
            _ => self.b.ins().sextend(types::I64, x),
        }
    }

    /// An `i64` cut to the register of integer `dtype` (wrapping, as the reference does).
    pub(super) fn i64_to_int(&mut self, x: Value, dtype: DType) -> Value {
        let ty = scalar_type(dtype);
        if ty == types::I64 {
            x
        } else {
            self.b.ins().ireduce(ty, x)
        }
    }

    /// A float register (`f32` or `f64`) as an `f64`.
    pub(super) fn float_to_f64(&mut self, x: Value) -> Value {
        if self.b.func.dfg.value_type(x) == types::F64 {
            x
        } else {
            self.b.ins().fpromote(types::F64, x)
        }
    }

    /// The reference's `f64` op `u` on an `f64` register, through [`f64_unary`].
    fn f64_unary_call(&mut self, u: UnaryOp, x: Value) -> Value {
        let code = self.b.ins().iconst(types::I32, unary_code(u));
        let f: extern "C" fn(u32, f64) -> f64 = f64_unary;
        self.call_helper(
            f as usize,
            &[types::I32, types::F64],
            types::F64,
            &[code, x],
        )
    }

    /// The reference's `f64` op `b` on two `f64` registers, through [`f64_binary`].
    fn f64_binary_call(&mut self, b: BinaryOp, x: Value, y: Value) -> Value {
        let code = self.b.ins().iconst(types::I32, binary_code(b));
        let f: extern "C" fn(u32, f64, f64) -> f64 = f64_binary;
        self.call_helper(
            f as usize,
            &[types::I32, types::F64, types::F64],
            types::F64,
            &[code, x, y],
        )
    }

    /// A unary op (not `not`) on an `f64`.
    pub(super) fn f64_unary(&mut self, u: UnaryOp, x: Value) -> Value {
        match u {
            UnaryOp::Neg => self.b.ins().fneg(x),
            UnaryOp::Abs => self.b.ins().fabs(x),
            UnaryOp::Sqrt => self.b.ins().sqrt(x),
            UnaryOp::Floor => self.b.ins().floor(x),
            UnaryOp::Ceil => self.b.ins().ceil(x),
            UnaryOp::Reciprocal => {
                let one = self.b.ins().f64const(1.0);
                self.b.ins().fdiv(one, x)
            }
            UnaryOp::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let one = self.b.ins().f64const(1.0);
                self.b.ins().fdiv(one, s)
            }
            UnaryOp::Relu => {
                // x > 0 or NaN keeps x; everything else (-0 included) is +0.
                let zero = self.b.ins().f64const(0.0);
                let keep = self.b.ins().fcmp(FloatCC::UnorderedOrGreaterThan, x, zero);
                self.b.ins().select(keep, x, zero)
            }
            UnaryOp::Sign => {
                let zero = self.b.ins().f64const(0.0);
                let one = self.b.ins().f64const(1.0);
                let minus = self.b.ins().f64const(-1.0);
                let pos = self.b.ins().fcmp(FloatCC::GreaterThan, x, zero);
                let neg = self.b.ins().fcmp(FloatCC::LessThan, x, zero);
                let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                // ±0 gives +0 and NaN stays NaN.
                let r = self.b.ins().select(nan, x, zero);
                let r = self.b.ins().select(neg, minus, r);
                self.b.ins().select(pos, one, r)
            }
            _ => self.f64_unary_call(u, x),
        }
    }

    /// An arithmetic binary op (not a comparison or logic) on two `f64`s.
    pub(super) fn f64_binary(&mut self, b: BinaryOp, x: Value, y: Value) -> Value {
        match b {
            BinaryOp::Add => self.b.ins().fadd(x, y),
            BinaryOp::Sub => self.b.ins().fsub(x, y),
            BinaryOp::Mul => self.b.ins().fmul(x, y),
            BinaryOp::Div => self.b.ins().fdiv(x, y),
            BinaryOp::Maximum | BinaryOp::Minimum => self.f64_extreme(b == BinaryOp::Maximum, x, y),
            _ => self.f64_binary_call(b, x, y),
        }
    }

    /// IEEE 754-2019 `maximum`/`minimum` of two `f64`s, as the reference: NaN if either
    /// is, and of two equal values (±0) the bits and-ed (max) or or-ed (min).
    fn f64_extreme(&mut self, max: bool, x: Value, y: Value) -> Value {
        let cc = if max {
            FloatCC::GreaterThan
        } else {
            FloatCC::LessThan
        };
        let beyond = self.b.ins().fcmp(cc, x, y);
        let pick = self.b.ins().select(beyond, x, y);
        let xb = bitcast(self.b, types::I64, x);
        let yb = bitcast(self.b, types::I64, y);
        let both = if max {
            self.b.ins().band(xb, yb)
        } else {
            self.b.ins().bor(xb, yb)
        };
        let both = bitcast(self.b, types::F64, both);
        let equal = self.b.ins().fcmp(FloatCC::Equal, x, y);
        let r = self.b.ins().select(equal, both, pick);
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, y);
        let q = self.b.ins().f64const(f64::NAN);
        self.b.ins().select(nan, q, r)
    }

    /// A float division of `f32`-register operands (`f32`, `f16`, `bf16`): in `f64`
    /// through the reference's definition, rounded once to `d`.
    pub(super) fn narrow_float_division(
        &mut self,
        b: BinaryOp,
        x: Value,
        y: Value,
        d: DType,
    ) -> Value {
        let a = self.float_to_f64(x);
        let c = self.float_to_f64(y);
        let r = self.f64_binary_call(b, a, c);
        round_f64_to(self.b, r, d)
    }

    /// A unary op (not `not`) on an integer of dtype `d`.
    pub(super) fn int_unary(&mut self, u: UnaryOp, x: Value, d: DType) -> Result<Value> {
        let ty = scalar_type(d);
        let unsigned = d.is_unsigned();
        Ok(match u {
            UnaryOp::Neg => self.b.ins().ineg(x),
            UnaryOp::Abs | UnaryOp::Relu if unsigned => x,
            UnaryOp::Abs => self.b.ins().iabs(x),
            UnaryOp::Relu => {
                let zero = iconst(self.b, ty, 0);
                self.b.ins().smax(x, zero)
            }
            UnaryOp::Sign if unsigned => {
                let nz = self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0);
                self.int_from_flag(nz, ty)
            }
            UnaryOp::Sign => {
                let pos = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, x, 0);
                let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 0);
                let pos = self.int_from_flag(pos, ty);
                let neg = self.int_from_flag(neg, ty);
                self.b.ins().isub(pos, neg)
            }
            UnaryOp::Floor | UnaryOp::Ceil => x,
            UnaryOp::BitwiseNot => self.b.ins().bnot(x),
            _ => return Err(Error::internal(format!("{} has no integer form", u.name()))),
        })
    }

    /// A 0/1 `i8` flag as an integer register of type `ty`.
    fn int_from_flag(&mut self, flag: Value, ty: Type) -> Value {
        if ty == types::I8 {
            flag
        } else {
            self.b.ins().uextend(ty, flag)
        }
    }

    /// An arithmetic binary op on integers of dtype `d`, wrapping.
    pub(super) fn int_binary(
        &mut self,
        op: BinaryOp,
        x: Value,
        y: Value,
        d: DType,
    ) -> Result<Value> {
        let unsigned = d.is_unsigned();
        Ok(match op {
            BinaryOp::Add => self.b.ins().iadd(x, y),
            BinaryOp::Sub => self.b.ins().isub(x, y),
            BinaryOp::Mul => self.b.ins().imul(x, y),
            BinaryOp::Maximum if unsigned => self.b.ins().umax(x, y),
            BinaryOp::Minimum if unsigned => self.b.ins().umin(x, y),
            BinaryOp::Maximum => self.b.ins().smax(x, y),
            BinaryOp::Minimum => self.b.ins().smin(x, y),
            BinaryOp::Pow if unsigned => {
                let wx = self.int_to_i64(x, d);
                let wy = self.int_to_i64(y, d);
                let f: extern "C" fn(i64, i64) -> i64 = uint_pow;
                let r =
                    self.call_helper(f as usize, &[types::I64, types::I64], types::I64, &[wx, wy]);
                self.i64_to_int(r, d)
            }
            BinaryOp::Pow => self.int_pow_call(x, y, d),
            BinaryOp::BitwiseAnd => self.b.ins().band(x, y),
            BinaryOp::BitwiseOr => self.b.ins().bor(x, y),
            BinaryOp::BitwiseXor => self.b.ins().bxor(x, y),
            BinaryOp::LeftShift | BinaryOp::RightShift => self.int_shift(op, x, y, d),
            _ if op.is_integer_division() => self.int_division(op, x, y, d),
            _ => {
                return Err(Error::internal(format!(
                    "{} has no integer form",
                    op.name()
                )))
            }
        })
    }

    /// `x << y` or `x >> y` (arithmetic for signed `d`) as `scalar::binary` defines them:
    /// Cranelift masks the amount modulo the width, so an amount outside `[0, bits)`
    /// (negative ones are huge unsigned) is tested here and gives 0 (left) or the sign
    /// fill (right: a signed shift by `bits - 1`, an unsigned result of 0).
    fn int_shift(&mut self, op: BinaryOp, x: Value, y: Value, d: DType) -> Value {
        let ty = scalar_type(d);
        let bits = i64::from(ty.bits());
        let outside = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, y, bits);
        let zero = iconst(self.b, ty, 0);
        match op {
            BinaryOp::LeftShift => {
                let r = self.b.ins().ishl(x, y);
                self.b.ins().select(outside, zero, r)
            }
            _ if d.is_unsigned() => {
                let r = self.b.ins().ushr(x, y);
                self.b.ins().select(outside, zero, r)
            }
            _ => {
                let last = iconst(self.b, ty, bits - 1);
                let amount = self.b.ins().select(outside, last, y);
                self.b.ins().sshr(x, amount)
            }
        }
    }

    /// An integer division or remainder: a zero divisor fails the kernel's check (the
    /// reference's error); `MIN / -1` wraps, computed as a negation so the machine's
    /// division never overflows.
    fn int_division(&mut self, op: BinaryOp, x: Value, y: Value, d: DType) -> Value {
        let x = self.int_to_i64(x, d);
        let y = self.int_to_i64(y, d);
        let zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
        self.check(
            zero,
            format!("integer division by zero in {} of {d}", op.name()),
        );
        if d == DType::U64 {
            let (q, r) = (self.b.ins().udiv(x, y), self.b.ins().urem(x, y));
            // Unsigned: floor and truncation agree, and so do both remainders.
            return match op {
                BinaryOp::FloorDivide | BinaryOp::TruncDivide => q,
                _ => r,
            };
        }
        // Every narrower dtype, unsigned ones included, is exact in signed `i64`.
        let minus_one = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
        let one = self.b.ins().iconst(types::I64, 1);
        let safe = self.b.ins().select(minus_one, one, y);
        let q = self.b.ins().sdiv(x, safe);
        let neg = self.b.ins().ineg(x);
        let q = self.b.ins().select(minus_one, neg, q);
        // By 1 the remainder is 0, as it is by -1.
        let r = self.b.ins().srem(x, safe);
        let r_nonzero = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
        let ry = self.b.ins().bxor(r, y);
        let signs_differ = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, ry, 0);
        let adjust = self.b.ins().band(r_nonzero, signs_differ);
        let out = match op {
            BinaryOp::TruncDivide => q,
            BinaryOp::Fmod => r,
            BinaryOp::FloorDivide => {
                let q1 = self.b.ins().iadd_imm_s(q, -1);
                self.b.ins().select(adjust, q1, q)
            }
            _ => {
                let ry = self.b.ins().iadd(r, y);
                self.b.ins().select(adjust, ry, r)
            }
        };
        self.i64_to_int(out, d)
    }

    /// `cast` from `from` to `to` on scalar registers, as
    /// [`ferrite_ir::loops::scalar::cast`] does it, for every pair of dtypes.
    pub(super) fn cast_any(&mut self, x: Value, from: DType, to: DType) -> Value {
        if from == to {
            return x;
        }
        match (from.category(), to.category()) {
            (_, Category::Bool) => self.truth_of(x, from),
            (Category::Float, Category::Float) => match to {
                DType::F64 => self.float_to_f64(x),
                // An f32 register holds every f32/f16/bf16 value exactly.
                _ if from != DType::F64 => super::convert::round_f32_to(self.b, x, to),
                // f64 to f32 is one IEEE rounding; to a half format, via round-to-odd.
                DType::F32 => self.b.ins().fdemote(types::F32, x),
                _ => round_f64_to(self.b, x, to),
            },
            (Category::Float, Category::Int) => self.float_to_int(x, to),
            (Category::Int | Category::Bool, Category::Float) => self.int_to_float(x, from, to),
            (Category::Int | Category::Bool, Category::Int) => {
                let w = self.int_to_i64(x, from);
                self.i64_to_int(w, to)
            }
        }
    }

    /// A value's truth (`!= 0`; NaN is true) as an `i8` 0/1, for any dtype.
    pub(super) fn truth_of(&mut self, x: Value, dtype: DType) -> Value {
        match dtype.category() {
            Category::Float => {
                let zero = if self.b.func.dfg.value_type(x) == types::F64 {
                    self.b.ins().f64const(0.0)
                } else {
                    self.b.ins().f32const(0.0)
                };
                self.b.ins().fcmp(FloatCC::NotEqual, x, zero)
            }
            Category::Int => self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0),
            Category::Bool => x,
        }
    }

    /// Float to integer: truncation toward zero, saturating at the dtype's range, NaN 0.
    fn float_to_int(&mut self, x: Value, to: DType) -> Value {
        match to {
            DType::I64 => self.b.ins().fcvt_to_sint_sat(types::I64, x),
            DType::U64 => self.b.ins().fcvt_to_uint_sat(types::I64, x),
            _ => {
                // Saturated to i64 first (NaN is 0 there), then clamped into the range.
                let w = self.b.ins().fcvt_to_sint_sat(types::I64, x);
                let (lo, hi) = to.int_range().unwrap_or((0, 0));
                let lo = self.b.ins().iconst(types::I64, lo as i64);
                let hi = self.b.ins().iconst(types::I64, hi as i64);
                let w = self.b.ins().smax(w, lo);
                let w = self.b.ins().smin(w, hi);
                self.i64_to_int(w, to)
            }
        }
    }

    /// Integer (or bool) to float, rounding once to nearest even as the reference does.
    fn int_to_float(&mut self, x: Value, from: DType, to: DType) -> Value {
        let w = self.int_to_i64(x, from);
        let wide = matches!(from, DType::I64 | DType::U64);
        match to {
            DType::F64 | DType::F32 => {
                let ty = if to == DType::F64 {
                    types::F64
                } else {
                    types::F32
                };
                if from == DType::U64 {
                    self.b.ins().fcvt_from_uint(ty, w)
                } else {
                    self.b.ins().fcvt_from_sint(ty, w)
                }
            }
            // Narrow sources are exact in f64, wide ones rounded to odd first, so the
            // rounding to the half format is the only one.
            _ if !wide => {
                let f = self.b.ins().fcvt_from_sint(types::F64, w);
                round_f64_to(self.b, f, to)
            }
            _ => {
                let f: extern "C" fn(i64) -> f64 = if from == DType::U64 {
                    u64_to_f64_odd
                } else {
                    i64_to_f64_odd
                };
                let odd = self.call_helper(f as usize, &[types::I64], types::F64, &[w]);
                round_f64_to(self.b, odd, to)
            }
        }
    }
}
