//! Accuracy and special values of the JIT'd vector math, against `f64` references.
//!
//! Each function is compiled into an elementwise kernel (unrolled `f32x4` body, scalar
//! tail) and run over every 97th `f32` bit pattern plus special values. Errors are in ulp of
//! the exact result rounded to `f32` precision (subnormal spacing below `f32::MIN_POSITIVE`).
//! Run with `--nocapture` to see the measured figures.

use ferrite_cpu::kernels::define_elementwise_f32;
use ferrite_cpu::{BinaryKernel, Jit, JitCode, JitOptions, UnaryFn, UnaryKernel, VMath};

/// Stated bounds (measured figures are printed; the bounds leave a little margin).
fn bound(f: UnaryFn) -> f64 {
    match f {
        UnaryFn::Exp | UnaryFn::Log | UnaryFn::Sin | UnaryFn::Cos => 2.0,
        UnaryFn::Tanh | UnaryFn::Erf | UnaryFn::Sigmoid => 3.0,
        UnaryFn::Erfc => 6.0,
    }
}

fn reference(f: UnaryFn, x: f64) -> f64 {
    match f {
        UnaryFn::Exp => x.exp(),
        UnaryFn::Log => x.ln(),
        UnaryFn::Tanh => x.tanh(),
        UnaryFn::Erf => ferrite_ir::interp::erf(x),
        UnaryFn::Erfc => ferrite_ir::interp::erfc(x),
        UnaryFn::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryFn::Sin => x.sin(),
        UnaryFn::Cos => x.cos(),
    }
}

/// Error of `got` in units of the last place of `want` at `f32` precision. Infinities count
/// as `±2^128`, the next value past `f32::MAX`, so overflowing one step early costs ~1 ulp.
fn ulp_error(got: f32, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let limit = 2f64.powi(128);
    let g = if got.is_infinite() {
        limit.copysign(got as f64)
    } else {
        got as f64
    };
    let w = want.clamp(-limit, limit);
    if g == w {
        return 0.0;
    }
    let exponent = if w == 0.0 {
        -126
    } else {
        ((w.abs().to_bits() >> 52) as i32 - 1023).max(-126)
    };
    (g - w).abs() / 2f64.powi(exponent - 23)
}

fn special_values() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        2.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::MAX,
        f32::MIN,
        88.722_83,
        88.722_84,
        -87.336_55,
        -103.972_08,
        -104.0,
        0.625,
        0.875,
        3.92,
        4.0,
        9.01,
        std::f32::consts::FRAC_PI_4,
        std::f32::consts::FRAC_PI_2,
        std::f32::consts::PI,
        8192.0,
        2_097_152.0,
        2_097_152.2,
        4_194_304.0,
        16_777_216.0,
    ];
    let more: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(more);
    v
}

fn build(vm: VMath, unroll: usize) -> JitCode {
    let mut jit = Jit::with_options(JitOptions::default()).expect("host JIT");
    for f in UnaryFn::ALL {
        define_elementwise_f32(&mut jit, f.name(), 1, unroll, &|b, v| vm.unary(b, f, v[0]))
            .expect("kernel compiles");
    }
    define_elementwise_f32(&mut jit, "pow", 2, unroll, &|b, v| vm.pow(b, v[0], v[1]))
        .expect("pow compiles");
    define_elementwise_f32(&mut jit, "maximum", 2, unroll, &|b, v| {
        vm.maximum(b, v[0], v[1])
    })
    .expect("max compiles");
    define_elementwise_f32(&mut jit, "minimum", 2, unroll, &|b, v| {
        vm.minimum(b, v[0], v[1])
    })
    .expect("min compiles");
    jit.finalize().expect("finalize")
}

fn host_vmath() -> (VMath, JitCode) {
    let jit = Jit::new().expect("host JIT");
    let vm = VMath::for_isa(jit.isa());
    (vm, build(vm, 2))
}

