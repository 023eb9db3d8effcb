//! Vector math emitted as Cranelift IR: no libm calls, a few ulp from correctly rounded.
//!
//! Every function takes a `FunctionBuilder` positioned in an open block and an `f32x4` value
//! (or an `f32`, which is splatted, computed as a vector and extracted, so a kernel's scalar
//! tail gives bit-identical results to its vector body) and returns the result. The code is
//! branch-free: lanes that need a special case are fixed up with compare + bitselect, or,
//! where the semantics allow, with cheaper shapes (see "Instruction shapes" below).
//!
//! | function  | method                                                                          | max error (FMA / no FMA) |
//! |-----------|---------------------------------------------------------------------------------|--------------------------|
//! | `exp`     | `n = round(x/ln2)`, Cody-Waite `r = x - n ln2`, `1 + r + r^2 P(r)`, scale by `2^n` in two steps; subnormal results as the integer `round((1 + q) 2^(n+149))` (the second step scaled by `2^149` more), their bit pattern (no subnormal arithmetic, same bits) | 0.98 / 0.92 ulp |
//! | `log`     | scale subnormals, `x = 2^e m` with `m` in `[sqrt(1/2), sqrt(2))` (by subtracting the bits of `sqrt(1/2)`), `log(1+f) = f - f^2/2 + f^3 P(f)`, `P` by Estrin's scheme | 0.79 / 0.78 ulp |
//! | `sin/cos` | `q = round(x 2/pi)`, Cody-Waite `r = x - q pi/2` (exact first step with FMA), sin/cos polynomials, quadrant select | 1.72, 1.62 / 2.33, 2.09 ulp |
//! | `tanh`    | `m / (m + 2)` with `m = expm1(2 abs(x))` (`2^n q + (2^n - 1)`, `q = e^r - 1`: no cancellation near 0), `2 abs(x)` capped at 20; sign copied | 2.46 / 2.33 ulp |
//! | `erf`     | `x + x A(x^2)` below 0.875, else `1 - exp(-H(abs(x) - 0.875))`, `H ~ -log(erfc)` | 1.06 / 1.05 ulp |
//! | `erfc`    | `1 - abs(x) - abs(x) A(x^2)` below 0.875 (erf's polynomial), else `t exp(P(t) - x^2)`, `t = 1/(1 + abs(x)/2)` (Numerical Recipes' `erfcc` fit, 1.2e-7), the exponent as a double-`f32` (`x^2` exact by FMA or Dekker's split, TwoSum), `t` folded into exp's scaling; `2 - erfc(-x)` for `x < 0` | 4.82 / 4.50 ulp |
//! | `sigmoid` | `e = exp(-abs(x))`; `1/(1+e)` or `e/(1+e)`: never overflows, keeps subnormal results | 2.28 / 2.23 ulp |
//! | `pow`     | `exp(y log abs(x))` in `f64` (two `f64x2` halves), rounded once to `f32`; C99 special cases | 0.50 ulp |
//!
//! The figures are the runtime tests' measurements (every 97th `f32` bit pattern plus
//! special values for the unary functions, every 1009th for the non-trig ones without
//! FMA, 2M random pairs for `pow`); the tests assert 2 ulp for exp/log/sin/cos, 3 ulp
//! for tanh/erf/sigmoid and 6 for erfc (one more without FMA), and 1 ulp for pow. Run them with
//! `--nocapture` to see the figures. (`tanh` was `x + x^3 T(x^2)` below 0.625 and
//! `1 - 2/(e^2x + 1)` above, at 1.31 ulp; the single `expm1` formula costs about an ulp
//! more, from rounding `m + 2` and the quotient, and needs a third fewer instructions.
//! Correcting those two roundings with FMA residuals brought it back to 1.66 ulp but made
//! it slower than the two-branch form, so that was not kept.)
//!
//! Polynomial coefficients are minimax fits of the relative error (Lawson's algorithm on a
//! dense grid against `mpmath`, then rounded to `f32`), made by `vmath_fit.py` next to this
//! file (its `TANH_T` fit is no longer used); the `f64` series in `pow` are plain Taylor
//! series, far more accurate than `f32` needs.
//!
//! Special values follow libm: `exp(±inf) = inf, 0`; overflow gives `inf`, underflow
//! subnormals then `0` (inputs below -104, e.g. masked `-inf` scores, are clamped to -104,
//! whose result rounds to 0; no lane
//! of `exp` executes an operation with a subnormal result, which x86 runs through a slow
//! microcode assist, so its speed does not depend on how far its results underflow);
//! `log(0) = -inf`, `log(x<0) = NaN`, `log(inf) = inf`; `tanh` and `erf` saturate to `±1`
//! and keep `-0`; `sin(-0) = -0`; NaN in gives NaN out everywhere (pow: except
//! `pow(1, NaN) = pow(NaN, 0) = 1`, as in C). Which NaN is not specified (`log` of a
//! negative number gives all ones).
//!
//! `sin` and `cos` are accurate for `|x| <= `[`VMath::trig_max_arg`] (2^21 with FMA, 2^13
//! without); beyond it they return NaN rather than a silently wrong value, as Cody-Waite
//! reduction in `f32` cannot resolve the phase there (that needs Payne-Hanek).
//!
//! `maximum` and `minimum` propagate NaN like `torch.maximum`/`torch.minimum`. They are
//! written as `maxps`-shaped compare + bitselect (which Cranelift matches to one `maxps`)
//! plus a NaN fix-up (`cmpunordps` + blend), three instructions, instead of CLIF `fmax`,
//! whose IEEE-754 `maximum` semantics (ordered zeros) lower to a much longer sequence.
//! When the operands are `-0` and `+0` in either order, the second operand is returned.
//! With a constant operand that is not NaN the fix-up is not needed: `maxps c, x` alone
//! (it returns `x` when `x` is NaN), for a constant first operand or a nonzero second one;
//! `maximum(x, +0)` is a compare and an `andps`.
//!
//! # Instruction shapes
//!
//! On current x86 cores a blend (`vpblendvb`/`vblendvps`) is three micro-ops, a compare or
//! a bitwise op one. So selects against zero are `andps` with the mask (`exp`'s subnormal
//! scaling, `log`'s subnormal exponent correction), clamps whose NaN must pass are
//! one `minps c, x` or `maxps c, x` (`exp`'s clamps, `tanh`'s and `erf`'s caps), rounding to an
//! integer fuses the product into the magic-number addition with FMA, `log` sends `+inf`
//! through one `maxps` (`max(r, x - f32::MAX)`, as `log x > x - f32::MAX` for finite `x`)
//! and negative inputs to NaN with one `orps` of the mask, and `tanh`'s and `erf`'s
//! exponentials, whose arguments are capped so the result stays normal, scale by `2^n` in
//! one multiply (`exp_bounded`), and `exp` folds its `1 +` into the first scaling FMA.
//! These shapes matter most in fused kernels: once the unrolled groups are interleaved
//! (see `jit/interleave.rs`) a chain of transcendentals is bound by throughput and by the
//! latency of one group's chain, which is why `log`'s degree-8 polynomial is evaluated by
//! Estrin's scheme (four dependent FMAs instead of eight, for two more instructions).

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{
    types, ConstantData, Endianness, InstBuilder, InstructionData, MemFlagsData, Opcode, Type,
    Value,
};
use cranelift_codegen::isa::TargetIsa;
use cranelift_frontend::FunctionBuilder;

/// The elementwise functions of one argument that [`VMath::unary`] emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryFn {
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Hyperbolic tangent.
    Tanh,
    /// The error function.
    Erf,
    /// The complementary error function `1 - erf(x)`.
    Erfc,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// Sine (radians).
    Sin,
    /// Cosine (radians).
    Cos,
}

