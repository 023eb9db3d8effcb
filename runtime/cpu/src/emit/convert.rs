//! Number-format conversions emitted as CLIF integer and float arithmetic.
//!
//! `f16` and `bf16` values live in registers as the `f32` holding the same number (every
//! half-precision value is exactly an `f32`), so only loads, stores and rounding need
//! these routines. Cranelift has no `f16` arithmetic on x64, so the conversions are the
//! classic bit-manipulation ones (F. Giesen's `half_to_float` / `float_to_half_rtne`),
//! branch-free, exact and round-to-nearest-even. Rounding from `f64` goes through `f32`
//! with round-to-odd, which makes the second rounding to a half format correct (the same
//! argument as `Tensor::from_f64` in `ferrite-ir`).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;
use ferrite_ir::DType;

/// Reinterprets the bits of `v` as `ty` (same size).
pub(super) fn bitcast(b: &mut FunctionBuilder<'_>, ty: Type, v: Value) -> Value {
    let flags = MemFlagsData::new().with_endianness(Endianness::Little);
    b.ins().bitcast(ty, flags, v)
}

/// An integer constant of type `ty`, its value truncated to the type's width (CLIF wants
/// narrow immediates zero-extended).
pub(super) fn iconst(b: &mut FunctionBuilder<'_>, ty: Type, v: i64) -> Value {
    let bits = ty.bits();
    let imm = if bits >= 64 {
        v
    } else {
        (v as u64 & ((1u64 << bits) - 1)) as i64
    };
    b.ins().iconst(ty, imm)
}

/// `f16` bits (the low 16 bits of an `i32`) to the `f32` of the same value.
pub(super) fn f16_bits_to_f32(b: &mut FunctionBuilder<'_>, h: Value) -> Value {
    let magnitude = b.ins().band_imm_u(h, 0x7fff);
    let shifted = b.ins().ishl_imm_u(magnitude, 13);
    let exponent = b.ins().band_imm_u(shifted, 0x0f80_0000);
    // Scaling by 2^112 re-biases the exponent and normalizes subnormals exactly.
    let as_float = bitcast(b, types::F32, shifted);
    let magic = b.ins().f32const(f32::from_bits(0x7780_0000));
    let scaled = b.ins().fmul(as_float, magic);
    let scaled_bits = bitcast(b, types::I32, scaled);
    // Infinity and NaN: force the exponent to all ones, keeping the payload.
    let inf_nan = b.ins().icmp_imm_u(IntCC::Equal, exponent, 0x0f80_0000);
    let forced = b.ins().bor_imm_u(scaled_bits, 0x7f80_0000);
    let bits = b.ins().select(inf_nan, forced, scaled_bits);
    let sign = b.ins().band_imm_u(h, 0x8000);
    let sign = b.ins().ishl_imm_u(sign, 16);
    let bits = b.ins().bor(bits, sign);
    bitcast(b, types::F32, bits)
}

/// An `f32` to `f16` bits (in the low 16 bits of an `i32`), rounding to nearest even;
/// overflow gives infinity and NaN stays NaN.
pub(super) fn f32_to_f16_bits(b: &mut FunctionBuilder<'_>, x: Value) -> Value {
    let u = bitcast(b, types::I32, x);
    let sign = b.ins().band_imm_u(u, 0x8000_0000);
    let a = b.ins().bxor(u, sign);
    // At or above 65536 (or inf/NaN): infinity, or a quiet NaN.
    let is_nan = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThan, a, 0x7f80_0000);
    let qnan = iconst(b, types::I32, 0x7e00);
    let inf = iconst(b, types::I32, 0x7c00);
    let big = b.ins().select(is_nan, qnan, inf);
    // Below the smallest normal half: let the FPU round at the subnormal spacing by adding 0.5.
    let a_float = bitcast(b, types::F32, a);
    let half = b.ins().f32const(0.5);
    let sum = b.ins().fadd(a_float, half);
    let sum_bits = bitcast(b, types::I32, sum);
    let small = b.ins().iadd_imm_s(sum_bits, -0x3f00_0000);
    // Normal: re-bias the exponent and round the 13 dropped mantissa bits to nearest even.
    let odd = b.ins().ushr_imm_u(a, 13);
    let odd = b.ins().band_imm_u(odd, 1);
    let rebias = b.ins().iadd_imm_s(a, (-112i64 << 23) + 0xfff);
    let rounded = b.ins().iadd(rebias, odd);
    let normal = b.ins().ushr_imm_u(rounded, 13);
    let is_big = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, a, 0x4780_0000);
    let is_small = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, a, 0x3880_0000);
    let r = b.ins().select(is_small, small, normal);
    let r = b.ins().select(is_big, big, r);
    let sign16 = b.ins().ushr_imm_u(sign, 16);
    b.ins().bor(r, sign16)
}