struct Sweep {
    max_ulp: f64,
    worst_input: f32,
    worst_output: f32,
    count: usize,
}

/// Runs `f` over `inputs` (in chunks) and returns the worst error; `domain` excludes inputs
/// whose expected result is checked separately.
fn sweep(code: &JitCode, vm: VMath, f: UnaryFn, inputs: impl Iterator<Item = f32>) -> Sweep {
    let kernel = UnaryKernel::new(code, f.name()).expect("kernel");
    let mut result = Sweep {
        max_ulp: 0.0,
        worst_input: 0.0,
        worst_output: 0.0,
        count: 0,
    };
    let limit = vm.trig_max_arg();
    let mut src = Vec::with_capacity(1 << 20);
    let mut dst = vec![0.0f32; 1 << 20];
    let mut inputs = inputs.peekable();
    while inputs.peek().is_some() {
        src.clear();
        src.extend(inputs.by_ref().take(1 << 20));
        let out = &mut dst[..src.len()];
        kernel.run(&src, out).expect("lengths match");
        for (&x, &y) in src.iter().zip(out.iter()) {
            let trig = matches!(f, UnaryFn::Sin | UnaryFn::Cos);
            let err = if trig && x.abs() > limit {
                // Documented: beyond the reduction's range the result is NaN.
                if y.is_nan() {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else {
                ulp_error(y, reference(f, x as f64))
            };
            result.count += 1;
            if err > result.max_ulp || err.is_nan() {
                result.max_ulp = err;
                result.worst_input = x;
                result.worst_output = y;
            }
        }
    }
    result
}

fn dense_sweep_inputs(step: u32) -> impl Iterator<Item = f32> {
    (0..=u32::MAX / step)
        .map(move |i| f32::from_bits(i * step))
        .chain(special_values())
}

fn check_function(f: UnaryFn) {
    let (vm, code) = host_vmath();
    let s = sweep(&code, vm, f, dense_sweep_inputs(97));
    println!(
        "{:8} fma={}  max error {:.3} ulp over {} inputs (worst: f({:e}) = {:e}, exact {:e})",
        f.name(),
        vm.uses_fma(),
        s.max_ulp,
        s.count,
        s.worst_input,
        s.worst_output,
        reference(f, s.worst_input as f64)
    );
    assert!(
        s.max_ulp <= bound(f),
        "{}: {} ulp at x = {:e} (bits {:#x}): got {:e}, want {:e}",
        f.name(),
        s.max_ulp,
        s.worst_input,
        s.worst_input.to_bits(),
        s.worst_output,
        reference(f, s.worst_input as f64)
    );
}

#[test]
fn exp_whole_domain() {
    check_function(UnaryFn::Exp);
}

#[test]
fn log_whole_domain() {
    check_function(UnaryFn::Log);
}

#[test]
fn tanh_whole_domain() {
    check_function(UnaryFn::Tanh);
}

#[test]
fn erf_whole_domain() {
    check_function(UnaryFn::Erf);
}

#[test]
fn erfc_whole_domain() {
    check_function(UnaryFn::Erfc);
}

#[test]
fn sigmoid_whole_domain() {
    check_function(UnaryFn::Sigmoid);
}

#[test]
fn sin_whole_domain() {
    check_function(UnaryFn::Sin);
}

#[test]
fn cos_whole_domain() {
    check_function(UnaryFn::Cos);
}

/// Hosts without FMA take a different reduction for sin/cos and unfused polynomials; the
/// same code is compiled here with FMA off and swept more coarsely.
#[test]
fn without_fma_all_functions() {
    let vm = VMath::new(false);
    let code = build(vm, 1);
    for f in UnaryFn::ALL {
        // The trig reduction differs most without FMA: sweep it densely.
        let step = if matches!(f, UnaryFn::Sin | UnaryFn::Cos) {
            97
        } else {
            1009
        };
        let s = sweep(&code, vm, f, dense_sweep_inputs(step));
        println!(
            "{:8} fma=false max error {:.3} ulp over {} inputs (worst at {:e})",
            f.name(),
            s.max_ulp,
            s.count,
            s.worst_input
        );
        assert!(
            s.max_ulp <= bound(f) + 1.0,
            "{} without FMA: {} ulp at {:e}",
            f.name(),
            s.max_ulp,
            s.worst_input
        );
    }
}

fn eval(code: &JitCode, name: &str, xs: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; xs.len()];
    UnaryKernel::new(code, name)
        .expect("kernel")
        .run(xs, &mut out)
        .expect("run");
    out
}

fn eval2(code: &JitCode, name: &str, xs: &[f32], ys: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; xs.len()];
    BinaryKernel::new(code, name)
        .expect("kernel")
        .run(xs, ys, &mut out)
        .expect("run");
    out
}

