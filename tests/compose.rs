//! The builder's conveniences (`split`, `chunk`, `stack`, `flatten`, `tril`/`triu`,
//! `masked_fill`, `clamp`, `var`, `linear`, `scaled_dot_product_attention`, `cumsum`): each against
//! values computed by hand here, on every target, fused and unfused; that they are built from
//! the IR's ops (no new op); and their build errors.

use ferrite::{
    compile, scaled_dot_product_attention, stack, DType, Graph, Options, Target, Tensor, Var,
};

fn f32s(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_f64(&ferrite::f32(shape), v).unwrap()
}

/// Runs `g` on every target, fused and unfused, and compares with `want`.
fn check_everywhere(g: &Graph, inputs: &[&Tensor], want: &[Tensor], tol: f64) {
    for target in Target::ALL {
        for fuse in [true, false] {
            let exe = compile(g, &Options::default().target(target).fuse(fuse))
                .unwrap_or_else(|e| panic!("{target} fuse={fuse}: {e}"));
            let got = exe
                .run(inputs)
                .unwrap_or_else(|e| panic!("{target} fuse={fuse}: {e}"));
            assert_eq!(got.len(), want.len());
            for (i, (a, b)) in got.iter().zip(want).enumerate() {
                a.check_close(b, tol, tol)
                    .unwrap_or_else(|e| panic!("{target} fuse={fuse}: output {i}: {e}"));
            }
        }
    }
}

/// The ops `g` records, by name, in order.
fn op_names(g: &Graph) -> Vec<&'static str> {
    g.to_ir()
        .unwrap()
        .nodes
        .iter()
        .map(|n| n.op.name())
        .collect()
}

/// `x[i, j] = 10 * i + j` of shape `[rows, cols]`.
fn grid(rows: usize, cols: usize) -> Vec<f64> {
    (0..rows * cols)
        .map(|k| (10 * (k / cols) + k % cols) as f64)
        .collect()
}

#[test]
fn split_chunk_stack_and_flatten_move_values_as_pytorch_does() {
    let g = Graph::new("moves");
    let x = g.input("x", ferrite::f32(&[2, 5]));
    let parts = x.split(2, 1);
    assert_eq!(
        parts.iter().map(Var::shape).collect::<Vec<_>>(),
        [vec![2, 2], vec![2, 2], vec![2, 1]]
    );
    let sized = x.split_sizes(&[1, 4], -1);
    // chunk(3) of 5: pieces of ceil(5 / 3) = 2, so 3 pieces; chunk(4): also 2, 2, 1.
    assert_eq!(x.chunk(3, 1).len(), 3);
    assert_eq!(x.chunk(4, 1).len(), 3);
    let rows = x.chunk(2, 0);
    let stacked = stack(&[&rows[1], &rows[0]], 0);
    assert_eq!(stacked.shape(), vec![2, 1, 5]);
    let last = stack(&[&parts[0], &parts[1]], -1);
    assert_eq!(last.shape(), vec![2, 2, 2]);
    let flat = last.flatten(1, -1);
    assert_eq!(flat.shape(), vec![2, 4]);
    for v in [&parts[2], &sized[1], &stacked, &last, &flat] {
        g.output(v);
    }
    let xs = grid(2, 5);
    let want = [
        f32s(&[2, 1], &[4.0, 14.0]),
        f32s(&[2, 4], &[1.0, 2.0, 3.0, 4.0, 11.0, 12.0, 13.0, 14.0]),
        f32s(
            &[2, 1, 5],
            &[10.0, 11.0, 12.0, 13.0, 14.0, 0.0, 1.0, 2.0, 3.0, 4.0],
        ),
        // last[i, j, k] = parts[k][i, j]: parts[0] = cols 0..2, parts[1] = cols 2..4.
        f32s(&[2, 2, 2], &[0.0, 2.0, 1.0, 3.0, 10.0, 12.0, 11.0, 13.0]),
        f32s(&[2, 4], &[0.0, 2.0, 1.0, 3.0, 10.0, 12.0, 11.0, 13.0]),
    ];
    check_everywhere(&g, &[&f32s(&[2, 5], &xs)], &want, 0.0);
    // Built from slices, reshapes and concats only.
    let names = op_names(&g);
    assert!(
        names
            .iter()
            .all(|n| ["param", "slice", "unsqueeze", "concat", "reshape"].contains(n)),
        "{names:?}"
    );
}

