//! Full-width vector math compiled by rustc: the algorithms of [`crate::vmath`] on 256-bit
//! (AVX2 + FMA) and 512-bit (AVX-512F) vectors, which Cranelift cannot emit (it gives
//! 128-bit vectors on x86-64).
//!
//! Each routine is the same sequence of operations as its `f32x4` Cranelift counterpart
//! with FMA (same constants, same order, same selects), so it gives the same bits lane for
//! lane (NaN payloads aside, which no target specifies); `tests/wide.rs` checks that over a
//! sweep of bit patterns and special values, at every width the host supports. A routine
//! maps a slice to a slice of the same length; the tail shorter than a vector is padded
//! into a stack buffer, so it gets the same bits too. The routines keep no state: they are
//! reentrant and may run on any number of threads at once.
//!
//! The width is chosen once per process ([`Isa::host`]): the widest the CPU has, capped by
//! the environment variable `FERRITE_CPU_ISA` (`sse`, `avx2` or `avx512`; `sse` means no
//! wide routine, so callers use the Cranelift code). Asking for a width the CPU lacks
//! gives the widest it has.
//!
//! Only `exp`, `log`, `tanh`, `erf`, `erfc` and `sigmoid` have wide routines (the functions of
//! [`UnaryFn`] whose vector math is pure `f32` lane arithmetic). Beside them, the row routines
//! of generated code ([`row_routine`], [`exp_sum_routine`], [`scale_routine`],
//! [`offset_routine`], [`chain_routine`]) run whole passes of a row in the JIT's order.

use std::sync::OnceLock;

use crate::vmath::UnaryFn;

/// The environment variable that caps the vector width of the wide routines.
pub const ISA_VAR: &str = "FERRITE_CPU_ISA";

/// A vector width for the wide routines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// 128-bit SSE: no wide routine (Cranelift's `f32x4` code).
    Sse,
    /// 256-bit AVX2 with FMA.
    Avx2,
    /// 512-bit AVX-512F.
    Avx512,
}

impl Isa {
    /// Every width, narrowest first.
    pub const ALL: [Isa; 3] = [Isa::Sse, Isa::Avx2, Isa::Avx512];