#[test]
fn special_values_exactly() {
    let (_, code) = host_vmath();
    let inf = f32::INFINITY;
    // (function, input, expected): bitwise, except that any NaN matches NaN.
    let cases: &[(&str, f32, f32)] = &[
        ("exp", inf, inf),
        ("exp", -inf, 0.0),
        ("exp", 89.0, inf),
        ("exp", 1000.0, inf),
        ("exp", -1000.0, 0.0),
        ("exp", f32::NAN, f32::NAN),
        ("exp", 0.0, 1.0),
        ("exp", -0.0, 1.0),
        ("log", 0.0, -inf),
        ("log", -0.0, -inf),
        ("log", -1.0, f32::NAN),
        ("log", -inf, f32::NAN),
        ("log", inf, inf),
        ("log", 1.0, 0.0),
        ("log", f32::NAN, f32::NAN),
        ("tanh", inf, 1.0),
        ("tanh", -inf, -1.0),
        ("tanh", -0.0, -0.0),
        ("tanh", 0.0, 0.0),
        ("tanh", 20.0, 1.0),
        // Just below saturation the result is 1 - 2^-24, not 1 (regression: floor(tanh(9))
        // was 1 in fused code, found by the random-graph differential test).
        ("tanh", 8.5, 1.0 - f32::EPSILON / 2.0),
        ("tanh", 9.0, 1.0 - f32::EPSILON / 2.0),
        ("tanh", -9.01, -(1.0 - f32::EPSILON / 2.0)),
        ("tanh", 9.02, 1.0),
        ("tanh", f32::NAN, f32::NAN),
        ("erf", inf, 1.0),
        ("erf", -inf, -1.0),
        ("erf", -0.0, -0.0),
        ("erf", 10.0, 1.0),
        ("erf", f32::NAN, f32::NAN),
        ("erfc", 0.0, 1.0),
        ("erfc", -0.0, 1.0),
        ("erfc", inf, 0.0),
        ("erfc", -inf, 2.0),
        ("erfc", 10.5, 0.0),
        ("erfc", 100.0, 0.0),
        ("erfc", -100.0, 2.0),
        ("erfc", f32::NAN, f32::NAN),
        ("sigmoid", inf, 1.0),
        ("sigmoid", -inf, 0.0),
        ("sigmoid", 200.0, 1.0),
        ("sigmoid", -200.0, 0.0),
        ("sigmoid", 0.0, 0.5),
        ("sigmoid", f32::NAN, f32::NAN),
        ("sin", -0.0, -0.0),
        ("sin", 0.0, 0.0),
        ("sin", inf, f32::NAN),
        ("sin", f32::NAN, f32::NAN),
        ("cos", 0.0, 1.0),
        ("cos", -0.0, 1.0),
        ("cos", -inf, f32::NAN),
    ];
    for &(name, x, want) in cases {
        // Five copies: four go through the f32x4 body, the last through the scalar tail.
        let got = eval(&code, name, &[x; 5]);
        for (lane, &g) in got.iter().enumerate() {
            let ok = if want.is_nan() {
                g.is_nan()
            } else {
                g.to_bits() == want.to_bits()
            };
            assert!(ok, "{name}({x:e}) = {g:e} (lane {lane}), want {want:e}");
        }
    }
    // Gradual underflow: exp of a value whose result is subnormal is correct to 1 ulp.
    for x in [-88.0f32, -95.0, -100.0, -103.0] {
        let got = eval(&code, "exp", &[x])[0];
        assert!(
            got > 0.0 && got < f32::MIN_POSITIVE,
            "exp({x}) = {got:e} is not subnormal"
        );
        assert!(
            ulp_error(got, (x as f64).exp()) <= 1.0,
            "exp({x}) = {got:e}"
        );
    }
    // sigmoid keeps subnormal results instead of flushing them (1 / (1 + inf) would).
    let got = eval(&code, "sigmoid", &[-95.0])[0];
    assert!(
        ulp_error(got, reference(UnaryFn::Sigmoid, -95.0)) <= 1.0,
        "sigmoid(-95) = {got:e}"
    );
    // log of subnormals.
    for bits in [1u32, 2, 3, 0x10_0000, 0x7f_ffff] {
        let x = f32::from_bits(bits);
        let got = eval(&code, "log", &[x])[0];
        assert!(
            ulp_error(got, (x as f64).ln()) <= 1.0,
            "log({x:e}) = {got:e}"
        );
    }
}

