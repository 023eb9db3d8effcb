//! Transformers with symbolic batch and sequence: row programs between attention kernels,
//! compiled once by `compile_dynamic` and run at every binding.

mod common;

use common::dynamic::{bt, check_against_interp, inputs, load, parse};
use ferrite::{compile_dynamic, Options, Tensor};
use std::sync::{Arc, Mutex};

#[test]
fn the_transformer_block_runs_random_bindings_from_one_compile() {
    let g = load("transformer_block.fg");
    let bindings = vec![bt(1, 1), bt(2, 5), bt(1, 64), bt(3, 17), bt(1, 130)];
    let n = check_against_interp(&g, Options::default(), &bindings);
    assert_eq!(n, 2);
}

#[test]
fn a_gpt2_style_decoder_runs_random_bindings_from_one_compile() {
    let g = load("gpt2.fg");
    let bindings = vec![bt(1, 1), bt(2, 9), bt(1, 77), bt(4, 33)];
    let n = check_against_interp(&g, Options::default(), &bindings);
    assert_eq!(n, 3);
}

/// Attention on the inputs themselves, with `mask` (a `where` condition over `[T, T]`
/// built from `pos`, or none).
fn attention_graph(mask: Option<&str>, extra_output: bool) -> String {
    let (masked, mask_lines) = match mask {
        Some(m) => (
            "where(mask, scores, -inf)".to_string(),
            format!("  pos = arange(end=T)\n  mask = {m}\n"),
        ),
        None => ("scores".to_string(), String::new()),
    };
    let (ret, rty) = if extra_output {
        ("out, scores", "f32[B, T, 64], f32[B, 2, T, T]")
    } else {
        ("out", "f32[B, T, 64]")
    };
    format!(
        "dims B in [1, 8], T in [1, 64]\n\
         graph attn(q: f32[B, T, 64], k: f32[B, T, 64], v: f32[B, T, 64]) -> {rty} {{\n\
         \x20 q4 = permute(reshape(q, shape=[B, T, 2, 32]), dims=[0, 2, 1, 3])\n\
         \x20 k4 = permute(reshape(k, shape=[B, T, 2, 32]), dims=[0, 2, 1, 3])\n\
         \x20 v4 = permute(reshape(v, shape=[B, T, 2, 32]), dims=[0, 2, 1, 3])\n\
         \x20 scores = mul(matmul(q4, transpose(k4, dim0=-2, dim1=-1)), 0.3)\n\
         {mask_lines}\
         \x20 w = softmax({masked}, axis=-1)\n\
         \x20 out = reshape(permute(matmul(w, v4), dims=[0, 2, 1, 3]), shape=[B, T, 64])\n\
         \x20 return {ret}\n}}\n"
    )
}

#[test]
fn causal_and_unmasked_attention_on_the_inputs_run_from_one_compile_on_every_path() {
    let bindings = vec![bt(1, 1), bt(3, 7), bt(8, 64), bt(2, 33)];
    for mask in [
        Some("le(reshape(pos, shape=[1, T]), reshape(pos, shape=[T, 1]))"),
        Some("ge(reshape(pos, shape=[T, 1]), reshape(pos, shape=[1, T]))"),
        None,
    ] {
        let g = parse(&attention_graph(mask, false));
        let sites = g.attention_sites();
        assert_eq!(sites.len(), 1, "{mask:?}");
        assert_eq!(sites[0].causal, mask.is_some());
        assert_eq!(
            (sites[0].heads, sites[0].head_dim, sites[0].value_dim),
            (2, 32, 32)
        );
        assert!((sites[0].scale - 0.3).abs() < 1e-12);
        // Nothing but the attention: no row program, only the kernel.
        assert_eq!(check_against_interp(&g, Options::default(), &bindings), 0);
    }
}

#[test]
fn the_transformer_block_is_exact_enough_fused_unfused_threaded_and_on_loops() {
    let g = load("transformer_block.fg");
    let bindings = vec![bt(2, 3), bt(1, 40)];
    for options in [
        Options::default().fuse(false),
        Options::default().threads(3),
        Options::default().target(ferrite::Target::Loops),
    ] {
        assert_eq!(check_against_interp(&g, options, &bindings), 2);
    }
}

