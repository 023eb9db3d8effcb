//! Every `examples/*.fg` parses, verifies and runs on the interpreter with the inputs
//! `ferrite run --seed 0` would use; several are checked against independent
//! computations written out in plain loops here.

use ferrite::ir::{interpret, parse, verify, Graph, Tensor};
use std::path::Path;

/// The examples the README and the docs refer to; more may exist.
const EXPECTED: [&str; 8] = [
    "attention",
    "embedding",
    "layer_norm_rows",
    "llama_mlp",
    "mlp",
    "pointwise_chain",
    "softmax_rows",
    "transformer_block",
];

fn load(name: &str) -> Graph {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.fg"));
    let source = std::fs::read_to_string(&path).unwrap();
    let g = parse(&format!("examples/{name}.fg"), &source).unwrap_or_else(|d| panic!("{d}"));
    verify(&g).unwrap();
    g
}

/// The inputs of `ferrite run --seed 0`: parameter i is random with seed i.
fn seed0_inputs(g: &Graph) -> Vec<Tensor> {
    g.param_types()
        .iter()
        .enumerate()
        .map(|(i, ty)| Tensor::random(ty, i as u64))
        .collect()
}

/// Runs an example on its seed-0 inputs; returns the inputs (as f64) and the outputs.
fn run(name: &str) -> (Vec<Vec<f64>>, Vec<Tensor>) {
    let g = load(name);
    let inputs = seed0_inputs(&g);
    let outputs = interpret(&g, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
    (inputs.iter().map(Tensor::to_f64).collect(), outputs)
}

/// Asserts `got` matches `want` within `tol` relative to the largest |want|.
#[track_caller]
fn assert_close(got: &Tensor, want: &[f64], tol: f64) {
    let got = got.to_f64();
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "element {i}: got {g}, want {w} (scale {scale})"
        );
    }
}

/// `a[m x k] @ b[k x n]` in f64.
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = a[i * k + p];
            for j in 0..n {
                c[i * n + j] += av * b[p * n + j];
            }
        }
    }
    c
}

/// Softmax of each row of length `n`, in place.
fn softmax_rows(x: &mut [f64], n: usize) {
    for row in x.chunks_mut(n) {
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        for v in row.iter_mut() {
            *v /= sum;
        }
    }
}

#[test]
fn every_example_runs_with_finite_outputs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "fg"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .collect();
    found.sort();
    for name in EXPECTED {
        assert!(
            found.iter().any(|f| f == name),
            "examples/{name}.fg is missing"
        );
    }
    for name in &found {
        let source = std::fs::read_to_string(dir.join(format!("{name}.fg"))).unwrap();
        assert!(
            source.starts_with("# "),
            "{name}.fg must start with a comment saying what it is"
        );
        let g = load(name);
        assert_eq!(g.name, *name, "the graph is named after its file");
        let (_, outputs) = run(name);
        assert_eq!(outputs.len(), g.outputs.len());
        for (i, t) in outputs.iter().enumerate() {
            assert_eq!(&t.ty, g.ty(g.outputs[i]));
            assert!(
                t.to_f64().iter().all(|v| v.is_finite()),
                "{name}: output {i} has non-finite values"
            );
        }
    }
}

#[test]
fn softmax_rows_matches_an_independent_softmax() {
    let (inputs, outputs) = run("softmax_rows");
    let mut want: Vec<f64> = inputs[0].iter().map(|v| v / 0.7).collect();
    softmax_rows(&mut want, 512);
    assert_close(&outputs[0], &want, 1e-6);
    // Each row is a distribution.
    for row in outputs[0].to_f64().chunks(512) {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-5);
    }
}

#[test]
fn layer_norm_rows_matches_an_independent_layer_norm() {
    let (inputs, outputs) = run("layer_norm_rows");
    let (x, gamma, beta) = (&inputs[0], &inputs[1], &inputs[2]);
    let mut want = Vec::new();
    for row in x.chunks(512) {
        let mean = row.iter().sum::<f64>() / 512.0;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 512.0;
        let inv = 1.0 / (var + 1e-5).sqrt();
        want.extend(
            row.iter()
                .enumerate()
                .map(|(j, v)| (v - mean) * inv * gamma[j] + beta[j]),
        );
    }
    assert_close(&outputs[0], &want, 1e-5);
}

