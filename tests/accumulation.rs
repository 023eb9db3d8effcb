//! The accumulation policy (ARCHITECTURE.md, "Numerics") on the reproducer of
//! reliability finding F14: f32 rows whose intermediates overflow f32.
//!
//! Composites (`mean`, `layer_norm`, `rms_norm`, ...) round every intermediate to
//! the tensor's dtype where `decompose` materializes it, in the interpreter as in
//! every backend, so they agree with each other and with PyTorch's f32 kernels; a
//! primitive reduction accumulates in f64 in the interpreter, so where a backend's
//! f32 partial products overflow (`prod`) the interpreter's answer is the exact one.

use ferrite::{compile_ir, Options, Target, Tensor};

const F14: &str = "graph g(x: f32[3, 8], w: f32[8], b: f32[8]) {
  r = rms_norm(x, w, eps=0.0)
  l = layer_norm(x, w, b)
  m = mean(x, axes=[1])
  p = prod(x, axes=[1])
  return r, l, m, p
}
";

fn inputs() -> Vec<Tensor> {
    let mut x = vec![1e20f32; 8];
    x.extend([3e38, 3e38, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    x.extend([2.0, 3.4e38, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    vec![
        Tensor::from_vec(&[3, 8], x).unwrap(),
        Tensor::from_vec(&[8], vec![1f32; 8]).unwrap(),
        Tensor::from_vec(&[8], vec![0f32; 8]).unwrap(),
    ]
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn regression_f32_overflow_happens_where_pytorch_has_it_on_every_target() {
    let g = ferrite_ir::parse("f14.fg", F14).unwrap();
    let run = |target: Target| -> Vec<Vec<f32>> {
        compile_ir(&g, &Options::default().target(target))
            .unwrap()
            .run(&inputs())
            .unwrap_or_else(|e| panic!("{target}: {e}"))
            .iter()
            .map(|t| t.to_vec::<f32>().unwrap())
            .collect()
    };
    let interp = run(Target::Interp);
    let (r, l, m, p) = (&interp[0], &interp[1], &interp[2], &interp[3]);
    // rms_norm: x * x overflows for |x| >= 1.9e19, so rsqrt(mean) is 0 and the rows
    // are 0 (PyTorch: `x * rsqrt(x.pow(2).mean(-1) + eps)` in f32).
    assert!(r.iter().all(|&v| v == 0.0), "rms_norm {r:?}");
    // layer_norm: the mean cannot overflow (PyTorch keeps a running mean); row 0 is
    // constant, so 0; row 1's variance overflows, so rstd is 0 and the row is `b`,
    // as PyTorch's kernel gives.
    assert!(l.iter().all(|&v| v == 0.0), "layer_norm {l:?}");
    // mean is sum / n: row 1's sum overflows f32, as in PyTorch (`sum().div_(n)`).
    assert_eq!(m[..2], [1e20, f32::INFINITY]);
    assert_eq!(m[2], ((2.0 + 3.4e38f32 as f64 + 5.0) as f32 / 8.0));
    // prod: one f64 accumulator, so 2 * 3.4e38 does not overflow before the 0.
    assert_eq!(p[..], [f32::INFINITY, f32::INFINITY, 0.0]);

    for target in [Target::Cpu, Target::Sim, Target::Loops] {
        let got = run(target);
        for (k, name) in ["rms_norm", "layer_norm", "mean"].iter().enumerate() {
            let ok = got[k].iter().zip(&interp[k]).all(|(&a, &b)| same(a, b));
            assert!(
                ok,
                "{name} on {target}: {:?}, interp {:?}",
                got[k], interp[k]
            );
        }
        // The one documented difference: a backend multiplies in f32, so 2 * 3.4e38
        // overflows and inf * 0 is NaN (PyTorch's f32 `prod` does the same); the
        // loop-IR evaluator, like the interpreter, accumulates in f64.
        let p = &got[3];
        assert_eq!(p[..2], [f32::INFINITY, f32::INFINITY], "prod on {target}");
        match target {
            Target::Loops => assert_eq!(p[2], 0.0),
            _ => assert!(p[2].is_nan() || p[2] == 0.0, "prod on {target}: {p:?}"),
        }
    }
}
