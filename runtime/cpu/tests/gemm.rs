//! The GEMM wrapper against a naive triple loop in `f64`: layouts, batches, scaling, errors.

use ferrite_cpu::gemm::gemm;
use ferrite_cpu::{
    GemmError, GemmShape, MatLayout, MatMut, MatRef, Parallelism, Scale, ThreadPool,
};

/// Deterministic pseudo-random numbers (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
            .collect()
    }
}

fn at(layout: &MatLayout, p: usize, i: usize, j: usize) -> usize {
    (layout.offset as isize
        + p as isize * layout.batch_stride
        + i as isize * layout.row_stride
        + j as isize * layout.col_stride) as usize
}

/// The obviously correct product, in f64.
fn naive(
    shape: GemmShape,
    a: (&[f32], MatLayout),
    b: (&[f32], MatLayout),
    c: (&[f32], MatLayout),
    alpha: f32,
    beta: f32,
) -> Vec<f64> {
    let mut out = Vec::new();
    for p in 0..shape.batch {
        for i in 0..shape.m {
            for j in 0..shape.n {
                let mut acc = 0.0f64;
                for k in 0..shape.k {
                    acc += a.0[at(&a.1, p, i, k)] as f64 * b.0[at(&b.1, p, k, j)] as f64;
                }
                let old = if beta == 0.0 {
                    0.0
                } else {
                    beta as f64 * c.0[at(&c.1, p, i, j)] as f64
                };
                out.push(alpha as f64 * acc + old);
            }
        }
    }
    out
}

fn check_against_naive(
    shape: GemmShape,
    la: MatLayout,
    lb: MatLayout,
    lc: MatLayout,
    scale: Scale<f32>,
    par: Parallelism<'_>,
    seed: u64,
) {
    let mut rng = Rng(seed);
    let len = |l: &MatLayout, r: usize, c: usize| {
        if shape.batch == 0 || r == 0 || c == 0 {
            return l.offset;
        }
        // The largest index is at one of the corners of the (batch, row, column) box.
        let mut max = 0;
        for p in [0, shape.batch - 1] {
            for i in [0, r - 1] {
                for j in [0, c - 1] {
                    max = max.max(at(l, p, i, j));
                }
            }
        }
        max + 1
    };
    let a = rng.values(len(&la, shape.m, shape.k) + 3);
    let b = rng.values(len(&lb, shape.k, shape.n) + 3);
    let c0 = rng.values(len(&lc, shape.m, shape.n) + 3);
    let want = naive(
        shape,
        (&a, la),
        (&b, lb),
        (&c0, lc),
        scale.alpha,
        scale.beta,
    );
    let mut c = c0.clone();
    gemm(
        shape,
        MatRef::new(&a, la),
        MatRef::new(&b, lb),
        MatMut::new(&mut c, lc),
        scale,
        par,
    )
    .expect("valid product");
    let mut idx = 0;
    let mut touched = vec![false; c.len()];
    for p in 0..shape.batch {
        for i in 0..shape.m {
            for j in 0..shape.n {
                let pos = at(&lc, p, i, j);
                touched[pos] = true;
                let tol = 1e-5 * (shape.k as f64).sqrt().max(1.0) * 4.0;
                assert!(
                    (c[pos] as f64 - want[idx]).abs() <= tol,
                    "{shape:?} [{p},{i},{j}]: {} vs {}",
                    c[pos],
                    want[idx]
                );
                idx += 1;
            }
        }
    }
    // Elements outside C's layout are untouched.
    for (pos, t) in touched.iter().enumerate() {
        if !t {
            assert_eq!(
                c[pos].to_bits(),
                c0[pos].to_bits(),
                "element {pos} outside C changed"
            );
        }
    }
}

#[test]
fn row_major_products_of_many_sizes() {
    let sizes = [
        (1, 1, 1),
        (1, 7, 3),
        (5, 1, 9),
        (3, 4, 0),
        (17, 13, 29),
        (64, 48, 33),
        (100, 3, 70),
    ];
    for (seed, &(m, n, k)) in sizes.iter().enumerate() {
        let shape = GemmShape::new(m, n, k);
        let (la, lb, lc) = (
            MatLayout::row_major(m, k),
            MatLayout::row_major(k, n),
            MatLayout::row_major(m, n),
        );
        check_against_naive(
            shape,
            la,
            lb,
            lc,
            Scale::overwrite(),
            Parallelism::None,
            seed as u64,
        );
        check_against_naive(
            shape,
            la,
            lb,
            lc,
            Scale {
                alpha: 0.5,
                beta: -2.0,
            },
            Parallelism::None,
            seed as u64 + 100,
        );
    }
}

