//! Compile-time scaling without a clock (reliability finding F13: scheduling a 20k-op
//! chain took 10 s, quadratic in its length). The fusion planner counts its work
//! (`FusionStats`: candidates examined, edges followed by cycle checks, profile updates,
//! groups ordered); at 1k and at 10k ops the count must grow about tenfold, not a
//! hundredfold. Every schedule is also checked for the kernels it must produce.

use ferrite_passes::schedule::{schedule, ScheduleOptions, Scheduled};
use ferrite_testkit::primitive;

/// The `.fg` text of a graph of `n` ops of the given shape.
fn graph(kind: &str, n: usize) -> String {
    let mut body = String::new();
    let prev = |i: usize| {
        if i == 0 {
            "x".to_string()
        } else {
            format!("a{}", i - 1)
        }
    };
    let (params, ret) = match kind {
        "relu" => {
            for i in 0..n {
                body += &format!("  a{i} = relu({})\n", prev(i));
            }
            ("x: f32[8, 8]".to_string(), format!("a{}", n - 1))
        }
        "add" => {
            for i in 0..n {
                body += &format!("  a{i} = add({}, y)\n", prev(i));
            }
            (
                "x: f32[8, 8], y: f32[8, 8]".to_string(),
                format!("a{}", n - 1),
            )
        }
        "mixed" => {
            let ops = [
                "relu({})",
                "add({}, y)",
                "mul({}, 0.5)",
                "neg({})",
                "sub({}, y)",
            ];
            for i in 0..n {
                body += &format!("  a{i} = {}\n", ops[i % ops.len()].replace("{}", &prev(i)));
            }
            (
                "x: f32[8, 8], y: f32[8, 8]".to_string(),
                format!("a{}", n - 1),
            )
        }
        "sum" => {
            // Each step subtracts its row sums: a reduction and an elementwise op.
            for i in 0..n / 2 {
                let p = prev(i);
                body += &format!("  s{i} = sum({p}, axes=[1], keepdim=true)\n");
                body += &format!("  a{i} = sub({p}, s{i})\n");
            }
            ("x: f32[8, 8]".to_string(), format!("a{}", n / 2 - 1))
        }
        "wide" => {
            // Independent parameters and outputs.
            let params: Vec<String> = (0..n).map(|i| format!("p{i}: f32[8]")).collect();
            for i in 0..n {
                body += &format!("  o{i} = relu(p{i})\n");
            }
            let outs: Vec<String> = (0..n).map(|i| format!("o{i}")).collect();
            (params.join(", "), outs.join(", "))
        }
        "fan" => {
            // One computed value read by every op, each op an output.
            body += "  h = exp(x)\n";
            for i in 0..n {
                body += &format!("  o{i} = mul(h, {i}.0)\n");
            }
            let outs: Vec<String> = (0..n).map(|i| format!("o{i}")).collect();
            ("x: f32[8, 8]".to_string(), outs.join(", "))
        }
        "layers" | "padded" => {
            // Identical layers with their own weights. `layers`: a matmul, its row sums, a
            // relu. `padded`: a matmul of a padded view, which the GEMM cannot read through
            // strides, so every layer's pad is materialized.
            let mut params = vec!["x: f32[8, 16]".to_string()];
            for i in 0..n {
                let p = prev(i);
                params.push(format!("w{i}: f32[16, 16]"));
                body += &if kind == "layers" {
                    format!(
                        "  m{i} = matmul({p}, w{i})\n  s{i} = sum(m{i}, axes=[1], keepdim=true)\n  a{i} = relu(sub(m{i}, s{i}))\n"
                    )
                } else {
                    format!(
                        "  c{i} = pad(slice({p}, axis=1, start=1), pads=[0, 0, 0, 1])\n  a{i} = relu(matmul(c{i}, w{i}))\n"
                    )
                };
            }
            (params.join(", "), format!("a{}", n - 1))
        }
        _ => unreachable!("no graph kind {kind}"),
    };
    format!("graph g({params}) {{\n{body}  return {ret}\n}}\n")
}

fn fused(kind: &str, n: usize) -> Scheduled {
    let g = primitive(&graph(kind, n));
    schedule(&g, &ScheduleOptions::default()).unwrap_or_else(|e| panic!("{kind} {n}: {e}"))
}

/// The planner's work at 10k ops over its work at 1k.
fn growth(kind: &str) -> f64 {
    let small = fused(kind, 1_000).fusion_stats;
    let large = fused(kind, 10_000).fusion_stats;
    assert!(small.work() > 0, "{kind}: no work counted: {small:?}");
    let ratio = large.work() as f64 / small.work() as f64;
    assert!(
        ratio < 20.0,
        "{kind}: fusion work grew {ratio:.1}x from 1k to 10k ops ({small:?} -> {large:?})"
    );
    eprintln!(
        "{kind}: fusion work {} -> {} ({ratio:.1}x)",
        small.work(),
        large.work()
    );
    ratio
}

#[test]
fn fusing_a_relu_chain_scales_linearly() {
    growth("relu");
    // 64 nodes per kernel at most: a chain of 1000 is 16 kernels.
    let s = fused("relu", 1_000);
    assert_eq!(s.program.kernels.len(), 16, "{}", s.decisions_text());
}

#[test]
fn fusing_an_add_chain_scales_linearly() {
    growth("add");
}

#[test]
fn fusing_a_mixed_chain_scales_linearly() {
    growth("mixed");
}

#[test]
fn fusing_a_reduction_chain_scales_linearly() {
    growth("sum");
}

#[test]
fn fusing_wide_graphs_scales_linearly() {
    growth("wide");
    growth("fan");
}

#[test]
fn unfused_schedules_have_one_kernel_per_op() {
    for kind in ["relu", "wide"] {
        let g = primitive(&graph(kind, 10_000));
        let s = schedule(&g, &ScheduleOptions::unfused()).unwrap();
        assert_eq!(s.program.kernels.len(), 10_000, "{kind}");
        assert_eq!(s.fusion_stats.work(), 0);
    }
}

#[test]
fn matmul_operands_are_materialized_in_one_pass_whatever_the_depth() {
    // Each layer's matmul needs its padded operand in memory. The repairs of independent
    // layers are made together: the plan is rebuilt once, not once per layer (which made
    // this step quadratic in the depth of a model).
    for n in [2, 40] {
        let s = fused("padded", n);
        assert_eq!(
            s.fusion_stats.operand_plans, 1,
            "{n} layers: {:?}",
            s.fusion_stats
        );
        assert_eq!(s.program.kernels.len(), 2 * n, "{}", s.decisions_text());
    }
}

#[test]
fn repeated_layers_are_built_once_and_costed_by_signature() {
    // The planner builds a candidate kernel to cost it; a candidate whose signature equals
    // one built before (the same candidate in an earlier layer) takes that cost.
    let two = fused("layers", 2);
    let many = fused("layers", 12);
    let (a, b) = (two.fusion_stats, many.fusion_stats);
    assert!(b.twin_costs > 0, "no twin found: {b:?}");
    assert!(
        b.kernels_built <= a.kernels_built + 4,
        "12 layers built {} candidates, 2 layers {}: {a:?} {b:?}",
        b.kernels_built,
        a.kernels_built
    );
    // Every layer is fused alike.
    assert_eq!(
        many.program.kernels.len(),
        6 * two.program.kernels.len(),
        "{}",
        many.decisions_text()
    );
}