#[test]
fn scalar_tail_matches_vector_body() {
    let (_, code) = host_vmath();
    let xs: Vec<f32> = (0..4001).map(|i| (i as f32 - 2000.0) * 0.013_7).collect();
    for f in UnaryFn::ALL {
        let all = eval(&code, f.name(), &xs);
        for (i, &x) in xs.iter().enumerate().step_by(7) {
            // A one-element call runs only the scalar tail.
            let one = eval(&code, f.name(), &[x])[0];
            assert_eq!(
                one.to_bits(),
                all[i].to_bits(),
                "{}({x}) differs between scalar and vector",
                f.name()
            );
        }
    }
}

/// Deterministic pseudo-random numbers (SplitMix64), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn pow_accuracy() {
    let (_, code) = host_vmath();
    let mut rng = Rng(42);
    let n = 1 << 21;
    let mut xs = Vec::with_capacity(n);
    let mut ys = Vec::with_capacity(n);
    for i in 0..n {
        // x log-uniform over the whole positive range, y such that |y log2 x| stays
        // mostly within the f32 exponent range (overflow and underflow included).
        let x = 2f64.powf(rng.uniform(-149.0, 128.0)) as f32;
        let y = if i % 4 == 0 {
            // Negative bases with integer exponents.
            (rng.uniform(-40.0, 40.0).round()) as f32
        } else {
            (rng.uniform(-160.0, 160.0) / (x as f64).log2().abs().max(1.0)) as f32
        };
        let x = if i % 4 == 0 {
            -(rng.uniform(0.1, 10.0) as f32)
        } else {
            x
        };
        xs.push(x);
        ys.push(y);
    }
    let got = eval2(&code, "pow", &xs, &ys);
    let mut worst = (0.0f64, 0.0f32, 0.0f32);
    for i in 0..n {
        let err = ulp_error(got[i], (xs[i] as f64).powf(ys[i] as f64));
        if err > worst.0 {
            worst = (err, xs[i], ys[i]);
        }
    }
    println!(
        "pow      max error {:.3} ulp over {n} pairs (worst: pow({:e}, {:e}))",
        worst.0, worst.1, worst.2
    );
    assert!(
        worst.0 <= 1.0,
        "pow({:e}, {:e}): {} ulp",
        worst.1,
        worst.2,
        worst.0
    );
}