#[test]
fn transposed_operands_need_no_copy() {
    let (m, n, k) = (23, 19, 31);
    let shape = GemmShape::new(m, n, k);
    // A stored as k x m (A^T row-major), B stored as n x k, C column-major.
    let la = MatLayout::row_major(k, m).transposed();
    let lb = MatLayout::row_major(n, k).transposed();
    let lc = MatLayout::col_major(m, n);
    check_against_naive(shape, la, lb, lc, Scale::overwrite(), Parallelism::None, 7);
    check_against_naive(shape, la, lb, lc, Scale::accumulate(), Parallelism::None, 8);
}

#[test]
fn padded_offset_and_negative_strides() {
    let (m, n, k) = (6, 5, 4);
    let shape = GemmShape::new(m, n, k);
    // Rows padded to 9 elements, starting at element 3.
    let la = MatLayout {
        offset: 3,
        batch_stride: 0,
        row_stride: 9,
        col_stride: 1,
    };
    // B with its rows in reverse order (negative row stride).
    let lb = MatLayout {
        offset: (k - 1) * n,
        batch_stride: 0,
        row_stride: -(n as isize),
        col_stride: 1,
    };
    let lc = MatLayout::row_major(m, n).with_offset(2);
    check_against_naive(
        shape,
        la,
        lb,
        lc,
        Scale {
            alpha: 1.5,
            beta: 0.25,
        },
        Parallelism::None,
        9,
    );
}

#[test]
fn batched_with_broadcast_weight_serial_and_pooled() {
    let (batch, m, n, k) = (6, 12, 10, 8);
    let shape = GemmShape::batched(batch, m, n, k);
    let la = MatLayout::row_major(m, k);
    let lb = MatLayout::row_major(k, n).broadcast_batch();
    let lc = MatLayout::row_major(m, n);
    check_against_naive(shape, la, lb, lc, Scale::overwrite(), Parallelism::None, 10);
    let pool = ThreadPool::new(2).expect("pool");
    check_against_naive(
        shape,
        la,
        lb,
        lc,
        Scale::overwrite(),
        Parallelism::Pool(&pool),
        11,
    );
    // Fewer batches than threads, products of at least 8M multiply-adds: each is split
    // into a block per pool thread, by rows when m >= n (odd sizes: uneven blocks), else by
    // columns; transposed and offset operands, accumulating, with a gap around C.
    let pool3 = ThreadPool::new(3).expect("pool");
    for (m, n, k) in [(257, 129, 255), (33, 1025, 250)] {
        let shape = GemmShape::batched(2, m, n, k);
        let la = MatLayout::col_major(m, k).with_offset(2);
        let lb = MatLayout::row_major(k, n);
        let lc = MatLayout {
            offset: 1,
            batch_stride: ((m + 1) * (n + 2)) as isize,
            row_stride: (n + 2) as isize,
            col_stride: 1,
        };
        for (i, p) in [&pool, &pool3].into_iter().enumerate() {
            check_against_naive(
                shape,
                la,
                lb,
                lc,
                Scale::accumulate(),
                Parallelism::Pool(p),
                13 + i as u64,
            );
        }
    }
    // Small products run on the calling thread.
    let one = GemmShape::batched(1, 70, 65, 90);
    let (la, lb, lc) = (
        MatLayout::row_major(70, 90),
        MatLayout::row_major(90, 65),
        MatLayout::row_major(70, 65),
    );
    check_against_naive(
        one,
        la,
        lb,
        lc,
        Scale::accumulate(),
        Parallelism::Pool(&pool),
        12,
    );
}

