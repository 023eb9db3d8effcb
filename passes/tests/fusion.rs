//! Fusion tests: kernel counts (as tinygrad's tests assert them), the structure of the
//! kernels, and the reasons recorded for refused fusions. Every graph is also checked
//! numerically against the interpreter.

use ferrite_ir::loops::{ExprOp, Program, Stage};
use ferrite_passes::schedule::{schedule, ScheduleOptions, Scheduled};
use ferrite_testkit::{check_against_interpreter, example, primitive, random_inputs};

/// Schedules both ways, checks the numbers, and returns the fused schedule.
fn fused(g: &ferrite_ir::Graph) -> Scheduled {
    let inputs = random_inputs(g, 42);
    let (f, _) = check_against_interpreter(g, &inputs).unwrap_or_else(|e| panic!("{e}"));
    f
}

fn count(p: &Program) -> usize {
    p.kernels.len()
}

#[test]
fn pointwise_chain_is_one_kernel() {
    let g = primitive(
        "graph chain(x: f32[8, 16], y: f32[8, 16], b: f32[16]) {
           h = tanh(mul(add(x, b), 0.5))
           return sub(mul(h, y), exp(h))
         }",
    );
    let s = fused(&g);
    assert_eq!(count(&s.program), 1, "{}", s.program);
    let unfused = schedule(&g, &ScheduleOptions::unfused()).unwrap();
    assert_eq!(count(&unfused.program), 6, "one kernel per primitive op");
}

#[test]
fn example_pointwise_chain_is_one_kernel() {
    let s = schedule(&example("pointwise_chain"), &ScheduleOptions::default()).unwrap();
    assert_eq!(count(&s.program), 1, "{}", s.program);
    assert_eq!(s.memory.peak_bytes(), 0, "nothing intermediate is left");
}

#[test]
fn softmax_rows_is_one_kernel_with_two_reductions() {
    let g = primitive("graph sm(x: f32[4, 32]) { return softmax(x, axis=-1) }");
    let s = fused(&g);
    assert_eq!(count(&s.program), 1, "{}", s.program);
    let k = &s.program.kernels[0];
    assert_eq!(k.domain, vec![4], "one outer point per row");
    let reduces = k
        .stages
        .iter()
        .filter(|st| matches!(st, Stage::Reduce { .. }))
        .count();
    assert_eq!(reduces, 2, "max, then sum of exp(x - max)");
    let ex = schedule(&example("softmax_rows"), &ScheduleOptions::default()).unwrap();
    assert_eq!(count(&ex.program), 1, "{}", ex.program);
}

#[test]
fn softmax_over_a_leading_axis_is_one_kernel() {
    let g = primitive("graph sm(x: f32[16, 3, 5]) { return softmax(x, axis=0) }");
    let s = fused(&g);
    assert_eq!(count(&s.program), 1, "{}", s.program);
    assert_eq!(s.program.kernels[0].domain, vec![3, 5]);
}

#[test]
fn layer_norm_rows_is_one_kernel() {
    let g = primitive(
        "graph ln(x: f32[6, 24], w: f32[24], b: f32[24]) { return layer_norm(x, w, b, eps=1e-5) }",
    );
    let s = fused(&g);
    assert!(count(&s.program) <= 2, "{}", s.program);
    assert_eq!(count(&s.program), 1, "{}", s.program);
    let ex = schedule(&example("layer_norm_rows"), &ScheduleOptions::default()).unwrap();
    assert_eq!(count(&ex.program), 1, "{}", ex.program);
}

#[test]
fn matmul_bias_relu_is_one_gemm_kernel() {
    let g = primitive(
        "graph mlp(x: f32[4, 8], w: f32[8, 3], b: f32[3]) { return relu(add(matmul(x, w), b)) }",
    );
    let s = fused(&g);
    assert_eq!(count(&s.program), 1, "{}", s.program);
    let gemm = s.program.kernels[0].gemm.as_ref().expect("a GEMM kernel");
    assert_eq!((gemm.m, gemm.n, gemm.k), (4, 3, 8));
    assert_eq!((gemm.lhs.row_stride, gemm.lhs.col_stride), (8, 1));
    assert_eq!((gemm.rhs.row_stride, gemm.rhs.col_stride), (3, 1));
}

#[test]
fn transposed_weights_fold_into_gemm_strides() {
    let g = primitive(
        "graph t(x: f32[4, 8], w: f32[3, 8], r: f32[4, 3]) { return add(matmul(x, transpose(w, dim0=0, dim1=1)), r) }",
    );
    let s = fused(&g);
    assert_eq!(
        count(&s.program),
        1,
        "no copy for the transpose: {}",
        s.program
    );
    let gemm = s.program.kernels[0].gemm.as_ref().expect("a GEMM kernel");
    // w^T[k, n] = w[n, k]: rows (k) step by 1, columns (n) by 8.
    assert_eq!((gemm.rhs.row_stride, gemm.rhs.col_stride), (1, 8));
}

