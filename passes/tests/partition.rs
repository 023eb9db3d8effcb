//! The min-cut partitioner: forward then backward computes the joint graph's outputs bit
//! for bit on the reference interpreter (the training examples and random graphs of the
//! differential generator, under both policies), the min cut never saves more bytes than
//! the naive partition, and a hand-checked case saves exactly the matmul's result.

use ferrite_ir::{interpret, parse, print, DType, Graph, Tensor, ValueId};
use ferrite_passes::autodiff::{grad, saved_for_backward, vjp};
use ferrite_passes::partition::{partition, partition_with, Partition, Policy};

const MLP: &str = include_str!("../../examples/training/mlp_classifier.fg");
const TINY_LM: &str = include_str!("../../examples/training/tiny_lm.fg");
const DLRM: &str = include_str!("../../examples/training/dlrm.fg");

/// Runs `p` as forward then backward on the joint graph's inputs.
fn compose(p: &Partition, forward_outputs: usize, xs: &[Tensor]) -> Vec<Tensor> {
    let fx: Vec<Tensor> = p.forward_inputs.iter().map(|&i| xs[i].clone()).collect();
    let f = interpret(&p.forward, &fx).unwrap_or_else(|e| panic!("forward: {e}"));
    let mut bx: Vec<Tensor> = f[forward_outputs..].to_vec();
    bx.extend(p.backward_inputs.iter().map(|&i| xs[i].clone()));
    let b = interpret(&p.backward, &bx).unwrap_or_else(|e| panic!("backward: {e}"));
    let mut out = f[..forward_outputs].to_vec();
    out.extend(b);
    out
}

/// Equal bits (NaNs equal to NaNs).
fn same(a: &Tensor, b: &Tensor) -> bool {
    a.ty == b.ty
        && a.to_f64()
            .iter()
            .zip(b.to_f64())
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

fn example_inputs(g: &Graph) -> Vec<Tensor> {
    g.params
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let ty = g.ty(p);
            if ty.dtype.is_int() {
                // Labels, ids, indices and offsets: small and non-decreasing, so every
                // example's index inputs are in range (dlrm's offsets start at 0).
                let n = ty.numel();
                let v: Vec<f64> = (0..n).map(|k| (k * 4 / n.max(1)) as f64).collect();
                Tensor::from_f64(ty, &v)
            } else {
                Tensor::random(ty, 7 + i as u64)
            }
        })
        .collect()
}

fn check_example(src: &str, wrt: &[&str]) -> Partition {
    let g = parse("t.fg", src).unwrap();
    let ids: Vec<ValueId> = wrt.iter().map(|n| g.find(n).unwrap()).collect();
    let j = grad(&g, 0, &ids).unwrap();
    let xs = example_inputs(&g);
    let want = interpret(&j, &xs).unwrap();
    let mut min_cut = None;
    for policy in [Policy::Naive, Policy::MinCut] {
        let p = partition_with(&j, 1, policy).unwrap();
        let got = compose(&p, 1, &xs);
        assert_eq!(got.len(), want.len());
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(same(a, b), "{policy:?}: output {k} differs");
        }
        if policy == Policy::MinCut {
            min_cut = Some(p);
        }
    }
    let p = min_cut.unwrap();
    let r = &p.report;
    assert!(r.min_cut_bytes() <= r.naive_bytes(), "{r}");
    // The naive figures are what `saved_for_backward` reports.
    let s = saved_for_backward(&g, &j);
    assert_eq!(r.naive_bytes(), s.activation_bytes, "{r}");
    eprintln!("{r}");
    p
}

#[test]
fn the_training_examples_compose_to_the_joint_graph() {
    let p = check_example(MLP, &["w1", "b1", "w2"]);
    assert!(p.report.min_cut_bytes() < p.report.naive_bytes());
    let p = check_example(
        TINY_LM,
        &[
            "wte", "wpe", "g1", "b1", "wqkv", "wo", "g2", "b2", "wfc", "wpr", "gf", "bf",
        ],
    );
    assert!(p.report.min_cut_bytes() < p.report.naive_bytes());
    let mut wrt = vec!["w0", "c0", "w1", "c1", "u0", "v0", "u1", "v1"];
    let tables: Vec<String> = (0..8).map(|k| format!("t{k}")).collect();
    wrt.extend(tables.iter().map(|s| s.as_str()));
    check_example(DLRM, &wrt);
}