#[test]
fn beta_zero_does_not_read_c() {
    let shape = GemmShape::new(2, 2, 2);
    let a = [1.0f32, 2.0, 3.0, 4.0];
    let b = [5.0f32, 6.0, 7.0, 8.0];
    let mut c = [f32::NAN; 4];
    let l = MatLayout::row_major(2, 2);
    gemm(
        shape,
        MatRef::new(&a, l),
        MatRef::new(&b, l),
        MatMut::new(&mut c, l),
        Scale::overwrite(),
        Parallelism::None,
    )
    .unwrap();
    assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
    // k = 0: C = beta * C, and zero (not NaN) when beta is zero.
    let empty: [f32; 0] = [];
    let mut c = [1.0f32, 2.0, f32::NAN, 4.0];
    let l0 = MatLayout::row_major(2, 0);
    gemm(
        GemmShape::new(2, 2, 0),
        MatRef::new(&empty, l0),
        MatRef::new(&empty, l0),
        MatMut::new(&mut c, l),
        Scale::overwrite(),
        Parallelism::None,
    )
    .unwrap();
    assert_eq!(c, [0.0; 4]);
    let mut c = [1.0f32, 2.0, 3.0, 4.0];
    let s = Scale {
        alpha: 1.0,
        beta: 3.0,
    };
    gemm(
        GemmShape::new(2, 2, 0),
        MatRef::new(&empty, l0),
        MatRef::new(&empty, l0),
        MatMut::new(&mut c, l),
        s,
        Parallelism::None,
    )
    .unwrap();
    assert_eq!(c, [3.0, 6.0, 9.0, 12.0]);
}

#[test]
fn bad_layouts_are_errors_not_memory_errors() {
    let a = vec![0.0f32; 12];
    let b = vec![0.0f32; 12];
    let mut c = vec![0.0f32; 9];
    let shape = GemmShape::new(3, 3, 4);
    let (la, lb, lc) = (
        MatLayout::row_major(3, 4),
        MatLayout::row_major(4, 3),
        MatLayout::row_major(3, 3),
    );
    // A one element short.
    let err = gemm(
        shape,
        MatRef::new(&a[..11], la),
        MatRef::new(&b, lb),
        MatMut::new(&mut c, lc),
        Scale::overwrite(),
        Parallelism::None,
    )
    .unwrap_err();
    assert!(
        matches!(err, GemmError::OutOfBounds { operand: "a", .. }),
        "{err:?}"
    );
    // B read past its end through an offset.
    let err = gemm(
        shape,
        MatRef::new(&a, la),
        MatRef::new(&b, lb.with_offset(1)),
        MatMut::new(&mut c, lc),
        Scale::overwrite(),
        Parallelism::None,
    )
    .unwrap_err();
    assert!(
        matches!(err, GemmError::OutOfBounds { operand: "b", .. }),
        "{err:?}"
    );
    // A negative stride reaching before the start.
    let neg = MatLayout {
        offset: 0,
        batch_stride: 0,
        row_stride: -3,
        col_stride: 1,
    };
    let err = gemm(
        shape,
        MatRef::new(&a, la),
        MatRef::new(&b, lb),
        MatMut::new(&mut c, neg),
        Scale::overwrite(),
        Parallelism::None,
    )
    .unwrap_err();
    assert!(
        matches!(err, GemmError::OutOfBounds { operand: "c", .. }),
        "{err:?}"
    );
    // An output whose rows overlap (row stride 1 with 3 columns of stride 1).
    let overlap = MatLayout {
        offset: 0,
        batch_stride: 0,
        row_stride: 1,
        col_stride: 1,
    };
    let err = gemm(
        shape,
        MatRef::new(&a, la),
        MatRef::new(&b, lb),
        MatMut::new(&mut c, overlap),
        Scale::overwrite(),
        Parallelism::None,
    )
    .unwrap_err();
    assert_eq!(err, GemmError::OverlappingOutput);
    // A batch of outputs all written to the same matrix.
    let shape2 = GemmShape::batched(2, 3, 3, 4);
    let err = gemm(
        shape2,
        MatRef::new(&a, la.broadcast_batch()),
        MatRef::new(&b, lb.broadcast_batch()),
        MatMut::new(&mut c, lc.broadcast_batch()),
        Scale::overwrite(),
        Parallelism::None,
    )
    .unwrap_err();
    assert_eq!(err, GemmError::OverlappingOutput);
    assert!(err.to_string().contains("output"));
}

