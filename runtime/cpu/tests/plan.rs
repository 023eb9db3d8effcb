//! The CPU plan is loop IR: the planned program verifies, and the loop-IR evaluator runs
//! it to bit-identical results to the program it was planned from. Its text shows the
//! rewrites as loop IR (a stash is a store into a scratch buffer inside a reduction) and
//! the schedule as annotations.

mod support;
use support::*;

use ferrite_cpu::plan::Run;
use ferrite_cpu::{plan_program, CodegenOptions, Isa};
use ferrite_ir::loops::{evaluate, parse_program, Program};
use ferrite_ir::Tensor;
use ferrite_passes::decompose::decompose;
use ferrite_testkit::{inputs_for, random_graph_with};

/// Evaluates `p` and its plan (with and without the extern GEMM, SIMD and stashing) on
/// `inputs`: the results must be the same bits, or both runs must fail.
fn plans_evaluate_the_same(what: &str, p: &Program, inputs: &[Tensor]) {
    let want = evaluate(p, inputs);
    let options = [
        (CodegenOptions::default(), true),
        (CodegenOptions::default(), false),
        (
            CodegenOptions {
                vectorize: false,
                ..CodegenOptions::default()
            },
            true,
        ),
        (
            CodegenOptions {
                stash: false,
                ..CodegenOptions::default()
            },
            true,
        ),
        // The default plans the host's wide routine calls, if any; this the other case
        // (calls planned whatever the host has: the plan is evaluated here, not run).
        (
            CodegenOptions {
                wide: match CodegenOptions::default().wide {
                    Some(_) => None,
                    None => Some(Isa::Avx512),
                },
                ..CodegenOptions::default()
            },
            true,
        ),
    ];
    for (codegen, use_gemm) in options {
        let plan = plan_program(p, &codegen, use_gemm)
            .unwrap_or_else(|e| panic!("{what}: plan: {e}\n{p}"));
        plan.program
            .verify()
            .unwrap_or_else(|e| panic!("{what}: {e}\n{plan}"));
        assert_eq!(plan.kernels.len(), plan.program.kernels.len());
        // The plan's text is loop IR (the schedule in `#` comments): it reads back.
        let text = plan.to_string();
        let back = parse_program("plan.loop", &text)
            .unwrap_or_else(|d| panic!("{what}: the plan does not read back: {d}\n{text}"));
        assert_eq!(back.to_string(), plan.program.to_string(), "{what}");
        match (&want, evaluate(&plan.program, inputs)) {
            (Ok(want), Ok(got)) => {
                for (k, (x, w)) in got.iter().zip(want).enumerate() {
                    let bits = |t: &Tensor| -> Vec<u64> {
                        t.to_f64().into_iter().map(f64::to_bits).collect()
                    };
                    assert!(
                        bits(x) == bits(w),
                        "{what} (gemm {use_gemm}, {codegen:?}): output {k} differs\n{plan}"
                    );
                }
            }
            (Err(_), Err(_)) => {}
            (want, got) => panic!(
                "{what}: the source gives {:?}, the plan {:?}\n{plan}",
                want.as_ref().map(|_| ()),
                got.map(|_| ())
            ),
        }
    }
}

#[test]
fn planned_examples_evaluate_as_their_sources() {
    let mut planned = 0;
    for name in example_names() {
        let g = example(&name);
        let inputs = random_inputs(&g);
        for fuse in [true, false] {
            let p = schedule(&g, fuse);
            // The evaluator is slow: keep to the examples it runs in a moment.
            let ops: u64 = p.kernels.iter().map(|k| k.op_count()).sum();
            if ops > 20_000_000 {
                continue;
            }
            plans_evaluate_the_same(&format!("{name} (fuse {fuse})"), &p, &inputs);
            planned += 1;
        }
    }
    assert!(planned >= 6, "{planned}");
}

#[test]
fn planned_random_graphs_evaluate_as_their_sources() {
    for seed in 0..60u64 {
        let rg = random_graph_with(seed, 8, seed % 2 == 0, false);
        let g = decompose(&rg.graph).unwrap_or_else(|e| panic!("seed {seed}: decompose: {e}"));
        let inputs = inputs_for(&rg, seed);
        for fuse in [true, false] {
            let p = schedule(&g, fuse);
            plans_evaluate_the_same(&format!("seed {seed} (fuse {fuse})"), &p, &inputs);
        }
    }
}

