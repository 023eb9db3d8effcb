//! The models the examples run, shared with `tests/jit.rs` so that the tests check
//! exactly what the examples show (eager and compiled results agree on each).
//!
//! Weights are inputs: a Ferrite graph has no tensor constants, so a model's parameters
//! are passed to `run` next to its data, as in a functional (`torch.func`) call.

#![allow(dead_code)] // each example uses part of this module

use ferrite::{DType, Tensor, TensorType, Var};

/// Sizes of the inference MLP: 784 -> 512 -> 10 (MNIST-shaped).
pub const MLP_IN: usize = 784;
/// Hidden width of the MLP.
pub const MLP_HIDDEN: usize = 512;
/// Classes of the MLP.
pub const MLP_OUT: usize = 10;

/// The MLP built with the graph builder: `softmax(relu(x @ w1 + b1) @ w2 + b2)`.
/// Inputs: `x [batch, 784]`, `w1`, `b1`, `w2`, `b2`; outputs: the class probabilities
/// and the predicted class of each row.
pub fn mlp_graph(batch: usize) -> ferrite::Graph {
    let g = ferrite::Graph::new("mlp");
    let x = g.input("x", ferrite::f32(&[batch, MLP_IN]));
    let w1 = g.input("w1", ferrite::f32(&[MLP_IN, MLP_HIDDEN]));
    let b1 = g.input("b1", ferrite::f32(&[MLP_HIDDEN]));
    let w2 = g.input("w2", ferrite::f32(&[MLP_HIDDEN, MLP_OUT]));
    let b2 = g.input("b2", ferrite::f32(&[MLP_OUT]));
    let h = (x.matmul(&w1) + &b1).relu();
    let logits = h.matmul(&w2) + &b2;
    g.output(&logits.softmax(-1));
    g.output(&logits.argmax(-1, false));
    g
}

/// The MLP's weights, scaled like a trained layer's (uniform in ±1/sqrt(fan_in)).
pub fn mlp_weights() -> Vec<Tensor> {
    vec![
        uniform(&[MLP_IN, MLP_HIDDEN], 1, (MLP_IN as f64).sqrt().recip()),
        uniform(&[MLP_HIDDEN], 2, 0.1),
        uniform(
            &[MLP_HIDDEN, MLP_OUT],
            3,
            (MLP_HIDDEN as f64).sqrt().recip(),
        ),
        uniform(&[MLP_OUT], 4, 0.1),
    ]
}

/// Model width of the transformer block.
pub const D_MODEL: usize = 64;
/// Attention heads.
pub const HEADS: usize = 4;
/// Width of the feed-forward layer.
pub const D_FF: usize = 4 * D_MODEL;

/// One pre-norm transformer decoder block (GPT-2 layout) as a closure over symbolic
/// tensors, for `ferrite::jit`. Inputs: `x [batch, seq, d_model]`, then the weights of
/// [`block_weights`]. Batch and sequence length come from `x`'s shape, so each new
/// input shape is a new graph: a recompile.
pub fn transformer_block() -> impl Fn([Var; 11]) -> Var + Send + Sync {
    |[x, ln1_w, ln1_b, w_q, w_k, w_v, w_o, ln2_w, ln2_b, w_fc, w_proj]| {
        let (b, s, d) = (x.size(0), x.size(1), x.size(2));
        let dh = d / HEADS;
        // [b, s, d] -> [b, heads, s, dh]
        let heads = |t: Var| t.reshape([b, s, HEADS, dh]).permute([0, 2, 1, 3]);

        let h = x.layer_norm(&ln1_w, &ln1_b, 1e-5);
        let (q, k, v) = (
            heads(h.matmul(&w_q)),
            heads(h.matmul(&w_k)),
            heads(h.matmul(&w_v)),
        );
        let scores = q.matmul(&k.transpose(-2, -1)) / (dh as f64).sqrt();
        // Causal mask: query i sees keys j <= i.
        let pos = x.graph().arange(0.0, s as f64, 1.0, DType::I64);
        let causal = pos.reshape([1, s]).le(pos.reshape([s, 1]));
        let weights = causal.where_(&scores, f64::NEG_INFINITY).softmax(-1);
        let context = weights.matmul(&v).permute([0, 2, 1, 3]).reshape([b, s, d]);
        let x = x + context.matmul(&w_o);

        let h = x.layer_norm(&ln2_w, &ln2_b, 1e-5);
        &x + h.matmul(&w_fc).gelu().matmul(&w_proj)
    }
}

/// The block's weights, in the closure's argument order after `x`.
pub fn block_weights() -> Vec<Tensor> {
    let d = D_MODEL;
    let s = (d as f64).sqrt().recip();
    vec![
        affine_ones(&[d], 10),
        uniform(&[d], 11, 0.1),
        uniform(&[d, d], 12, s),
        uniform(&[d, d], 13, s),
        uniform(&[d, d], 14, s),
        uniform(&[d, d], 15, s),
        affine_ones(&[d], 16),
        uniform(&[d], 17, 0.1),
        uniform(&[d, D_FF], 18, s),
        uniform(&[D_FF, d], 19, (D_FF as f64).sqrt().recip()),
    ]
}

/// A deterministic `f32` tensor uniform in `[-scale, scale)`.
pub fn uniform(shape: &[usize], seed: u64, scale: f64) -> Tensor {
    let ty = TensorType {
        dtype: DType::F32,
        shape: shape.to_vec(),
    };
    let values: Vec<f64> = Tensor::random(&ty, seed)
        .expect("example shapes are small")
        .to_f64_vec()
        .into_iter()
        .map(|v| v * scale)
        .collect();
    Tensor::from_f64(&ty, &values).expect("example shapes are small")
}

/// Normalization weights near 1.
fn affine_ones(shape: &[usize], seed: u64) -> Tensor {
    let u = uniform(shape, seed, 0.1);
    let values: Vec<f64> = u.to_f64_vec().into_iter().map(|v| 1.0 + v).collect();
    Tensor::from_f64(u.ty(), &values).expect("example shapes are small")
}

/// Inputs `x` then `weights`, as the `&[&Tensor]` that `run` takes.
pub fn with_weights<'a>(x: &'a Tensor, weights: &'a [Tensor]) -> Vec<&'a Tensor> {
    std::iter::once(x).chain(weights).collect()
}