impl UnaryFn {
    /// All of them, for tests and tables.
    pub const ALL: [UnaryFn; 8] = [
        UnaryFn::Exp,
        UnaryFn::Log,
        UnaryFn::Tanh,
        UnaryFn::Erf,
        UnaryFn::Erfc,
        UnaryFn::Sigmoid,
        UnaryFn::Sin,
        UnaryFn::Cos,
    ];

    /// The op's name in the graph IR.
    pub fn name(self) -> &'static str {
        match self {
            UnaryFn::Exp => "exp",
            UnaryFn::Log => "log",
            UnaryFn::Tanh => "tanh",
            UnaryFn::Erf => "erf",
            UnaryFn::Erfc => "erfc",
            UnaryFn::Sigmoid => "sigmoid",
            UnaryFn::Sin => "sin",
            UnaryFn::Cos => "cos",
        }
    }
}

/// See [`VMath::trig_max_arg`]. With FMA the reduction's first step is exact for any
/// quotient and the parts of pi/2 carry ~96 bits; the limit is where `x * 2/pi`, rounded to
/// `f32` (and with `2/pi` itself rounded), still picks a quadrant whose remainder `|r| <= 1`
/// stays inside the polynomials' range: at `|x| = 2^21` the quadrant estimate is off by at
/// most ~0.1, so `|r| < 0.95`; at `2^22` it would not be. Without FMA the short
/// parts give exact products only for quotients below `2^13`.
fn trig_max_arg(fma: bool) -> f32 {
    if fma {
        2_097_152.0
    } else {
        8_192.0
    }
}

/// Emits vector math. Cheap to copy; holds only the ISA facts the code depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VMath {
    fma: bool,
}

// ---- constants -------------------------------------------------------------------------

use constants::*;

/// The constants of the algorithms, shared with their wide versions in [`crate::wide`].
pub(crate) mod constants {
    pub(crate) const SIGN_MASK: i32 = i32::MIN;
    pub(crate) const ABS_MASK: i32 = i32::MAX;
    /// `1.5 * 2^23`: adding it to `|v| < 2^22` rounds `v` to an integer held in the low mantissa bits.
    pub(crate) const ROUND_MAGIC: f32 = 12_582_912.0;
    pub(crate) const LOG2_E: f32 = std::f32::consts::LOG2_E;
    /// `ln 2` split so that `n * LN2_HI` is exact for `|n| < 2^15` (Cephes' split).
    pub(crate) const LN2_HI: f32 = 355.0 / 512.0;
    pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
    /// `exp` input range: below `EXP_LO` the result rounds to 0 (`e^-104 < 2^-150`) and is
    /// selected directly; above `EXP_HI` the input is clamped and the result overflows to inf.
    pub(crate) const EXP_LO: f32 = -104.0;
    pub(crate) const EXP_HI: f32 = 89.0;
    /// `e^r = 1 + r + r^2 P(r)` on `|r| <= ln2/2`; relative error of the fit 3.1e-9.
    pub(crate) const EXP_P: [f32; 5] = [
        4.999_999_4e-1,
        1.666_652_1e-1,
        4.166_839e-2,
        8.368_716e-3,
        1.381_460_2e-3,
    ];
    /// `log(1+f) = f - f^2/2 + f^3 P(f)` on `f in [sqrt(1/2)-1, sqrt(2)-1]`; fit error 7.5e-10.
    pub(crate) const LOG_P: [f32; 9] = [
        3.333_331_3e-1,
        -2.500_001e-1,
        2.000_211_9e-1,
        -1.666_799_6e-1,
        1.421_955_2e-1,
        -1.240_558_85e-1,
        1.188_816_35e-1,
        -1.167_565_66e-1,
        6.746_643e-2,
    ];
    pub(crate) const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
    /// `sin r = r + r^3 S(r^2)` on `|r| <= 1`; fit error 5.9e-11. The range is wider than
    /// `pi/4` because for large `|x|` the rounded `x * 2/pi` can pick a neighbouring quadrant.
    pub(crate) const SIN_S: [f32; 4] = [
        -1.666_666_7e-1,
        8.333_316e-3,
        -1.983_611_6e-4,
        2.694_809_8e-6,
    ];
    /// `cos r = 1 - r^2/2 + r^4 C(r^2)` on `|r| <= 1`; fit error 2.5e-12.
    pub(crate) const COS_C: [f32; 4] = [
        4.166_666_8e-2,
        -1.388_886_5e-3,
        2.479_590_3e-5,
        -2.698_391_5e-7,
    ];
    pub(crate) const TWO_OVER_PI: f32 = std::f32::consts::FRAC_2_PI;
    /// `pi/2 = P1 + P2 + P3` to ~96 bits, each the nearest `f32` to the remainder (FMA path:
    /// `fma(q, -P1, x)` is exact for every integer `q`, the later steps round once each).
    pub(crate) const PIO2_FMA: [f32; 3] = [1.570_796_4, -4.371_139e-8, -1.715_124_5e-15];
    /// `pi/2` in parts for hosts without FMA: the first three have 11 significant bits, so
    /// `q * part` is exact for `|q| < 2^13`; the last carries the remainder (to ~2^-63).
    pub(crate) const PIO2_NO_FMA: [f32; 4] =
        [1.570_312_5, 4.837_513e-4, 7.549_533_6e-8, 2.563_344e-12];
    /// `tanh x` rounds to 1 for `x > 9.01` (`2 e^-2x < 2^-25`); capping `2x` at 20 keeps
    /// `e^2x` normal while `m / (m + 2)` with `m = e^20 - 1` still rounds to exactly 1.
    /// From here on `tanh` is computed as `1 - 2/(m + 2)` (see `Emit::tanh`): tanh(0.625) = 0.555.
    pub(crate) const TANH_SPLIT: f32 = 0.625;

    pub(crate) const TANH_EXP_CAP: f32 = 20.0;
    /// `erf x = x + x A(x^2)` on `|x| <= 0.875`; fit error 2.0e-10.
    pub(crate) const ERF_A: [f32; 7] = [
        1.283_791_7e-1,
        -3.761_263_5e-1,
        1.128_373_3e-1,
        -2.686_158_6e-2,
        5.206_748e-3,
        -8.211_109_7e-4,
        8.675_414_6e-5,
    ];
    pub(crate) const ERF_SMALL: f32 = 0.875;
    /// `erf x = 1 - exp(-H(x - 0.875))` on `[0.875, 4]`, `H ~ -log(erfc)`; expanded at the low
    /// end so the terms do not cancel where `erfc` is large; erf error of the fit 1.9e-9.
    pub(crate) const ERF_H: [f32; 7] = [
        1.532_824_4,
        2.430_219,
        8.265_527e-1,
        4.683_907e-2,
        -1.119_975_65e-2,
        2.037_062_8e-3,
        -2.009_964_4e-4,
    ];
    /// erf rounds to 1 in `f32` well below this, so larger inputs are clamped to it.
    pub(crate) const ERF_CLAMP: f32 = 4.0;
    /// `erfc a = t exp(P(t) - a^2)` with `t = 1 / (1 + a/2)` for `a >= 0`: the Chebyshev
    /// fit of Numerical Recipes' `erfcc`, relative error below 1.2e-7 for every `a >= 0`.
    pub(crate) const ERFC_P: [f32; 10] = [
        -1.265_512_2,
        1.000_023_7,
        3.740_919_6e-1,
        9.678_418e-2,
        -1.862_880_6e-1,
        2.788_680_7e-1,
        -1.135_204,
        1.488_515_9,
        -8.221_522e-1,
        1.708_727_7e-1,
    ];
    /// `erfc` rounds to 0 in `f32` from 10.06 on; larger inputs are clamped to this, which
    /// keeps `a^2` and the exponent finite.
    pub(crate) const ERFC_CLAMP: f32 = 10.5;
    /// `exp` results for `n < -125.5` (`n <= -126`) may be subnormal and are built as integers.
    pub(crate) const EXP_SUBNORMAL_N: f32 = -125.5;
    /// The extra scaling `2^149` that makes a subnormal result's multiples of `2^-149` integers.
    pub(crate) const EXP_SUBNORMAL_SHIFT: i32 = 149;
}