#[test]
fn pow_special_cases_follow_c99() {
    let (_, code) = host_vmath();
    let values = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        3.0,
        -3.0,
        2.5,
        -2.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(1),
        f32::MAX,
        1e-30,
        16_777_217.0,
    ];
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for &x in &values {
        for &y in &values {
            xs.push(x);
            ys.push(y);
        }
    }
    let got = eval2(&code, "pow", &xs, &ys);
    for i in 0..xs.len() {
        let want = (xs[i] as f64).powf(ys[i] as f64);
        let g = got[i];
        let err = ulp_error(g, want);
        let same_sign = g.is_nan() || (g.is_sign_negative() == (want as f32).is_sign_negative());
        assert!(
            err <= 1.0 && same_sign,
            "pow({:e}, {:e}) = {g:e}, want {want:e}",
            xs[i],
            ys[i]
        );
    }
}

#[test]
fn maximum_minimum_propagate_nan() {
    let (_, code) = host_vmath();
    let values = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        2.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
    ];
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for &x in &values {
        for &y in &values {
            xs.push(x);
            ys.push(y);
        }
    }
    let max = eval2(&code, "maximum", &xs, &ys);
    let min = eval2(&code, "minimum", &xs, &ys);
    for i in 0..xs.len() {
        let (x, y) = (xs[i], ys[i]);
        if x.is_nan() || y.is_nan() {
            assert!(
                max[i].is_nan() && min[i].is_nan(),
                "max/min({x}, {y}) must be NaN"
            );
        } else if x == y {
            // Equal: IEEE 754-2019 orders -0 below +0, so the maximum is -0 only when both
            // are, and the minimum +0 only when both are.
            let (pos, neg) = (x.abs(), -x.abs());
            let any_pos = x.is_sign_positive() || y.is_sign_positive();
            let any_neg = x.is_sign_negative() || y.is_sign_negative();
            let want_max = if x == 0.0 {
                if any_pos {
                    pos
                } else {
                    neg
                }
            } else {
                x
            };
            let want_min = if x == 0.0 {
                if any_neg {
                    neg
                } else {
                    pos
                }
            } else {
                x
            };
            assert_eq!(max[i].to_bits(), want_max.to_bits(), "max({x}, {y})");
            assert_eq!(min[i].to_bits(), want_min.to_bits(), "min({x}, {y})");
        } else {
            assert_eq!(max[i], x.max(y), "max({x}, {y})");
            assert_eq!(min[i], x.min(y), "min({x}, {y})");
        }
    }
}

/// The hot ops compile to the short sequences the module docs promise.
#[test]
fn maximum_is_maxps_plus_nan_fixup() {
    let options = JitOptions {
        capture_dumps: true,
        ..JitOptions::default()
    };
    let mut jit = Jit::with_options(options).expect("jit");
    let vm = VMath::for_isa(jit.isa());
    define_elementwise_f32(&mut jit, "max", 2, 1, &|b, v| vm.maximum(b, v[0], v[1])).expect("max");
    let code = jit.finalize().expect("finalize");
    let vcode = &code.dump("max").expect("dump").vcode;
    println!("{vcode}");
    let lower = vcode.to_lowercase();
    assert!(lower.contains("maxps"), "no maxps in:\n{vcode}");
    assert!(
        lower.contains("cmpunordps") && lower.contains("blendv"),
        "no NaN fix-up in:\n{vcode}"
    );
    // CLIF fmax would add minps/orps/andnps sequences for NaN and signed zeros.
    assert!(
        !lower.contains("minps"),
        "unexpected long fmax sequence:\n{vcode}"
    );
}