    /// The name `FERRITE_CPU_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Sse => "sse",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses a `FERRITE_CPU_ISA` value.
    pub fn parse(s: &str) -> Option<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether this CPU can run routines of this width.
    pub fn supported(self) -> bool {
        match self {
            Isa::Sse => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The widest supported width.
    pub fn widest() -> Isa {
        Isa::ALL
            .into_iter()
            .rev()
            .find(|isa| isa.supported())
            .unwrap_or(Isa::Sse)
    }

    /// The process's width: [`Isa::widest`], capped by `FERRITE_CPU_ISA` when it is set to
    /// a known name (an unknown name is ignored). Read once.
    pub fn host() -> Isa {
        static HOST: OnceLock<Isa> = OnceLock::new();
        *HOST.get_or_init(|| {
            let widest = Isa::widest();
            match std::env::var(ISA_VAR).ok().as_deref().and_then(Isa::parse) {
                Some(cap) => cap.min(widest),
                None => widest,
            }
        })
    }
}

/// The routine `avx2` or `avx512` for `isa`, when this CPU supports the width (`None` at
/// SSE): every routine lookup below.
#[cfg(target_arch = "x86_64")]
fn by_width<T>(isa: Isa, avx2: T, avx512: T) -> Option<T> {
    match isa {
        _ if !isa.supported() => None,
        Isa::Sse => None,
        Isa::Avx2 => Some(avx2),
        Isa::Avx512 => Some(avx512),
    }
}

/// A wide routine: `out[i] = f(xs[i])`. Panics if the lengths differ.
pub type WideFn = fn(&[f32], &mut [f32]);

/// The routine for `f` at width `isa`, if there is one and this CPU supports the width.
pub fn routine(f: UnaryFn, isa: Isa) -> Option<WideFn> {
    #[cfg(target_arch = "x86_64")]
    {
        let pick = |avx2: WideFn, avx512: WideFn| by_width(isa, avx2, avx512);
        match f {
            UnaryFn::Exp => pick(avx2::exp_slice, avx512::exp_slice),
            UnaryFn::Log => pick(avx2::log_slice, avx512::log_slice),
            UnaryFn::Tanh => pick(avx2::tanh_slice, avx512::tanh_slice),
            UnaryFn::Erf => pick(avx2::erf_slice, avx512::erf_slice),
            UnaryFn::Erfc => pick(avx2::erfc_slice, avx512::erfc_slice),
            UnaryFn::Sigmoid => pick(avx2::sigmoid_slice, avx512::sigmoid_slice),
            UnaryFn::Sin | UnaryFn::Cos => None,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (f, isa);
        None
    }
}

/// An in-place wide routine with the C calling convention, for generated code:
/// `xs[i] = f(xs[i])` for the `n` floats at `xs`.
///
/// Calling it is `unsafe`: `xs` must point to `n` readable and writable floats that
/// nothing else accesses during the call.
pub type InPlaceFn = unsafe extern "C" fn(xs: *mut f32, n: usize);

/// The in-place routine for `f` at width `isa` (the same bits as [`routine`]'s), if
/// there is one and this CPU supports the width.
pub fn in_place_routine(f: UnaryFn, isa: Isa) -> Option<InPlaceFn> {
    #[cfg(target_arch = "x86_64")]
    {
        let pick = |avx2: InPlaceFn, avx512: InPlaceFn| by_width(isa, avx2, avx512);
        match f {
            UnaryFn::Exp => pick(avx2::exp_in_place, avx512::exp_in_place),
            UnaryFn::Log => pick(avx2::log_in_place, avx512::log_in_place),
            UnaryFn::Tanh => pick(avx2::tanh_in_place, avx512::tanh_in_place),
            UnaryFn::Erf => pick(avx2::erf_in_place, avx512::erf_in_place),
            UnaryFn::Erfc => pick(avx2::erfc_in_place, avx512::erfc_in_place),
            UnaryFn::Sigmoid => pick(avx2::sigmoid_in_place, avx512::sigmoid_in_place),
            UnaryFn::Sin | UnaryFn::Cos => None,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (f, isa);
        None
    }
}

/// A row reduction with the C calling convention, for generated code: the sum, max or
/// min of the `n` floats at `xs`, in the order of the JIT's vector loop
/// ([`crate::row_order`]).
///
/// Calling it is `unsafe`: `xs` must point to `n` readable floats.
pub type RowFn = unsafe extern "C" fn(xs: *const f32, n: usize) -> f32;

/// What a [`RowFn`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowReduce {
    Sum,
    Max,
    Min,
}

impl RowReduce {
    /// Its name in plan notes.
    pub fn name(self) -> &'static str {
        match self {
            RowReduce::Sum => "sum",
            RowReduce::Max => "max",
            RowReduce::Min => "min",
        }
    }
}

/// The row reduction `r` at width `isa`, if this CPU supports the width.
pub fn row_routine(r: RowReduce, isa: Isa) -> Option<RowFn> {
    #[cfg(target_arch = "x86_64")]
    {
        let pick = |avx2: RowFn, avx512: RowFn| by_width(isa, avx2, avx512);
        match r {
            RowReduce::Sum => pick(avx2::row_sum, avx512::row_sum),
            RowReduce::Max => pick(avx2::row_max, avx512::row_max),
            RowReduce::Min => pick(avx2::row_min, avx512::row_min),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (r, isa);
        None
    }
}

/// `out[j] = exp(xs[j] - c)` over `n` floats (no stores when `out` is null), returning
/// their sum in the JIT's order: the middle of a softmax row as one routine call.
///
/// Calling it is `unsafe`: `xs` must point to `n` readable floats and `out` be null or
/// point to `n` writable floats apart from them that nothing else accesses during the call.
pub type ExpSumFn = unsafe extern "C" fn(xs: *const f32, c: f32, out: *mut f32, n: usize) -> f32;

/// The [`ExpSumFn`] at width `isa`, if this CPU supports the width.
pub fn exp_sum_routine(isa: Isa) -> Option<ExpSumFn> {
    #[cfg(target_arch = "x86_64")]
    {
        by_width(
            isa,
            avx2::exp_sub_sum as ExpSumFn,
            avx512::exp_sub_sum as ExpSumFn,
        )
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        None
    }
}

/// `out[j] = (v < below ? zero : v) * k` (or `/ k`) with `v = xs[j]` or `v = exp(xs[j] -
/// c)` over `n` floats, for generated code: the last pass of a softmax row (`below = -inf`
/// for no select).
///
/// Calling it is `unsafe`: `xs` must point to `n` readable floats and `out` to `n`
/// writable floats apart from them that nothing else accesses during the call.
pub type ScaleFn = unsafe extern "C" fn(
    xs: *const f32,
    c: f32,
    below: f32,
    zero: f32,
    k: f32,
    out: *mut f32,
    n: usize,
);

/// The [`ScaleFn`] that multiplies (`div` false) or divides by `k`, of `exp(x - c)`
/// (`exp`) or of `x`, at width `isa`, if this CPU supports the width.
pub fn scale_routine(div: bool, exp: bool, isa: Isa) -> Option<ScaleFn> {
    #[cfg(target_arch = "x86_64")]
    {
        let i = usize::from(div) + 2 * usize::from(exp);
        let avx2: [ScaleFn; 4] = [
            avx2::scale_mul,
            avx2::scale_div,
            avx2::exp_scale_mul,
            avx2::exp_scale_div,
        ];
        let avx512: [ScaleFn; 4] = [
            avx512::scale_mul,
            avx512::scale_div,
            avx512::exp_scale_mul,
            avx512::exp_scale_div,
        ];
        by_width(isa, avx2[i], avx512[i])
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (div, exp, isa);
        None
    }
}

/// `out[j] = (xs[j] - a) - b` over `n` floats, for generated code: a log-softmax row's
/// last pass.
///
/// Calling it is `unsafe`: `xs` must point to `n` readable floats and `out` to `n`
/// writable floats apart from them that nothing else accesses during the call.
pub type OffsetFn = unsafe extern "C" fn(xs: *const f32, a: f32, b: f32, out: *mut f32, n: usize);

/// The [`OffsetFn`] at width `isa`, if this CPU supports the width.
pub fn offset_routine(isa: Isa) -> Option<OffsetFn> {
    #[cfg(target_arch = "x86_64")]
    {
        by_width(isa, avx2::offset as OffsetFn, avx512::offset as OffsetFn)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        None
    }
}

/// The most steps of a [`ChainArgs`].
pub const MAX_CHAIN_STEPS: usize = 8;

/// What one step of a chain row does to the row's value `v` with its operand `a`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ChainOp {
    /// `v + a` (also `a + v`: the same bits).
    Add = 0,
    /// `v - a`.
    Sub = 1,
    /// `a - v`.
    SubFrom = 2,
    /// `v * a` (also `a * v`).
    Mul = 3,
    /// `v / a`.
    Div = 4,
    /// `a / v`.
    DivInto = 5,
    /// `v * v` (no operand).
    Square = 6,
    /// `v < a ? a : v`: `maximum(v, a)` for a constant `a` neither NaN nor zero, as the
    /// JIT computes it (`maxps a, v`: a NaN `v` passes).
    MaxConst = 7,
    /// `a < v ? a : v`: `minimum(v, a)` for such a constant.
    MinConst = 8,
    /// `v` where `v > 0` or NaN, else `+0`: `maximum(v, +0)` (a ReLU), as the JIT computes
    /// it (no operand).
    Relu = 9,
}

impl ChainOp {
    /// The step as text over the value `v` and its operand `a`.
    pub fn show(self, v: &str, a: &str) -> String {
        match self {
            ChainOp::Add => format!("{v} + {a}"),
            ChainOp::Sub => format!("{v} - {a}"),
            ChainOp::SubFrom => format!("{a} - {v}"),
            ChainOp::Mul => format!("{v} * {a}"),
            ChainOp::Div => format!("{v} / {a}"),
            ChainOp::DivInto => format!("{a} / {v}"),
            ChainOp::Square => format!("square({v})"),
            ChainOp::Relu => format!("relu({v})"),
            ChainOp::MaxConst => format!("maximum({v}, {a})"),
            ChainOp::MinConst => format!("minimum({v}, {a})"),
        }
    }

    /// Whether the step is written as a function of the value (`square(v)`,
    /// `maximum(v, a)`), which needs no parentheses around or inside it.
    pub fn function_form(self) -> bool {
        matches!(
            self,
            ChainOp::Square | ChainOp::Relu | ChainOp::MaxConst | ChainOp::MinConst
        )
    }
}

/// One step of a chain row ([`ChainArgs`]), as generated code writes it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ChainStep {
    /// A [`ChainOp`] as `u32`.
    pub op: u32,
    /// The operand when `row` is null.
    pub scalar: f32,
    /// The operand row (`n` floats), or null for `scalar`.
    pub row: *const f32,
    /// Where the value after this step is stored (`n` floats), or null.
    pub out: *mut f32,
}

/// A chain row: the value of each element `j` of a row is `x[j]` taken through `steps`
/// ops, each with a scalar or the element `j` of another row as its operand, and stored
/// after the steps that say so: the passes of a layer or RMS norm (`(x - mean) * rstd *
/// w + b`, `(x + r - mean)^2`) as one routine call. Generated code writes each field at
/// its `offset_of!`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ChainArgs {
    pub x: *const f32,
    /// How many of `steps` apply.
    pub count: u64,
    pub steps: [ChainStep; MAX_CHAIN_STEPS],
}

/// A chain row over `n` elements: [`ChainArgs`]; returns the sum of the last step's values
/// in the JIT's order ([`crate::row_order`]) for a sum routine, `0` for a store routine.
///
/// Calling it is `unsafe`: every row of `args` must hold `n` floats, readable (`x`, the
/// operand rows) or writable (the `out` rows); no `out` row may overlap another row of the
/// call, and no one else may access the `out` rows during the call.
pub type ChainFn = unsafe extern "C" fn(args: *const ChainArgs, n: usize) -> f32;

/// The chain routine that sums the row's last values (`sum`) or only stores, at width
/// `isa`, if this CPU supports the width.
pub fn chain_routine(sum: bool, isa: Isa) -> Option<ChainFn> {
    #[cfg(target_arch = "x86_64")]
    {
        let (a, b): (ChainFn, ChainFn) = if sum {
            (avx2::chain_sum, avx512::chain_sum)
        } else {
            (avx2::chain_store, avx512::chain_store)
        };
        by_width(isa, a, b)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (sum, isa);
        None
    }
}

