//! Ferrite's own `f32` GEMM kernel (`sgemm.rs`): every output is one FMA chain over `k` in
//! increasing order, so it must equal that chain computed in scalar code bit for bit, at
//! every width the host has, for every tail in M, N and K, any strides of `A`, padded rows
//! of `C`, and any thread split; and it must never read `C`.

use ferrite_cpu::gemm::{gemm, ours_for, OURS_MAX_ROWS};
use ferrite_cpu::sgemm::{self, Operands, KC, NB};
use ferrite_cpu::{GemmShape, Isa, MatLayout, MatMut, MatRef, Parallelism, Scale, ThreadPool};

/// Deterministic pseudo-random values in [-1, 1) (SplitMix64).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `C[i, j]` as the kernel computes it: `fma(A[i, l], B[l, j], acc)` for `l = 0..k`.
fn fma_chain(
    a: &[f32],
    (ar, ac): (usize, usize),
    b: &[f32],
    n: usize,
    i: usize,
    j: usize,
    k: usize,
) -> f32 {
    (0..k).fold(0.0f32, |acc, l| {
        a[i * ar + l * ac].mul_add(b[l * n + j], acc)
    })
}

fn widths() -> Vec<Isa> {
    [Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|isa| isa.supported())
        .collect()
}

/// `m x n` products over `k` with `A` row-major or transposed and `C` rows padded by 5,
/// against the scalar chain; the padding must keep its NaNs and no NaN of the old `C` may
/// come through.
fn check(isa: Isa, m: usize, n: usize, k: usize, a_transposed: bool) {
    let a = values(1 + m as u64, m * k);
    let b = values(2 + n as u64, k * n);
    let a_strides = if a_transposed { (1, m) } else { (k, 1) };
    let ldc = n + 5;
    let mut c = vec![f32::NAN; m * ldc];
    let ops = Operands {
        a: a.as_ptr(),
        a_row: a_strides.0 as isize,
        a_col: a_strides.1 as isize,
        a_panel: 0,
        a_kblock: 0,
        b: b.as_ptr(),
        b_row: n as isize,
        b_offs: std::ptr::null(),
        c: c.as_mut_ptr(),
        c_row: ldc as isize,
    };
    // SAFETY: the operands are dense (A with the strides above), C's rows of `n` within
    // its padded rows; the ISA is supported.
    unsafe { sgemm::product(isa, &ops, m, n, k) };
    for i in 0..m {
        for j in 0..ldc {
            let got = c[i * ldc + j];
            if j >= n {
                assert!(
                    got.is_nan(),
                    "{isa:?} {m}x{n}x{k}: padding [{i},{j}] written"
                );
                continue;
            }
            let want = fma_chain(&a, a_strides, &b, n, i, j, k);
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{isa:?} {m}x{n}x{k} (A transposed: {a_transposed}) [{i},{j}]: {got} vs {want}"
            );
        }
    }
}

#[test]
fn every_width_gives_the_fma_chain_bit_for_bit() {
    let widths = widths();
    if widths.is_empty() {
        eprintln!("no AVX2 or AVX-512 on this host: nothing to check");
        return;
    }
    for isa in widths {
        // Row tails of every length below both tile heights, column tails below one
        // vector, one vector and a masked one, whole tiles; K within one block, exactly
        // one, and crossing blocks.
        for m in [1, 2, 3, 5, 6, 7, 8, 9, 13, 17] {
            for n in [1, 3, 8, 15, 16, 17, 31, 33, 48, 64, 70] {
                for k in [1, 2, 7] {
                    check(isa, m, n, k, false);
                }
            }
        }
        for (m, n, k) in [
            (4, 40, KC),
            (9, 33, KC + 1),
            (3, 17, 2 * KC + 5),
            (16, 2 * NB + 19, 300),
            // One and two rows stream B row after row (a classifier's matrix-vector
            // product): four rows of B per step and a tail of single rows.
            (1, 1000, 130),
            (2, 2 * NB + 19, 9),
        ] {
            check(isa, m, n, k, false);
            check(isa, m, n, k, true);
        }
    }
}