#[test]
fn other_masks_and_shared_scores_are_specialized_and_say_why() {
    for (mask, extra) in [
        // A sliding window (causal only while T <= 4): another function.
        (
            Some("le(reshape(pos, shape=[1, T]), add(reshape(pos, shape=[T, 1]), 4))"),
            false,
        ),
        // Strictly below the diagonal.
        (
            Some("lt(reshape(pos, shape=[1, T]), reshape(pos, shape=[T, 1]))"),
            false,
        ),
        // The scores are returned too: the kernel does not materialize them.
        (None, true),
    ] {
        let g = parse(&attention_graph(mask, extra));
        assert!(g.attention_sites().is_empty() || extra, "{mask:?}");
        let d = compile_dynamic(&g, &Options::default()).unwrap();
        assert!(!d.is_symbolic(), "{}", d.summary());
        assert!(
            d.summary().contains("specialized per binding"),
            "{}",
            d.summary()
        );
        // Still right, one program per binding.
        let b = bt(2, 5);
        let x = inputs(&g, &b, 3);
        let raw: Vec<ferrite::ir::Tensor> = x.iter().map(|t| t.as_ir().clone()).collect();
        let want = ferrite::ir::interpret(&g.instantiate(&b).unwrap(), &raw).unwrap();
        let got = d.run(&x).unwrap();
        got[0].as_ir().check_close(&want[0], 1e-4, 1e-4).unwrap();
    }
}

#[test]
fn a_hundred_bindings_of_gpt2_compile_once() {
    let g = load("gpt2.fg");
    let d = compile_dynamic(&g, &Options::default()).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut state = 0x1234_5678u64;
    while seen.len() < 100 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let b = ((state >> 33) % 4) as i64 + 1;
        let t = ((state >> 45) % 40) as i64 + 1;
        if !seen.insert((b, t)) {
            continue;
        }
        let x = inputs(&g, &bt(b, t), 1);
        let y = d.run(&x).unwrap();
        assert_eq!(y[0].shape(), &[b as usize, t as usize, 1000]);
    }
    let s = d.stats();
    assert_eq!(s.compiles, 3, "{}", d.summary());
    assert_eq!(s.recompiles, 2, "three parts, compiled once each");
    assert!(d.is_symbolic());
}

#[test]
fn the_builders_attention_is_matched_through_jit_automatic_dynamic() {
    use ferrite::{jit, scaled_dot_product_attention, Var};
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    // Heads split and merged around the builder's causal attention.
    let f = jit(|[x, wq, wk, wv]: [Var; 4]| {
        let (b, t) = (x.size(0), x.size(1));
        let heads = |y: Var| y.reshape([b, t, 2, 16]).permute([0, 2, 1, 3]);
        let (q, k, v) = (
            heads(x.matmul(&wq)),
            heads(x.matmul(&wk)),
            heads(x.matmul(&wv)),
        );
        scaled_dot_product_attention(&q, &k, &v, None, true, None)
            .permute([0, 2, 1, 3])
            .reshape([b, t, 32])
    })
    .automatic_dynamic(true)
    .on_event(move |e| sink.lock().unwrap().push(e.to_string()));
    let w = |seed| Tensor::from_f64(&f32_type(&[32, 32]), &values(32 * 32, seed, 0.2)).unwrap();
    let (wq, wk, wv) = (w(1), w(2), w(3));
    for (i, (b, t)) in [(1, 5), (2, 9), (3, 4), (1, 20), (2, 1)]
        .into_iter()
        .enumerate()
    {
        let x = Tensor::from_f64(
            &f32_type(&[b, t, 32]),
            &values(b * t * 32, 10 + i as u64, 1.0),
        )
        .unwrap();
        let inputs = [&x, &wq, &wk, &wv];
        let got = f.run(&inputs).unwrap();
        let want = f.run_eager(&inputs).unwrap();
        got[0].check_close(&want[0], 1e-4, 1e-4).unwrap();
    }
    let events = events.lock().unwrap();
    let generalized: Vec<&String> = events
        .iter()
        .filter(|e| e.contains("generalized"))
        .collect();
    assert_eq!(generalized.len(), 1, "{events:#?}");
    assert!(
        generalized[0].contains("between 1 attention kernels"),
        "{}",
        generalized[0]
    );
}

fn f32_type(shape: &[usize]) -> ferrite::TensorType {
    ferrite::TensorType {
        dtype: ferrite::DType::F32,
        shape: shape.to_vec(),
    }
}

