//! `ferrite_cpu::attention` against a plain `f64` reference of the decomposed graph
//! (`softmax(where(causal, q @ k^T * scale, -inf)) @ v`, with softmax's flush of `exp`
//! below `2^-126`), over strided and interleaved layouts; every parallelism gives the
//! same bits; bad layouts are errors.

use ferrite_cpu::attention::{attention, AttentionError, AttentionShape, RowsLayout};
use ferrite_cpu::{Parallelism, ThreadPool};
use ferrite_ir::SplitMix64;

/// Deterministic pseudo-random values in [-1, 1).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = SplitMix64(seed);
    (0..n)
        .map(|_| ((rng.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
        .collect()
}

/// An operand: its storage and layout.
struct Operand {
    data: Vec<f32>,
    layout: RowsLayout,
}

impl Operand {
    /// `tokens` rows of `row_len` values from `offset`, `pad` more elements between rows;
    /// the padding and the elements before `offset` are NaN (never read).
    fn new(seed: u64, tokens: usize, row_len: usize, offset: usize, pad: usize) -> Operand {
        let row_stride = row_len + pad;
        let mut data = values(seed, offset + tokens * row_stride);
        for r in 0..tokens {
            for x in &mut data[offset + r * row_stride + row_len..offset + (r + 1) * row_stride] {
                *x = f32::NAN;
            }
        }
        data[..offset].fill(f32::NAN);
        Operand {
            data,
            layout: RowsLayout { offset, row_stride },
        }
    }

    fn get(&self, r: usize, h: usize, dim: usize, d: usize) -> f32 {
        self.data[self.layout.offset + r * self.layout.row_stride + h * dim + d]
    }
}

/// The reference output element, in f64, and the error allowed in `f32`: `1e-5 *
/// sum_j |p_j v_jd|`, plus as much again per `2^-24 * sqrt(head_dim)` relative error of the
/// largest `|scale| * sum_d |q_d k_d|` of the row (what rounding the scores to `f32` moves
/// the weights by, large where the scale is).
fn reference(s: &AttentionShape, q: &Operand, k: &Operand, v: &Operand) -> Vec<(f64, f64)> {
    let (hd, vd) = (s.head_dim, s.value_dim);
    let mut out = vec![(0.0, 0.0); s.batch * s.seq * s.heads * vd];
    for b in 0..s.batch {
        for h in 0..s.heads {
            // The key/value head of query head `h`.
            let kvh = h / (s.heads / s.kv_heads);
            for i in 0..s.seq {
                let keys = if s.causal { i + 1 } else { s.seq };
                let mut spread: f64 = 0.0;
                let scores: Vec<f64> = (0..keys)
                    .map(|j| {
                        let terms = (0..hd).map(|d| {
                            q.get(b * s.seq + i, h, hd, d) as f64
                                * k.get(b * s.seq + j, kvh, hd, d) as f64
                        });
                        let size: f64 = terms.clone().map(f64::abs).sum();
                        spread = spread.max(size * (s.scale as f64).abs());
                        terms.sum::<f64>() * s.scale as f64
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|&x| (x - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                let p: Vec<f64> = e
                    .iter()
                    .map(|&x| {
                        if x < f32::MIN_POSITIVE as f64 {
                            0.0
                        } else {
                            x / sum
                        }
                    })
                    .collect();
                for d in 0..vd {
                    let (mut o, mut mag) = (0.0, 0.0);
                    for (j, &pj) in p.iter().enumerate() {
                        let x = v.get(b * s.seq + j, kvh, vd, d) as f64;
                        o += pj * x;
                        mag += (pj * x).abs();
                    }
                    let rel = 1e-5 + spread * (hd as f64).sqrt() / (1u64 << 24) as f64;
                    out[((b * s.seq + i) * s.heads + h) * vd + d] = (o, rel * mag);
                }
            }
        }
    }
    out
}

const SENTINEL: f32 = 12345.5;

/// Runs `s` with strided inputs and an output interleaved into a wider buffer, on the
/// calling thread and on the pool's parallelisms; checks the reference, that every run
/// gives the same bits, and that the other columns are untouched.
fn check_shape(s: &AttentionShape, pool: &ThreadPool, seed: u64) {
    let tokens = s.batch * s.seq;
    let (hd, vd, heads, kvh) = (s.head_dim, s.value_dim, s.heads, s.kv_heads);
    let q = Operand::new(seed, tokens, heads * hd, 3, 5);
    let k = Operand::new(seed + 1, tokens, kvh * hd, 0, 1);
    let v = Operand::new(seed + 2, tokens, kvh * vd, 11, 2);
    // The output's heads are every other block of `vd` columns of a row, after a gap.
    let out_layout = RowsLayout {
        offset: 7,
        row_stride: 2 * heads * vd + 3,
    };
    let out_len = out_layout.offset + tokens * out_layout.row_stride + 4;
    let want = reference(s, &q, &k, &v);
    let mut runs = Vec::new();
    for par in [
        Parallelism::None,
        Parallelism::Pool(pool),
        Parallelism::Team(pool.team(2, true)),
    ] {
        let mut out = vec![SENTINEL; out_len];
        attention(
            s, &q.data, q.layout, &k.data, k.layout, &v.data, v.layout, &mut out, out_layout, par,
        )
        .expect("a valid call");
        runs.push(out);
    }
    let first = &runs[0];
    for other in &runs[1..] {
        assert!(
            first
                .iter()
                .zip(other)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{s:?}: parallel runs differ from the caller thread's"
        );
    }
    // The heads' columns are the first heads * vd of each wide row; the rest is padding.
    let mut written = vec![false; out_len];
    for r in 0..tokens {
        for h in 0..heads {
            for d in 0..vd {
                let at = out_layout.offset + r * out_layout.row_stride + h * vd + d;
                written[at] = true;
                let (o, tol) = want[(r * heads + h) * vd + d];
                let got = first[at] as f64;
                assert!(
                    (got - o).abs() <= tol + 1e-30,
                    "{s:?}: row {r} head {h} elem {d}: got {got}, want {o} (within {tol})"
                );
            }
        }
    }
    for (i, (&x, &w)) in first.iter().zip(&written).enumerate() {
        if !w {
            assert_eq!(
                x.to_bits(),
                SENTINEL.to_bits(),
                "{s:?}: element {i} written"
            );
        }
    }
}

#[test]
fn matches_the_f64_reference_over_shapes() {
    let pool = ThreadPool::new(3).expect("pool");
    let mut seed = 1;
    for batch in [1, 3] {
        for seq in [1, 2, 7, 33, 130] {
            for heads in [1, 4] {
                for head_dim in [8, 64] {
                    for causal in [false, true] {
                        let s = AttentionShape {
                            batch,
                            seq,
                            heads,
                            kv_heads: heads,
                            head_dim,
                            value_dim: head_dim,
                            causal,
                            scale: 1.0 / (head_dim as f32).sqrt(),
                        };
                        check_shape(&s, &pool, seed);
                        seed += 3;
                    }
                }
            }
        }
    }
}

#[test]
fn value_dim_may_differ_from_head_dim() {
    let pool = ThreadPool::new(3).expect("pool");
    for (head_dim, value_dim, causal) in [(64, 24, true), (8, 40, false), (17, 3, true)] {
        let s = AttentionShape {
            batch: 2,
            seq: 75,
            heads: 3,
            kv_heads: 3,
            head_dim,
            value_dim,
            causal,
            scale: 0.3,
        };
        check_shape(&s, &pool, 77);
    }
}

/// Large scores: most weights' `exp` fall below `2^-126` and are flushed.
#[test]
fn spread_scores_flush_tiny_weights() {
    let pool = ThreadPool::new(3).expect("pool");
    for causal in [false, true] {
        let s = AttentionShape {
            batch: 2,
            seq: 130,
            heads: 4,
            kv_heads: 4,
            head_dim: 64,
            value_dim: 64,
            causal,
            scale: 40.0,
        };
        check_shape(&s, &pool, 99);
    }
}

/// Parallel runs of many blocks (the 64-row blocks) give the caller thread's bits.
#[test]
fn every_parallelism_gives_the_same_bits_at_larger_sizes() {
    let pool = ThreadPool::new(3).expect("pool");
    let s = AttentionShape {
        batch: 4,
        seq: 200,
        heads: 4,
        kv_heads: 4,
        head_dim: 64,
        value_dim: 64,
        causal: true,
        scale: 0.125,
    };
    check_shape(&s, &pool, 5);
}

/// With `causal`, a later key's NaN or infinite `k` or `v` reaches no earlier query.
#[test]
fn masked_keys_contribute_nothing() {
    let s = AttentionShape {
        batch: 1,
        seq: 40,
        heads: 2,
        kv_heads: 2,
        head_dim: 8,
        value_dim: 8,
        causal: true,
        scale: 0.5,
    };
    let l = RowsLayout {
        offset: 0,
        row_stride: 16,
    };
    let q = values(1, 40 * 16);
    let mut k = values(2, 40 * 16);
    let mut v = values(3, 40 * 16);
    let mut out_clean = vec![0.0; 40 * 16];
    attention(
        &s,
        &q,
        l,
        &k,
        l,
        &v,
        l,
        &mut out_clean,
        l,
        Parallelism::None,
    )
    .unwrap();
    // Token 20: NaN in k, inf in v (head 0); token 30: NaN in v (head 1).
    k[20 * 16 + 3] = f32::NAN;
    v[20 * 16 + 5] = f32::INFINITY;
    v[30 * 16 + 8 + 2] = f32::NAN;
    let mut out = vec![0.0; 40 * 16];
    attention(&s, &q, l, &k, l, &v, l, &mut out, l, Parallelism::None).unwrap();
    for r in 0..40 {
        for h in 0..2 {
            for d in 0..8 {
                let (a, b) = (out[r * 16 + h * 8 + d], out_clean[r * 16 + h * 8 + d]);
                // Head 0 from token 20 on sees the NaN score; head 1's element 2 from
                // token 30 on sees the NaN value.
                if (h == 0 && r >= 20) || (h == 1 && r >= 30 && d == 2) {
                    assert!(a.is_nan(), "row {r} head {h} elem {d}: {a}");
                } else {
                    assert_eq!(a.to_bits(), b.to_bits(), "row {r} head {h} elem {d}");
                }
            }
        }
    }
}

#[test]
fn empty_shapes_write_nothing() {
    for (batch, seq) in [(0, 5), (2, 0)] {
        let s = AttentionShape {
            batch,
            seq,
            heads: 2,
            kv_heads: 2,
            head_dim: 4,
            value_dim: 4,
            causal: true,
            scale: 1.0,
        };
        let l = RowsLayout {
            offset: 0,
            row_stride: 8,
        };
        let mut out = vec![SENTINEL; 3];
        attention(&s, &[], l, &[], l, &[], l, &mut out, l, Parallelism::None).unwrap();
        assert!(out.iter().all(|&x| x == SENTINEL));
    }
}

#[test]
fn bad_layouts_are_errors() {
    let s = AttentionShape {
        batch: 2,
        seq: 3,
        heads: 2,
        kv_heads: 2,
        head_dim: 4,
        value_dim: 5,
        causal: false,
        scale: 1.0,
    };
    let lq = RowsLayout {
        offset: 1,
        row_stride: 8,
    };
    let lv = RowsLayout {
        offset: 0,
        row_stride: 10,
    };
    let q = vec![0.5; 1 + 6 * 8];
    let v = vec![0.5; 6 * 10];
    let mut out = vec![SENTINEL; 6 * 10];
    let run = |q: &[f32], lq, k: &[f32], v: &[f32], lv, out: &mut [f32], lo| {
        attention(&s, q, lq, k, lq, v, lv, out, lo, Parallelism::None)
    };
    assert!(run(&q, lq, &q, &v, lv, &mut out, lv).is_ok());
    let short = |operand: &'static str| move |e: AttentionError| matches!(e, AttentionError::OutOfBounds { operand: o, .. } if o == operand);
    let mut fresh = vec![SENTINEL; 6 * 10];
    let e = run(&q[1..], lq, &q, &v, lv, &mut fresh, lv).unwrap_err();
    assert!(short("q")(e.clone()), "{e}");
    assert!(!e.to_string().is_empty());
    assert!(
        fresh.iter().all(|&x| x == SENTINEL),
        "nothing written on error"
    );
    let e = run(&q, lq, &q[..40], &v, lv, &mut fresh, lv).unwrap_err();
    assert!(short("k")(e.clone()), "{e}");
    let e = run(&q, lq, &q, &v[..59], lv, &mut fresh, lv).unwrap_err();
    assert!(short("v")(e.clone()), "{e}");
    let e = run(&q, lq, &q, &v, lv, &mut fresh[..59], lv).unwrap_err();
    assert!(short("out")(e.clone()), "{e}");
    let far = RowsLayout {
        offset: usize::MAX - 3,
        row_stride: 10,
    };
    let e = run(&q, lq, &q, &v, lv, &mut fresh, far).unwrap_err();
    assert!(matches!(e, AttentionError::Overflow { .. }), "{e}");
    // Output rows overlapping each other.
    let narrow = RowsLayout {
        offset: 0,
        row_stride: 9,
    };
    let e = run(&q, lq, &q, &v, lv, &mut fresh, narrow).unwrap_err();
    assert!(matches!(e, AttentionError::RowStride { .. }), "{e}");
    assert!(
        fresh.iter().all(|&x| x == SENTINEL),
        "nothing written on error"
    );
    let err: Box<dyn std::error::Error> = Box::new(e);
    assert!(!err.to_string().is_empty());
}

#[test]
fn grouped_query_heads_read_their_groups_key_and_value_heads() {
    let pool = ThreadPool::new(3).expect("pool");
    for (heads, kv_heads, causal) in [(4, 2, true), (4, 1, false), (6, 3, true)] {
        let s = AttentionShape {
            batch: 2,
            seq: 19,
            heads,
            kv_heads,
            head_dim: 16,
            value_dim: 16,
            causal,
            scale: 0.25,
        };
        check_shape(&s, &pool, 40 + heads as u64);
    }
    // Key/value heads that do not divide the query heads are an error.
    let s = AttentionShape {
        batch: 1,
        seq: 2,
        heads: 4,
        kv_heads: 3,
        head_dim: 4,
        value_dim: 4,
        causal: false,
        scale: 1.0,
    };
    let x = vec![0.0f32; 64];
    let mut out = vec![0.0f32; 64];
    let l = RowsLayout {
        offset: 0,
        row_stride: 16,
    };
    let e = attention(&s, &x, l, &x, l, &x, l, &mut out, l, Parallelism::None).unwrap_err();
    assert!(e.to_string().contains("do not divide"), "{e}");
}