#[test]
fn tril_and_triu_keep_their_triangle_with_any_diagonal() {
    let g = Graph::new("triangles");
    let x = g.input("x", ferrite::f32(&[2, 3, 4]));
    let n = g.input("n", ferrite::i32(&[3, 3]));
    g.output(&x.tril(0));
    g.output(&x.triu(1));
    g.output(&x.tril(-1));
    g.output(&n.triu(-1));
    let xs: Vec<f64> = (0..24).map(|k| k as f64 + 1.0).collect();
    let (mut tril0, mut triu1, mut tril_m1) = (vec![], vec![], vec![]);
    for b in 0..2 {
        for i in 0..3i64 {
            for j in 0..4i64 {
                let v = xs[b * 12 + i as usize * 4 + j as usize];
                tril0.push(if j <= i { v } else { 0.0 });
                // j - i >= 1 and j - i <= -1.
                triu1.push(if j > i { v } else { 0.0 });
                tril_m1.push(if j < i { v } else { 0.0 });
            }
        }
    }
    let ns: Vec<f64> = (1..=9).map(f64::from).collect();
    let want = [
        f32s(&[2, 3, 4], &tril0),
        f32s(&[2, 3, 4], &triu1),
        f32s(&[2, 3, 4], &tril_m1),
        // triu(-1) of a 3x3: everything but (2, 0).
        Tensor::from_f64(
            &ferrite::i32(&[3, 3]),
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, 8.0, 9.0],
        )
        .unwrap(),
    ];
    let n_val = Tensor::from_f64(&ferrite::i32(&[3, 3]), &ns).unwrap();
    check_everywhere(&g, &[&f32s(&[2, 3, 4], &xs), &n_val], &want, 0.0);
    assert!(op_names(&g).contains(&"arange"));
    assert!(op_names(&g).contains(&"where"));
}

#[test]
fn cumsum_sums_prefixes_and_onnx_variants_on_every_target() {
    let g = Graph::new("cumsum");
    let x = g.input("x", ferrite::f32(&[2, 3, 4]));
    let n = g.input("n", ferrite::i32(&[5]));
    g.output(&x.cumsum(1));
    g.output(&x.cumsum_ext(-1, true, false));
    g.output(&x.cumsum_ext(0, false, true));
    g.output(&x.cumsum_ext(2, true, true));
    g.output(&n.cumsum(0));
    let xs: Vec<f64> = (0..24).map(|k| (k as f64 - 7.0) * 0.5).collect();
    let at = |b: usize, i: usize, j: usize| xs[b * 12 + i * 4 + j];
    let (mut rows, mut excl, mut rev0, mut rev_excl) = (vec![], vec![], vec![], vec![]);
    for b in 0..2 {
        for i in 0..3 {
            for j in 0..4 {
                rows.push((0..=i).map(|r| at(b, r, j)).sum::<f64>());
                excl.push((0..j).map(|c| at(b, i, c)).sum::<f64>());
                rev0.push((b..2).map(|d| at(d, i, j)).sum::<f64>());
                rev_excl.push((j + 1..4).map(|c| at(b, i, c)).sum::<f64>());
            }
        }
    }
    let want = [
        f32s(&[2, 3, 4], &rows),
        f32s(&[2, 3, 4], &excl),
        f32s(&[2, 3, 4], &rev0),
        f32s(&[2, 3, 4], &rev_excl),
        // Integers sum in i64, as in PyTorch.
        Tensor::from_f64(&ferrite::i64(&[5]), &[3.0, 2.0, 6.0, 16.0, 15.0]).unwrap(),
    ];
    let n_val = Tensor::from_f64(&ferrite::i32(&[5]), &[3.0, -1.0, 4.0, 10.0, -1.0]).unwrap();
    check_everywhere(&g, &[&f32s(&[2, 3, 4], &xs), &n_val], &want, 1e-6);
    assert!(op_names(&g).contains(&"where"));
    assert!(op_names(&g).contains(&"sum"));
}

