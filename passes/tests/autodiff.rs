//! Reverse-mode autodiff: every op's vector-Jacobian product against central finite
//! differences of the reference interpreter in f64, through broadcasting, every operand
//! position and values used more than once; the subgradients PyTorch picks at ties and
//! zeros, checked against exact values; the joint graph's outputs and errors.

use ferrite_ir::{interpret, parse, print, DType, Graph, Tensor, TensorType, ValueId};
use ferrite_passes::autodiff::{grad, vjp};

/// `params` and `body` (which binds `y`) as a graph whose loss is `sum(y * r)`, with `r`
/// a random cotangent of `y`'s shape.
fn graph(params: &str, body: &str) -> Graph {
    let probe = format!("graph p({params}) {{\n{body}\n  return y\n}}\n");
    let g = parse("probe.fg", &probe).unwrap_or_else(|e| panic!("{e}\n{probe}"));
    let yt = g.ty(g.outputs[0]).clone();
    let src =
        format!("graph t({params}, r: {yt}) {{\n{body}\n  l = sum(mul(y, r))\n  return l\n}}\n");
    parse("t.fg", &src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    g.params
        .iter()
        .enumerate()
        .map(|(i, &p)| Tensor::random(g.ty(p), seed * 31 + i as u64))
        .collect()
}

fn loss(g: &Graph, xs: &[Tensor]) -> f64 {
    interpret(g, xs).unwrap()[0].to_f64()[0]
}

/// Checks d loss / d p for the named float parameters against central differences.
fn check(params: &str, body: &str, wrt: &[&str]) {
    let g = graph(params, body);
    let ids: Vec<ValueId> = wrt.iter().map(|n| g.find(n).unwrap()).collect();
    let j = grad(&g, 0, &ids).unwrap_or_else(|e| panic!("{body}: {e}"));
    for seed in 1..=2 {
        let xs = inputs(&g, seed);
        let outs = interpret(&j, &xs).unwrap_or_else(|e| panic!("{body}: {e}\n{}", print(&j)));
        assert_eq!(outs.len(), 1 + wrt.len());
        assert_eq!(
            outs[0],
            interpret(&g, &xs).unwrap()[0],
            "{body}: the loss changed"
        );
        for (k, name) in wrt.iter().enumerate() {
            let pi = g.params.iter().position(|&p| p == ids[k]).unwrap();
            let ty = g.ty(ids[k]).clone();
            let got = &outs[1 + k];
            assert_eq!(got.ty, ty, "{body}: gradient type of {name}");
            let (h, tol) = match ty.dtype {
                DType::F64 => (1e-6, 1e-6),
                _ => (1e-2, 2e-2),
            };
            let base = xs[pi].to_f64();
            let got = got.to_f64();
            for e in 0..base.len() {
                let at = |delta: f64| {
                    let mut v = base.clone();
                    v[e] += delta;
                    let mut ys = xs.clone();
                    ys[pi] = Tensor::from_f64(&ty, &v);
                    loss(&g, &ys)
                };
                let fd = (at(h) - at(-h)) / (2.0 * h);
                assert!(
                    (got[e] - fd).abs() <= tol * (1.0 + fd.abs()),
                    "{body}: d/d{name}[{e}] is {} but finite differences give {fd}\n{}",
                    got[e],
                    print(&j)
                );
            }
        }
    }
}

const X23: &str = "x: f64[2, 3]";

#[test]
fn unary_ops_match_finite_differences() {
    for body in [
        "neg(x)",
        "abs(x)",
        "exp(x)",
        "log(add(abs(x), 0.5))",
        "sqrt(add(abs(x), 0.5))",
        "rsqrt(add(abs(x), 0.5))",
        "reciprocal(add(abs(x), 0.5))",
        "sin(x)",
        "cos(x)",
        "tanh(x)",
        "sigmoid(x)",
        "relu(x)",
        "gelu(x)",
        "gelu(x, approximate=\"tanh\")",
        "silu(x)",
        "erf(x)",
        "floor(mul(x, 3.0))",
        "ceil(mul(x, 3.0))",
        "sign(x)",
    ] {
        check(X23, &format!("  y = {body}"), &["x"]);
    }
}

#[test]
fn binary_ops_match_finite_differences_through_broadcasting() {
    let ps = "x: f64[2, 3], z: f64[3]";
    for body in [
        "add(x, z)",
        "sub(z, x)",
        "mul(x, z)",
        "div(x, add(abs(z), 0.5))",
        "div(z, add(abs(x), 0.5))",
        "pow(add(abs(x), 0.5), z)",
        "maximum(x, z)",
        "minimum(z, x)",
        "remainder(mul(x, 3.0), add(abs(z), 0.5))",
        "fmod(mul(x, 3.0), add(abs(z), 0.5))",
        "where(gt(x, 0.0), z, mul(x, 2.0))",
        "mul(x, x)",
        "add(mul(x, z), div(x, add(abs(z), 1.0)))",
    ] {
        check(ps, &format!("  y = {body}"), &["x", "z"]);
    }
    // A stretched extent-1 axis on both sides.
    check(
        "x: f64[2, 1], z: f64[1, 3]",
        "  y = mul(add(x, z), x)",
        &["x", "z"],
    );
}

#[test]
fn reductions_and_normalizations_match_finite_differences() {
    for body in [
        "sum(x, axes=[1])",
        "mean(x, axes=[0], keepdim=true)",
        "max(x, axes=[1])",
        "min(x)",
        "prod(x, axes=[0])",
        "softmax(x, axis=1)",
        "log_softmax(x, axis=0)",
        "sum(x)",
    ] {
        check(X23, &format!("  y = {body}"), &["x"]);
    }
    check(
        "x: f64[2, 4], w: f64[4], b: f64[4]",
        "  y = layer_norm(x, w, b, eps=1e-5)",
        &["x", "w", "b"],
    );
    check(
        "x: f64[3, 4], w: f64[4]",
        "  y = rms_norm(x, w)",
        &["x", "w"],
    );
}

#[test]
fn matmul_matches_finite_differences_in_every_rank_combination() {
    for (ps, body) in [
        ("a: f64[2, 3], b: f64[3, 4]", "matmul(a, b)"),
        ("a: f64[3], b: f64[3, 4]", "matmul(a, b)"),
        ("a: f64[2, 3], b: f64[3]", "matmul(a, b)"),
        ("a: f64[3], b: f64[3]", "matmul(a, b)"),
        ("a: f64[2, 2, 3], b: f64[3, 4]", "matmul(a, b)"),
        ("a: f64[1, 2, 3], b: f64[2, 3, 2]", "matmul(a, b)"),
        ("a: f64[3], b: f64[2, 3, 2]", "matmul(a, b)"),
        (
            "a: f64[2, 3], b: f64[3, 3]",
            "tanh(matmul(matmul(a, b), b))",
        ),
    ] {
        check(ps, &format!("  y = {body}"), &["a", "b"]);
    }
}

#[test]
fn movement_ops_match_finite_differences() {
    let x234 = "x: f64[2, 3, 4]";
    for body in [
        "reshape(x, shape=[4, -1])",
        "permute(x, dims=[2, 0, 1])",
        "transpose(x, dim0=0, dim1=2)",
        "squeeze(unsqueeze(x, axis=1), axes=[1])",
        "slice(x, axis=2, start=1, end=4)",
        "slice(x, axis=2, start=-3, end=100, step=2)",
        "slice(x, axis=1, start=0, end=3, step=3)",
        "pad(x, pads=[1, 0, 0, 2, -1, 1])",
        "concat(x, mul(x, 2.0), axis=1)",
        "expand(slice(x, axis=0, start=0, end=1), shape=[3, 3, 4])",
    ] {
        check(x234, &format!("  y = {body}"), &["x"]);
    }
    check(
        "x: f64[3, 1], z: f64[2, 3]",
        "  y = concat(expand(x, shape=[3, 4]), permute(z, dims=[1, 0]), axis=1)",
        &["x", "z"],
    );
}

#[test]
fn index_ops_scatter_their_gradient_back() {
    // Random i64 indices are in [0, 10), so the indexed axis has 10 entries; repeated
    // indices accumulate.
    check(
        "x: f64[10, 3], i: i64[2, 4]",
        "  y = index_select(x, i, axis=0)",
        &["x"],
    );
    check(
        "x: f64[2, 10, 3], i: i64[5]",
        "  y = mul(index_select(x, i, axis=1), 2.0)",
        &["x"],
    );
    check(
        "x: f64[10, 3], i: i64[4, 3]",
        "  y = gather(x, i, axis=0)",
        &["x"],
    );
    check(
        "x: f64[2, 10], i: i64[2, 6]",
        "  y = gather(x, i, axis=1)",
        &["x"],
    );
    // x broadcast along axis 0: every row of the index reads the one row of x.
    check(
        "x: f64[1, 10], i: i64[3, 4]",
        "  y = gather(x, i, axis=1)",
        &["x"],
    );
    // index_add: the base's gradient is the cotangent, the source's an index_select of it.
    check(
        "b: f64[10, 3], i: i64[6], s: f64[6, 3]",
        "  y = mul(index_add(b, i, s, axis=0), b)",
        &["b", "s"],
    );
}

#[test]
fn casts_pass_gradients_between_float_types_and_stop_at_integers() {
    check(
        "x: f32[2, 3]",
        "  y = mul(cast(x, to=f64), cast(x, to=f64))",
        &["x"],
    );
    // Through an integer cast nothing flows: the gradient is zero.
    check(
        "x: f64[2, 3]",
        "  y = add(cast(cast(mul(x, 4.0), to=i64), to=f64), 0.0)",
        &["x"],
    );
}

/// Runs the joint graph of `src` (loss = output 0) at `xs`; returns the gradients.
fn grads(src: &str, wrt: &[&str], xs: &[Tensor]) -> Vec<Vec<f64>> {
    let g = parse("t.fg", src).unwrap();
    let ids: Vec<ValueId> = wrt.iter().map(|n| g.find(n).unwrap()).collect();
    let j = grad(&g, 0, &ids).unwrap();
    interpret(&j, xs).unwrap()[1..]
        .iter()
        .map(|t| t.to_f64())
        .collect()
}

fn f64s(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_f64(&TensorType::new(DType::F64, shape.to_vec()).unwrap(), v)
}

#[test]
fn ties_and_zeros_get_pytorchs_subgradients() {
    // maximum/minimum: a tie splits the cotangent in halves.
    let src = "graph t(a: f64[3], b: f64[3]) { l = sum(maximum(a, b)) \n return l }";
    let g = grads(
        src,
        &["a", "b"],
        &[f64s(&[3], &[1.0, 2.0, 3.0]), f64s(&[3], &[1.0, 5.0, 0.0])],
    );
    assert_eq!(g, vec![vec![0.5, 0.0, 1.0], vec![0.5, 1.0, 0.0]]);
    // max reduction: ties share evenly (torch.amax).
    let src = "graph t(a: f64[4]) { l = max(a) \n return l }";
    let g = grads(src, &["a"], &[f64s(&[4], &[2.0, 7.0, 7.0, 1.0])]);
    assert_eq!(g, vec![vec![0.0, 0.5, 0.5, 0.0]]);
    // prod with one zero: only the zero gets the product of the others; with two, none.
    let src = "graph t(a: f64[4]) { l = prod(a) \n return l }";
    let g = grads(src, &["a"], &[f64s(&[4], &[2.0, 0.0, 3.0, 4.0])]);
    assert_eq!(g, vec![vec![0.0, 24.0, 0.0, 0.0]]);
    let g = grads(src, &["a"], &[f64s(&[4], &[2.0, 0.0, 3.0, 0.0])]);
    assert_eq!(g, vec![vec![0.0; 4]]);
    // relu at 0 and abs at 0: 0.
    let src = "graph t(a: f64[2]) { l = sum(add(relu(a), abs(a))) \n return l }";
    let g = grads(src, &["a"], &[f64s(&[2], &[0.0, -2.0])]);
    assert_eq!(g, vec![vec![0.0, -1.0]]);
    // pow's exponent gradient at a zero base with a non-negative exponent: 0, not NaN.
    let src = "graph t(a: f64[2], b: f64[2]) { l = sum(pow(a, b)) \n return l }";
    let g = grads(
        src,
        &["b"],
        &[f64s(&[2], &[0.0, 2.0]), f64s(&[2], &[2.0, 3.0])],
    );
    assert_eq!(g[0][0], 0.0);
    assert!((g[0][1] - 8.0 * 2f64.ln()).abs() < 1e-12);
}

#[test]
fn unrelated_values_get_zero_gradients_and_intermediates_can_be_targets() {
    let src = "graph t(a: f64[2], b: f64[2]) {\n  h = mul(a, 3.0)\n  l = sum(mul(h, h))\n  return l, b\n}";
    let g = parse("t.fg", src).unwrap();
    let ids = [
        g.find("b").unwrap(),
        g.find("h").unwrap(),
        g.find("a").unwrap(),
    ];
    let j = grad(&g, 0, &ids).unwrap();
    let xs = [f64s(&[2], &[1.0, -2.0]), f64s(&[2], &[5.0, 6.0])];
    let out = interpret(&j, &xs).unwrap();
    assert_eq!(out.len(), 5);
    assert_eq!(out[1], xs[1], "the graph's outputs come first");
    assert_eq!(out[2].to_f64(), vec![0.0, 0.0]);
    assert_eq!(out[3].to_f64(), vec![6.0, -12.0]);
    assert_eq!(out[4].to_f64(), vec![18.0, -36.0]);
    // Named parameters name their gradients, so the joint graph reads well as text.
    let text = print(&j);
    assert!(text.contains("grad_a"), "{text}");
    assert!(
        parse("j.fg", &text).is_ok(),
        "the joint graph round-trips:\n{text}"
    );
}

#[test]
fn vjp_takes_a_cotangent_per_output() {
    let src = "graph t(a: f64[2, 2]) {\n  y = matmul(a, a)\n  s = sum(a)\n  return y, s\n}";
    let g = parse("t.fg", src).unwrap();
    let j = vjp(&g, &[g.find("a").unwrap()]).unwrap();
    assert_eq!(j.params.len(), 3, "{}", print(&j));
    let a = f64s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let gy = f64s(&[2, 2], &[1.0, 0.0, 0.0, 0.0]);
    let gs = f64s(&[], &[2.0]);
    let out = interpret(&j, &[a, gy, gs]).unwrap();
    // d/da <e00, a a> = e00 a^T + a^T e00 = [[1,3],[0,0]] + [[1,0],[2,0]]; plus 2 everywhere.
    assert_eq!(out[2].to_f64(), vec![4.0, 5.0, 4.0, 2.0]);
}

#[test]
fn bad_requests_are_errors_that_say_what_is_wrong() {
    let g = parse(
        "t.fg",
        "graph t(a: f64[2], i: i64[2]) {\n  y = mul(a, 2.0)\n  return y\n}",
    )
    .unwrap();
    let a = g.find("a").unwrap();
    let e = grad(&g, 0, &[a]).unwrap_err().to_string();
    assert!(
        e.contains("must be a float scalar") && e.contains("f64[2]"),
        "{e}"
    );
    let e = grad(&g, 3, &[a]).unwrap_err().to_string();
    assert!(e.contains("output 3"), "{e}");
    let g = parse(
        "t.fg",
        "graph t(a: f64[2], i: i64[2]) {\n  y = sum(mul(a, cast(i, to=f64)))\n  return y\n}",
    )
    .unwrap();
    let e = grad(&g, 0, &[g.find("i").unwrap()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`i`") && e.contains("only float values"), "{e}");
}

/// Random graphs of the differential generator (composites included), in f64: the
/// vector-Jacobian product of every float output against a directional central
/// difference, at points where the graph is smooth (two step sizes agree).
#[test]
fn random_graphs_match_directional_finite_differences() {
    use ferrite_testkit::{inputs_for, random_graph, RandomGraph};
    let (mut checked, mut rough) = (0, 0);
    for seed in 0..2000u64 {
        let rg = random_graph(seed, 8, true);
        let text = print(&rg.graph)
            .replace("bf16", "f64")
            .replace("f16", "f64")
            .replace("f32", "f64");
        let Ok(g) = parse("r.fg", &text) else {
            continue;
        };
        let wrt: Vec<ValueId> = g
            .params
            .iter()
            .copied()
            .filter(|&p| g.ty(p).dtype == DType::F64)
            .collect();
        if wrt.is_empty() || !g.outputs.iter().any(|&o| g.ty(o).dtype == DType::F64) {
            continue;
        }
        let j = vjp(&g, &wrt).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        let rg64 = RandomGraph {
            graph: g.clone(),
            index_bounds: rg.index_bounds.clone(),
        };
        let xs = inputs_for(&rg64, seed);
        // Cotangents for the float outputs, in output order (vjp's extra parameters).
        let cts: Vec<Tensor> = j.params[g.params.len()..]
            .iter()
            .enumerate()
            .map(|(k, &p)| Tensor::random(j.ty(p), 1000 + seed + k as u64))
            .collect();
        let mut all = xs.clone();
        all.extend(cts.iter().cloned());
        let Ok(out) = interpret(&j, &all) else {
            continue; // an input the graph rejects (an index out of range, ...)
        };
        // L(x) = sum_k <y_k(x), c_k> over the float outputs.
        let float_outs: Vec<usize> = (0..g.outputs.len())
            .filter(|&i| g.ty(g.outputs[i]).dtype.is_float())
            .collect();
        let lval = |ys: &[Tensor]| -> f64 {
            float_outs
                .iter()
                .zip(&cts)
                .map(|(&i, c)| {
                    ys[i]
                        .to_f64()
                        .iter()
                        .zip(c.to_f64())
                        .map(|(a, b)| a * b)
                        .sum::<f64>()
                })
                .sum()
        };
        // A random direction over every float parameter.
        let dirs: Vec<Vec<f64>> = wrt
            .iter()
            .enumerate()
            .map(|(k, &p)| Tensor::random(g.ty(p), 5000 + seed + k as u64).to_f64())
            .collect();
        let along = |h: f64| -> Option<f64> {
            let mut plus = xs.clone();
            let mut minus = xs.clone();
            for (k, &p) in wrt.iter().enumerate() {
                let pi = g.params.iter().position(|&q| q == p).unwrap();
                let base = xs[pi].to_f64();
                let ty = g.ty(p);
                let up: Vec<f64> = base.iter().zip(&dirs[k]).map(|(b, d)| b + h * d).collect();
                let dn: Vec<f64> = base.iter().zip(&dirs[k]).map(|(b, d)| b - h * d).collect();
                plus[pi] = Tensor::from_f64(ty, &up);
                minus[pi] = Tensor::from_f64(ty, &dn);
            }
            let a = lval(&interpret(&g, &plus).ok()?);
            let b = lval(&interpret(&g, &minus).ok()?);
            Some((a - b) / (2.0 * h))
        };
        let analytic: f64 = wrt
            .iter()
            .enumerate()
            .map(|(k, _)| {
                let d = out[g.outputs.len() + k].to_f64();
                d.iter().zip(&dirs[k]).map(|(a, b)| a * b).sum::<f64>()
            })
            .sum();
        let (Some(f1), Some(f2)) = (along(1e-5), along(2.5e-6)) else {
            continue;
        };
        if !(f1.is_finite() && f2.is_finite() && analytic.is_finite()) {
            continue;
        }
        let scale = 1.0 + f1.abs();
        if (f1 - f2).abs() > 1e-6 * scale {
            rough += 1; // not smooth here (a kink, a jump, a tie): the check says nothing
            continue;
        }
        assert!(
            (analytic - f2).abs() <= 1e-5 * scale,
            "seed {seed}: the VJP gives {analytic}, finite differences {f2}\n{text}\n{}",
            print(&j)
        );
        checked += 1;
    }
    eprintln!("{checked} random graphs checked, {rough} not smooth where sampled");
    assert!(
        checked >= 1000,
        "only {checked} graphs checked ({rough} not smooth)"
    );
}

/// Ops without a rule of their own (the window ops, batch_norm, clip) are differentiated
/// through their decomposition.
#[test]
fn window_ops_are_differentiated_through_their_decomposition() {
    check(
        "x: f64[1, 2, 5, 5], w: f64[4, 1, 2, 2]",
        "  y = conv(x, w, padding=[1, 1], stride=[2, 1], groups=2)",
        &["x", "w"],
    );
    check(
        "x: f64[1, 2, 4, 4], w: f64[2, 1, 2, 2], s: f64[2], b: f64[2], m: f64[2], v: f64[2]",
        "  d = conv(x, w, padding=[1, 1], groups=2)\n  p = max_pool(d, kernel=[2, 2], stride=[2, 2], ceil_mode=true)\n  a = avg_pool(x, kernel=[3, 3], stride=[2, 2], padding=[1, 1], count_include_pad=false)\n  n = batch_norm(a, s, b, add(abs(v), 0.5), add(abs(v), 0.5))\n  y = add(sum(p), clip(mul(n, 3.0), min=-0.5, max=0.5))",
        &["x", "w", "s", "b"],
    );
    // An intermediate value cannot be a target of a graph that must be decomposed.
    let g = parse(
        "t.fg",
        "graph t(x: f64[1, 1, 3, 3], w: f64[1, 1, 2, 2]) {\n  h = conv(x, w)\n  l = sum(h)\n  return l\n}",
    )
    .unwrap();
    let e = grad(&g, 0, &[g.find("h").unwrap()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`conv`") && e.contains("parameters only"), "{e}");
}