#[test]
fn batched_matmul_broadcasts_with_zero_strides() {
    let g = primitive("graph b(a: f32[2, 3, 4], w: f32[4, 5]) { return matmul(a, w) }");
    let s = fused(&g);
    let gemm = s.program.kernels[0].gemm.as_ref().expect("a GEMM kernel");
    assert_eq!(gemm.batch, vec![2]);
    assert_eq!(gemm.lhs.batch_strides, vec![12]);
    assert_eq!(gemm.rhs.batch_strides, vec![0]);
}

#[test]
fn views_never_copy() {
    let g = primitive(
        "graph v(x: f32[4, 6], y: f32[3, 8]) {
           a = reshape(permute(x, dims=[1, 0]), shape=[3, 8])
           b = slice(pad(y, pads=[0, 0, 1, 1], value=2.0), axis=1, start=1, end=9)
           return add(a, b)
         }",
    );
    let s = fused(&g);
    assert_eq!(count(&s.program), 1, "{}", s.program);
    // The slice cancels the padding exactly, so no load needs a guard.
    let guarded = s.program.kernels[0].stages.iter().any(|st| {
        st.body()
            .nodes
            .iter()
            .any(|n| matches!(&n.op, ExprOp::Load(l) if !l.guard.is_empty()))
    });
    assert!(!guarded, "{}", s.program);
}

#[test]
fn sibling_reductions_share_one_loop() {
    let g = primitive(
        "graph h(x: f32[8, 16]) { return sum(x, axes=[-1]), max(x, axes=[-1]), min(x, axes=[1]) }",
    );
    let s = fused(&g);
    assert_eq!(count(&s.program), 1, "{}", s.program);
    let k = &s.program.kernels[0];
    match &k.stages[0] {
        Stage::Reduce { reductions, .. } => assert_eq!(reductions.len(), 3, "{}", s.program),
        other => panic!("expected a reduction stage, got {other:?}"),
    }
    assert!(s
        .decisions
        .iter()
        .any(|d| d.refused.is_none() && d.kind == ferrite_passes::fuse::FusionKind::Horizontal));
}

#[test]
fn reductions_with_different_kept_shapes_are_refused() {
    let g = primitive("graph r(x: f32[8, 16]) { return sum(x, axes=[0]), sum(x, axes=[1]) }");
    let s = fused(&g);
    assert_eq!(count(&s.program), 2, "{}", s.program);
    let text = s.decisions_text();
    assert!(text.contains("reduction-domains-differ"), "{text}");
}

#[test]
fn fusion_never_creates_a_cycle() {
    // The matmul must read `a` from memory (a GEMM operand is a buffer), and `c` needs
    // both: fusing `a` with `c` would put the matmul both before and after their kernel.
    let g = primitive(
        "graph c(x: f32[4, 4], w: f32[4, 4]) {
           a = exp(x)
           m = matmul(a, w)
           c = add(a, m)
           return c
         }",
    );
    let s = fused(&g);
    let text = s.decisions_text();
    assert_eq!(count(&s.program), 2, "{}", s.program);
    assert!(text.contains("would-create-cycle"), "{text}");
    assert!(text.contains("gemm-operand-not-strided"), "{text}");
}

#[test]
fn long_chains_respect_the_size_cap() {
    let mut src = String::from("graph long(x: f32[4, 4]) {\n  v0 = exp(x)\n");
    for i in 1..150 {
        src.push_str(&format!("  v{i} = add(v{}, 1.0)\n", i - 1));
    }
    src.push_str("  return v149\n}\n");
    let g = primitive(&src);
    let s = fused(&g);
    assert!(
        count(&s.program) >= 3,
        "150 nodes need at least 3 kernels of 64"
    );
    assert!(count(&s.program) <= 6, "{} kernels", count(&s.program));
    for k in &s.program.kernels {
        assert!(
            k.nodes.len() <= 64,
            "{} has {} nodes",
            k.name,
            k.nodes.len()
        );
    }
    assert!(s.decisions_text().contains("max-fusion-size"));
    let small = ScheduleOptions {
        max_fusion_size: 10,
        ..ScheduleOptions::default()
    };
    let s10 = schedule(&g, &small).unwrap();
    assert!(count(&s10.program) >= 15, "{} kernels", count(&s10.program));
}

#[test]
fn embedding_lookup_is_one_kernel() {
    let ex = example("embedding");
    let s = fused(&ex);
    assert_eq!(count(&s.program), 1, "{}", s.program);
}