#[test]
fn f16_and_f64_products() {
    use ferrite_cpu::gemm::f16;
    let (m, n, k) = (9, 7, 16);
    let mut rng = Rng(99);
    let a32 = rng.values(m * k);
    let b32 = rng.values(k * n);
    let (la, lb, lc) = (
        MatLayout::row_major(m, k),
        MatLayout::row_major(k, n),
        MatLayout::row_major(m, n),
    );
    let a16: Vec<f16> = a32.iter().map(|&x| f16::from_f32(x)).collect();
    let b16: Vec<f16> = b32.iter().map(|&x| f16::from_f32(x)).collect();
    let mut c16 = vec![f16::ZERO; m * n];
    gemm(
        GemmShape::new(m, n, k),
        MatRef::new(&a16, la),
        MatRef::new(&b16, lb),
        MatMut::new(&mut c16, lc),
        Scale::overwrite(),
        Parallelism::None,
    )
    .unwrap();
    // Reference on the f16-rounded inputs; the result is rounded to f16 (about 3 decimal digits).
    let a_r: Vec<f32> = a16.iter().map(|x| x.to_f32()).collect();
    let b_r: Vec<f32> = b16.iter().map(|x| x.to_f32()).collect();
    let want = naive(
        GemmShape::new(m, n, k),
        (&a_r, la),
        (&b_r, lb),
        (&vec![0.0; m * n], lc),
        1.0,
        0.0,
    );
    for (got, want) in c16.iter().zip(&want) {
        assert!(
            (got.to_f32() as f64 - want).abs() <= 4e-3 * want.abs().max(1.0),
            "{got} vs {want}"
        );
    }
    let a64: Vec<f64> = a32.iter().map(|&x| x as f64).collect();
    let b64: Vec<f64> = b32.iter().map(|&x| x as f64).collect();
    let mut c64 = vec![0.0f64; m * n];
    gemm(
        GemmShape::new(m, n, k),
        MatRef::new(&a64, la),
        MatRef::new(&b64, lb),
        MatMut::new(&mut c64, lc),
        Scale::overwrite(),
        Parallelism::None,
    )
    .unwrap();
    for (got, want) in c64.iter().zip(&want_from(&a32, &b32, m, n, k)) {
        assert!((got - want).abs() <= 1e-12, "{got} vs {want}");
    }
}

fn want_from(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let (la, lb, lc) = (
        MatLayout::row_major(m, k),
        MatLayout::row_major(k, n),
        MatLayout::row_major(m, n),
    );
    naive(
        GemmShape::new(m, n, k),
        (a, la),
        (b, lb),
        (&vec![0.0; m * n], lc),
        1.0,
        0.0,
    )
}

/// Regression: `f16` products accumulate in `f32`. With AVX-512 FP16 the `gemm` crate's own
/// `f16` kernel rounded every partial sum to `f16`, so a cancelling dot product lost its
/// whole result (found by the random-graph differential test, seed 5009969). Here
/// `(1 + 2^-10)^2 - (1 + 2^-9) = 2^-20` exactly (an `f16` subnormal); `f16` accumulation
/// gives 0. Also through a transposed, strided, batched and accumulating (beta = 1) call.
#[test]
fn f16_products_accumulate_in_f32() {
    use ferrite_cpu::gemm::f16;
    let h = |x: f64| f16::from_f64(x);
    let e = 2f64.powi(-10);
    let a = [h(1.0 + e), h(-1.0)];
    let b = [h(1.0 + e), h(1.0 + 2.0 * e)];
    let mut c = [f16::ZERO];
    gemm(
        GemmShape::new(1, 1, 2),
        MatRef::new(&a, MatLayout::row_major(1, 2)),
        MatRef::new(&b, MatLayout::row_major(2, 1)),
        MatMut::new(&mut c, MatLayout::row_major(1, 1)),
        Scale::overwrite(),
        Parallelism::None,
    )
    .unwrap();
    assert_eq!(c[0].to_f64(), 2f64.powi(-20));
    // Batch of 3 sharing `a` (batch stride 0), `b` read transposed from a [3, 1, 2]
    // buffer, `c` strided with a gap, accumulating onto 2^-20.
    let bt: Vec<f16> = (0..3).flat_map(|_| b).collect();
    let mut c = vec![h(2f64.powi(-20)); 6];
    let pool = ThreadPool::new(2).unwrap();
    gemm(
        GemmShape::batched(3, 1, 1, 2),
        MatRef::new(&a, MatLayout::row_major(1, 2).broadcast_batch()),
        MatRef::new(&bt, MatLayout::row_major(1, 2).transposed()),
        MatMut::new(
            &mut c,
            MatLayout {
                offset: 1,
                batch_stride: 2,
                row_stride: 1,
                col_stride: 1,
            },
        ),
        Scale::accumulate(),
        Parallelism::Pool(&pool),
    )
    .unwrap();
    for p in 0..3 {
        assert_eq!(c[1 + 2 * p].to_f64(), 2f64.powi(-19), "batch {p}");
        assert_eq!(c[2 * p].to_f64(), 2f64.powi(-20), "untouched gap");
    }
}