impl VMath {
    /// Vector math using fused multiply-add when `use_fma` (which needs an ISA that has it).
    pub fn new(use_fma: bool) -> VMath {
        VMath { fma: use_fma }
    }

    /// Vector math for `isa`: FMA when the ISA has it.
    pub fn for_isa(isa: &dyn TargetIsa) -> VMath {
        VMath::new(super::jit::isa_has_fma(isa))
    }

    /// Whether fused multiply-add is used.
    pub fn uses_fma(&self) -> bool {
        self.fma
    }

    /// The largest `|x|` for which `sin`/`cos` are accurate; larger inputs give NaN.
    pub fn trig_max_arg(&self) -> f32 {
        trig_max_arg(self.fma)
    }

    /// Emits `f(x)` for an `f32x4` or `f32` value.
    ///
    /// # Panics
    /// If `x` is neither `f32x4` nor `f32`: a bug in the caller's code generator.
    pub fn unary(&self, b: &mut FunctionBuilder<'_>, f: UnaryFn, x: Value) -> Value {
        self.lanewise(b, &[x], |e, v| match f {
            UnaryFn::Exp => e.exp(v[0]),
            UnaryFn::Log => e.log(v[0]),
            UnaryFn::Tanh => e.tanh(v[0]),
            UnaryFn::Erf => e.erf(v[0]),
            UnaryFn::Erfc => e.erfc(v[0]),
            UnaryFn::Sigmoid => e.sigmoid(v[0]),
            UnaryFn::Sin => e.sin_cos(v[0], false),
            UnaryFn::Cos => e.sin_cos(v[0], true),
        })
    }

    /// `e^x`.
    pub fn exp(&self, b: &mut FunctionBuilder<'_>, x: Value) -> Value {
        self.unary(b, UnaryFn::Exp, x)
    }

    /// Natural logarithm.
    pub fn log(&self, b: &mut FunctionBuilder<'_>, x: Value) -> Value {
        self.unary(b, UnaryFn::Log, x)
    }

    /// Hyperbolic tangent.
    pub fn tanh(&self, b: &mut FunctionBuilder<'_>, x: Value) -> Value {
        self.unary(b, UnaryFn::Tanh, x)
    }

    /// The error function.
    pub fn erf(&self, b: &mut FunctionBuilder<'_>, x: Value) -> Value {
        self.unary(b, UnaryFn::Erf, x)
    }

    /// The complementary error function.
    pub fn erfc(&self, b: &mut FunctionBuilder<'_>, x: Value) -> Value {
        self.unary(b, UnaryFn::Erfc, x)
    }

    /// The logistic sigmoid.
    pub fn sigmoid(&self, b: &mut FunctionBuilder<'_>, x: Value) -> Value {
        self.unary(b, UnaryFn::Sigmoid, x)
    }

    /// Sine.
    pub fn sin(&self, b: &mut FunctionBuilder<'_>, x: Value) -> Value {
        self.unary(b, UnaryFn::Sin, x)
    }

    /// Cosine.
    pub fn cos(&self, b: &mut FunctionBuilder<'_>, x: Value) -> Value {
        self.unary(b, UnaryFn::Cos, x)
    }

    /// `x^y` with C99 special cases (negative `x` with integer `y` included).
    pub fn pow(&self, b: &mut FunctionBuilder<'_>, x: Value, y: Value) -> Value {
        self.lanewise(b, &[x, y], |e, v| e.pow(v[0], v[1]))
    }

    /// NaN-propagating maximum (`torch.maximum`).
    pub fn maximum(&self, b: &mut FunctionBuilder<'_>, x: Value, y: Value) -> Value {
        self.lanewise(b, &[x, y], |e, v| e.max_min(v[0], v[1], true))
    }

    /// NaN-propagating minimum (`torch.minimum`).
    pub fn minimum(&self, b: &mut FunctionBuilder<'_>, x: Value, y: Value) -> Value {
        self.lanewise(b, &[x, y], |e, v| e.max_min(v[0], v[1], false))
    }

    /// Runs `body` on `f32x4` versions of `args` (splatting `f32` inputs) and returns a value
    /// of the inputs' type.
    fn lanewise<F>(&self, b: &mut FunctionBuilder<'_>, args: &[Value], body: F) -> Value
    where
        F: FnOnce(&mut Emit<'_, '_>, &[Value]) -> Value,
    {
        let ty = b.func.dfg.value_type(args[0]);
        assert!(
            ty == types::F32X4 || ty == types::F32,
            "vector math takes f32x4 or f32 values, not {ty}"
        );
        let vectors: Vec<Value> = args
            .iter()
            .map(|&a| {
                if ty == types::F32 {
                    b.ins().splat(types::F32X4, a)
                } else {
                    a
                }
            })
            .collect();
        let mut e = Emit { b, fma: self.fma };
        let result = body(&mut e, &vectors);
        if ty == types::F32 {
            b.ins().extractlane(result, 0)
        } else {
            result
        }
    }
}

/// The emitter: small helpers over `f32x4` (and, for `pow`, `f64x2`) values.
struct Emit<'a, 'f> {
    b: &'a mut FunctionBuilder<'f>,
    fma: bool,
}

impl Emit<'_, '_> {
    // ---- constants and reinterpretation ----

    fn vconst(&mut self, ty: Type, bytes: Vec<u8>) -> Value {
        let constant = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
        self.b.ins().vconst(ty, constant)
    }

    /// An `f32x4` with every lane `c`.
    fn f(&mut self, c: f32) -> Value {
        self.vconst(types::F32X4, c.to_le_bytes().repeat(4))
    }

    /// An `i32x4` with every lane `c`.
    fn i(&mut self, c: i32) -> Value {
        self.vconst(types::I32X4, c.to_le_bytes().repeat(4))
    }

    /// An `f64x2` with both lanes `c`.
    fn d(&mut self, c: f64) -> Value {
        self.vconst(types::F64X2, c.to_le_bytes().repeat(2))
    }

    /// An `i64x2` with both lanes `c`.
    fn l(&mut self, c: i64) -> Value {
        self.vconst(types::I64X2, c.to_le_bytes().repeat(2))
    }

    fn cast(&mut self, ty: Type, v: Value) -> Value {
        let flags = MemFlagsData::new().with_endianness(Endianness::Little);
        self.b.ins().bitcast(ty, flags, v)
    }

    fn bits(&mut self, v: Value) -> Value {
        self.cast(types::I32X4, v)
    }

    fn float(&mut self, v: Value) -> Value {
        self.cast(types::F32X4, v)
    }

    // ---- arithmetic ----

    fn add(&mut self, a: Value, c: Value) -> Value {
        self.b.ins().fadd(a, c)
    }

    fn sub(&mut self, a: Value, c: Value) -> Value {
        self.b.ins().fsub(a, c)
    }