/// `x @ w` then a chain of pointwise ops and a sum: the product is saved (a matmul is
/// never recomputed), every pointwise intermediate is recomputed from it.
#[test]
fn a_pointwise_chain_after_a_matmul_saves_only_the_product() {
    let src = "graph g(x: f32[4, 8], w: f32[8, 16]) -> f32[] {
  h = matmul(x, w)
  t = tanh(mul(h, 0.79788456))
  u = mul(mul(h, 0.5), add(t, 1.0))
  v = mul(u, u)
  loss = sum(v)
  return loss
}
";
    let g = parse("t.fg", src).unwrap();
    let j = grad(&g, 0, &[g.find("w").unwrap()]).unwrap();
    let p = partition(&j, 1).unwrap();
    let names = |vs: &[ValueId]| -> Vec<String> {
        vs.iter()
            .map(|&v| j.node(v).name.clone().unwrap_or(format!("{v}")))
            .collect()
    };
    assert_eq!(names(&p.saved), ["h"], "{}", p.report);
    assert_eq!(p.report.min_cut_bytes(), 4 * 16 * 4);
    // The naive partition saves the pointwise results the backward rules read too.
    assert!(
        p.report.naive_bytes() > p.report.min_cut_bytes(),
        "{}",
        p.report
    );
    let recomputed: Vec<&str> = p.report.recomputed.iter().map(|r| r.op).collect();
    assert!(recomputed.contains(&"tanh"), "{recomputed:?}");
    assert!(p.recomputed.contains(&j.find("t").unwrap()));
    assert!(p.recomputed.contains(&j.find("u").unwrap()));
    // x is read by the backward (w's gradient is x^T @ dh) as an input, never saved.
    assert_eq!(p.backward_inputs, [0]);
    assert_eq!(
        print(&p.backward).lines().next().unwrap(),
        "graph g_backward(h: f32[4, 16], x: f32[4, 8]) {"
    );
    let xs = vec![
        Tensor::random(g.ty(g.params[0]), 1),
        Tensor::random(g.ty(g.params[1]), 2),
    ];
    let want = interpret(&j, &xs).unwrap();
    let got = compose(&p, 1, &xs);
    assert!(got.iter().zip(&want).all(|(a, b)| same(a, b)));
}

/// Random graphs of the differential generator: the vector-Jacobian product of every
/// float output, partitioned both ways, gives the joint graph's outputs bit for bit.
#[test]
fn random_joint_graphs_compose_exactly_under_both_policies() {
    use ferrite_testkit::{inputs_for, random_graph, RandomGraph};
    let mut checked = 0;
    for seed in 0..600u64 {
        let rg = random_graph(seed, 8, true);
        let g = rg.graph.clone();
        let wrt: Vec<ValueId> = g
            .params
            .iter()
            .copied()
            .filter(|&p| g.ty(p).dtype.is_float())
            .collect();
        if wrt.is_empty() {
            continue;
        }
        let Ok(j) = vjp(&g, &wrt) else {
            continue;
        };
        let rg = RandomGraph {
            graph: g.clone(),
            index_bounds: rg.index_bounds.clone(),
        };
        let mut xs = inputs_for(&rg, seed);
        xs.extend(
            j.params[g.params.len()..]
                .iter()
                .enumerate()
                .map(|(k, &p)| Tensor::random(j.ty(p), 1000 + seed + k as u64)),
        );
        let Ok(want) = interpret(&j, &xs) else {
            continue; // an input the graph rejects (an index out of range, ...)
        };
        let n = g.outputs.len();
        let mut bytes = [0; 2];
        for (k, policy) in [Policy::Naive, Policy::MinCut].into_iter().enumerate() {
            let p = partition_with(&j, n, policy)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", print(&j)));
            let got = compose(&p, n, &xs);
            assert_eq!(got.len(), want.len(), "seed {seed}");
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    same(a, b),
                    "seed {seed}, {policy:?}: output {i} differs\n{}\n{}\n{}",
                    print(&j),
                    print(&p.forward),
                    print(&p.backward)
                );
            }
            bytes[k] = p.saved.iter().map(|&v| j.ty(v).size_bytes()).sum::<usize>();
        }
        assert!(bytes[1] <= bytes[0], "seed {seed}: {bytes:?}");
        checked += 1;
    }
    assert!(checked >= 300, "only {checked} graphs checked");
}

#[test]
fn cotangents_are_backward_inputs_and_bad_requests_are_errors() {
    let g = parse("t.fg", "graph g(x: f64[3]) { y = exp(x)\n return y }").unwrap();
    let j = vjp(&g, &[g.params[0]]).unwrap();
    let p = partition(&j, 1).unwrap();
    // d exp(x) = grad_y * exp(x): exp is recomputed from x rather than saved.
    assert!(p.saved.is_empty(), "{}", p.report);
    assert_eq!(p.backward_inputs, [0, 1]);
    assert_eq!(p.backward.params.len(), 2);
    assert_eq!(p.backward.ty(p.backward.params[0]).dtype, DType::F64);
    let e = partition(&j, 3).unwrap_err();
    assert!(
        e.to_string().contains("fewer than the 3 forward ones"),
        "{e}"
    );
}