/// Products of bounded operands run with denormals flushed (module docs of `gemm`): a
/// subnormal operand reads as zero and a subnormal result is zero, on the crate's path and
/// on our few-row kernel, serial and pooled; products with a huge or infinite operand keep
/// IEEE arithmetic; the caller's floating-point mode is untouched afterwards.
#[test]
fn subnormals_are_flushed_inside_products_only() {
    let tiny = f32::MIN_POSITIVE / 4.0; // subnormal
    let pool = ThreadPool::new(3).unwrap();
    // Row-major C = A @ B of shape (m, n, k).
    let product = |a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), par| {
        let mut c = vec![f32::NAN; m * n];
        gemm(
            GemmShape::new(m, n, k),
            MatRef::new(a, MatLayout::row_major(m, k)),
            MatRef::new(b, MatLayout::row_major(k, n)),
            MatMut::new(&mut c, MatLayout::row_major(m, n)),
            Scale::overwrite(),
            par,
        )
        .unwrap();
        c
    };
    // A with `first` in column 0 and `rest` elsewhere.
    let column = |(m, k): (usize, usize), first: f32, rest: f32| {
        let mut a = vec![rest; m * k];
        for i in 0..m {
            a[i * k] = first;
        }
        a
    };
    for (m, n, k) in [(2, 3, 4), (200, 96, 64)] {
        // A: a column of subnormals, the rest 1; B: all 1, so each element of C is
        // (k - 1) + tiny, and the tiny part is gone. A with only the subnormals gives 0,
        // and so does a product of normal values whose result is subnormal.
        let a = column((m, k), tiny, 1.0);
        let only = column((m, k), tiny, 0.0);
        let b = vec![1.0f32; k * n];
        let small_a = vec![1e-20f32; m * k];
        let small_b = vec![1e-20f32; k * n];
        for par in [Parallelism::None, Parallelism::Pool(&pool)] {
            let c = product(&a, &b, (m, n, k), par);
            assert!(c.iter().all(|&v| v == (k - 1) as f32), "{:?}", &c[..4]);
            let c = product(&only, &b, (m, n, k), par);
            assert!(
                c.iter().all(|&v| v == 0.0),
                "subnormal operand: {:?}",
                &c[..4]
            );
            // k * 1e-40 is subnormal: flushed to zero.
            let c = product(&small_a, &small_b, (m, n, k), par);
            assert!(
                c.iter().all(|&v| v == 0.0),
                "subnormal result: {:?}",
                &c[..4]
            );
        }
    }
    // With an operand beyond 2^32 or not finite the product keeps IEEE arithmetic, where a
    // subnormal read as zero would matter: 1e-39 * 3e38 = 0.3, 1e-39 * inf = inf.
    for big in [3e38f32, f32::INFINITY] {
        let (m, n, k) = (200, 96, 64);
        // A row: 1e-39 then zeros (finite B: the sum is 1e-39 * 3e38 = 0.3) or ones
        // (infinite B: every term is inf; a subnormal read as zero would make one NaN).
        let rest = if big.is_finite() { 0.0 } else { 1.0 };
        let a = column((m, k), 1e-39, rest);
        let b = vec![big; k * n];
        let want = if big.is_finite() {
            1e-39f64 as f32 as f64 * 3e38
        } else {
            f64::INFINITY
        };
        for par in [Parallelism::None, Parallelism::Pool(&pool)] {
            let c = product(&a, &b, (m, n, k), par);
            assert!(
                c.iter()
                    .all(|&v| v as f64 == want || ((v as f64) - want).abs() < 1e-6 * want),
                "{big}: {:?}, want {want}",
                &c[..4]
            );
        }
    }
    // The caller's mode is restored: ordinary arithmetic keeps gradual underflow.
    assert!(!ferrite_cpu::FlushDenormals::active());
    let x = std::hint::black_box(f32::MIN_POSITIVE);
    assert!(x / 4.0 > 0.0);
}