    fn mul(&mut self, a: Value, c: Value) -> Value {
        self.b.ins().fmul(a, c)
    }

    fn div(&mut self, a: Value, c: Value) -> Value {
        self.b.ins().fdiv(a, c)
    }

    /// `a * m + c`, fused when the ISA allows.
    fn mul_add(&mut self, a: Value, m: Value, c: Value) -> Value {
        if self.fma {
            self.b.ins().fma(a, m, c)
        } else {
            let p = self.b.ins().fmul(a, m);
            self.b.ins().fadd(p, c)
        }
    }

    /// `coeffs[0] + x * (coeffs[1] + x * ...)` by Horner's rule (works for f32x4 and f64x2).
    fn horner(&mut self, x: Value, coeffs: &[f64], lane: Type) -> Value {
        let k = |e: &mut Self, c: f64| {
            if lane == types::F64X2 {
                e.d(c)
            } else {
                e.f(c as f32)
            }
        };
        let (&last, rest) = coeffs.split_last().expect("a polynomial has coefficients");
        let mut acc = k(self, last);
        for &c in rest.iter().rev() {
            let c = k(self, c);
            acc = self.mul_add(acc, x, c);
        }
        acc
    }

    /// `c[0] + c[1] x + ... + c[8] x^8` by Estrin's scheme, given `x2 = x^2`: four levels
    /// of FMAs instead of Horner's eight, so the chain is half as long (it sits on the
    /// critical path of fused kernels) for two more instructions.
    fn poly_estrin9(&mut self, x: Value, x2: Value, c: &[f32; 9]) -> Value {
        let k: Vec<Value> = c.iter().map(|&v| self.f(v)).collect();
        let a0 = self.mul_add(k[1], x, k[0]);
        let a1 = self.mul_add(k[3], x, k[2]);
        let a2 = self.mul_add(k[5], x, k[4]);
        let a3 = self.mul_add(k[7], x, k[6]);
        let x4 = self.mul(x2, x2);
        let b0 = self.mul_add(a1, x2, a0);
        let b1 = self.mul_add(a3, x2, a2);
        let t = self.mul_add(k[8], x4, b1);
        self.mul_add(t, x4, b0)
    }

    fn poly(&mut self, x: Value, coeffs: &[f32]) -> Value {
        let wide: Vec<f64> = coeffs.iter().map(|&c| c as f64).collect();
        self.horner(x, &wide, types::F32X4)
    }

    // ---- masks and selection ----

    /// Lane mask of `a <cc> b` (all ones where true).
    fn cmp(&mut self, cc: FloatCC, a: Value, c: Value) -> Value {
        self.b.ins().fcmp(cc, a, c)
    }

    /// `mask ? t : f` per lane; `mask` comes from `cmp` (or integer lane masks).
    fn select(&mut self, mask: Value, t: Value, f: Value) -> Value {
        let ty = self.b.func.dfg.value_type(t);
        let mask = if self.b.func.dfg.value_type(mask) == ty {
            mask
        } else {
            self.cast(ty, mask)
        };
        self.b.ins().bitselect(mask, t, f)
    }

    /// `x < lo ? lo : (x > hi ? hi : x)`; NaN passes through (both compares are false).
    fn clamp(&mut self, x: Value, lo: Value, hi: Value) -> Value {
        let below = self.cmp(FloatCC::LessThan, x, lo);
        let x = self.select(below, lo, x);
        let above = self.cmp(FloatCC::GreaterThan, x, hi);
        self.select(above, hi, x)
    }

    /// `mask ? v : 0` per lane, as one `andps`.
    fn keep_where(&mut self, mask: Value, v: Value) -> Value {
        let ty = self.b.func.dfg.value_type(v);
        let mask = if self.b.func.dfg.value_type(mask) == ty {
            mask
        } else {
            self.cast(ty, mask)
        };
        self.b.ins().band(mask, v)
    }

    /// `min(c, x)` where a NaN `x` passes through: `c < x ? c : x`, which x64 lowers to
    /// one `minps c, x` (it returns the second operand when either is NaN).
    fn min_or_nan(&mut self, c: Value, x: Value) -> Value {
        let c_wins = self.cmp(FloatCC::LessThan, c, x);
        self.select(c_wins, c, x)
    }

    /// `max(c, x)` where a NaN `x` passes through: one `maxps c, x`.
    fn max_or_nan(&mut self, c: Value, x: Value) -> Value {
        let c_wins = self.cmp(FloatCC::LessThan, x, c);
        self.select(c_wins, c, x)
    }

    /// The value of `v` when it is a constant with equal lanes (`f32const`, its splat, or a
    /// `vconst`): lets `maximum`/`minimum` with a constant skip their NaN fix-up.
    fn known_constant(&self, v: Value) -> Option<f32> {
        let dfg = &self.b.func.dfg;
        let inst = dfg.value_def(v).inst()?;
        match dfg.insts[inst] {
            InstructionData::UnaryIeee32 {
                opcode: Opcode::F32const,
                imm,
            } => Some(f32::from_bits(imm.bits())),
            InstructionData::Unary {
                opcode: Opcode::Splat,
                arg,
            } => self.known_constant(arg),
            InstructionData::UnaryConst {
                opcode: Opcode::Vconst,
                constant_handle,
            } if dfg.value_type(v) == types::F32X4 => {
                let bytes = dfg.constants.get(constant_handle).as_slice();
                let lane = |k: usize| {
                    u32::from_le_bytes(bytes[4 * k..4 * k + 4].try_into().expect("4 bytes"))
                };
                (0..4)
                    .all(|k| lane(k) == lane(0))
                    .then(|| f32::from_bits(lane(0)))
            }
            _ => None,
        }
    }

    fn band(&mut self, a: Value, c: Value) -> Value {
        self.b.ins().band(a, c)
    }

    fn bor(&mut self, a: Value, c: Value) -> Value {
        self.b.ins().bor(a, c)
    }

    fn bxor(&mut self, a: Value, c: Value) -> Value {
        self.b.ins().bxor(a, c)
    }

    fn abs(&mut self, x: Value) -> Value {
        let bits = self.bits(x);
        let mask = self.i(ABS_MASK);
        let a = self.band(bits, mask);
        self.float(a)
    }

    /// `magnitude` with the sign bit of `sign` (`magnitude` must be non-negative or NaN).
    fn with_sign_of(&mut self, magnitude: Value, sign: Value) -> Value {
        let s = self.bits(sign);
        let m = self.i(SIGN_MASK);
        let s = self.band(s, m);
        let mag = self.bits(magnitude);
        let r = self.bor(mag, s);
        self.float(r)
    }

    /// Rounds `x * m` (with `|x * m| < 2^22`) to the nearest integer, ties to even: returns
    /// the rounded value as `f32x4` and the lanes `bits(magic) + n` from which integer
    /// code extracts `n` (as `bits - bits(magic)`, or shifted left by 23 directly).
    fn round_product(&mut self, x: Value, m: Value) -> (Value, Value) {
        let magic = self.f(ROUND_MAGIC);
        // With FMA the product is rounded only once, inside the addition of the magic
        // number; `n` may then differ from round(fl(x m)) in a tie, which only moves the
        // reduced argument by far less than its range's margin.
        let shifted = self.mul_add(x, m, magic);
        let rounded = self.sub(shifted, magic);
        let shifted_bits = self.bits(shifted);
        (rounded, shifted_bits)
    }

    /// `n` from [`Self::round_product`]'s bits.
    fn rounded_int(&mut self, shifted_bits: Value) -> Value {
        let magic_bits = self.i(ROUND_MAGIC.to_bits() as i32);
        self.b.ins().isub(shifted_bits, magic_bits)
    }