#[test]
fn masked_fill_and_clamp() {
    let g = Graph::new("fill");
    let x = g.input("x", ferrite::f32(&[2, 3]));
    let m = g.input("m", ferrite::bool(&[3]));
    g.output(&x.masked_fill(&m, -9.0));
    g.output(&x.clamp(Some(-1.0), Some(2.0)));
    g.output(&x.clamp(None, Some(0.0)));
    g.output(&x.clamp(Some(5.0), Some(1.0)));
    let n = g.input("n", ferrite::i32(&[4]));
    let clamped = n.clamp(Some(0.0), Some(3.0));
    assert_eq!(
        clamped.dtype(),
        DType::I32,
        "whole bounds keep an integer tensor integer"
    );
    g.output(&clamped);
    let nan = f64::NAN;
    let xs = [-3.0, 0.5, 4.0, nan, 2.0, -1.0];
    let m_val = Tensor::from_vec(&[3], vec![true, false, true]).unwrap();
    let want = [
        f32s(&[2, 3], &[-9.0, 0.5, -9.0, -9.0, 2.0, -9.0]),
        f32s(&[2, 3], &[-1.0, 0.5, 2.0, nan, 2.0, -1.0]),
        f32s(&[2, 3], &[-3.0, 0.0, 0.0, nan, 0.0, -1.0]),
        // min > max: max everywhere (NaN stays NaN).
        f32s(&[2, 3], &[1.0, 1.0, 1.0, nan, 1.0, 1.0]),
        Tensor::from_vec(&[4], vec![0i32, 2, 3, 3]).unwrap(),
    ];
    let n_val = Tensor::from_vec(&[4], vec![-5i32, 2, 3, 70]).unwrap();
    check_everywhere(&g, &[&f32s(&[2, 3], &xs), &m_val, &n_val], &want, 0.0);
}

#[test]
fn var_uses_pytorch_corrections() {
    let g = Graph::new("var");
    let x = g.input("x", ferrite::f32(&[2, 4]));
    g.output(&x.var([1], 1, false));
    g.output(&x.var([0], 0, true));
    g.output(&x.var_all(1));
    // N = 2 <= correction divides by 0, as PyTorch does.
    g.output(&x.var([0], 2, false));
    let xs = [1.0, 2.0, 3.0, 4.0, 2.0, 4.0, 6.0, 8.0];
    let var = |v: &[f64], c: f64| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() as f64 - c)
    };
    let cols: Vec<f64> = (0..4).map(|j| var(&[xs[j], xs[4 + j]], 0.0)).collect();
    let want = [
        f32s(&[2], &[var(&xs[..4], 1.0), var(&xs[4..], 1.0)]),
        f32s(&[1, 4], &cols),
        f32s(&[], &[var(&xs, 1.0)]),
        // Every column's two values differ: a positive sum over 0 is inf.
        f32s(&[4], &[f64::INFINITY; 4]),
    ];
    // 1.6667 = 5/3 for the first row: sum of squares 5, N - 1 = 3.
    assert!((var(&xs[..4], 1.0) - 5.0 / 3.0).abs() < 1e-12);
    check_everywhere(&g, &[&f32s(&[2, 4], &xs)], &want, 1e-6);
}

#[test]
fn linear_is_a_matmul_with_the_transposed_weight_plus_bias() {
    let g = Graph::new("linear");
    let x = g.input("x", ferrite::f32(&[2, 3]));
    let w = g.input("w", ferrite::f32(&[2, 3]));
    let b = g.input("b", ferrite::f32(&[2]));
    g.output(&x.linear(&w, Some(&b)));
    g.output(&x.linear(&w, None));
    let xs = [1.0, 2.0, 3.0, -1.0, 0.0, 1.0];
    let ws = [1.0, 0.0, -1.0, 0.5, 0.5, 0.5];
    let bs = [10.0, 20.0];
    // y[i, o] = sum_k x[i, k] w[o, k].
    let y = [-2.0, 3.0, -2.0, 0.0];
    let want = [
        f32s(
            &[2, 2],
            &[y[0] + 10.0, y[1] + 20.0, y[2] + 10.0, y[3] + 20.0],
        ),
        f32s(&[2, 2], &y),
    ];
    check_everywhere(
        &g,
        &[&f32s(&[2, 3], &xs), &f32s(&[2, 3], &ws), &f32s(&[2], &bs)],
        &want,
        1e-6,
    );
}

/// Attention written out row by row: `softmax(q k^T * scale + bias) v`, with masked
/// positions excluded.
fn attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    (l, s, e): (usize, usize, usize),
    scale: f64,
    keep: impl Fn(usize, usize) -> bool,
) -> Vec<f64> {
    let mut out = Vec::new();
    for i in 0..l {
        let scores: Vec<f64> = (0..s)
            .map(|j| (0..e).map(|c| q[i * e + c] * k[j * e + c]).sum::<f64>() * scale)
            .collect();
        let max = (0..s)
            .filter(|&j| keep(i, j))
            .map(|j| scores[j])
            .fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = (0..s)
            .map(|j| {
                if keep(i, j) {
                    (scores[j] - max).exp()
                } else {
                    0.0
                }
            })
            .collect();
        let total: f64 = w.iter().sum();
        for c in 0..e {
            out.push((0..s).map(|j| w[j] / total * v[j * e + c]).sum());
        }
    }
    out
}