#[test]
fn crafted_plans_evaluate_as_their_sources() {
    let graphs = [
        // Softmax over a middle axis: lanes across the last axis, stashing every lane.
        "graph s(x: f32[3, 20, 33]) -> f32[3, 20, 33] {\n  y = softmax(x, axis=1)\n  return y\n}\n",
        // A transpose: tiled.
        "graph t(x: f32[64, 48], y: f32[48, 64]) -> f32[48, 64] {\n  z = add(transpose(x, dim0=0, dim1=1), y)\n  return z\n}\n",
        // A matmul with a residual: the epilogue updates the product in place.
        "graph m(a: f32[13, 24], b: f32[24, 36], r: f32[13, 36]) -> f32[13, 36] {\n  y = add(matmul(a, b), r)\n  return y\n}\n",
        // A matmul whose epilogue broadcasts: coalescing stops at the bias.
        "graph m(a: f32[13, 24], b: f32[24, 36], c: f32[36]) -> f32[13, 36] {\n  y = relu(add(matmul(a, b), c))\n  return y\n}\n",
        // Two stashes of one row, read back by two stages.
        "graph s(x: f32[4, 300]) -> f32[4, 300] {\n  e = exp(x)\n  a = sum(e, axes=[1], keepdim=true)\n  b = sum(mul(e, sub(e, a)), axes=[1], keepdim=true)\n  y = div(e, b)\n  return y\n}\n",
    ];
    for src in graphs {
        let g = graph(src);
        let inputs = random_inputs(&g);
        for fuse in [true, false] {
            plans_evaluate_the_same(&g.name, &schedule(&g, fuse), &inputs);
        }
    }
}

#[test]
fn the_plan_text_shows_the_stash_as_loop_ir_and_the_schedule() {
    let p = schedule(&example("softmax_rows"), true);
    let narrow = CodegenOptions {
        wide: None,
        ..CodegenOptions::default()
    };
    let plan = plan_program(&p, &narrow, true).unwrap();
    let text = plan.to_string();
    // The scratch row, written inside the sum's reduction and read back by the store.
    assert!(text.contains("scratch `stash0`"), "{text}");
    assert!(text.contains("  # stash: exp("), "{text}");
    assert!(text.contains("  # parallel"), "{text}");
    assert!(text.contains("  # stage 2 (store over j0 < "), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("buf2[r0] = t")),
        "{text}"
    );
    // With wide routines, `exp(x - max)` goes into a row of its own that one routine
    // call turns into its exp, read by the sum and the store; the stash row is not filled.
    let wide = CodegenOptions {
        wide: Some(Isa::Avx512),
        ..CodegenOptions::default()
    };
    let plan = plan_program(&p, &wide, true).unwrap();
    let text = plan.to_string();
    assert!(
        text.contains("  # wide: stage 2 is the avx512 routine: exp over buf3"),
        "{text}"
    );
    assert!(
        text.contains("  # stage 2 (store over j0 < 512): vector avx512 call"),
        "{text}"
    );
    assert!(
        text.contains("for j0 in 0..512: buf3[j0] = exp(buf3[j0])"),
        "{text}"
    );
    assert!(!text.contains("buf2[r0] = t"), "{text}");
    // A GEMM kernel with a bias becomes the product kernel and an epilogue.
    let g = graph("graph m(a: f32[13, 24], b: f32[24, 36], c: f32[36]) -> f32[13, 36] {\n  y = relu(add(matmul(a, b), c))\n  return y\n}\n");
    let p = schedule(&g, true);
    let plan = plan_program(&p, &CodegenOptions::default(), true).unwrap();
    let text = plan.to_string();
    assert_eq!(plan.program.kernels.len(), p.kernels.len() + 1, "{text}");
    assert!(matches!(plan.kernels[0].run, Run::ExternGemm(_)), "{text}");
    assert!(
        text.contains("  # extern gemm f32 batch [] m 13 n 36 k 24 into "),
        "{text}"
    );
    assert!(text.contains("_epilogue("), "{text}");
}