    /// `2^n` for integer lanes `n` in `[-126, 127]`.
    fn pow2(&mut self, n: Value) -> Value {
        let bias = self.i(127);
        let biased = self.b.ins().iadd(n, bias);
        let bits = self.b.ins().ishl_imm_u(biased, 23);
        self.float(bits)
    }

    // ---- the functions ----

    fn exp(&mut self, x: Value) -> Value {
        self.exp_general(x, true)
    }

    /// `e^x` for every input. `may_overflow: false` promises `x <= 0` or NaN (sigmoid).
    fn exp_general(&mut self, x: Value, may_overflow: bool) -> Value {
        self.exp_scaled(x, None, None, may_overflow)
    }

    /// `scale e^(x + lo)`, rounded once, for `lo` below an ulp of `x` (the low part of a
    /// double-`f32` exponent, added to the reduced argument) and `scale` in `[1/8, 1]`,
    /// folded into the first power-of-two scaling (exact: `2^n1 scale` is normal). Results
    /// with `n <= -126` are built as integers as [`Self::exp_general`]'s are; a smaller
    /// `scale` can make a few results of `n` in `[-125, -123]` subnormal too, and those
    /// take the slow path of the last multiply.
    fn exp_scaled(
        &mut self,
        x: Value,
        lo: Option<Value>,
        scale: Option<Value>,
        may_overflow: bool,
    ) -> Value {
        // No lane executes a floating-point operation whose result is subnormal: on x86
        // each one takes a microcode assist (~100 cycles) unless flush-to-zero is on, which
        // made exp of masked (-inf) attention scores 15x slower than of ordinary inputs,
        // and exp of inputs in [-104, -87.3] as slow. Lanes whose result may be subnormal
        // build its bits with integer operations (below); so inputs below EXP_LO can be
        // clamped to it (one `maxps`): their integer result rounds to 0 (e^-104 is 0.485
        // of 2^-149). NaN lanes pass through both clamps.
        let floor = self.f(EXP_LO);
        let mut x = self.max_or_nan(floor, x);
        if may_overflow {
            let hi = self.f(EXP_HI);
            x = self.min_or_nan(hi, x);
        }
        let (q, n, shifted_bits) = self.expm1_reduced_n(x, lo);
        let ni = self.rounded_int(shifted_bits);
        // n is in [-150, 129]: 2^n may not be a normal f32, 2^(n/2) always is, and the first
        // multiply is exact, so an overflowing result rounds once. (Multiplies, not integer
        // adds to y's exponent field: NaN must stay NaN.)
        let n1 = self.b.ins().sshr_imm_u(ni, 1);
        let n2 = self.b.ins().isub(ni, n1);
        let s1 = self.pow2(n1);
        let s1 = match scale {
            Some(t) => self.mul(s1, t),
            None => s1,
        };
        // (1 + q) 2^n1 as q 2^n1 + 2^n1: the same single rounding, one instruction less.
        let y1 = self.mul_add(q, s1, s1);
        // For n <= -126 the result is below 2^-125, where f32 values are the multiples
        // k 2^-149 (subnormal below 2^-126), and the bits of k 2^-149 are the integer k
        // itself. Those lanes scale by 2^(n2 + 149) instead of 2^n2, which gives the normal
        // m = (1 + q) 2^(n + 149) < 2^24 with the same rounding as y1; m rounded to an
        // integer (nearest, ties to even: as the multiply into the subnormal range rounds)
        // is the result's bit pattern. (The float n is an exact integer, or NaN, which
        // compares false.)
        let threshold = self.f(EXP_SUBNORMAL_N);
        let subnormal = self.cmp(FloatCC::LessThan, n, threshold);
        let shift = self.i(EXP_SUBNORMAL_SHIFT);
        let shift = self.keep_where(subnormal, shift);
        let n2 = self.b.ins().iadd(n2, shift);
        let s2 = self.pow2(n2);
        let y = self.mul(y1, s2);
        let k = self.b.ins().nearest(y);
        let k = self.exact_int(k);
        let k = self.float(k);
        self.select(subnormal, k, y)
    }

    /// The `i32x4` of an `f32x4` whose lanes are integers in `i32`'s range.
    fn exact_int(&mut self, v: Value) -> Value {
        if cfg!(target_arch = "x86_64") {
            // One `cvttps2dq` (the saturating conversion adds a NaN and overflow fix-up
            // that these lanes do not need).
            self.b.ins().x86_cvtt2dq(types::I32X4, v)
        } else {
            self.b.ins().fcvt_to_sint_sat(types::I32X4, v)
        }
    }

    /// `e^x` for `x` in `[-87, 88]` or NaN, whose result is a normal number: one scaling.
    /// Callers clamp their arguments into this range (tanh, erf).
    fn exp_bounded(&mut self, x: Value) -> Value {
        let (q, shifted_bits) = self.expm1_reduced(x);
        // bits(magic) + n shifted left by 23 is n << 23 (the magic's bits shift out).
        let e = self.b.ins().ishl_imm_u(shifted_bits, 23);
        let one = self.i(1.0f32.to_bits() as i32);
        let scale = self.b.ins().iadd(e, one);
        let scale = self.float(scale);
        // (1 + q) 2^n as q 2^n + 2^n (one rounding, as for the sum), in floating point
        // rather than as an integer add to the exponent field: NaN must stay NaN.
        self.mul_add(q, scale, scale)
    }

    /// `e^x - 1` for `x` in `[0, 88]` or NaN: `2^n (1 + q) - 1 = 2^n q + (2^n - 1)` with
    /// `q = e^r - 1` (no cancellation for small `x`, where `n = 0` and `r = x`) and
    /// `2^n - 1` exact, rounded once by the final FMA.
    fn expm1_bounded(&mut self, x: Value) -> Value {
        let (q, shifted_bits) = self.expm1_reduced(x);
        let e = self.b.ins().ishl_imm_u(shifted_bits, 23);
        let one_bits = self.i(1.0f32.to_bits() as i32);
        let scale = self.b.ins().iadd(e, one_bits);
        let scale = self.float(scale);
        let one = self.f(1.0);
        let scale_m1 = self.sub(scale, one);
        self.mul_add(scale, q, scale_m1)
    }

    /// `e^r - 1 = r + r^2 P(r)` with `r = x - n ln2`, and the rounding bits of `n`.
    fn expm1_reduced(&mut self, x: Value) -> (Value, Value) {
        let (q, _, shifted_bits) = self.expm1_reduced_n(x, None);
        (q, shifted_bits)
    }

    /// [`Self::expm1_reduced`] of `x + lo`, and `n` as `f32x4`.
    fn expm1_reduced_n(&mut self, x: Value, lo: Option<Value>) -> (Value, Value, Value) {
        let log2e = self.f(LOG2_E);
        let (n, shifted_bits) = self.round_product(x, log2e);
        // r = x - n ln2, exactly in the first step (n * LN2_HI is exact).
        let c1 = self.f(-LN2_HI);
        let r = self.mul_add(n, c1, x);
        let c2 = self.f(-LN2_LO);
        let r = self.mul_add(n, c2, r);
        let r = match lo {
            Some(lo) => self.add(r, lo),
            None => r,
        };
        let p = self.poly(r, &EXP_P);
        let r2 = self.mul(r, r);
        (self.mul_add(p, r2, r), n, shifted_bits)
    }

