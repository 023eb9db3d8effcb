//! The tile attention kernel against a direct computation, at many batches,
//! lengths, head counts and widths, causal or not, from one kernel per shape.

use ferrite_accel::attention::{AttentionKernel, AttentionSpec};
use ferrite_accel::sim::{Device, Machine, Placement};
use ferrite_ir::Tensor;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Attention computed directly in f64, over token rows.
#[allow(clippy::too_many_arguments)]
fn reference(
    s: &AttentionSpec,
    batch: usize,
    seq: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
) -> Vec<f64> {
    let (h, d, dv, kvh) = (s.heads, s.head_dim, s.value_dim, s.kv_heads);
    let mut out = vec![0.0; batch * seq * h * dv];
    for b in 0..batch {
        for head in 0..h {
            let kh = head / (h / kvh);
            for i in 0..seq {
                let qi = &q[(b * seq + i) * h * d + head * d..][..d];
                let keys = if s.causal { i + 1 } else { seq };
                let scores: Vec<f64> = (0..keys)
                    .map(|j| {
                        let kj = &k[(b * seq + j) * kvh * d + kh * d..][..d];
                        qi.iter()
                            .zip(kj)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                            * s.scale
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..dv {
                    let mut acc = 0.0;
                    for (j, w) in e.iter().enumerate() {
                        acc += w * v[(b * seq + j) * kvh * dv + kh * dv + c] as f64;
                    }
                    out[(b * seq + i) * h * dv + head * dv + c] = acc / z;
                }
            }
        }
    }
    out
}

#[test]
fn the_attention_kernel_matches_a_direct_computation_at_every_shape() {
    let specs = [
        (4, 4, 16, 16, true, 0.25),
        (4, 2, 8, 8, false, 0.3),
        (3, 1, 12, 5, true, 0.4),
        (2, 2, 64, 64, true, 0.125),
    ];
    for (i, &(heads, kv_heads, head_dim, value_dim, causal, scale)) in specs.iter().enumerate() {
        let spec = AttentionSpec {
            heads,
            kv_heads,
            head_dim,
            value_dim,
            causal,
            scale,
        };
        let kernel = AttentionKernel::new(&spec).unwrap();
        for (batch, seq) in [(1, 1), (2, 7), (1, 33), (3, 64), (1, 70)] {
            let seed = (i * 100 + batch * 10 + seq) as u64;
            let tokens = batch * seq;
            let q = values(tokens * heads * head_dim, seed);
            let k = values(tokens * kv_heads * head_dim, seed + 1);
            let v = values(tokens * kv_heads * value_dim, seed + 2);
            let mut dev = Device::new(Machine::mtia2i());
            let up = |dev: &mut Device, name: &str, x: &[f32], w: usize| {
                let t = Tensor::from_f32(&[tokens, w], x.to_vec()).unwrap();
                dev.upload(name, &t, Placement::Lpddr).unwrap()
            };
            let qb = up(&mut dev, "q", &q, heads * head_dim);
            let kb = up(&mut dev, "k", &k, kv_heads * head_dim);
            let vb = up(&mut dev, "v", &v, kv_heads * value_dim);
            let out_ty = Tensor::from_f32(
                &[tokens, heads * value_dim],
                vec![0.0; tokens * heads * value_dim],
            )
            .unwrap()
            .ty;
            let ob = dev.alloc("out", &out_ty, Placement::Lpddr).unwrap();
            let report = kernel
                .launch(&mut dev, batch, seq, [qb, kb, vb, ob])
                .unwrap()
                .unwrap();
            assert!(report.cycles > 0);
            let got = dev.read(ob).unwrap().to_f64();
            let want = reference(&spec, batch, seq, &q, &k, &v);
            for (n, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 + 1e-5 * w.abs(),
                    "{spec:?} at batch {batch}, seq {seq}: element {n} is {g}, not {w}"
                );
            }
        }
    }
}