/// Through `gemm`: products of few rows take the kernel (the same bits as the chain,
/// batched and on any number of threads), the others the crate, within the rounding
/// bound of a sum of `k` terms.
#[test]
fn gemm_takes_the_kernel_for_few_rows() {
    let row_major = |r: usize, c: usize| MatLayout::row_major(r, c);
    let ours = ours_for::<f32>(
        &row_major(32, 64),
        &row_major(64, 32),
        &row_major(32, 32),
        Scale::overwrite(),
    );
    assert_eq!(ours.is_some(), Isa::host() != Isa::Sse);
    // Transposed B, scaled products and other element types stay on the crate.
    let bt = MatLayout::col_major(64, 32);
    assert!(ours_for::<f32>(
        &row_major(32, 64),
        &bt,
        &row_major(32, 32),
        Scale::overwrite()
    )
    .is_none());
    assert!(ours_for::<f32>(
        &row_major(32, 64),
        &row_major(64, 32),
        &row_major(32, 32),
        Scale::accumulate()
    )
    .is_none());
    assert!(ours_for::<f64>(
        &row_major(32, 64),
        &row_major(64, 32),
        &row_major(32, 32),
        Scale::overwrite()
    )
    .is_none());

    let pool = ThreadPool::new(3).expect("pool");
    // 16 threads: the few-row split's small blocks (32x256x1024 in 16 column blocks).
    let pool16 = ThreadPool::new(16).expect("pool");
    for (batch, m, n, k) in [
        (1, 32, 1024, 256),
        (1, 32, 256, 1024),
        (1, 30, 250, 200),
        (3, 7, 100, 300),
        (2, 64, 520, 260),
        (1, 200, 96, 64),
    ] {
        let a = values(5, batch * m * k);
        let b = values(6, k * n);
        let shape = GemmShape::batched(batch, m, n, k);
        let mut results = Vec::new();
        for par in [
            Parallelism::None,
            Parallelism::Pool(&pool),
            Parallelism::Pool(&pool16),
        ] {
            let mut c = vec![f32::NAN; batch * m * n];
            gemm(
                shape,
                MatRef::new(&a, row_major(m, k)),
                MatRef::new(&b, row_major(k, n).broadcast_batch()),
                MatMut::new(&mut c, row_major(m, n)),
                Scale::overwrite(),
                par,
            )
            .expect("valid product");
            for p in 0..batch {
                let ap = &a[p * m * k..];
                for i in 0..m {
                    for j in 0..n {
                        let got = c[(p * m + i) * n + j];
                        let want = fma_chain(ap, (k, 1), &b, n, i, j, k);
                        if ours.is_some() && m <= OURS_MAX_ROWS {
                            assert_eq!(got.to_bits(), want.to_bits(), "{shape:?} [{p},{i},{j}]");
                        } else {
                            let tol = 4.0 * k as f32 * f32::EPSILON;
                            assert!(
                                (got - want).abs() <= tol,
                                "{shape:?} [{p},{i},{j}]: {got} vs {want}"
                            );
                        }
                    }
                }
            }
            results.push(c);
        }
        if m <= OURS_MAX_ROWS && ours.is_some() {
            for other in &results[1..] {
                assert!(
                    results[0]
                        .iter()
                        .zip(other)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{shape:?}: the thread split changed bits"
                );
            }
        }
    }
}

/// `A` in panel form (`sgemm::Panels`, `Operands::a_panel` and `a_kblock`) gives the
/// strided product's bits, for row counts that end inside a panel and column counts
/// that end inside a block of `KC`, from any starting panel.
#[test]
fn panels_of_a_give_the_strided_product() {
    for isa in widths() {
        let mr = sgemm::panel_rows(isa);
        for (m, n, k) in [
            (1, 5, 3),
            (2, 17, 9),
            (mr + 3, 40, KC + 7),
            (3 * mr, 33, 2 * KC + 1),
        ] {
            let a = values(7 + m as u64, m * k);
            let b = values(8 + n as u64, k * n);
            let p = sgemm::Panels::pack(isa, &a, (0, k as isize, 1), m, k).unwrap();
            assert_eq!(p.data.len(), k.div_ceil(KC) * m.div_ceil(mr) * mr * KC);
            // From panel 0 and from panel 1 (a block that starts at row mr).
            for first in [0, mr].into_iter().filter(|&f| f < m) {
                let rows = m - first;
                let mut c = vec![f32::NAN; rows * n];
                let strided = Operands::row_major(a.as_ptr(), k, b.as_ptr(), n, c.as_mut_ptr());
                let ops = p.rows_from(first, strided);
                // SAFETY: the panels hold rows `first..m` from panel `first / mr` on, B
                // and C are dense; the ISA is supported.
                unsafe { sgemm::product(isa, &ops, rows, n, k) };
                for i in 0..rows {
                    for j in 0..n {
                        let want = fma_chain(&a, (k, 1), &b, n, first + i, j, k);
                        assert_eq!(
                            c[i * n + j].to_bits(),
                            want.to_bits(),
                            "{isa:?} {m}x{n}x{k} from {first} [{i},{j}]"
                        );
                    }
                }
            }
        }
    }
}

/// Rows of `B` read through offsets (`Operands::b_offs`, the shared rows of a gathered
/// convolution) give the product of `B` stored row after row, bit for bit: rows placed in
/// reverse order with gaps, some rows the same floats as others, every row and column
/// tail, the streaming path of one and two rows, and K across blocks.
#[test]
fn rows_of_b_through_offsets_give_the_stored_product() {
    for isa in widths() {
        for (m, n, k) in [
            (1, 37, 9),
            (2, 70, 5),
            (3, 17, KC + 3),
            (8, 33, 7),
            (13, 48, 2 * KC + 1),
            (17, 2 * NB + 5, 70),
        ] {
            let a = values(31 + m as u64, m * k);
            // `k` rows of `n` floats made of `k / 2 + 1` distinct ones: row `l` is
            // distinct row `l / 2`, shifted by `l % 2` floats.
            let distinct = k / 2 + 1;
            let pitch = n + 11;
            let store = values(32 + n as u64, distinct * pitch + 1);
            let offs: Vec<isize> = (0..k)
                .map(|l| ((distinct - 1 - l / 2) * pitch + l % 2) as isize)
                .collect();
            let mut b = vec![0.0f32; k * n];
            for l in 0..k {
                b[l * n..(l + 1) * n]
                    .copy_from_slice(&store[offs[l] as usize..offs[l] as usize + n]);
            }
            let mut want = vec![f32::NAN; m * n];
            let mut got = vec![f32::NAN; m * n];
            let base = Operands::row_major(a.as_ptr(), k, b.as_ptr(), n, want.as_mut_ptr());
            let through = Operands {
                b: store.as_ptr(),
                b_row: 0,
                b_offs: offs.as_ptr(),
                c: got.as_mut_ptr(),
                ..base
            };
            // SAFETY: A, B and C are dense `m x k`, `k x n`, `m x n`; every row of B
            // through the offsets has `n` floats inside `store`; the ISA is supported.
            unsafe {
                sgemm::product(isa, &base, m, n, k);
                sgemm::product(isa, &through, m, n, k);
            }
            let same = want
                .iter()
                .zip(&got)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{isa:?} {m}x{n}x{k}: offsets changed the product");
        }
    }
}