    /// Splits positive `x` into `m * 2^e` with `m` in `[sqrt(1/2), sqrt(2))`; returns `f = m - 1`
    /// (exact) and `e` as `f32x4`. Subnormal inputs are scaled up first. Zero, negative,
    /// infinite and NaN inputs give meaningless lanes that the callers replace.
    fn split_log_argument(&mut self, x: Value) -> (Value, Value) {
        let min_normal = self.f(f32::MIN_POSITIVE);
        let subnormal = self.cmp(FloatCC::LessThan, x, min_normal);
        let two23 = self.f(8_388_608.0);
        let scaled = self.mul(x, two23);
        let x = self.select(subnormal, scaled, x);
        // Subtracting the bits of sqrt(1/2) moves the exponent boundary there: the shifted
        // exponent field is e, and adding the bits back to the mantissa field gives m.
        let bits = self.bits(x);
        let sqrt_half_bits = self.i(SQRT_HALF.to_bits() as i32);
        let shifted = self.b.ins().isub(bits, sqrt_half_bits);
        let e = self.b.ins().sshr_imm_u(shifted, 23);
        let twenty_three = self.i(23);
        let correction = self.keep_where(subnormal, twenty_three);
        let e = self.b.ins().isub(e, correction);
        let mant_mask = self.i(0x007f_ffff);
        let mant = self.band(shifted, mant_mask);
        let m = self.b.ins().iadd(mant, sqrt_half_bits);
        let m = self.float(m);
        let one = self.f(1.0);
        let f = self.sub(m, one);
        let e = self.b.ins().fcvt_from_sint(types::F32X4, e);
        (f, e)
    }

    fn log(&mut self, x: Value) -> Value {
        let (f, e) = self.split_log_argument(x);
        let z = self.mul(f, f);
        let p = self.poly_estrin9(f, z, &LOG_P);
        let fz = self.mul(f, z);
        let y = self.mul(fz, p);
        let c2 = self.f(LN2_LO);
        let y = self.mul_add(e, c2, y);
        let minus_half = self.f(-0.5);
        let y = self.mul_add(z, minus_half, y);
        let r = self.add(f, y);
        let c1 = self.f(LN2_HI);
        let r = self.mul_add(e, c1, r);
        // Special inputs. x - f32::MAX is below log x for every finite x > 0, and is +inf for
        // +inf and NaN for NaN, so max(r, x - MAX) (one `maxps`, which returns its second
        // operand when that is NaN) fixes +inf; then negative or NaN inputs become NaN
        // (all ones is a NaN), and +-0 gives -inf.
        let max = self.f(f32::MAX);
        let t = self.sub(x, max);
        let r = self.max_or_nan(r, t);
        let zero = self.f(0.0);
        let invalid = self.cmp(FloatCC::UnorderedOrLessThan, x, zero);
        let invalid = self.cast(types::F32X4, invalid);
        let r = self.bor(r, invalid);
        let is_zero = self.cmp(FloatCC::Equal, x, zero);
        let neg_inf = self.f(f32::NEG_INFINITY);
        self.select(is_zero, neg_inf, r)
    }

    /// `sin(x)`, or `cos(x)` when `cosine`, by quadrant reduction.
    fn sin_cos(&mut self, x: Value, cosine: bool) -> Value {
        let two_over_pi = self.f(TWO_OVER_PI);
        let (q, q_bits) = self.round_product(x, two_over_pi);
        let qi = self.rounded_int(q_bits);
        // r = x - q pi/2 in three steps; with FMA the first is exact for any q, without it the
        // parts are short enough for exact products up to the documented limit.
        let parts: &[f32] = if self.fma { &PIO2_FMA } else { &PIO2_NO_FMA };
        let mut r = x;
        for &part in parts {
            let c = self.f(-part);
            r = self.mul_add(q, c, r);
        }
        let z = self.mul(r, r);
        // sin r = r + r^3 S(z)
        let s = self.poly(z, &SIN_S);
        let rz = self.mul(r, z);
        let sin_r = self.mul_add(rz, s, r);
        // cos r = 1 - z/2 + z^2 C(z)
        let c = self.poly(z, &COS_C);
        let z2 = self.mul(z, z);
        let minus_half = self.f(-0.5);
        let one = self.f(1.0);
        let h = self.mul_add(z, minus_half, one);
        let cos_r = self.mul_add(z2, c, h);
        // Quadrant k = q (+1 for cosine): odd k takes cos r, k & 2 negates.
        let k = if cosine {
            let one_i = self.i(1);
            self.b.ins().iadd(qi, one_i)
        } else {
            qi
        };
        let one_i = self.i(1);
        let odd = self.band(k, one_i);
        let zero_i = self.i(0);
        let use_cos = self.b.ins().icmp(
            cranelift_codegen::ir::condcodes::IntCC::NotEqual,
            odd,
            zero_i,
        );
        let v = self.select(use_cos, cos_r, sin_r);
        let sign = self.b.ins().ishl_imm_u(k, 30);
        let sign_mask = self.i(SIGN_MASK);
        let sign = self.band(sign, sign_mask);
        let v_bits = self.bits(v);
        let v = self.bxor(v_bits, sign);
        let mut v = self.float(v);
        if !cosine {
            // x + x * (...) turns -0 into +0; sin(-0) must be -0.
            let zero = self.f(0.0);
            let is_zero = self.cmp(FloatCC::Equal, x, zero);
            v = self.select(is_zero, x, v);
        }
        // Beyond the reduction's range (including infinities) the phase is unknown: NaN.
        let a = self.abs(x);
        let limit = self.f(trig_max_arg(self.fma));
        let out_of_range = self.cmp(FloatCC::GreaterThan, a, limit);
        let nan = self.f(f32::NAN);
        self.select(out_of_range, nan, v)
    }

    fn tanh(&mut self, x: Value) -> Value {
        // tanh a = m / (m + 2) with m = expm1(2a), a = |x|: expm1 has no cancellation near
        // 0, so one polynomial serves the whole range. Near saturation the quotient is a
        // ratio of two nearly equal large numbers whose rounding decides between 1 - 2^-24
        // and 1 (tanh(9) must round to 1 - 2^-24; the fused-vs-interpreter fuzz caught
        // floor(tanh(9)) = 1), so from a = TANH_SPLIT on, where tanh >= 1/2 and the
        // subtraction is exact, it is 1 - 2/(m + 2): still one division, with its
        // numerator selected. tanh rounds to 1 for a > 9.01, so 2a is capped at
        // TANH_EXP_CAP (NaN passes), which keeps e^(2a) normal.
        let a = self.abs(x);
        let two_a = self.add(a, a);
        let cap = self.f(TANH_EXP_CAP);
        let two_a = self.min_or_nan(cap, two_a);
        let m = self.expm1_bounded(two_a);
        let two = self.f(2.0);
        let d = self.add(m, two);
        let split = self.f(TANH_SPLIT);
        let big = self.cmp(FloatCC::GreaterThanOrEqual, a, split);
        let n = self.select(big, two, m);
        let q = self.div(n, d);
        let one = self.f(1.0);
        let one_minus_q = self.sub(one, q);
        let v = self.select(big, one_minus_q, q);
        // The sign bit of x is x ^ |x|.
        let x_bits = self.bits(x);
        let a_bits = self.bits(a);
        let sign = self.bxor(x_bits, a_bits);
        let v_bits = self.bits(v);
        let r = self.bor(v_bits, sign);
        self.float(r)
    }

    fn sigmoid(&mut self, x: Value) -> Value {
        let a = self.abs(x);
        let zero = self.f(0.0);
        let minus_a = self.sub(zero, a);
        // -|x| <= 0: exp cannot overflow, but may underflow (subnormal results are kept).
        let e = self.exp_general(minus_a, false);
        let one = self.f(1.0);
        let nonneg = self.cmp(FloatCC::GreaterThanOrEqual, x, zero);
        let numerator = self.select(nonneg, one, e);
        let denominator = self.add(one, e);
        self.div(numerator, denominator)
    }