#[test]
fn scaled_dot_product_attention_matches_the_written_out_formula() {
    let (l, s, e) = (3, 4, 2);
    let g = Graph::new("sdpa");
    let q = g.input("q", ferrite::f32(&[1, l, e]));
    let k = g.input("k", ferrite::f32(&[1, s, e]));
    let v = g.input("v", ferrite::f32(&[1, s, e]));
    let m = g.input("m", ferrite::bool(&[l, s]));
    g.output(&scaled_dot_product_attention(&q, &k, &v, None, false, None));
    g.output(&scaled_dot_product_attention(
        &q,
        &k,
        &v,
        None,
        true,
        Some(0.5),
    ));
    g.output(&scaled_dot_product_attention(
        &q,
        &k,
        &v,
        Some(&m),
        false,
        None,
    ));
    let qs: Vec<f64> = (0..l * e).map(|i| (i as f64 * 0.7).sin()).collect();
    let ks: Vec<f64> = (0..s * e).map(|i| (i as f64 * 1.3).cos()).collect();
    let vs: Vec<f64> = (0..s * e).map(|i| i as f64 - 3.0).collect();
    let ms: Vec<bool> = (0..l * s).map(|i| i % 3 != 1).collect();
    let dims = (l, s, e);
    let d = 1.0 / (e as f64).sqrt();
    let want = [
        attention(&qs, &ks, &vs, dims, d, |_, _| true),
        attention(&qs, &ks, &vs, dims, 0.5, |i, j| j <= i),
        attention(&qs, &ks, &vs, dims, d, |i, j| ms[i * s + j]),
    ]
    .map(|o| f32s(&[1, l, e], &o));
    let m_val = Tensor::from_vec(&[l, s], ms.clone()).unwrap();
    check_everywhere(
        &g,
        &[
            &f32s(&[1, l, e], &qs),
            &f32s(&[1, s, e], &ks),
            &f32s(&[1, s, e], &vs),
            &m_val,
        ],
        &want,
        1e-5,
    );
    // Decomposed: a softmax between two matmuls, no attention op.
    let names = op_names(&g);
    assert!(
        names.contains(&"softmax") && names.contains(&"matmul"),
        "{names:?}"
    );
}

#[test]
fn bad_arguments_are_build_errors_naming_the_convenience() {
    type Case = (fn(&Graph, &Var), &'static str);
    let cases: Vec<Case> = vec![
        (
            |_, x| drop(x.split(0, 0)),
            "split(f32[2, 3]): the split size must be at least 1",
        ),
        (
            |_, x| drop(x.split_sizes(&[1, 1], 1)),
            "split(f32[2, 3]): the sizes [1, 1] do not add up to the extent 3 of axis 1",
        ),
        (
            |_, x| drop(x.chunk(0, 1)),
            "chunk(f32[2, 3]): the number of chunks must be at least 1",
        ),
        (|_, x| drop(x.split(1, 2)), "split(f32[2, 3]): axis 2"),
        (
            |_, x| drop(x.flatten(1, 0)),
            "flatten(f32[2, 3]): start_dim 1 comes after end_dim 0",
        ),
        (
            |_, x| drop(x.sum_all().tril(0)),
            "tril(f32[]): needs rank >= 2, not 0",
        ),
        (
            |_, x| drop(x.sum_all().cumsum(0)),
            "cumsum(f32[]): needs rank >= 1",
        ),
        (|_, x| drop(x.cumsum(2)), "cumsum(f32[2, 3]): axis 2"),
        (
            |_, x| drop(x.clamp(None, None)),
            "clamp(f32[2, 3]): needs at least one of min and max",
        ),
        (
            |_, x| drop(x.cast(DType::I32).var([0], 1, false)),
            "var(i32[2, 3]): needs a float tensor, not i32",
        ),
        (
            |_, x| drop(stack(&[x], 3)),
            "stack(f32[2, 3]): axis 3 is out of range",
        ),
        (
            |g, x| {
                let m = g.input("m", ferrite::bool(&[2, 2]));
                drop(scaled_dot_product_attention(x, x, x, Some(&m), true, None))
            },
            "takes a mask or causal, not both",
        ),
    ];
    for (build, want) in cases {
        let g = Graph::new("bad");
        let x = g.input("x", ferrite::f32(&[2, 3]));
        build(&g, &x);
        let err = g.check().unwrap_err().to_string();
        assert!(err.contains(want), "{err}\nwant: {want}");
        // The error points at this file, where the convenience was called.
        assert!(err.contains("tests/compose.rs:"), "{err}");
    }
}
