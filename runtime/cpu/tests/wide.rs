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