#[test]
fn mlp_matches_independent_matmuls() {
    let (inputs, outputs) = run("mlp");
    let [x, w1, b1, w2, b2] = &inputs[..] else {
        panic!("mlp takes 5 inputs")
    };
    let mut h = matmul(x, w1, 64, 784, 256);
    for (i, v) in h.iter_mut().enumerate() {
        *v = (*v + b1[i % 256]).max(0.0);
    }
    let mut logits = matmul(&h, w2, 64, 256, 10);
    for (i, v) in logits.iter_mut().enumerate() {
        *v += b2[i % 10];
    }
    assert_close(&outputs[0], &logits, 1e-5);
}

#[test]
fn embedding_looks_up_rows_and_adds_positions() {
    let (inputs, outputs) = run("embedding");
    let (ids, tokens, positions) = (&inputs[0], &inputs[1], &inputs[2]);
    let mut want = Vec::new();
    for (p, &id) in ids.iter().enumerate() {
        let id = id as usize;
        for j in 0..256 {
            want.push(tokens[id * 256 + j] * 16.0 + positions[p * 256 + j]);
        }
    }
    assert_close(&outputs[0], &want, 1e-6);
}

/// Causal multi-head attention over one sequence `x[s x d]` (no biases), in f64.
fn causal_attention(x: &[f64], w: [&[f64]; 4], s: usize, d: usize, heads: usize) -> Vec<f64> {
    let dh = d / heads;
    let q = matmul(x, w[0], s, d, d);
    let k = matmul(x, w[1], s, d, d);
    let v = matmul(x, w[2], s, d, d);
    let mut merged = vec![0.0; s * d];
    for h in 0..heads {
        for i in 0..s {
            // Position i sees positions 0..=i only.
            let mut weights: Vec<f64> = (0..=i)
                .map(|j| {
                    (0..dh)
                        .map(|c| q[i * d + h * dh + c] * k[j * d + h * dh + c])
                        .sum::<f64>()
                        / (dh as f64).sqrt()
                })
                .collect();
            softmax_rows(&mut weights, i + 1);
            for (j, wj) in weights.iter().enumerate() {
                for c in 0..dh {
                    merged[i * d + h * dh + c] += wj * v[j * d + h * dh + c];
                }
            }
        }
    }
    matmul(&merged, w[3], s, d, d)
}

#[test]
fn attention_matches_an_independent_causal_attention() {
    let (inputs, outputs) = run("attention");
    let w = [&inputs[1][..], &inputs[2], &inputs[3], &inputs[4]];
    let (s, d) = (64, 256);
    let mut want = Vec::new();
    for b in 0..2 {
        want.extend(causal_attention(
            &inputs[0][b * s * d..(b + 1) * s * d],
            w,
            s,
            d,
            4,
        ));
    }
    assert_close(&outputs[0], &want, 1e-4);
}

#[test]
fn llama_mlp_matches_an_independent_swiglu() {
    let (inputs, outputs) = run("llama_mlp");
    let [x, norm_w, w_gate, w_up, w_down] = &inputs[..] else {
        panic!("llama_mlp takes 5 inputs")
    };
    let (s, d, f) = (64, 256, 688);
    let mut h = Vec::new();
    for row in x.chunks(d) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
        let inv = 1.0 / (ms + 1e-6).sqrt();
        h.extend(row.iter().enumerate().map(|(j, v)| v * inv * norm_w[j]));
    }
    let gate = matmul(&h, w_gate, s, d, f);
    let up = matmul(&h, w_up, s, d, f);
    let act: Vec<f64> = gate
        .iter()
        .zip(&up)
        .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
        .collect();
    let down = matmul(&act, w_down, s, f, d);
    let want: Vec<f64> = x.iter().zip(&down).map(|(a, b)| a + b).collect();
    assert_close(&outputs[0], &want, 1e-5);
}

#[test]
fn pointwise_chain_matches_an_independent_evaluation() {
    let (inputs, outputs) = run("pointwise_chain");
    let (x, y, bias) = (&inputs[0], &inputs[1], &inputs[2]);
    let want: Vec<f64> = (0..x.len())
        .map(|i| {
            let t = ((x[i] + bias[i % 1024]) * 0.5).tanh();
            let g = (t + (1.0 - t * t)) * y[i];
            let signed_sqrt = g.signum() * g.abs().max(1e-3).sqrt();
            if g == 0.0 {
                0.0
            } else {
                signed_sqrt.min(2.0)
            }
        })
        .collect();
    assert_close(&outputs[0], &want, 1e-5);
}
