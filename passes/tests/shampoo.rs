//! Shampoo's block preconditioner step as graph code (`train::Optimizer::Shampoo`),
//! against a host reference written plainly in f64: the same coupled Newton iteration
//! for the inverse fourth root (no eigendecomposition), whose root is checked to satisfy
//! `X^4 (L + eps I) = I`, and the blocked update `W -= lr L^(-1/4) G R^(-1/4)` with its
//! statistics accumulated over two steps.

use ferrite_ir::{interpret, DType, Graph, Tensor, TensorType};
use ferrite_passes::train::{inverse_fourth_root, train_step, Optimizer};

type Mat = Vec<Vec<f64>>;

fn eye(k: usize) -> Mat {
    (0..k)
        .map(|i| (0..k).map(|j| f64::from(u8::from(i == j))).collect())
        .collect()
}

fn matmul(a: &Mat, b: &Mat) -> Mat {
    let (n, k, m) = (a.len(), b.len(), b[0].len());
    (0..n)
        .map(|i| {
            (0..m)
                .map(|j| (0..k).map(|t| a[i][t] * b[t][j]).sum())
                .collect()
        })
        .collect()
}

fn transpose(a: &Mat) -> Mat {
    (0..a[0].len())
        .map(|j| (0..a.len()).map(|i| a[i][j]).collect())
        .collect()
}

fn add(a: &Mat, b: &Mat, s: f64) -> Mat {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.iter().zip(y).map(|(x, y)| x + s * y).collect())
        .collect()
}

/// The coupled Newton iteration for `(a + eps I)^(-1/4)`, as the graph computes it.
fn host_root(a: &Mat, eps: f64, iterations: usize) -> Mat {
    let k = a.len();
    let a = add(a, &eye(k), eps);
    let norm = a.iter().flatten().map(|x| x * x).sum::<f64>().sqrt();
    let z = 2.5 / norm;
    let mut x: Mat = add(&vec![vec![0.0; k]; k], &eye(k), z.sqrt().sqrt());
    let mut m: Mat = add(&vec![vec![0.0; k]; k], &a, z);
    for _ in 0..iterations {
        let t = add(&add(&vec![vec![0.0; k]; k], &eye(k), 1.25), &m, -0.25);
        x = matmul(&x, &t);
        let t2 = matmul(&t, &t);
        m = matmul(&matmul(&t2, &t2), &m);
    }
    x
}

/// `max |X^4 (a + eps I) - I|`.
fn root_error(x: &Mat, a: &Mat, eps: f64) -> f64 {
    let k = a.len();
    let x2 = matmul(x, x);
    let p = matmul(&matmul(&x2, &x2), &add(a, &eye(k), eps));
    let e = add(&p, &eye(k), -1.0);
    e.iter().flatten().fold(0.0f64, |w, v| w.max(v.abs()))
}

fn random_mat(rows: usize, cols: usize, seed: u64) -> Mat {
    let t = Tensor::random(
        &TensorType::new(DType::F64, vec![rows, cols]).unwrap(),
        seed,
    );
    t.to_f64().chunks(cols).map(|r| r.to_vec()).collect()
}

#[test]
fn the_graphs_inverse_fourth_root_is_the_host_iteration_and_a_root() {
    let eps = 1e-4;
    // A rank-deficient Gram matrix (eigenvalues down to eps) and a full-rank one.
    let g1 = random_mat(5, 3, 1);
    let g2 = random_mat(5, 9, 2);
    let stats = [matmul(&g1, &transpose(&g1)), matmul(&g2, &transpose(&g2))];
    for dt in [DType::F64, DType::F32] {
        let mut g = Graph::new("root");
        let a = g
            .add_param("a", TensorType::new(dt, vec![2, 5, 5]).unwrap())
            .unwrap();
        let x = inverse_fourth_root(&mut g, a, eps, 20).unwrap();
        g.outputs.push(x);
        let flat: Vec<f64> = stats.iter().flatten().flatten().copied().collect();
        let input = Tensor::from_f64(g.ty(a), &flat);
        let got = interpret(&g, &[input]).unwrap()[0].to_f64();
        for (b, s) in stats.iter().enumerate() {
            let want = host_root(s, eps, 20);
            let err = root_error(&want, s, eps);
            assert!(err < 1e-9, "block {b}: X^4 (L + eps I) is off I by {err}");
            let got: Mat = got[b * 25..(b + 1) * 25]
                .chunks(5)
                .map(|r| r.to_vec())
                .collect();
            let tol = if dt == DType::F64 { 1e-10 } else { 2e-3 };
            for (gr, wr) in got.iter().zip(&want) {
                for (g, w) in gr.iter().zip(wr) {
                    assert!((g - w).abs() <= tol * w.abs().max(1.0), "{dt}: {g} vs {w}");
                }
            }
            if dt == DType::F32 {
                // The f32 root, used in f64, is still a root to f32's precision times the
                // condition number (about 1e4 here).
                assert!(root_error(&got, s, eps) < 5e-2);
            }
        }
    }
}