/// The operand scan that decides flushing sees every element, at every position of long
/// slices (vector bodies, chunk ends, tails).
#[test]
fn the_flush_scan_sees_every_element() {
    use ferrite_cpu::gemm::{GemmScalar, Scan, FLUSH_LIMIT};
    let scan = |xs: &[f32]| <f32 as GemmScalar>::scan(xs);
    let ok = Scan {
        bounded: true,
        normal: true,
    };
    assert_eq!(scan(&[]), ok);
    for n in [1usize, 7, 16, 4095, 4096, 4097, 10_001] {
        let base: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
        assert_eq!(scan(&base), ok, "{n}");
        for at in [0, n / 2, n - 1] {
            for (v, want) in [
                (
                    f32::MIN_POSITIVE / 2.0,
                    Scan {
                        bounded: true,
                        normal: false,
                    },
                ),
                (
                    -f32::from_bits(1),
                    Scan {
                        bounded: true,
                        normal: false,
                    },
                ),
                (f32::MIN_POSITIVE, ok),
                (-0.0, ok),
                (FLUSH_LIMIT, ok),
                (
                    -FLUSH_LIMIT * 2.0,
                    Scan {
                        bounded: false,
                        normal: true,
                    },
                ),
                (
                    f32::INFINITY,
                    Scan {
                        bounded: false,
                        normal: true,
                    },
                ),
                (
                    f32::NAN,
                    Scan {
                        bounded: false,
                        normal: true,
                    },
                ),
            ] {
                let mut xs = base.clone();
                xs[at] = v;
                let got = scan(&xs);
                // An unbounded slice may stop scanning early: only `bounded` is promised.
                if want.bounded {
                    assert_eq!(got, want, "{v:e} at {at} of {n}");
                } else {
                    assert!(!got.bounded, "{v:e} at {at} of {n}");
                }
            }
        }
    }
}

/// `gemm_nd_then` runs `after` once on every element's block: on one thread blocks of
/// whole rows (small enough to stay in cache when `B` is, whole products when it is
/// not), on a team the blocks of rows and columns of the usual split, so that a product
/// of few rows still spreads over the team; every element of every batch exactly once,
/// with the same results as `gemm_nd`.
#[test]
fn blocks_run_after_once_each() {
    use ferrite_cpu::gemm::rows_per_block;
    use ferrite_cpu::{gemm_nd, gemm_nd_then, BatchAxes};
    use std::sync::Mutex;
    let pool = ThreadPool::new(3).expect("pool");
    // (m, n, k): a small B (serial blocks of 8 rows), a B over 2 MiB (serial whole
    // rows), a small product (serial on the team too), and a matrix-vector product.
    for (m, n, k) in [(40, 20000, 8), (20, 9000, 64), (5, 100, 3), (1, 40000, 64)] {
        let batch = 2;
        let mut rng = Rng(m as u64);
        let a = rng.values(batch * m * k);
        let b = rng.values(k * n);
        let la = MatLayout::row_major(m, k);
        let lb = MatLayout::row_major(k, n);
        let lc = MatLayout::row_major(m, n);
        let axes = BatchAxes {
            extents: &[batch],
            a: &[(m * k) as i64],
            b: &[0],
            c: &[(m * n) as i64],
        };
        let mut want = vec![0.0f32; batch * m * n];
        gemm_nd(
            axes,
            (m, n, k),
            MatRef::new(&a, la),
            MatRef::new(&b, lb),
            MatMut::new(&mut want, lc),
            Scale::overwrite(),
            Parallelism::None,
        )
        .unwrap();
        let rows = rows_per_block::<f32>(m, n, k, &lb);
        assert_eq!(
            rows == m,
            k * n * 4 > 2 << 20 || m <= 8,
            "{m}x{n}x{k}: {rows}"
        );
        for par in [Parallelism::None, Parallelism::Pool(&pool)] {
            let serial = matches!(par, Parallelism::None);
            let seen = Mutex::new(vec![0u32; batch * m * n]);
            let after = |p: usize, r: std::ops::Range<usize>, cols: std::ops::Range<usize>| {
                if serial {
                    assert!(r.len() <= rows, "{m}x{n}x{k}: block {r:?}");
                    assert_eq!(cols, 0..n, "{m}x{n}x{k}: serial blocks are whole rows");
                }
                let mut seen = seen.lock().unwrap();
                for i in r {
                    for j in cols.clone() {
                        seen[(p * m + i) * n + j] += 1;
                    }
                }
            };
            let mut c = vec![f32::NAN; batch * m * n];
            gemm_nd_then(
                axes,
                (m, n, k),
                MatRef::new(&a, la),
                MatRef::new(&b, lb),
                MatMut::new(&mut c, lc),
                Scale::overwrite(),
                par,
                Some(&after),
            )
            .unwrap();
            assert!(seen.into_inner().unwrap().iter().all(|&s| s == 1));
            for (i, (x, y)) in c.iter().zip(&want).enumerate() {
                assert!((x - y).abs() <= 1e-4, "{m}x{n}x{k} [{i}]: {x} vs {y}");
            }
        }
    }
}