    fn erf(&mut self, x: Value) -> Value {
        let a = self.abs(x);
        // Small: a + a A(a^2).
        let z = self.mul(a, a);
        let p = self.poly(z, &ERF_A);
        let small_value = self.mul_add(a, p, a);
        // Large: 1 - exp(-H(min(a, 4) - 0.875)); H stays below 17 there, so exp's result
        // is normal. min passes NaN through.
        let clamp = self.f(ERF_CLAMP);
        let ac = self.min_or_nan(clamp, a);
        let small_limit = self.f(ERF_SMALL);
        let t = self.sub(ac, small_limit);
        let h = self.poly(t, &ERF_H);
        let zero = self.f(0.0);
        let minus_h = self.sub(zero, h);
        let e = self.exp_bounded(minus_h);
        let one = self.f(1.0);
        let large_value = self.sub(one, e);
        let small = self.cmp(FloatCC::LessThan, a, small_limit);
        let v = self.select(small, small_value, large_value);
        self.with_sign_of(v, x)
    }

    /// `(hi, lo)` with `hi + lo = a * a` exactly (for `|a| < 2^60`): the residual by FMA,
    /// or by Dekker's split without it.
    fn two_square(&mut self, a: Value) -> (Value, Value) {
        let hi = self.mul(a, a);
        let zero = self.f(0.0);
        let minus_hi = self.sub(zero, hi);
        if self.fma {
            return (hi, self.b.ins().fma(a, a, minus_hi));
        }
        // a = ah + al with ah of 12 significant bits: ah^2, 2 ah al and al^2 are exact.
        let split = self.f(4097.0);
        let c = self.mul(a, split);
        let c_minus_a = self.sub(c, a);
        let ah = self.sub(c, c_minus_a);
        let al = self.sub(a, ah);
        let ah2 = self.mul(ah, ah);
        let e = self.add(ah2, minus_hi);
        let two_ah = self.add(ah, ah);
        let cross = self.mul(two_ah, al);
        let e = self.add(e, cross);
        let al2 = self.mul(al, al);
        (hi, self.add(e, al2))
    }

    fn erfc(&mut self, x: Value) -> Value {
        // erfc a = t exp(P(t) - a^2), t = 1 / (1 + a/2), a = min(|x|, 10.5) (NaN passes),
        // from 0.875 on; erfc(x) = 2 - erfc(-x) for x < 0. At a = 10 the exponent is about -101, whose
        // rounding to f32 alone would cost 4e-6 of relative error, so it is kept as a
        // double-f32: a^2 exactly as hi + lo, P - hi by TwoSum, and the low parts added
        // to the reduced argument of exp. t is folded into exp's first scaling, so
        // subnormal results are built as integers as exp's are (no slow assists).
        let a = self.abs(x);
        let cap = self.f(ERFC_CLAMP);
        let a = self.min_or_nan(cap, a);
        let half = self.f(0.5);
        let one = self.f(1.0);
        let d = self.mul_add(a, half, one);
        let t = self.div(one, d);
        let p = self.poly(t, &ERFC_P);
        let (hi, lo) = self.two_square(a);
        // s + err = p - hi exactly.
        let s = self.sub(p, hi);
        let p_part = self.add(s, hi);
        let hi_part = self.sub(s, p_part);
        let p_err = self.sub(p, p_part);
        let hi_err = self.add(hi, hi_part);
        let err = self.sub(p_err, hi_err);
        let low = self.sub(err, lo);
        let large_value = self.exp_scaled(s, Some(low), Some(t), false);
        // Below 0.875 the terms of P(t) cancel (P(1) = 0); 1 - erf a = (1 - a) - a A(a^2)
        // with erf's small-argument polynomial is within 2 ulp there.
        let p_small = self.poly(hi, &ERF_A);
        let zero = self.f(0.0);
        let minus_a = self.sub(zero, a);
        let one_minus_a = self.sub(one, a);
        let small_value = self.mul_add(minus_a, p_small, one_minus_a);
        let small_limit = self.f(ERF_SMALL);
        let small = self.cmp(FloatCC::LessThan, a, small_limit);
        let r = self.select(small, small_value, large_value);
        let negative = self.cmp(FloatCC::LessThan, x, zero);
        let two = self.f(2.0);
        let reflected = self.sub(two, r);
        self.select(negative, reflected, r)
    }

    /// IEEE 754-2019 `maximum` (or `minimum`): NaN wins, as in `torch.maximum`, and
    /// -0 < +0, so the result does not depend on the operands' order.
    fn max_min(&mut self, x: Value, y: Value, max: bool) -> Value {
        // With a constant that is neither NaN nor zero one instruction does: `maxps c, x`
        // returns x when x is NaN and when the two are equal, and then they are bitwise
        // equal.
        let plain = |c: Option<f32>| c.filter(|c| !c.is_nan() && *c != 0.0);
        let (cx, cy) = (self.known_constant(x), self.known_constant(y));
        let c = match (plain(cx), plain(cy)) {
            (Some(_), _) => Some((x, y)),
            (None, Some(_)) => Some((y, x)),
            _ => None,
        };
        if let Some((c, other)) = c {
            return if max {
                self.max_or_nan(c, other)
            } else {
                self.min_or_nan(c, other)
            };
        }
        let positive_zero = |c: Option<f32>| c.is_some_and(|c| c == 0.0 && c.is_sign_positive());
        if max && (positive_zero(cx) || positive_zero(cy)) {
            // max(x, +0) (relu) keeps x when x > 0 or NaN, else +0 (for x = -0 too): one
            // compare and one `andps`.
            let (v, zero) = if positive_zero(cy) { (x, y) } else { (y, x) };
            let keep = self.cmp(FloatCC::UnorderedOrGreaterThan, v, zero);
            return self.keep_where(keep, v);
        }
        // `y < x ? x : y` is exactly maxps(x, y) (and `x < y ? x : y` minps), which return
        // the second operand when either is NaN or both are zeros. maxps(x, y) and
        // maxps(y, x) differ only there: their `and` is the maximum of two zeros (+0 wins;
        // for a minimum their `or`, -0 wins), and lanes where either is NaN take the
        // canonical NaN, as the interpreter's. Five instructions, where testing for equal
        // lanes and fixing up x's NaN took six (a max pool is a chain of eight).
        let (x_wins, y_wins) = if max {
            (
                self.cmp(FloatCC::LessThan, y, x),
                self.cmp(FloatCC::LessThan, x, y),
            )
        } else {
            (
                self.cmp(FloatCC::LessThan, x, y),
                self.cmp(FloatCC::LessThan, y, x),
            )
        };
        let xy = self.select(x_wins, x, y);
        let yx = self.select(y_wins, y, x);
        let m = if max {
            self.band(xy, yx)
        } else {
            self.bor(xy, yx)
        };
        let nan = self.cmp(FloatCC::Unordered, x, y);
        let canonical = self.f(f32::NAN);
        self.select(nan, canonical, m)
    }

    // ---- pow, in f64 ----

    fn pow(&mut self, x: Value, y: Value) -> Value {
        let a = self.abs(x);
        let (f, e) = self.split_log_argument(a);
        let low = self.pow_core_half(f, e, y, false);
        let high = self.pow_core_half(f, e, y, true);
        // Lanes 0-1 of `low` and of `high` hold the four results.
        let mask = self.b.func.dfg.immediates.push(ConstantData::from(
            (0u8..8).chain(16..24).collect::<Vec<u8>>(),
        ));
        let low_bytes = self.cast(types::I8X16, low);
        let high_bytes = self.cast(types::I8X16, high);
        let joined = self.b.ins().shuffle(low_bytes, high_bytes, mask);
        let core = self.float(joined);
        self.pow_special_cases(x, y, a, core)
    }