/// `exp` executes no floating-point operation with a subnormal result or operand, so x86
/// never runs it through the microcode assist that made it slow on underflowing inputs:
/// the MXCSR's sticky underflow and denormal-operand flags stay clear over inputs whose
/// results are normal, subnormal and zero (counted as flags, not time).
#[cfg(target_arch = "x86_64")]
#[test]
#[allow(deprecated)] // _mm_getcsr / _mm_setcsr: there is no other stable way to read them
fn exp_never_computes_with_subnormals() {
    use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
    const DENORMAL_OPERAND: u32 = 1 << 1;
    const UNDERFLOW: u32 = 1 << 4;
    let (_, code) = host_vmath();
    let kernel = UnaryKernel::new(&code, "exp").expect("kernel");
    // -110 to -80 in small steps, so every lane kind is hit, with odd lengths for the tail.
    let xs: Vec<f32> = (0..30_001).map(|i| -110.0 + i as f32 * 1e-3).collect();
    let mut out = vec![0.0f32; xs.len()];
    // SAFETY: reading and writing the calling thread's MXCSR; only the sticky exception
    // flags (bits 0-5) are cleared, the rounding and masking modes are kept.
    let before = unsafe {
        let csr = _mm_getcsr();
        _mm_setcsr(csr & !0x3f);
        csr
    };
    kernel.run(&xs, &mut out).expect("run");
    // SAFETY: as above; the flags the caller had are restored.
    let flags = unsafe {
        let flags = _mm_getcsr() & 0x3f;
        _mm_setcsr(before);
        flags
    };
    assert_eq!(
        flags & (UNDERFLOW | DENORMAL_OPERAND),
        0,
        "MXCSR flags {flags:#x}"
    );
    assert!(out.iter().any(|y| y.is_subnormal()));
    assert!(out.contains(&0.0));
    assert!(out.iter().any(|y| y.is_normal()));
    for (&x, &y) in xs.iter().zip(&out) {
        let want = (x as f64).exp();
        assert!(
            ulp_error(y, want) <= bound(UnaryFn::Exp),
            "exp({x:e}) = {y:e}"
        );
    }
}

/// Machine instructions of one `f32x4` application of `f` (load, constants, math, store,
/// frame), counted in Cranelift's vcode.
fn instruction_count(f: UnaryFn) -> usize {
    use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData};
    let options = JitOptions {
        capture_dumps: true,
        ..JitOptions::default()
    };
    let mut jit = Jit::with_options(options).expect("jit");
    let vm = VMath::for_isa(jit.isa());
    let ptr = jit.pointer_type();
    let signature = jit.signature(&[ptr, ptr], &[]);
    jit.define_with("one", signature, |b| {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let args = b.block_params(entry).to_vec();
        let flags = MemFlagsData::new().with_notrap();
        let x = b.ins().load(types::F32X4, flags, args[0], 0);
        let y = vm.unary(b, f, x);
        b.ins().store(flags, y, args[1], 0);
        b.ins().return_(&[]);
    })
    .expect("define");
    let code = jit.finalize().expect("finalize");
    let vcode = &code.dump("one").expect("dump").vcode;
    vcode
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("block") && !l.ends_with(':'))
        .count()
}

/// `exp`'s no-subnormal-arithmetic guarantee costs a few instructions, not a second
/// scaling path: its subnormal lanes reuse the normal path's scalings with `2^149` more
/// (one `and`, one add), and inputs below -104 are clamped rather than masked twice.
/// Measured on x86-64 with AVX2 + FMA: exp 61 and sigmoid 69 instructions with the
/// separate subnormal path, 53 and 61 now, 47 and 55 for the exp that let its results
/// underflow through a multiply (and stall on them).
#[cfg(target_arch = "x86_64")]
#[test]
fn exp_stays_short() {
    if !Jit::new().expect("jit").has_fma() {
        println!("no FMA: the counts are for FMA hosts");
        return;
    }
    let exp = instruction_count(UnaryFn::Exp);
    let sigmoid = instruction_count(UnaryFn::Sigmoid);
    println!("instructions: exp {exp}, sigmoid {sigmoid}");
    assert!(exp <= 53, "exp: {exp} instructions");
    assert!(sigmoid <= 61, "sigmoid: {sigmoid} instructions");
}