/// The algorithms, written once over the helpers each width's module defines (`V` the
/// float vector, `M` its lane mask). Each line mirrors a line of `vmath.rs`'s `Emit`.
#[cfg(target_arch = "x86_64")]
macro_rules! algorithms {
    ($feature:literal, $detected:expr) => {
        use crate::vmath::constants::*;

        #[target_feature(enable = $feature)]
        #[inline]
        fn poly(x: V, c: &[f32]) -> V {
            let (&last, rest) = c.split_last().expect("a polynomial has coefficients");
            let mut acc = f(last);
            for &k in rest.iter().rev() {
                acc = fma(acc, x, f(k));
            }
            acc
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn poly_estrin9(x: V, x2: V, c: &[f32; 9]) -> V {
            let a0 = fma(f(c[1]), x, f(c[0]));
            let a1 = fma(f(c[3]), x, f(c[2]));
            let a2 = fma(f(c[5]), x, f(c[4]));
            let a3 = fma(f(c[7]), x, f(c[6]));
            let x4 = mul(x2, x2);
            let b0 = fma(a1, x2, a0);
            let b1 = fma(a3, x2, a2);
            let t = fma(f(c[8]), x4, b1);
            fma(t, x4, b0)
        }

        /// `(round(x/ln2) as float, q = e^r - 1, bits(magic) + n)`.
        #[target_feature(enable = $feature)]
        #[inline]
        fn expm1_reduced_n(x: V, lo: Option<V>) -> (V, V, V) {
            let magic = f(ROUND_MAGIC);
            let shifted = fma(x, f(LOG2_E), magic);
            let n = sub(shifted, magic);
            let r = fma(n, f(-LN2_HI), x);
            let r = fma(n, f(-LN2_LO), r);
            let r = match lo {
                Some(lo) => add(r, lo),
                None => r,
            };
            let p = poly(r, &EXP_P);
            let r2 = mul(r, r);
            (n, fma(p, r2, r), shifted)
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn pow2(n: V) -> V {
            shl23(iadd(n, i(127)))
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn exp_general(x: V, may_overflow: bool) -> V {
            exp_scaled(x, None, None, may_overflow)
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn exp_scaled(x: V, lo: Option<V>, scale: Option<V>, may_overflow: bool) -> V {
            let mut x = max(f(EXP_LO), x);
            if may_overflow {
                x = min(f(EXP_HI), x);
            }
            let (n, q, shifted) = expm1_reduced_n(x, lo);
            let subnormal = lt(n, f(EXP_SUBNORMAL_N));
            if none(subnormal) {
                if let Some(y) = exp_normal(q, n, scale) {
                    return y;
                }
            }
            let ni = isub(shifted, i(ROUND_MAGIC.to_bits() as i32));
            let n1 = sar1(ni);
            let n2 = isub(ni, n1);
            let s1 = pow2(n1);
            let s1 = match scale {
                Some(t) => mul(s1, t),
                None => s1,
            };
            let y1 = fma(q, s1, s1);
            if none(subnormal) {
                // The select below would pick `y` in every lane (and `n2` would be
                // unshifted): the same bits, five instructions fewer.
                return mul(y1, pow2(n2));
            }
            let n2 = iadd(n2, keep_i(subnormal, EXP_SUBNORMAL_SHIFT));
            let y = mul(y1, pow2(n2));
            let k = cvtt_nearest(y);
            select(subnormal, k, y)
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn exp_bounded(x: V) -> V {
            let (_, q, shifted) = expm1_reduced_n(x, None);
            let scale = iadd(shl23(shifted), i(1.0f32.to_bits() as i32));
            fma(q, scale, scale)
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn expm1_bounded(x: V) -> V {
            let (_, q, shifted) = expm1_reduced_n(x, None);
            let scale = iadd(shl23(shifted), i(1.0f32.to_bits() as i32));
            let scale_m1 = sub(scale, f(1.0));
            fma(scale, q, scale_m1)
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn exp(x: V) -> V {
            exp_general(x, true)
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn sigmoid(x: V) -> V {
            let a = abs(x);
            let zero = f(0.0);
            let e = exp_general(sub(zero, a), false);
            let one = f(1.0);
            let numerator = select(ge(x, zero), one, e);
            div(numerator, add(one, e))
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn tanh(x: V) -> V {
            let a = abs(x);
            let two_a = min(f(TANH_EXP_CAP), add(a, a));
            let m = expm1_bounded(two_a);
            let two = f(2.0);
            let d = add(m, two);
            let big = ge(a, f(TANH_SPLIT));
            let q = div(select(big, two, m), d);
            let v = select(big, sub(f(1.0), q), q);
            bor(v, bxor(x, a))
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn erf(x: V) -> V {
            let a = abs(x);
            let z = mul(a, a);
            let small_value = fma(a, poly(z, &ERF_A), a);
            let small_limit = f(ERF_SMALL);
            let t = sub(min(f(ERF_CLAMP), a), small_limit);
            let h = poly(t, &ERF_H);
            let e = exp_bounded(sub(f(0.0), h));
            let large_value = sub(f(1.0), e);
            let v = select(lt(a, small_limit), small_value, large_value);
            bor(v, band(x, i(SIGN_MASK)))
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn erfc(x: V) -> V {
            let a = min(f(ERFC_CLAMP), abs(x));
            let one = f(1.0);
            let t = div(one, fma(a, f(0.5), one));
            let p = poly(t, &ERFC_P);
            let hi = mul(a, a);
            let lo = fma(a, a, sub(f(0.0), hi));
            let s = sub(p, hi);
            let p_part = add(s, hi);
            let hi_part = sub(s, p_part);
            let err = sub(sub(p, p_part), add(hi, hi_part));
            let large_value = exp_scaled(s, Some(sub(err, lo)), Some(t), false);
            let p_small = poly(hi, &ERF_A);
            let small_value = fma(sub(f(0.0), a), p_small, sub(one, a));
            let r = select(lt(a, f(ERF_SMALL)), small_value, large_value);
            select(lt(x, f(0.0)), sub(f(2.0), r), r)
        }

        #[target_feature(enable = $feature)]
        #[inline]
        fn log(x: V) -> V {
            // split_log_argument
            let subnormal = lt(x, f(f32::MIN_POSITIVE));
            let xs = select(subnormal, mul(x, f(8_388_608.0)), x);
            let sqrt_half_bits = i(SQRT_HALF.to_bits() as i32);
            let shifted = isub(xs, sqrt_half_bits);
            let e = isub(sar23(shifted), keep_i(subnormal, 23));
            let m = iadd(band(shifted, i(0x007f_ffff)), sqrt_half_bits);
            let fr = sub(m, f(1.0));
            let e = int_to_float(e);
            // log
            let z = mul(fr, fr);
            let p = poly_estrin9(fr, z, &LOG_P);
            let y = mul(mul(fr, z), p);
            let y = fma(e, f(LN2_LO), y);
            let y = fma(z, f(-0.5), y);
            let r = add(fr, y);
            let r = fma(e, f(LN2_HI), r);
            let r = max(r, sub(x, f(f32::MAX)));
            let zero = f(0.0);
            let r = bor(r, mask_bits(not_ge(x, zero)));
            select(eq(x, zero), f(f32::NEG_INFINITY), r)
        }

        slice_fn!(exp_slice, exp_in_place, exp, $feature, $detected);
        slice_fn!(log_slice, log_in_place, log, $feature, $detected);
        slice_fn!(tanh_slice, tanh_in_place, tanh, $feature, $detected);
        slice_fn!(erf_slice, erf_in_place, erf, $feature, $detected);
        slice_fn!(erfc_slice, erfc_in_place, erfc, $feature, $detected);
        slice_fn!(
            sigmoid_slice,
            sigmoid_in_place,
            sigmoid,
            $feature,
            $detected
        );
        rows!($feature);
    };
}

/// The row routines of generated code over the vector helpers of one width: sums, max and
/// min, and `exp(x - c)` with its sum, in the order of [`crate::row_order`] (the JIT's
/// `f32x4x4` reduction loops), so that a call gives the bits of the loop it replaces.
#[cfg(target_arch = "x86_64")]
macro_rules! rows {
    ($feature:literal) => {
        use crate::row_order::{self, SumFolds, STEP};

        /// Vectors per 16-element step.
        const PER: usize = STEP / LANES;

        #[target_feature(enable = $feature)]
        #[inline]
        fn spill(v: &[V; PER]) -> [f32; STEP] {
            let mut out = [0.0f32; STEP];
            for (p, &x) in v.iter().enumerate() {
                store(&mut out[p * LANES..], x);
            }
            out
        }

        /// The lanes of a max (min) after the unrolled loop, in the JIT's order: one
        /// dependent select per vector, and each lane's last NaN.
        #[target_feature(enable = $feature)]
        fn extreme_lanes_exact<const MAX: bool>(xs: &[f32]) -> ([f32; STEP], [f32; STEP]) {
            let mut acc = [f(row_order::extreme_identity(MAX)); PER];
            let mut nan = [f(0.0); PER];
            for row in xs.chunks_exact(STEP) {
                for p in 0..PER {
                    let x = load(&row[p * LANES..]);
                    nan[p] = select(is_nan(x), x, nan[p]);
                    let take = if MAX { lt(acc[p], x) } else { lt(x, acc[p]) };
                    acc[p] = select(take, x, acc[p]);
                }
            }
            (spill(&acc), spill(&nan))
        }

        /// Independent chains of the fast max (min) loop.
        const CHAINS: usize = 4;

        /// The max (min) of a row on independent chains of `maxps` (`minps`), reduced
        /// by value: the JIT's value, and its bits unless the result could be a zero (the
        /// JIT keeps the first of equal +0 and -0) or the row holds a NaN (it keeps the
        /// last). `None` then, when any lane's extreme or any element of the tail is a
        /// zero or a NaN.
        #[target_feature(enable = $feature)]
        fn extreme_fast<const MAX: bool>(xs: &[f32]) -> Option<f32> {
            let pick = |a: V, x: V| if MAX { max(a, x) } else { min(a, x) };
            let id = f(row_order::extreme_identity(MAX));
            let mut acc = [[id; PER]; CHAINS];
            let mut nan = is_nan(id);
            let whole = xs.len() / STEP * STEP;
            let mut blocks = xs[..whole].chunks_exact(STEP * CHAINS);
            for block in &mut blocks {
                for (c, chain) in acc.iter_mut().enumerate() {
                    let row = &block[c * STEP..];
                    for (p, a) in chain.iter_mut().enumerate() {
                        let x = load(&row[p * LANES..]);
                        nan = mor(nan, is_nan(x));
                        *a = pick(*a, x);
                    }
                }
            }
            for (c, row) in blocks.remainder().chunks_exact(STEP).enumerate() {
                for (p, a) in acc[c].iter_mut().enumerate() {
                    let x = load(&row[p * LANES..]);
                    nan = mor(nan, is_nan(x));
                    *a = pick(*a, x);
                }
            }
            // No NaN: the chains merge by value.
            let mut v = acc[0][0];
            for chain in &acc {
                for &a in chain {
                    v = pick(v, a);
                }
            }
            let zero = f(0.0);
            if !none(nan) || !none(eq(v, zero)) {
                return None;
            }
            let mut best = if MAX { hmax(v) } else { hmin(v) };
            for &x in &xs[whole..] {
                if x.is_nan() || x == 0.0 {
                    return None;
                }
                best = if MAX { best.max(x) } else { best.min(x) };
            }
            Some(best)
        }

        #[target_feature(enable = $feature)]
        fn extreme_row<const MAX: bool>(xs: &[f32]) -> f32 {
            if let Some(v) = extreme_fast::<MAX>(xs) {
                return v;
            }
            let whole = xs.len() / STEP * STEP;
            let (lanes, nans) = extreme_lanes_exact::<MAX>(&xs[..whole]);
            row_order::finish_extreme(MAX, lanes, nans, &xs[whole..])
        }

        /// The sum of `exp(xs[j] - c)` (`EXP`) or of `xs[j]` in the JIT's order, the
        /// values stored into `out` when there is one.
        #[target_feature(enable = $feature)]
        fn sum_row<const EXP: bool>(xs: &[f32], c: f32, mut out: Option<&mut [f32]>) -> f32 {
            let steps = xs.len() / STEP;
            let cv = f(c);
            let value = |x: V| if EXP { exp(sub(x, cv)) } else { x };
            let mut folds = SumFolds::default();
            let mut acc = [f(0.0); PER];
            for k in 0..steps {
                let row = &xs[k * STEP..];
                for (p, a) in acc.iter_mut().enumerate() {
                    let y = value(load(&row[p * LANES..]));
                    if let Some(o) = out.as_deref_mut() {
                        store(&mut o[k * STEP + p * LANES..], y);
                    }
                    *a = add(*a, y);
                }
                if folds.step() {
                    folds.fold(&spill(&acc));
                    acc = [f(0.0); PER];
                }
            }
            let done = steps * STEP;
            let rest = xs.len() - done;
            let mut buf = [0.0f32; STEP];
            buf[..rest].copy_from_slice(&xs[done..]);
            for p in 0..PER {
                let y = value(load(&buf[p * LANES..]));
                store(&mut buf[p * LANES..], y);
            }
            if let Some(o) = out {
                o[done..].copy_from_slice(&buf[..rest]);
            }
            folds.finish(spill(&acc), &buf[..rest])
        }

        /// Vectors of a chain row's block, kept in registers: the ops of a step apply to
        /// all of them before the next step's (one dispatch per step and block).
        const CHAIN_BLOCK: usize = if LANES == 16 { 16 } else { 8 };

        /// One chain op ([`crate::wide::ChainOp`] as `u32`) on a vector.
        #[target_feature(enable = $feature)]
        #[inline]
        fn chain_op<const OP: u32>(v: V, a: V) -> V {
            match OP {
                0 => add(v, a),
                1 => sub(v, a),
                2 => sub(a, v),
                3 => mul(v, a),
                4 => div(v, a),
                5 => div(a, v),
                6 => mul(v, v),
                7 => select(lt(v, a), a, v),
                8 => select(lt(a, v), a, v),
                // `0 >= v` is false for a NaN `v`, which passes.
                _ => select(ge(f(0.0), v), f(0.0), v),
            }
        }

        /// Step `s` (op `OP`) on the `NV` vectors of a block from element `at`.
        ///
        /// # Safety
        /// As [`chain_vectors`].
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn chain_step<const OP: u32, const NV: usize>(
            v: &mut [V; NV],
            s: &crate::wide::ChainStep,
            at: usize,
        ) {
            if s.row.is_null() {
                let a = f(s.scalar);
                for vk in v.iter_mut() {
                    *vk = chain_op::<OP>(*vk, a);
                }
            } else {
                for (k, vk) in v.iter_mut().enumerate() {
                    // SAFETY: `at + NV * LANES <= n` floats in the row (the caller).
                    let a = unsafe { load_ptr(s.row.add(at + k * LANES)) };
                    *vk = chain_op::<OP>(*vk, a);
                }
            }
        }

        /// Folds a chain row's sum lanes into `folds` and restarts them: out of line, so
        /// that the block's loop stays small enough to keep its vectors in registers.
        ///
        /// # Safety
        /// The CPU has the feature.
        #[target_feature(enable = $feature)]
        #[inline(never)]
        #[cold]
        unsafe fn chain_fold(folds: &mut SumFolds, acc: &mut [V; PER]) {
            folds.fold(&spill(acc));
            *acc = [f(0.0); PER];
        }

        /// Blocks of `NV` vectors of a chain row from `at` while they fit in `n`: every
        /// step in order on the whole block, each store right after its step; with `SUM`,
        /// the values after the last step added into `acc` in the JIT's order. Returns
        /// where the blocks stopped.
        ///
        /// # Safety
        /// As [`chain_sum`].
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn chain_vectors<const NV: usize, const SUM: bool>(
            x: *const f32,
            steps: &[crate::wide::ChainStep],
            mut at: usize,
            n: usize,
            acc_io: &mut [V; PER],
            folds_io: &mut SumFolds,
        ) -> usize {
            // The sum's state in registers for the whole loop.
            let mut acc = *acc_io;
            let mut folds = *folds_io;
            while at + NV * LANES <= n {
                let mut v = [f(0.0); NV];
                for (k, vk) in v.iter_mut().enumerate() {
                    // SAFETY: `at + NV * LANES <= n` floats at each row (the caller).
                    *vk = unsafe { load_ptr(x.add(at + k * LANES)) };
                }
                for s in steps {
                    // SAFETY: the caller's bounds.
                    unsafe {
                        match s.op {
                            0 => chain_step::<0, NV>(&mut v, s, at),
                            1 => chain_step::<1, NV>(&mut v, s, at),
                            2 => chain_step::<2, NV>(&mut v, s, at),
                            3 => chain_step::<3, NV>(&mut v, s, at),
                            4 => chain_step::<4, NV>(&mut v, s, at),
                            5 => chain_step::<5, NV>(&mut v, s, at),
                            6 => chain_step::<6, NV>(&mut v, s, at),
                            7 => chain_step::<7, NV>(&mut v, s, at),
                            8 => chain_step::<8, NV>(&mut v, s, at),
                            _ => chain_step::<9, NV>(&mut v, s, at),
                        }
                    }
                    if !s.out.is_null() {
                        for (k, &vk) in v.iter().enumerate() {
                            // SAFETY: as above; `out` is apart from every row read.
                            unsafe { store_ptr(s.out.add(at + k * LANES), vk) };
                        }
                    }
                }
                if SUM {
                    // Whole 16-element steps in order, folding as the JIT does.
                    for step in v.chunks_exact(PER) {
                        for (a, &y) in acc.iter_mut().zip(step) {
                            *a = add(*a, y);
                        }
                        if folds.step() {
                            // SAFETY: the same feature as this function's.
                            unsafe { chain_fold(&mut folds, &mut acc) };
                        }
                    }
                }
                at += NV * LANES;
            }
            *acc_io = acc;
            *folds_io = folds;
            at
        }

        /// The last `n - at < 16` elements of a chain row: one step of vectors whose loads
        /// and stores take only the lanes of the row (each element computed with the same
        /// ops as in the vector loop, and as the JIT's four-wide and scalar tails); the
        /// last values into `last`.
        ///
        /// # Safety
        /// As [`chain_sum`], with `at < n < at + 16`.
        #[target_feature(enable = $feature)]
        #[inline(never)]
        unsafe fn chain_tail(
            x: *const f32,
            steps: &[crate::wide::ChainStep],
            at: usize,
            n: usize,
            last: &mut [f32; STEP],
        ) {
            let rest = n - at;
            // The valid lanes of each vector of the step.
            let lanes = |p: usize| rest.saturating_sub(p * LANES).min(LANES);
            let mut v = [f(0.0); PER];
            for (p, vp) in v.iter_mut().enumerate() {
                // SAFETY: only the row's lanes are read (the caller's bounds).
                *vp = unsafe { load_part(x.wrapping_add(at + p * LANES), lanes(p)) };
            }
            for s in steps {
                let mut a = [f(s.scalar); PER];
                if !s.row.is_null() {
                    for (p, ap) in a.iter_mut().enumerate() {
                        // SAFETY: as above.
                        *ap = unsafe { load_part(s.row.wrapping_add(at + p * LANES), lanes(p)) };
                    }
                }
                for (vp, &ap) in v.iter_mut().zip(&a) {
                    *vp = match s.op {
                        0 => chain_op::<0>(*vp, ap),
                        1 => chain_op::<1>(*vp, ap),
                        2 => chain_op::<2>(*vp, ap),
                        3 => chain_op::<3>(*vp, ap),
                        4 => chain_op::<4>(*vp, ap),
                        5 => chain_op::<5>(*vp, ap),
                        6 => chain_op::<6>(*vp, ap),
                        7 => chain_op::<7>(*vp, ap),
                        8 => chain_op::<8>(*vp, ap),
                        _ => chain_op::<9>(*vp, ap),
                    };
                }
                if !s.out.is_null() {
                    for (p, &vp) in v.iter().enumerate() {
                        // SAFETY: only the row's lanes are written.
                        unsafe { store_part(s.out.wrapping_add(at + p * LANES), vp, lanes(p)) };
                    }
                }
            }
            *last = spill(&v);
        }

        /// A chain row (see [`crate::wide::ChainArgs`]); with `SUM`, the sum of its last
        /// values in the JIT's order.
        ///
        /// # Safety
        /// As [`chain_sum`].
        #[target_feature(enable = $feature)]
        unsafe fn chain_row<const SUM: bool>(args: &crate::wide::ChainArgs, n: usize) -> f32 {
            use crate::wide::MAX_CHAIN_STEPS;
            let count = (args.count as usize).min(MAX_CHAIN_STEPS);
            let steps = &args.steps[..count];
            let mut folds = SumFolds::default();
            let mut acc = [f(0.0); PER];
            // Blocks of whole 16-element steps (CHAIN_BLOCK and 4 vectors are multiples of
            // 16 elements at either width), then single steps.
            // SAFETY: the caller's rows hold `n` floats; each call stays below `n`.
            let at = unsafe {
                let at =
                    chain_vectors::<CHAIN_BLOCK, SUM>(args.x, steps, 0, n, &mut acc, &mut folds);
                let at = chain_vectors::<4, SUM>(args.x, steps, at, n, &mut acc, &mut folds);
                chain_vectors::<PER, SUM>(args.x, steps, at, n, &mut acc, &mut folds)
            };
            // The rest, fewer than 16 elements: one masked step.
            let mut rest = [0.0f32; STEP];
            if at < n {
                // SAFETY: the rows hold `n > at` floats.
                unsafe { chain_tail(args.x, steps, at, n, &mut rest) };
            }
            if SUM {
                folds.finish(spill(&acc), &rest[..n - at])
            } else {
                0.0
            }
        }

        /// A chain row's sum: see [`crate::wide::ChainFn`].
        ///
        /// # Safety
        /// `args` points to a [`crate::wide::ChainArgs`] whose rows hold `n` floats each,
        /// readable or (`out`) writable, no `out` row overlapping another row of the call
        /// or accessed by anyone else during it; the CPU has the feature.
        pub(super) unsafe extern "C" fn chain_sum(
            args: *const crate::wide::ChainArgs,
            n: usize,
        ) -> f32 {
            // SAFETY: the caller's contract.
            unsafe { chain_row::<true>(&*args, n) }
        }

        /// A chain row that only stores: see [`crate::wide::ChainFn`].
        ///
        /// # Safety
        /// As [`chain_sum`].
        pub(super) unsafe extern "C" fn chain_store(
            args: *const crate::wide::ChainArgs,
            n: usize,
        ) -> f32 {
            // SAFETY: the caller's contract.
            unsafe { chain_row::<false>(&*args, n) }
        }

        #[target_feature(enable = $feature)]
        fn offset_row(xs: &[f32], a: f32, b: f32, out: &mut [f32]) {
            let (av, bv) = (f(a), f(b));
            let whole = xs.len() / LANES * LANES;
            for (x, o) in xs[..whole]
                .chunks_exact(LANES)
                .zip(out[..whole].chunks_exact_mut(LANES))
            {
                store(o, sub(sub(load(x), av), bv));
            }
            for (&v, o) in xs[whole..].iter().zip(&mut out[whole..]) {
                *o = (v - a) - b;
            }
        }

        /// `out[j] = (xs[j] - a) - b` over `n` floats: a log-softmax row's last pass.
        ///
        /// # Safety
        /// `xs` points to `n` readable floats and `out` to `n` writable ones apart from
        /// them that nothing else accesses during the call, and the CPU has the feature.
        pub(super) unsafe extern "C" fn offset(
            xs: *const f32,
            a: f32,
            b: f32,
            out: *mut f32,
            n: usize,
        ) {
            if n == 0 {
                return;
            }
            // SAFETY: the caller guarantees the two rows, apart, and the feature.
            unsafe {
                offset_row(
                    std::slice::from_raw_parts(xs, n),
                    a,
                    b,
                    std::slice::from_raw_parts_mut(out, n),
                )
            }
        }

        #[target_feature(enable = $feature)]
        fn scale_row<const DIV: bool, const EXP: bool>(
            xs: &[f32],
            c: f32,
            below: f32,
            zero: f32,
            k: f32,
            out: &mut [f32],
        ) {
            let (cv, b, z, kv) = (f(c), f(below), f(zero), f(k));
            let one = |x: V| {
                let v = if EXP { exp(sub(x, cv)) } else { x };
                let w = select(lt(v, b), z, v);
                if DIV {
                    div(w, kv)
                } else {
                    mul(w, kv)
                }
            };
            let whole = xs.len() / LANES * LANES;
            for (x, o) in xs[..whole]
                .chunks_exact(LANES)
                .zip(out[..whole].chunks_exact_mut(LANES))
            {
                store(o, one(load(x)));
            }
            let rest = xs.len() - whole;
            if rest > 0 {
                // The tail through the same vector code, padded.
                let mut buf = [0.0f32; LANES];
                buf[..rest].copy_from_slice(&xs[whole..]);
                let y = one(load(&buf));
                store(&mut buf, y);
                out[whole..].copy_from_slice(&buf[..rest]);
            }
        }

        /// The scaled-row entry points: `out[j] = (v < below ? zero : v) * k` (or `/ k`)
        /// with `v = xs[j]` or `v = exp(xs[j] - c)`, over `n` floats: the last pass of a
        /// softmax row.
        ///
        /// # Safety
        /// `xs` points to `n` readable floats and `out` to `n` writable ones apart from
        /// them that nothing else accesses during the call, and the CPU has the feature.
        macro_rules! scale_entry {
            ($name:ident, $div:literal, $exp:literal) => {
                pub(super) unsafe extern "C" fn $name(
                    xs: *const f32,
                    c: f32,
                    below: f32,
                    zero: f32,
                    k: f32,
                    out: *mut f32,
                    n: usize,
                ) {
                    if n == 0 {
                        return;
                    }
                    // SAFETY: the caller guarantees the two rows, apart, and the feature.
                    unsafe {
                        scale_row::<$div, $exp>(
                            std::slice::from_raw_parts(xs, n),
                            c,
                            below,
                            zero,
                            k,
                            std::slice::from_raw_parts_mut(out, n),
                        )
                    }
                }
            };
        }
        scale_entry!(scale_mul, false, false);
        scale_entry!(scale_div, true, false);
        scale_entry!(exp_scale_mul, false, true);
        scale_entry!(exp_scale_div, true, true);

        /// The sum of the `n` floats at `xs`, in the JIT's order.
        ///
        /// # Safety
        /// `xs` points to `n` readable floats, and the CPU has the feature (the routine is
        /// only handed out by [`row_routine`] when it has).
        pub(super) unsafe extern "C" fn row_sum(xs: *const f32, n: usize) -> f32 {
            if n == 0 {
                return 0.0;
            }
            // SAFETY: the caller guarantees `n` readable floats and the feature.
            unsafe { sum_row::<false>(std::slice::from_raw_parts(xs, n), 0.0, None) }
        }

        /// The max of the `n` floats at `xs`, as the JIT's loop computes it.
        ///
        /// # Safety
        /// As [`row_sum`].
        pub(super) unsafe extern "C" fn row_max(xs: *const f32, n: usize) -> f32 {
            if n == 0 {
                return f32::NEG_INFINITY;
            }
            // SAFETY: the caller guarantees `n` readable floats and the feature.
            unsafe { extreme_row::<true>(std::slice::from_raw_parts(xs, n)) }
        }

        /// The min of the `n` floats at `xs`, as the JIT's loop computes it.
        ///
        /// # Safety
        /// As [`row_sum`].
        pub(super) unsafe extern "C" fn row_min(xs: *const f32, n: usize) -> f32 {
            if n == 0 {
                return f32::INFINITY;
            }
            // SAFETY: the caller guarantees `n` readable floats and the feature.
            unsafe { extreme_row::<false>(std::slice::from_raw_parts(xs, n)) }
        }

        /// `out[j] = exp(xs[j] - c)` for the `n` floats at `xs` (no stores when `out` is
        /// null); returns their sum in the JIT's order.
        ///
        /// # Safety
        /// `xs` points to `n` readable floats and `out` is null or points to `n` writable
        /// ones that nothing else accesses during the call (`out` does not overlap `xs`),
        /// and the CPU has the feature.
        pub(super) unsafe extern "C" fn exp_sub_sum(
            xs: *const f32,
            c: f32,
            out: *mut f32,
            n: usize,
        ) -> f32 {
            if n == 0 {
                return 0.0;
            }
            // SAFETY: the caller guarantees the rows, apart, and the feature.
            unsafe {
                let out = (!out.is_null()).then(|| std::slice::from_raw_parts_mut(out, n));
                sum_row::<true>(std::slice::from_raw_parts(xs, n), c, out)
            }
        }
    };
}

/// A safe slice routine around the vector function `$f`, checking the CPU feature once
/// per call (the routine is only handed out when it is present, see [`routine`]).
#[cfg(target_arch = "x86_64")]
macro_rules! slice_fn {
    ($name:ident, $in_place:ident, $f:ident, $feature:literal, $detected:expr) => {
        /// `f` over `n` floats at `xs`, in place: the entry generated code calls.
        ///
        /// # Safety
        /// `xs` points to `n` readable and writable floats that nothing else accesses
        /// during the call, and the CPU has the feature (the routine is only handed out
        /// by [`in_place_routine`] when it has).
        pub(super) unsafe extern "C" fn $in_place(xs: *mut f32, n: usize) {
            if n == 0 {
                return;
            }
            // SAFETY: the caller guarantees `n` exclusive floats at `xs`.
            let xs = unsafe { std::slice::from_raw_parts_mut(xs, n) };
            // SAFETY: the caller guarantees the feature.
            unsafe { run_in_place(xs) }

            #[target_feature(enable = $feature)]
            fn run_in_place(xs: &mut [f32]) {
                let full = xs.len() / LANES * LANES;
                for o in xs[..full].chunks_exact_mut(LANES) {
                    let v = $f(load(o));
                    store(o, v);
                }
                if full < xs.len() {
                    let mut buf = [0.0f32; LANES];
                    let tail = xs.len() - full;
                    buf[..tail].copy_from_slice(&xs[full..]);
                    let v = $f(load(&buf));
                    store(&mut buf, v);
                    xs[full..].copy_from_slice(&buf[..tail]);
                }
            }
        }

        pub(super) fn $name(xs: &[f32], out: &mut [f32]) {
            assert_eq!(
                xs.len(),
                out.len(),
                "wide routine: input and output lengths"
            );
            assert!($detected, concat!("wide routine needs ", $feature));
            // SAFETY: the CPU has the feature (checked above).
            unsafe { run(xs, out) }

            #[target_feature(enable = $feature)]
            fn run(xs: &[f32], out: &mut [f32]) {
                let full = xs.len() / LANES * LANES;
                for (x, o) in xs[..full]
                    .chunks_exact(LANES)
                    .zip(out[..full].chunks_exact_mut(LANES))
                {
                    store(o, $f(load(x)));
                }
                if full < xs.len() {
                    let mut buf = [0.0f32; LANES];
                    let tail = xs.len() - full;
                    buf[..tail].copy_from_slice(&xs[full..]);
                    let v = $f(load(&buf));
                    store(&mut buf, v);
                    out[full..].copy_from_slice(&buf[..tail]);
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    type V = __m512;
    type M = __mmask16;
    const LANES: usize = 16;

    #[target_feature(enable = "avx512f")]
    #[inline]
    fn load(x: &[f32]) -> V {
        assert!(x.len() >= LANES);
        // SAFETY: 16 floats are readable at x (checked); loadu has no alignment need.
        unsafe { _mm512_loadu_ps(x.as_ptr()) }
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn store(o: &mut [f32], v: V) {
        assert!(o.len() >= LANES);
        // SAFETY: 16 floats are writable at o (checked).
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), v) }
    }
    /// The first `k <= 16` floats at `p`, zeros after them.
    ///
    /// # Safety
    /// `k` floats are readable at `p`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load_part(p: *const f32, k: usize) -> V {
        let m = ((1u32 << k) - 1) as __mmask16;
        // SAFETY: the masked-off lanes are not accessed.
        unsafe { _mm512_maskz_loadu_ps(m, p) }
    }
    /// Stores the first `k <= 16` lanes of `v` at `p`.
    ///
    /// # Safety
    /// `k` floats are writable at `p`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn store_part(p: *mut f32, v: V, k: usize) {
        let m = ((1u32 << k) - 1) as __mmask16;
        // SAFETY: the masked-off lanes are not accessed.
        unsafe { _mm512_mask_storeu_ps(p, m, v) }
    }
    /// # Safety
    /// 16 floats are readable at `p`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load_ptr(p: *const f32) -> V {
        // SAFETY: the caller's contract; loadu has no alignment need.
        unsafe { _mm512_loadu_ps(p) }
    }
    /// # Safety
    /// 16 floats are writable at `p`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn store_ptr(p: *mut f32, v: V) {
        // SAFETY: the caller's contract.
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn f(c: f32) -> V {
        _mm512_set1_ps(c)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn i(c: i32) -> V {
        _mm512_castsi512_ps(_mm512_set1_epi32(c))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn bits(v: V) -> __m512i {
        _mm512_castps_si512(v)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn float(v: __m512i) -> V {
        _mm512_castsi512_ps(v)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn add(a: V, b: V) -> V {
        _mm512_add_ps(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn sub(a: V, b: V) -> V {
        _mm512_sub_ps(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn mul(a: V, b: V) -> V {
        _mm512_mul_ps(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn div(a: V, b: V) -> V {
        _mm512_div_ps(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn fma(a: V, b: V, c: V) -> V {
        _mm512_fmadd_ps(a, b, c)
    }
    /// `c < x ? c : x` (`minps c, x`: NaN `x` passes).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn min(c: V, x: V) -> V {
        _mm512_min_ps(c, x)
    }
    /// `x < c ? c : x` (`maxps c, x`: NaN `x` passes).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn max(c: V, x: V) -> V {
        _mm512_max_ps(c, x)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn lt(a: V, b: V) -> M {
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn ge(a: V, b: V) -> M {
        _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn eq(a: V, b: V) -> M {
        _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, b)
    }
    /// `a < b` or unordered.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn not_ge(a: V, b: V) -> M {
        _mm512_cmp_ps_mask::<_CMP_NGE_UQ>(a, b)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn is_nan(x: V) -> M {
        _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn mor(a: M, b: M) -> M {
        a | b
    }
    /// The largest lane (no NaN).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn hmax(v: V) -> f32 {
        _mm512_reduce_max_ps(v)
    }
    /// The smallest lane (no NaN).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn hmin(v: V) -> f32 {
        _mm512_reduce_min_ps(v)
    }
    /// exp's result from `q = e^r - 1` and `n` when no lane is subnormal: the generic
    /// `fma(q, s1, s1) * 2^n2`, with `s1 = 2^n1 t` (`t` = 1 without a scale), is
    /// `round(t + q t)` scaled by `2^n` exactly (or the same infinity), which is one
    /// `vscalefps`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn exp_normal(q: V, n: V, scale: Option<V>) -> Option<V> {
        let m = match scale {
            Some(t) => fma(q, t, t),
            None => add(q, f(1.0)),
        };
        Some(_mm512_scalef_ps(m, n))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn select(m: M, t: V, e: V) -> V {
        _mm512_mask_blend_ps(m, e, t)
    }
    /// No lane of `m` set.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn none(m: M) -> bool {
        m == 0
    }
    /// All ones where `m`, else zero.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn mask_bits(m: M) -> V {
        float(_mm512_maskz_set1_epi32(m, -1))
    }
    /// The integer `c` where `m`, else zero.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn keep_i(m: M, c: i32) -> V {
        float(_mm512_maskz_set1_epi32(m, c))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn band(a: V, b: V) -> V {
        float(_mm512_and_si512(bits(a), bits(b)))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn bor(a: V, b: V) -> V {
        float(_mm512_or_si512(bits(a), bits(b)))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn bxor(a: V, b: V) -> V {
        float(_mm512_xor_si512(bits(a), bits(b)))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn abs(x: V) -> V {
        band(x, i(i32::MAX))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn iadd(a: V, b: V) -> V {
        float(_mm512_add_epi32(bits(a), bits(b)))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn isub(a: V, b: V) -> V {
        float(_mm512_sub_epi32(bits(a), bits(b)))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn shl23(a: V) -> V {
        float(_mm512_slli_epi32::<23>(bits(a)))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn sar1(a: V) -> V {
        float(_mm512_srai_epi32::<1>(bits(a)))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn sar23(a: V) -> V {
        float(_mm512_srai_epi32::<23>(bits(a)))
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn int_to_float(a: V) -> V {
        _mm512_cvtepi32_ps(bits(a))
    }
    /// The bits of the integer nearest to `v` (ties to even), for `v` in `i32`'s range.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn cvtt_nearest(v: V) -> V {
        let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        float(_mm512_cvttps_epi32(r))
    }

    algorithms!("avx512f", is_x86_feature_detected!("avx512f"));
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    type V = __m256;
    type M = __m256;
    const LANES: usize = 8;

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn load(x: &[f32]) -> V {
        assert!(x.len() >= LANES);
        // SAFETY: 8 floats are readable at x (checked); loadu has no alignment need.
        unsafe { _mm256_loadu_ps(x.as_ptr()) }
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn store(o: &mut [f32], v: V) {
        assert!(o.len() >= LANES);
        // SAFETY: 8 floats are writable at o (checked).
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) }
    }
    /// Lane masks for [`load_part`]: from `8 - k`, `k` lanes set.
    const PART: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];
    /// The first `k <= 8` floats at `p`, zeros after them.
    ///
    /// # Safety
    /// `k` floats are readable at `p`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn load_part(p: *const f32, k: usize) -> V {
        // SAFETY: 8 ints from `8 - k` in the table; the masked-off lanes are not accessed.
        unsafe {
            let m = _mm256_loadu_si256(PART.as_ptr().add(8 - k) as *const __m256i);
            _mm256_maskload_ps(p, m)
        }
    }
    /// Stores the first `k <= 8` lanes of `v` at `p`.
    ///
    /// # Safety
    /// `k` floats are writable at `p`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn store_part(p: *mut f32, v: V, k: usize) {
        // SAFETY: as above.
        unsafe {
            let m = _mm256_loadu_si256(PART.as_ptr().add(8 - k) as *const __m256i);
            _mm256_maskstore_ps(p, m, v)
        }
    }
    /// # Safety
    /// 8 floats are readable at `p`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn load_ptr(p: *const f32) -> V {
        // SAFETY: the caller's contract; loadu has no alignment need.
        unsafe { _mm256_loadu_ps(p) }
    }
    /// # Safety
    /// 8 floats are writable at `p`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn store_ptr(p: *mut f32, v: V) {
        // SAFETY: the caller's contract.
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn f(c: f32) -> V {
        _mm256_set1_ps(c)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn i(c: i32) -> V {
        _mm256_castsi256_ps(_mm256_set1_epi32(c))
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn bits(v: V) -> __m256i {
        _mm256_castps_si256(v)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn float(v: __m256i) -> V {
        _mm256_castsi256_ps(v)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn add(a: V, b: V) -> V {
        _mm256_add_ps(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn sub(a: V, b: V) -> V {
        _mm256_sub_ps(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn mul(a: V, b: V) -> V {
        _mm256_mul_ps(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn div(a: V, b: V) -> V {
        _mm256_div_ps(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn fma(a: V, b: V, c: V) -> V {
        _mm256_fmadd_ps(a, b, c)
    }
    /// `c < x ? c : x` (`minps c, x`: NaN `x` passes).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn min(c: V, x: V) -> V {
        _mm256_min_ps(c, x)
    }
    /// `x < c ? c : x` (`maxps c, x`: NaN `x` passes).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn max(c: V, x: V) -> V {
        _mm256_max_ps(c, x)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn lt(a: V, b: V) -> M {
        _mm256_cmp_ps::<_CMP_LT_OQ>(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn ge(a: V, b: V) -> M {
        _mm256_cmp_ps::<_CMP_GE_OQ>(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn eq(a: V, b: V) -> M {
        _mm256_cmp_ps::<_CMP_EQ_OQ>(a, b)
    }
    /// `a < b` or unordered.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn not_ge(a: V, b: V) -> M {
        _mm256_cmp_ps::<_CMP_NGE_UQ>(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn is_nan(x: V) -> M {
        _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn mor(a: M, b: M) -> M {
        _mm256_or_ps(a, b)
    }
    /// The largest lane (no NaN).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn hmax(v: V) -> f32 {
        let h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps::<1>(h, h)))
    }
    /// The smallest lane (no NaN).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn hmin(v: V) -> f32 {
        let h = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let h = _mm_min_ps(h, _mm_movehl_ps(h, h));
        _mm_cvtss_f32(_mm_min_ss(h, _mm_shuffle_ps::<1>(h, h)))
    }
    /// No one-instruction form at this width: exp keeps its generic code.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn exp_normal(_q: V, _n: V, _scale: Option<V>) -> Option<V> {
        None
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn select(m: M, t: V, e: V) -> V {
        _mm256_blendv_ps(e, t, m)
    }
    /// No lane of `m` set.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn none(m: M) -> bool {
        _mm256_movemask_ps(m) == 0
    }
    /// All ones where `m`, else zero.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn mask_bits(m: M) -> V {
        m
    }
    /// The integer `c` where `m`, else zero.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn keep_i(m: M, c: i32) -> V {
        band(m, i(c))
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn band(a: V, b: V) -> V {
        _mm256_and_ps(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn bor(a: V, b: V) -> V {
        _mm256_or_ps(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn bxor(a: V, b: V) -> V {
        _mm256_xor_ps(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn abs(x: V) -> V {
        band(x, i(i32::MAX))
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn iadd(a: V, b: V) -> V {
        float(_mm256_add_epi32(bits(a), bits(b)))
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn isub(a: V, b: V) -> V {
        float(_mm256_sub_epi32(bits(a), bits(b)))
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn shl23(a: V) -> V {
        float(_mm256_slli_epi32::<23>(bits(a)))
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn sar1(a: V) -> V {
        float(_mm256_srai_epi32::<1>(bits(a)))
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn sar23(a: V) -> V {
        float(_mm256_srai_epi32::<23>(bits(a)))
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn int_to_float(a: V) -> V {
        _mm256_cvtepi32_ps(bits(a))
    }
    /// The bits of the integer nearest to `v` (ties to even), for `v` in `i32`'s range.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn cvtt_nearest(v: V) -> V {
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        float(_mm256_cvttps_epi32(r))
    }

    algorithms!(
        "avx2,fma",
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    );
}