    /// Moves lanes 2-3 of an `f32x4` to lanes 0-1 (for widening the high half).
    fn high_half(&mut self, v: Value) -> Value {
        let mask = self.b.func.dfg.immediates.push(ConstantData::from(
            (8u8..16).chain(8..16).collect::<Vec<u8>>(),
        ));
        let bytes = self.cast(types::I8X16, v);
        let moved = self.b.ins().shuffle(bytes, bytes, mask);
        self.float(moved)
    }

    /// `exp(y * log(m 2^e))` for two lanes, in `f64`, rounded to `f32` in lanes 0-1.
    fn pow_core_half(&mut self, f: Value, e: Value, y: Value, high: bool) -> Value {
        let (f, e, y) = if high {
            (self.high_half(f), self.high_half(e), self.high_half(y))
        } else {
            (f, e, y)
        };
        let f = self.b.ins().fvpromote_low(f);
        let e = self.b.ins().fvpromote_low(e);
        let y = self.b.ins().fvpromote_low(y);
        let log = self.log_f64(f, e);
        let t = self.b.ins().fmul(y, log);
        let r = self.exp_f64(t);
        self.b.ins().fvdemote(r)
    }

    /// `log(1 + f) + e ln2` for `f64x2` lanes, `1 + f` in `[sqrt(1/2), sqrt(2))`: with
    /// `s = f / (2 + f)`, `log(1 + f) = 2 atanh(s) = 2s (1 + s^2/3 + s^4/5 + ...)`, `s^2 < 0.03`,
    /// so eight terms leave a relative error below 2^-40.
    fn log_f64(&mut self, f: Value, e: Value) -> Value {
        let two = self.d(2.0);
        let denominator = self.b.ins().fadd(two, f);
        let s = self.b.ins().fdiv(f, denominator);
        let w = self.b.ins().fmul(s, s);
        let series: Vec<f64> = (0..8).map(|k| 1.0 / (2 * k + 1) as f64).collect();
        let q = self.horner(w, &series, types::F64X2);
        let two_s = self.b.ins().fadd(s, s);
        let log_m = self.b.ins().fmul(two_s, q);
        let ln2 = self.d(std::f64::consts::LN_2);
        self.mul_add(e, ln2, log_m)
    }

    /// `e^t` for `f64x2` lanes, accurate to ~2^-45 relative; clamped so that the result,
    /// once rounded to `f32`, is `inf` or `0` outside the `f32` range. NaN passes through.
    fn exp_f64(&mut self, t: Value) -> Value {
        let (lo, hi) = (self.d(-160.0), self.d(130.0));
        let t = self.clamp(t, lo, hi);
        let log2e = self.d(std::f64::consts::LOG2_E);
        let scaled = self.b.ins().fmul(t, log2e);
        let n = self.b.ins().nearest(scaled);
        // ln2 = LN2_HI + LN2_LO with LN2_HI's low 21 bits zero, so n * LN2_HI is exact.
        let hi_part = self.d(-f64::from_bits(0x3fe6_2e42_fee0_0000));
        let lo_part = self.d(-1.908_214_929_270_587_7e-10);
        let r = self.mul_add(n, hi_part, t);
        let r = self.mul_add(n, lo_part, r);
        // Taylor series to r^11/11!: |r| <= 0.35 leaves an error below 2^-45.
        let mut factorial = 1.0f64;
        let taylor: Vec<f64> = (0..12)
            .map(|k| {
                if k > 0 {
                    factorial *= k as f64;
                }
                1.0 / factorial
            })
            .collect();
        let p = self.horner(r, &taylor, types::F64X2);
        // 2^n from the bits: n + 1.5*2^52 holds n in its low mantissa bits.
        let magic = self.d(6_755_399_441_055_744.0);
        let shifted = self.b.ins().fadd(n, magic);
        let shifted_bits = self.cast(types::I64X2, shifted);
        let magic_bits = self.l(6_755_399_441_055_744.0f64.to_bits() as i64 - 1023);
        let biased = self.b.ins().isub(shifted_bits, magic_bits);
        let scale_bits = self.b.ins().ishl_imm_u(biased, 52);
        let scale = self.cast(types::F64X2, scale_bits);
        self.b.ins().fmul(p, scale)
    }

    /// Applies C99 `pow` special cases to `core = |x|^y` (computed for finite positive `|x|`).
    fn pow_special_cases(&mut self, x: Value, y: Value, a: Value, core: Value) -> Value {
        let zero = self.f(0.0);
        let one = self.f(1.0);
        let inf = self.f(f32::INFINITY);
        let nan = self.f(f32::NAN);
        // |x| = 0 or inf: the result is 0 or inf, by whether |x| and y push the same way.
        let is_zero = self.cmp(FloatCC::Equal, a, zero);
        let is_inf = self.cmp(FloatCC::Equal, a, inf);
        let y_pos = self.cmp(FloatCC::GreaterThan, y, zero);
        let y_neg = self.cmp(FloatCC::LessThan, y, zero);
        let grows = self.select(is_inf, y_pos, y_neg);
        let zero_or_inf = self.select(grows, inf, zero);
        let extreme = self.bor(is_zero, is_inf);
        let r = self.select(extreme, zero_or_inf, core);
        // Negative x (including -0 and -inf) with odd integer y: negate.
        let fy = self.b.ins().floor(y);
        let half = self.f(0.5);
        let hy = self.mul(y, half);
        let fhy = self.b.ins().floor(hy);
        let y_int = self.cmp(FloatCC::Equal, fy, y);
        let half_not_int = self.cmp(FloatCC::NotEqual, fhy, hy);
        let y_odd = self.band(y_int, half_not_int);
        let x_bits = self.bits(x);
        let sign_mask = self.i(SIGN_MASK);
        let x_sign = self.band(x_bits, sign_mask);
        let flip = self.band(x_sign, y_odd);
        let r_bits = self.bits(r);
        let r = self.bxor(r_bits, flip);
        let r = self.float(r);
        // Finite negative x with non-integer y, or any NaN input: NaN.
        let x_neg = self.cmp(FloatCC::LessThan, x, zero);
        let neg_inf = self.f(f32::NEG_INFINITY);
        let x_finite = self.cmp(FloatCC::NotEqual, x, neg_inf);
        let y_not_int = self.cmp(FloatCC::NotEqual, fy, y);
        let bad = self.band(x_neg, x_finite);
        let bad = self.band(bad, y_not_int);
        let any_nan = self.cmp(FloatCC::Unordered, x, y);
        let bad = self.bor(bad, any_nan);
        let r = self.select(bad, nan, r);
        // x = 1, y = 0, or x = -1 with y = +-inf: exactly 1, even for NaN operands.
        let x_one = self.cmp(FloatCC::Equal, x, one);
        let y_zero = self.cmp(FloatCC::Equal, y, zero);
        let minus_one = self.f(-1.0);
        let x_minus_one = self.cmp(FloatCC::Equal, x, minus_one);
        let ay = self.abs(y);
        let y_inf = self.cmp(FloatCC::Equal, ay, inf);
        let unit = self.band(x_minus_one, y_inf);
        let unit = self.bor(unit, x_one);
        let unit = self.bor(unit, y_zero);
        self.select(unit, one, r)
    }
}