#[test]
fn batched_embedding_lookup_fuses_with_its_elementwise_consumers() {
    // [batch, seq] ids into a table, scaled, plus positions picked by a 2-D arange-free
    // index, then a GELU: the lookups are index expressions of the one kernel.
    let g = primitive(
        "graph emb(ids: i64[2, 8], pos: i32[2, 8], tokens: f32[16, 32], positions: f32[10, 32]) {
           tok = index_select(tokens, ids, axis=0)
           p = index_select(positions, pos, axis=0)
           return gelu(add(mul(tok, 4.0), p))
         }",
    );
    let s = fused(&g);
    assert_eq!(count(&s.program), 1, "{}", s.program);
    assert_eq!(
        s.program.kernels[0].domain.iter().product::<usize>(),
        2 * 8 * 32
    );
    let unfused = schedule(&g, &ScheduleOptions::unfused()).unwrap();
    assert!(count(&unfused.program) > 3, "{}", unfused.program);
    // A lookup along an inner axis with a rank-2 index, then a reduction over the index's
    // axes: one kernel whose reduction reads the table through the checked index.
    let g = primitive(
        "graph cols(x: f32[4, 12], i: i32[3, 2]) {
           y = index_select(x, i, axis=1)
           return sum(exp(y), axes=[1, 2])
         }",
    );
    let s = fused(&g);
    assert_eq!(count(&s.program), 1, "{}", s.program);
}

#[test]
fn examples_fuse_well() {
    for (name, fused_kernels, unfused_kernels) in [
        ("mlp", 2, 5),
        // Unfused: silu is `x * sigmoid(x)`, sigmoid a primitive.
        ("llama_mlp", 4, 14),
        // Unfused: softmax counts subnormal exponentials as 0 (lt, where) and multiplies
        // by the reciprocal of the sum.
        ("attention", 7, 29),
        // Unfused: gelu is `0.5 * x * erfc(-x / sqrt 2)` with erfc a primitive (and a
        // subnormal erfc counted as 0: `lt`, `where`), layer_norm centers about the row's
        // first element (`sum(x/n - p/n)`), and softmax's `lt`, `where` and `reciprocal`.
        ("transformer_block", 11, 71),
    ] {
        let g = example(name);
        let f = schedule(&g, &ScheduleOptions::default()).unwrap();
        let u = schedule(&g, &ScheduleOptions::unfused()).unwrap();
        assert_eq!(
            (count(&f.program), count(&u.program)),
            (fused_kernels, unfused_kernels),
            "{name}:\n{}",
            f.program
        );
        assert!(f.program.bytes_moved() < u.program.bytes_moved(), "{name}");
        assert!(f.memory.peak_bytes() <= u.memory.peak_bytes(), "{name}");
    }
}

#[test]
fn a_transposed_or_reshaped_layout_is_stored_directly() {
    let g = primitive(
        "graph t(x: f32[3, 4, 5], w: f32[5, 2]) {
           y = exp(x)
           m = matmul(y, w)
           return y, permute(y, dims=[2, 0, 1]), reshape(permute(m, dims=[1, 0, 2]), shape=[4, 6])
         }",
    );
    let s = fused(&g);
    assert_eq!(count(&s.program), 2, "no copy kernels: {}", s.program);
}

#[test]
fn composite_graphs_are_rejected() {
    let g = ferrite_ir::parse("t.fg", "graph s(x: f32[4]) { return softmax(x) }").unwrap();
    let err = schedule(&g, &ScheduleOptions::default()).unwrap_err();
    assert!(err.to_string().contains("not primitive"), "{err}");
    assert!(
        !err.is_internal(),
        "the caller's mistake, not a bug: {err:?}"
    );
}

#[test]
fn outputs_that_are_params_views_or_repeated_still_work() {
    let g = primitive(
        "graph o(x: f32[3, 4]) {
           y = exp(x)
           return x, y, y, permute(y, dims=[1, 0]), full(shape=[2], value=3.0)
         }",
    );
    let s = fused(&g);
    assert_eq!(s.program.outputs.len(), 5);
    let unfused = schedule(&g, &ScheduleOptions::unfused()).unwrap();
    assert!(count(&unfused.program) > count(&s.program));
}

/// The fusion planner builds a round's candidate kernels on several threads when asked:
/// the kernels, their order and every decision are the ones a single thread makes.
#[test]
fn planning_on_several_threads_gives_the_single_thread_schedule() {
    let mut graphs: Vec<ferrite_ir::Graph> = ferrite_testkit::example_names()
        .iter()
        .map(|name| example(name))
        .collect();
    graphs.push(primitive(
        "graph r(x: f32[1, 8, 12, 12], w1: f32[8, 8, 3, 3], w2: f32[8, 8, 3, 3], w3: f32[16, 8, 1, 1], s: f32[8]) {
           h = relu(add(conv(x, w1, padding=[1, 1]), reshape(s, shape=[1, 8, 1, 1])))
           r = add(conv(h, w2, padding=[1, 1]), x)
           p = max_pool(relu(r), kernel=[3, 3], stride=[2, 2], padding=[1, 1])
           return softmax(reshape(conv(p, w3), shape=[16, 36]), axis=-1)
         }",
    ));
    for g in &graphs {
        let one = schedule(g, &ScheduleOptions::default()).unwrap();
        for threads in [2, 5] {
            let options = ScheduleOptions {
                threads,
                ..ScheduleOptions::default()
            };
            let many = schedule(g, &options).unwrap();
            assert_eq!(
                many.program.to_string(),
                one.program.to_string(),
                "{}",
                g.name
            );
            assert_eq!(many.decisions_text(), one.decisions_text(), "{}", g.name);
        }
    }
}
