//! The wide (AVX2, AVX-512) routines give the bits of the JIT'd `f32x4` vector math, lane
//! for lane, at every width this CPU supports: over a sweep of bit patterns, special
//! values, every `f32` whose `exp` is subnormal, and lengths that leave a tail.

use ferrite_cpu::kernels::define_elementwise_f32;
use ferrite_cpu::wide::routine;
use ferrite_cpu::{Isa, Jit, JitCode, UnaryFn, UnaryKernel, VMath};

const WIDE_FNS: [UnaryFn; 6] = [
    UnaryFn::Exp,
    UnaryFn::Log,
    UnaryFn::Tanh,
    UnaryFn::Erf,
    UnaryFn::Erfc,
    UnaryFn::Sigmoid,
];

fn narrow() -> JitCode {
    let mut jit = Jit::new().expect("host JIT");
    let vm = VMath::for_isa(jit.isa());
    for f in WIDE_FNS {
        define_elementwise_f32(&mut jit, f.name(), 1, 2, &|b, v| vm.unary(b, f, v[0]))
            .expect("kernel compiles");
    }
    jit.finalize().expect("finalize")
}

fn inputs() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..=u32::MAX / 4099)
        .map(|k| f32::from_bits(k * 4099))
        .collect();
    for x in [
        0.0f32,
        1.0,
        0.5,
        f32::INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::MAX,
        88.722_83,
        88.722_84,
        89.0,
        -87.336_55,
        -103.972_08,
        -104.0,
        -104.000_01,
        0.625,
        0.875,
        4.0,
        9.01,
        20.0,
    ] {
        xs.push(x);
        xs.push(-x);
    }
    // Every f32 from -104 to -86: exp's results from 0 through the subnormals to normal.
    let (hi, lo) = ((-86.0f32).to_bits(), (-104.0f32).to_bits());
    xs.extend((hi..=lo).map(f32::from_bits));
    // Around 0, where tanh, erf and log switch formulas: a fine grid.
    xs.extend((-40_000..40_000).map(|k| k as f32 * 1e-4));
    xs
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn wide_routines_match_the_jit_bit_for_bit() {
    let code = narrow();
    let xs = inputs();
    let widths: Vec<Isa> = [Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|isa| isa.supported())
        .collect();
    println!("wide widths on this CPU: {widths:?}");
    for f in WIDE_FNS {
        let kernel = UnaryKernel::new(&code, f.name()).expect("kernel");
        let mut want = vec![0.0f32; xs.len()];
        kernel.run(&xs, &mut want).expect("run");
        for &isa in &widths {
            let wide = routine(f, isa).expect("a wide routine for a supported width");
            // The whole sweep, then a length that leaves a tail of every size.
            let mut got = vec![0.0f32; xs.len()];
            wide(&xs, &mut got);
            for n in 1..40 {
                wide(&xs[..n], &mut got[..n]);
            }
            let bad: Vec<(f32, f32, f32)> = xs
                .iter()
                .zip(want.iter().zip(&got))
                .filter(|(_, (w, g))| !same(**w, **g))
                .map(|(&x, (&w, &g))| (x, w, g))
                .take(5)
                .collect();
            assert!(
                bad.is_empty(),
                "{} at {}: (x, jit, wide) {bad:?}",
                f.name(),
                isa.name()
            );
        }
    }
}

#[test]
fn no_wide_routine_at_sse_or_for_trig() {
    assert!(routine(UnaryFn::Exp, Isa::Sse).is_none());
    for isa in Isa::ALL {
        assert!(routine(UnaryFn::Sin, isa).is_none());
        assert!(routine(UnaryFn::Cos, isa).is_none());
    }
}

#[test]
fn isa_names_round_trip_and_cap() {
    for isa in Isa::ALL {
        assert_eq!(Isa::parse(isa.name()), Some(isa));
    }
    assert_eq!(Isa::parse(" AVX512 "), Some(Isa::Avx512));
    assert_eq!(Isa::parse("neon"), None);
    assert!(Isa::host() <= Isa::widest());
    assert!(Isa::widest().supported());
}

/// The steps of a layer norm's last pass, `((x - 0.5) * 1.5) * w + b`, stored into `out`,
/// over rows that `x`, `w` and `b` point to.
fn norm_steps(w: &[f32], b: &[f32], out: &mut [f32]) -> [ferrite_cpu::wide::ChainStep; 8] {
    use ferrite_cpu::wide::ChainStep;
    use ferrite_cpu::ChainOp;
    let step = |op: ChainOp, scalar: f32, row: *const f32, out: *mut f32| ChainStep {
        op: op as u32,
        scalar,
        row,
        out,
    };
    let (null, none) = (std::ptr::null::<f32>(), std::ptr::null_mut::<f32>());
    let mut steps = [step(ChainOp::Add, 0.0, null, none); 8];
    steps[0] = step(ChainOp::Sub, 0.5, null, none);
    steps[1] = step(ChainOp::Mul, 1.5, null, none);
    steps[2] = step(ChainOp::Mul, 0.0, w.as_ptr(), none);
    steps[3] = step(ChainOp::Add, 0.0, b.as_ptr(), out.as_mut_ptr());
    steps
}