/// Two Shampoo steps on `loss = sum(w * c)` (the gradient is `c`), with 4 x 4 blocks over
/// a 5 x 7 parameter (both axes padded), against the host's blockwise update.
#[test]
fn a_shampoo_step_is_the_blockwise_host_update() {
    let (m, n, bs) = (5usize, 7usize, 4usize);
    let (lr, eps, iterations) = (0.1, 1e-3, 20);
    let src = "graph g(w: f32[5, 7], c: f32[5, 7]) -> f32[] {\n  return sum(mul(w, c))\n}\n";
    let g = ferrite_ir::parse("t.fg", src).unwrap();
    let opt = Optimizer::Shampoo {
        lr,
        eps,
        block_size: bs,
        iterations,
    };
    let step = train_step(&g, 0, &[g.params[0]], &opt).unwrap();
    let w0 = random_mat(m, n, 3);
    let cs = [random_mat(m, n, 4), random_mat(m, n, 5)];
    let ty = TensorType::new(DType::F32, vec![m, n]).unwrap();
    let state_ty = opt.slot_type(0, &ty);
    assert_eq!(state_ty.shape, [2, 2, 4, 4]);
    let f32s = |a: &Mat| Tensor::from_f64(&ty, &a.iter().flatten().copied().collect::<Vec<_>>());
    let mut xs = vec![
        f32s(&w0),
        f32s(&cs[0]),
        Tensor::from_f64(&state_ty, &vec![0.0; state_ty.numel()]),
        Tensor::from_f64(&opt.slot_type(1, &ty), &vec![0.0; 64]),
        Tensor::from_f64(&TensorType::scalar(DType::F64), &[0.0]),
    ];
    // The host's state: the weight (as f32 rounds it) and each block's statistics.
    let mut w: Mat = f32s(&w0).to_f64().chunks(n).map(|r| r.to_vec()).collect();
    let mut left = vec![vec![vec![vec![0.0; bs]; bs]; 2]; 2];
    let mut right = left.clone();
    for (s, c) in cs.iter().enumerate() {
        xs[1] = f32s(c);
        let c: Mat = xs[1].to_f64().chunks(n).map(|r| r.to_vec()).collect();
        let out = interpret(&step, &xs).unwrap();
        let mut new_w = w.clone();
        for bi in 0..2 {
            for bj in 0..2 {
                // The block of the gradient, zero-padded to 4 x 4.
                let gb: Mat = (0..bs)
                    .map(|i| {
                        (0..bs)
                            .map(|j| {
                                let (r, q) = (bi * bs + i, bj * bs + j);
                                if r < m && q < n {
                                    c[r][q]
                                } else {
                                    0.0
                                }
                            })
                            .collect()
                    })
                    .collect();
                left[bi][bj] = add(&left[bi][bj], &matmul(&gb, &transpose(&gb)), 1.0);
                right[bi][bj] = add(&right[bi][bj], &matmul(&transpose(&gb), &gb), 1.0);
                let xl = host_root(&left[bi][bj], eps, iterations);
                let xr = host_root(&right[bi][bj], eps, iterations);
                for (x, a) in [(&xl, &left[bi][bj]), (&xr, &right[bi][bj])] {
                    let err = root_error(x, a, eps);
                    assert!(err < 1e-8, "step {s}: X^4 (L + eps I) is off I by {err}");
                }
                let u = matmul(&matmul(&xl, &gb), &xr);
                for (i, row) in u.iter().enumerate() {
                    for (j, v) in row.iter().enumerate() {
                        let (r, q) = (bi * bs + i, bj * bs + j);
                        if r < m && q < n {
                            new_w[r][q] = w[r][q] - lr * v;
                        }
                    }
                }
            }
        }
        w = new_w;
        let got = out[1].to_f64();
        for (k, (g, h)) in got.iter().zip(w.iter().flatten()).enumerate() {
            assert!(
                (g - h).abs() <= 1e-4 * h.abs().max(1.0),
                "step {s}: w[{k}] is {g}, the host's {h}"
            );
        }
        let stats = |v: &[Vec<Mat>]| -> Vec<f64> {
            v.iter().flatten().flatten().flatten().copied().collect()
        };
        for (t, host) in [(&out[2], stats(&left)), (&out[3], stats(&right))] {
            for (g, h) in t.to_f64().iter().zip(&host) {
                assert!(
                    (g - h).abs() <= 1e-5 * h.abs().max(1.0),
                    "step {s}: {g} vs {h}"
                );
            }
        }
        // The next step starts from this one's results.
        xs[0] = out[1].clone();
        w = out[1].to_f64().chunks(n).map(|r| r.to_vec()).collect();
        xs[2] = out[2].clone();
        xs[3] = out[3].clone();
        xs[4] = out[4].clone();
        left = unflatten(&out[2].to_f64(), bs);
        right = unflatten(&out[3].to_f64(), bs);
    }
}

/// `[2, 2, k, k]` values as blocks of matrices.
fn unflatten(v: &[f64], k: usize) -> Vec<Vec<Mat>> {
    let mats: Vec<Mat> = v
        .chunks(k * k)
        .map(|b| b.chunks(k).map(|r| r.to_vec()).collect())
        .collect();
    mats.chunks(2).map(|r| r.to_vec()).collect()
}

#[test]
fn bad_shampoo_settings_are_errors() {
    let g = ferrite_ir::parse("t.fg", "graph g(w: f32[3]) -> f32[] { return sum(w) }").unwrap();
    for opt in [
        Optimizer::Shampoo {
            lr: 0.1,
            eps: 0.0,
            block_size: 4,
            iterations: 10,
        },
        Optimizer::Shampoo {
            lr: 0.1,
            eps: 1e-4,
            block_size: 0,
            iterations: 10,
        },
        Optimizer::Shampoo {
            lr: 0.1,
            eps: 1e-4,
            block_size: 4,
            iterations: 0,
        },
    ] {
        let e = train_step(&g, 0, &[g.params[0]], &opt).unwrap_err();
        assert!(e.to_string().contains("Shampoo needs"), "{e}");
    }
}