/// `bf16` bits (low 16 bits of an `i32`) to `f32`.
pub(super) fn bf16_bits_to_f32(b: &mut FunctionBuilder<'_>, h: Value) -> Value {
    let bits = b.ins().ishl_imm_u(h, 16);
    bitcast(b, types::F32, bits)
}

/// An `f32` to `bf16` bits (low 16 bits of an `i32`), rounding to nearest even; NaN stays
/// a (quiet) NaN with its sign.
pub(super) fn f32_to_bf16_bits(b: &mut FunctionBuilder<'_>, x: Value) -> Value {
    let u = bitcast(b, types::I32, x);
    let lsb = b.ins().ushr_imm_u(u, 16);
    let lsb = b.ins().band_imm_u(lsb, 1);
    let biased = b.ins().iadd_imm_s(u, 0x7fff);
    let biased = b.ins().iadd(biased, lsb);
    let rounded = b.ins().ushr_imm_u(biased, 16);
    let high = b.ins().ushr_imm_u(u, 16);
    let quiet = b.ins().bor_imm_u(high, 0x40);
    let is_nan = b.ins().fcmp(FloatCC::Unordered, x, x);
    b.ins().select(is_nan, quiet, rounded)
}

/// An `f64` rounded to `f32` with round-to-odd: inexact results are truncated toward zero
/// with the lowest mantissa bit set, so that a second rounding to a narrower format gives
/// the correctly rounded value. Infinities, NaN and overflow round as usual.
pub(super) fn f64_to_f32_round_odd(b: &mut FunctionBuilder<'_>, x: Value) -> Value {
    let nearest = b.ins().fdemote(types::F32, x);
    let back = b.ins().fpromote(types::F64, nearest);
    let exact = b.ins().fcmp(FloatCC::Equal, back, x);
    let abs_near = b.ins().fabs(nearest);
    let inf = b.ins().f32const(f32::INFINITY);
    let overflowed = b.ins().fcmp(FloatCC::Equal, abs_near, inf);
    let nan = b.ins().fcmp(FloatCC::Unordered, x, x);
    let keep = b.ins().bor(exact, overflowed);
    let keep = b.ins().bor(keep, nan);
    // Rounding went away from zero: step one ulp back toward zero (sign-magnitude bits).
    let abs_back = b.ins().fabs(back);
    let abs_x = b.ins().fabs(x);
    let away = b.ins().fcmp(FloatCC::GreaterThan, abs_back, abs_x);
    let bits = bitcast(b, types::I32, nearest);
    let stepped = b.ins().iadd_imm_s(bits, -1);
    let toward = b.ins().select(away, stepped, bits);
    let odd = b.ins().bor_imm_u(toward, 1);
    let odd = bitcast(b, types::F32, odd);
    b.ins().select(keep, nearest, odd)
}

/// Rounds an `f32` register value to the precision of `dtype` (`f16`, `bf16`; `f32` is
/// left as it is), returning it as an `f32` again.
pub(super) fn round_f32_to(b: &mut FunctionBuilder<'_>, x: Value, dtype: DType) -> Value {
    match dtype {
        DType::F16 => {
            let h = f32_to_f16_bits(b, x);
            f16_bits_to_f32(b, h)
        }
        DType::Bf16 => {
            let h = f32_to_bf16_bits(b, x);
            bf16_bits_to_f32(b, h)
        }
        _ => x,
    }
}

/// Rounds an `f64` once to `dtype` (a float dtype) and returns the `f32` holding it.
pub(super) fn round_f64_to(b: &mut FunctionBuilder<'_>, x: Value, dtype: DType) -> Value {
    match dtype {
        DType::F16 | DType::Bf16 => {
            let odd = f64_to_f32_round_odd(b, x);
            round_f32_to(b, odd, dtype)
        }
        _ => b.ins().fdemote(types::F32, x),
    }
}