/// The chain routines store each element's value after the steps as scalar `f32` code
/// computes it, and sum the last values as the row sum routine does (the JIT's order), at
/// every width and every length of tail; nothing is written past the row.
#[test]
fn chain_routines_match_scalar_steps() {
    use ferrite_cpu::wide::{chain_routine, row_routine, ChainArgs};
    use ferrite_cpu::{ChainOp, RowReduce};
    for isa in [Isa::Avx2, Isa::Avx512] {
        if !isa.supported() {
            continue;
        }
        for n in [
            0, 1, 15, 16, 17, 63, 64, 100, 255, 256, 257, 1024, 1031, 4099,
        ] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37)
                .collect();
            let w: Vec<f32> = (0..n).map(|i| 1.0 + (i as f32) * 1e-3).collect();
            let b: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.25).collect();
            // One guard element past the row.
            let mut out = vec![f32::from_bits(0x7fc0_dead); n + 1];
            let steps = norm_steps(&w, &b, &mut out);
            let args = ChainArgs {
                x: x.as_ptr(),
                count: 4,
                steps,
            };
            let store = chain_routine(false, isa).expect("the width is supported");
            // SAFETY: every row holds n floats; out is apart from the others.
            unsafe { store(&args, n) };
            for j in 0..n {
                let want = ((x[j] - 0.5) * 1.5) * w[j] + b[j];
                assert_eq!(out[j].to_bits(), want.to_bits(), "{isa:?} n {n} at {j}");
            }
            assert_eq!(
                out[n].to_bits(),
                0x7fc0_dead,
                "{isa:?} n {n}: wrote past the row"
            );
            // The sum of squares of the same values, as a separate square step.
            let mut sq_args = args;
            sq_args.steps[3].out = std::ptr::null_mut();
            sq_args.steps[4].op = ChainOp::Square as u32;
            sq_args.count = 5;
            let sum = chain_routine(true, isa).expect("the width is supported");
            // SAFETY: as above, nothing stored.
            let got = unsafe { sum(&sq_args, n) };
            let squares: Vec<f32> = out[..n].iter().map(|v| v * v).collect();
            let row_sum = row_routine(RowReduce::Sum, isa).expect("the width is supported");
            // SAFETY: n readable floats.
            let want = unsafe { row_sum(squares.as_ptr(), n) };
            assert_eq!(got.to_bits(), want.to_bits(), "{isa:?} n {n}: sum");
        }
    }
}

/// Timing of the chain routines on one L1-resident row (1024 floats, or `CHAIN_N`) against
/// the scalar loop (not a test: `CHAIN_N=196 cargo test --release -p ferrite-cpu --test wide
/// chain_speed -- --ignored --nocapture`).
#[test]
#[ignore]
fn chain_speed() {
    use ferrite_cpu::wide::{chain_routine, ChainArgs};
    let n: usize = std::env::var("CHAIN_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let x: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
    let w: Vec<f32> = (0..n).map(|i| 1.0 + (i as f32) * 1e-3).collect();
    let b: Vec<f32> = (0..n).map(|i| (i as f32) * 1e-3).collect();
    let mut out = vec![0.0f32; n];
    let steps = norm_steps(&w, &b, &mut out);
    let args = ChainArgs {
        x: x.as_ptr(),
        count: 4,
        steps,
    };
    let reps = 100_000;
    for isa in [Isa::Avx2, Isa::Avx512] {
        let Some(f) = chain_routine(false, isa) else {
            continue;
        };
        let t = std::time::Instant::now();
        for _ in 0..reps {
            // SAFETY: every row holds n floats; out is apart from the others.
            unsafe { f(std::hint::black_box(&args), n) };
        }
        let ns = t.elapsed().as_nanos() as f64 / reps as f64;
        eprintln!("{isa:?}: {ns:.1} ns per row of {n}");
    }
    let t = std::time::Instant::now();
    for _ in 0..reps {
        for j in 0..n {
            out[j] = std::hint::black_box(((x[j] - 0.5) * 1.5) * w[j] + b[j]);
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / reps as f64;
    eprintln!("scalar: {ns:.1} ns per row of {n}");
}