/// `n` deterministic values in `[-scale, scale)`.
fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut rng = ferrite::ir::SplitMix64(seed);
    (0..n)
        .map(|_| (rng.next_f64() * 2.0 - 1.0) * scale)
        .collect()
}

#[test]
fn an_additive_causal_mask_shared_by_two_layers_is_matched() {
    // One bias for both attentions, as models build it once; its -inf side either way round.
    for bias in [
        "where(le(reshape(pos, shape=[1, T]), reshape(pos, shape=[T, 1])), 0.0, -inf)",
        "where(gt(sub(reshape(pos, shape=[1, T]), reshape(pos, shape=[T, 1])), 0), -3.4e38, 0.0)",
    ] {
        let text = format!(
            "dims B in [1, 8], T in [1, 64]\n\
             graph two(x: f32[B, T, 64], w: f32[64, 64]) -> f32[B, T, 64] {{\n\
             \x20 pos = arange(end=T)\n\
             \x20 bias = {bias}\n\
             \x20 h = permute(reshape(x, shape=[B, T, 2, 32]), dims=[0, 2, 1, 3])\n\
             \x20 s1 = add(mul(matmul(h, transpose(h, dim0=-2, dim1=-1)), 0.2), bias)\n\
             \x20 a1 = reshape(permute(matmul(softmax(s1, axis=-1), h), dims=[0, 2, 1, 3]), shape=[B, T, 64])\n\
             \x20 y = matmul(a1, w)\n\
             \x20 g = permute(reshape(y, shape=[B, T, 2, 32]), dims=[0, 2, 1, 3])\n\
             \x20 s2 = add(bias, mul(matmul(g, transpose(g, dim0=-2, dim1=-1)), 0.2))\n\
             \x20 a2 = reshape(permute(matmul(softmax(s2, axis=-1), g), dims=[0, 2, 1, 3]), shape=[B, T, 64])\n\
             \x20 return add(a2, x)\n}}\n"
        );
        let g = parse(&text);
        let sites = g.attention_sites();
        assert_eq!(sites.len(), 2, "{bias}");
        assert!(sites.iter().all(|s| s.causal));
        let n = check_against_interp(&g, Options::default(), &[bt(1, 1), bt(2, 9), bt(3, 40)]);
        assert_eq!(n, 2, "{bias}");
    }
}

#[test]
fn grouped_query_attention_with_repeated_kv_heads_is_one_kernel() {
    // LLaMA's repeat_kv: 4 query heads over 2 key/value heads, each read by two.
    let text = "dims B in [1, 8], T in [1, 64]\n\
        graph gqa(x: f32[B, T, 64], wq: f32[64, 64], wk: f32[64, 32], wv: f32[64, 32]) -> f32[B, T, 64] {\n\
        \x20 q = permute(reshape(matmul(x, wq), shape=[B, T, 4, 16]), dims=[0, 2, 1, 3])\n\
        \x20 k = permute(reshape(matmul(x, wk), shape=[B, T, 2, 16]), dims=[0, 2, 1, 3])\n\
        \x20 v = permute(reshape(matmul(x, wv), shape=[B, T, 2, 16]), dims=[0, 2, 1, 3])\n\
        \x20 kr = reshape(expand(unsqueeze(k, axis=2), shape=[B, 2, 2, T, 16]), shape=[B, 4, T, 16])\n\
        \x20 vr = reshape(expand(unsqueeze(v, axis=2), shape=[B, 2, 2, T, 16]), shape=[B, 4, T, 16])\n\
        \x20 pos = arange(end=T)\n\
        \x20 s = mul(matmul(q, transpose(kr, dim0=-2, dim1=-1)), 0.25)\n\
        \x20 w = softmax(where(le(reshape(pos, shape=[1, T]), reshape(pos, shape=[T, 1])), s, -inf), axis=-1)\n\
        \x20 return reshape(permute(matmul(w, vr), dims=[0, 2, 1, 3]), shape=[B, T, 64])\n}\n";
    let g = parse(text);
    let sites = g.attention_sites();
    assert_eq!(sites.len(), 1);
    assert_eq!((sites[0].heads, sites[0].kv_heads), (4, 2));
    let n = check_against_interp(&g, Options::default(), &[bt(1, 1), bt(2, 9), bt(3, 40)]);
    assert_eq!(n, 1);
}
