//! Convolutional building blocks through the facade: the builder's `conv2d`,
//! `conv_transpose2d`, `max_pool2d`, `avg_pool2d`, `batch_norm`, `relu6` and
//! `adaptive_avg_pool2d` on every target, fused and unfused, against the interpreter;
//! and located errors for bad attributes in `.fg` text.

use ferrite::{compile, Graph, Options, Target, Tensor};

fn random(shape: &[usize], seed: u64) -> Tensor {
    let t = ferrite::ir::Tensor::random(&ferrite::f32(shape), seed);
    Tensor::from_f64(&ferrite::f32(shape), &t.to_f64()).unwrap()
}

/// Runs `g` on every target, fused and unfused, against the interpreter's result.
fn check_everywhere(g: &Graph, inputs: &[&Tensor], tol: f64) {
    let want = compile(g, &Options::default().target(Target::Interp))
        .unwrap()
        .run(inputs)
        .unwrap();
    for target in Target::ALL {
        for fuse in [true, false] {
            let exe = compile(g, &Options::default().target(target).fuse(fuse))
                .unwrap_or_else(|e| panic!("{target} fuse={fuse}: {e}"));
            let got = exe
                .run(inputs)
                .unwrap_or_else(|e| panic!("{target} fuse={fuse}: {e}"));
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                a.check_close(b, tol, tol)
                    .unwrap_or_else(|e| panic!("{target} fuse={fuse}: output {i}: {e}"));
            }
        }
    }
}

#[test]
fn a_resnet_block_runs_everywhere() {
    // conv3x3 + bn + relu, conv3x3 + bn, residual add, relu; then a strided
    // downsampling conv, max pool and global average pool.
    let g = Graph::new("block");
    let x = g.input("x", ferrite::f32(&[1, 4, 9, 9]));
    let w1 = g.input("w1", ferrite::f32(&[4, 4, 3, 3]));
    let w2 = g.input("w2", ferrite::f32(&[4, 4, 3, 3]));
    let wd = g.input("wd", ferrite::f32(&[8, 4, 1, 1]));
    let bd = g.input("bd", ferrite::f32(&[8]));
    let s = g.input("s", ferrite::f32(&[4]));
    let t = g.input("t", ferrite::f32(&[4]));
    let m = g.input("m", ferrite::f32(&[4]));
    let v = g.input("v", ferrite::f32(&[4]));
    let v = v.abs();
    let h = x
        .conv2d(&w1, None, [1, 1], [1, 1], [1, 1], 1)
        .batch_norm(&m, &v, &s, &t, 1e-5)
        .relu();
    let h = h
        .conv2d(&w2, None, [1, 1], [1, 1], [1, 1], 1)
        .batch_norm(&m, &v, &s, &t, 1e-5);
    let h = h.add(&x).relu();
    let d = h.conv2d(&wd, Some(&bd), [2, 2], [0, 0], [1, 1], 1);
    let p = d.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false);
    let gap = p.adaptive_avg_pool2d([1, 1]);
    g.output(&gap);
    g.output(&d.avg_pool2d([2, 2], [] as [i64; 0], [0, 0], true, false));
    let inputs: Vec<Tensor> = [
        vec![1, 4, 9, 9],
        vec![4, 4, 3, 3],
        vec![4, 4, 3, 3],
        vec![8, 4, 1, 1],
        vec![8],
        vec![4],
        vec![4],
        vec![4],
        vec![4],
    ]
    .iter()
    .enumerate()
    .map(|(i, s)| random(s, i as u64))
    .collect();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    check_everywhere(&g, &refs, 1e-4);
}

#[test]
fn a_mobilenet_block_runs_everywhere() {
    // expand 1x1 + relu6, depthwise 3x3 stride 2 + relu6, project 1x1; a transposed
    // conv upsamples, and an adaptive pool that does not divide its input.
    let g = Graph::new("inverted_residual");
    let x = g.input("x", ferrite::f32(&[2, 3, 8, 8]));
    let we = g.input("we", ferrite::f32(&[12, 3, 1, 1]));
    let wd = g.input("wd", ferrite::f32(&[12, 1, 3, 3]));
    let wp = g.input("wp", ferrite::f32(&[5, 12, 1, 1]));
    let wt = g.input("wt", ferrite::f32(&[5, 2, 3, 3]));
    let h = x.conv2d(&we, None, [1, 1], [0, 0], [1, 1], 1).relu6();
    let h = h.conv2d(&wd, None, [2, 2], [1, 1], [1, 1], 12).relu6();
    let h = h.conv2d(&wp, None, [1, 1], [0, 0], [1, 1], 1);
    let up = h.conv_transpose2d(&wt, None, [2, 2], [1, 1], [1, 1], 1, [1, 1]);
    assert_eq!(up.shape(), [2, 2, 8, 8]);
    g.output(&up);
    g.output(&h.adaptive_avg_pool2d([3, 2]));
    let inputs: Vec<Tensor> = [
        vec![2, 3, 8, 8],
        vec![12, 3, 1, 1],
        vec![12, 1, 3, 3],
        vec![5, 12, 1, 1],
        vec![5, 2, 3, 3],
    ]
    .iter()
    .enumerate()
    .map(|(i, s)| random(s, 10 + i as u64))
    .collect();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    check_everywhere(&g, &refs, 1e-4);
}

#[test]
fn bad_window_attributes_are_located_errors() {
    let cases = [
        (
            "graph c(x: f32[1, 3, 8, 8], w: f32[4, 3, 3, 3]) {\n  return conv(x, w, stride=[0, 1])\n}",
            "stride entries must be in 1..",
        ),
        (
            "graph c(x: f32[1, 3, 8, 8], w: f32[4, 3, 3, 3]) {\n  return conv(x, w, padding=[1, 1, 1])\n}",
            "padding has 3 entries",
        ),
        (
            "graph c(x: f32[1, 3, 8, 8], w: f32[4, 2, 3, 3]) {\n  return conv(x, w, groups=2)\n}",
            "groups=2 does not divide",
        ),
        (
            "graph c(x: f32[1, 3, 2, 2], w: f32[4, 3, 3, 3]) {\n  return conv(x, w)\n}",
            "the window spans 3 elements",
        ),
        (
            "graph c(x: f32[1, 3, 8, 8]) {\n  return max_pool(x, kernel=[2, 0])\n}",
            "kernel extents must be positive",
        ),
        (
            "graph c(x: f32[1, 3, 8, 8], w: f32[3, 1, 2, 2]) {\n  return conv_transpose(x, w, stride=[2, 2], output_padding=[2, 0])\n}",
            "output_padding 2 on spatial axis 0 must be in 0..2",
        ),
        (
            "graph c(x: i32[1, 3, 8, 8]) {\n  return avg_pool(x, kernel=[2, 2])\n}",
            "needs a float tensor",
        ),
        (
            "graph c(x: i32[4]) {\n  return clip(x, min=0.5)\n}",
            "min 0.5 is not a bound of a i32 tensor",
        ),
        (
            "graph c(x: f32[1, 3, 8], m: f32[2]) {\n  return batch_norm(x, m, m, m, m)\n}",
            "weight must be f32[3]",
        ),
    ];
    for (src, want) in cases {
        let e = ferrite::ir::parse("bad.fg", src)
            .expect_err(src)
            .to_string();
        assert!(e.contains(want), "{src}\n{e}");
        assert!(e.starts_with("bad.fg:2:"), "{e}");
    }
}

#[test]
fn empty_batches_and_channels_run_everywhere() {
    let g = Graph::new("empty");
    let x = g.input("x", ferrite::f32(&[0, 3, 5, 5]));
    let w = g.input("w", ferrite::f32(&[4, 3, 3, 3]));
    let z = g.input("z", ferrite::f32(&[1, 0, 4, 4]));
    let wz = g.input("wz", ferrite::f32(&[2, 0, 3, 3]));
    g.output(&x.conv2d(&w, None, [1, 1], [0, 0], [1, 1], 1));
    g.output(&z.max_pool2d([2, 2], [] as [i64; 0], [0, 0], [1, 1], false));
    // No input channels: every output is an empty sum, 0.
    let y = z.conv2d(&wz, None, [1, 1], [1, 1], [1, 1], 1);
    assert_eq!(y.shape(), [1, 2, 4, 4]);
    g.output(&y);
    let inputs = [
        random(&[0, 3, 5, 5], 0),
        random(&[4, 3, 3, 3], 1),
        random(&[1, 0, 4, 4], 2),
        random(&[2, 0, 3, 3], 3),
    ];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    check_everywhere(&g, &refs, 0.0);
    let out = compile(&g, &Options::default().target(Target::Interp))
        .unwrap()
        .run(&refs)
        .unwrap();
    assert!(out[2].to_f64_vec().iter().all(|&v| v == 0.0));
}

#[test]
fn constant_batch_norms_fold_into_their_convs_on_every_target() {
    // A conv with a constant weight and bias, then a batch norm with constant vectors and
    // ReLU6 (a MobileNet stem), then a depthwise conv and its batch norm: both batch norms
    // fold into the weights (no rsqrt is left to compute), and every target still agrees
    // with the interpreter, which runs the graph as given.
    let g = Graph::new("folded");
    let x = g.input("x", ferrite::f32(&[1, 3, 10, 10]));
    let c = |name: &str, shape: &[usize], seed: u64| g.constant(name, &random(shape, seed));
    let var = |name: &str, seed: u64| {
        let v: Vec<f32> = random(&[6], seed)
            .to_f64_vec()
            .iter()
            .map(|v| 0.5 + v.abs() as f32)
            .collect();
        g.constant(name, &Tensor::from_vec(&[6], v).unwrap())
    };
    let h = x
        .conv2d(
            &c("w1", &[6, 3, 3, 3], 1),
            Some(&c("b1", &[6], 2)),
            [2, 2],
            [1, 1],
            [1, 1],
            1,
        )
        .batch_norm(
            &c("m1", &[6], 3),
            &var("v1", 4),
            &c("s1", &[6], 5),
            &c("t1", &[6], 6),
            1e-5,
        )
        .relu6();
    let h = h
        .conv2d(&c("w2", &[6, 1, 3, 3], 7), None, [1, 1], [1, 1], [1, 1], 6)
        .batch_norm(
            &c("m2", &[6], 8),
            &var("v2", 9),
            &c("s2", &[6], 10),
            &c("t2", &[6], 11),
            1e-5,
        );
    g.output(&h);
    let input = random(&[1, 3, 10, 10], 0);
    check_everywhere(&g, &[&input], 1e-4);
    let exe = compile(&g, &Options::default().target(Target::Cpu)).unwrap();
    let d = exe.decomposed_graph().unwrap();
    let rsqrts = d
        .nodes
        .iter()
        .filter(|n| n.op == ferrite::ir::Op::Unary(ferrite::ir::UnaryOp::Rsqrt))
        .count();
    assert_eq!(rsqrts, 0, "{}", ferrite::ir::print(d));
}

/// Padded depthwise convs (MobileNet's 3x3, and 5x5) on widths whose window edges fall at
/// every position of a 4-lane group: the CPU runs their guarded (padded) tap loads as vector
/// code (one vector load where a group is inside the input, lane by lane at its edges) and
/// matches the interpreter everywhere, on every target.
#[test]
fn padded_depthwise_convs_are_vector_code_and_exact_at_the_edges() {
    for (k, w) in [(3usize, 5usize), (3, 7), (3, 16), (3, 17), (5, 9), (5, 33)] {
        let g = Graph::new("depthwise");
        let x = g.input("x", ferrite::f32(&[1, 6, 6, w]));
        let wd = g.input("wd", ferrite::f32(&[6, 1, k, k]));
        let p = (k / 2) as i64;
        let y = x.conv2d(&wd, None, [1, 1], [p, p], [1, 1], 6).relu6();
        g.output(&y);
        let inputs = [random(&[1, 6, 6, w], 3), random(&[6, 1, k, k], 4)];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_everywhere(&g, &refs, 1e-5);
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("dw-{k}-{w}"));
        let exe = compile(&g, &Options::default().target(Target::Cpu).dump(&dir)).unwrap();
        let plan = exe
            .dump_files()
            .iter()
            .find(|f| f.to_string_lossy().ends_with("cpu-plan.loop"))
            .map(|f| std::fs::read_to_string(f).unwrap())
            .expect("a cpu plan dump");
        if plan.contains("direct stencil") {
            // The direct stencil runs it (`depthwise_convs_run_as_direct_stencils`).
            continue;
        }
        assert!(
            !plan.contains("guarded (padded) load"),
            "k={k} w={w}: a padded tap load stayed scalar:\n{plan}"
        );
        if w >= 16 {
            assert!(plan.contains("vector f32x4"), "k={k} w={w}:\n{plan}");
        }
    }
}

/// Depthwise convs (3x3 and 5x5, stride 1 and 2, dilation 2, asymmetric padding, with
/// and without a bias, a residual add, a batch of two, widths whose window edges fall at
/// every lane of a 16-lane vector, rows of one to eight vectors and longer, short rows
/// whose vectors run across rows, short padded rows read through their pad kernel) run
/// as the direct stencil when the CPU has AVX-512, its epilogue on each block of rows,
/// and match the interpreter on every target and on 1 and 3 threads. Rows under eight
/// columns that cannot run across rows keep the generated code.
#[test]
fn depthwise_convs_run_as_direct_stencils() {
    let avx512 = ferrite_cpu::Isa::host() == ferrite_cpu::Isa::Avx512;
    for (n, k, s, d, pad, h, w, bias, residual) in [
        (
            1usize,
            3usize,
            1i64,
            1i64,
            [1i64, 1, 1, 1],
            9usize,
            17usize,
            true,
            false,
        ),
        (2, 3, 1, 1, [1, 1, 1, 1], 6, 40, true, true),
        (1, 3, 2, 1, [1, 1, 1, 1], 12, 33, true, false),
        (1, 3, 2, 1, [0, 0, 1, 1], 11, 130, false, false),
        (1, 5, 1, 1, [2, 2, 2, 2], 7, 31, true, false),
        (1, 3, 1, 2, [2, 2, 2, 2], 8, 16, false, true),
        (1, 3, 1, 1, [0, 1, 2, 0], 5, 264, true, false),
        (1, 3, 1, 1, [1, 1, 1, 1], 7, 7, true, false),
        (1, 3, 1, 1, [1, 1, 1, 1], 14, 14, true, true),
        (1, 3, 2, 1, [1, 1, 1, 1], 14, 14, true, false),
        (1, 3, 1, 1, [0, 0, 0, 0], 9, 12, true, false),
        (2, 3, 1, 1, [1, 1, 1, 1], 7, 7, false, true),
        (1, 5, 1, 1, [2, 2, 2, 2], 9, 9, true, false),
        (1, 3, 1, 1, [1, 0, 1, 2], 6, 13, true, false),
    ] {
        let c = 5usize;
        let g = Graph::new("depthwise");
        let x = g.input("x", ferrite::f32(&[n, c, h, w]));
        let wd = g.input("wd", ferrite::f32(&[c, 1, k, k]));
        let b = g.input("b", ferrite::f32(&[c]));
        let mut y = x.conv2d(&wd, bias.then_some(&b), [s, s], pad, [d, d], c as i64);
        if residual {
            y = &y + &x;
        }
        g.output(&y.relu6());
        let inputs = [
            random(&[n, c, h, w], 21),
            random(&[c, 1, k, k], 22),
            random(&[c], 23),
        ];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let case = format!("n={n} k={k} s={s} d={d} pad={pad:?} {h}x{w}");
        check_everywhere(&g, &refs, 1e-5);
        check_cpu_threads(&g, &refs, &[1, 3], 1e-5);
        let report = cpu_plan(&g, &format!("stencil-{n}-{k}-{s}-{d}-{h}-{w}"));
        let ow = (w as i64 + pad[1] + pad[3] - d * (k as i64 - 1) - 1) / s + 1;
        // Vectors across rows when every tap reads the plane as one run (stride 1, the
        // output as wide as the input) and rows are short. Padded rows of at most 16 are
        // stored by a pad kernel of their own (`fuse::SHORT_PADDED_ROW`); the stencil
        // reads through it instead, and the pad does not run.
        let padded = w as i64 + pad[1] + pad[3];
        let own_pad = padded <= 16 && pad.iter().any(|&p| p != 0);
        let flat = s == 1 && ow == w as i64 && ow <= 32;
        if avx512 && (ow >= 8 || flat) {
            assert_eq!(
                report.contains("through the padding"),
                own_pad,
                "{case}:\n{report}"
            );
            if own_pad {
                assert!(
                    report.contains("not run: the next kernel's stencil reads through this pad"),
                    "{case}:\n{report}"
                );
            }
            assert_eq!(
                report.contains("vectors across rows"),
                flat,
                "{case}:\n{report}"
            );
            assert!(report.contains("direct stencil"), "{case}:\n{report}");
            assert!(
                report.contains("epilogue per block of rows"),
                "{case}:\n{report}"
            );
        } else {
            assert!(!report.contains("direct stencil"), "{case}:\n{report}");
        }
    }
}

/// Runs `g`'s first output on the CPU at each of `threads` against the interpreter's.
fn check_cpu_threads(g: &Graph, inputs: &[&Tensor], threads: &[usize], tol: f64) {
    let want = compile(g, &Options::default().target(Target::Interp))
        .unwrap()
        .run(inputs)
        .unwrap();
    for &t in threads {
        let exe = compile(g, &Options::default().target(Target::Cpu).threads(t)).unwrap();
        exe.run(inputs).unwrap()[0]
            .check_close(&want[0], tol, tol)
            .unwrap_or_else(|e| panic!("{t} threads: {e}"));
    }
}

/// Reads the CPU plan of `g` (its `05-cpu-plan.loop` dump).
fn cpu_plan(g: &Graph, name: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let exe = compile(g, &Options::default().target(Target::Cpu).dump(&dir)).unwrap();
    exe.dump_files()
        .iter()
        .find(|f| f.to_string_lossy().ends_with("cpu-plan.loop"))
        .map(|f| std::fs::read_to_string(f).unwrap())
        .expect("a cpu plan dump")
}

/// A 1x1 conv with few input channels (MobileNetV2's expansions) writes a large product
/// for little arithmetic: its bias + relu6 epilogue runs on each block of rows as the GEMM
/// computes it, while the block is in cache, and matches the interpreter on 1 and 3
/// threads.
#[test]
fn pointwise_conv_epilogues_run_on_each_block_of_rows() {
    let g = Graph::new("expand");
    let x = g.input("x", ferrite::f32(&[1, 16, 40, 40]));
    let w = g.input("w", ferrite::f32(&[96, 16, 1, 1]));
    let b = g.input("b", ferrite::f32(&[96]));
    let y = x.conv2d(&w, Some(&b), [1, 1], [0, 0], [1, 1], 1).relu6();
    g.output(&y);
    let inputs = [
        random(&[1, 16, 40, 40], 5),
        random(&[96, 16, 1, 1], 6),
        random(&[96], 7),
    ];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    check_everywhere(&g, &refs, 1e-5);
    check_cpu_threads(&g, &refs, &[1, 3], 1e-5);
    let plan = cpu_plan(&g, "expand-1x1");
    assert!(
        plan.contains("epilogue per block of rows"),
        "the epilogue runs after the whole product:\n{plan}"
    );
}

/// Strided depthwise convs (MobileNetV2's stride-2 3x3, a 5x5, and stride 3): their taps
/// move by 2 or 3 elements per output, so each vector of taps is two vector loads and a
/// shuffle (guarded at the padded edges as the stride-1 taps are). Widths put the window's
/// edges at every lane of a group; every target matches the interpreter.
#[test]
fn strided_depthwise_convs_are_vector_code_and_exact_at_the_edges() {
    for (k, s, w) in [
        (3usize, 2usize, 9usize),
        (3, 2, 16),
        (3, 2, 33),
        (3, 2, 34),
        (5, 2, 35),
        (3, 3, 40),
        (3, 3, 41),
    ] {
        let g = Graph::new("depthwise");
        let x = g.input("x", ferrite::f32(&[1, 6, 7, w]));
        let wd = g.input("wd", ferrite::f32(&[6, 1, k, k]));
        let p = (k / 2) as i64;
        let st = s as i64;
        let y = x.conv2d(&wd, None, [st, st], [p, p], [1, 1], 6).relu6();
        g.output(&y);
        let inputs = [random(&[1, 6, 7, w], 8), random(&[6, 1, k, k], 9)];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_everywhere(&g, &refs, 1e-5);
        let plan = cpu_plan(&g, &format!("dw-s{s}-{k}-{w}"));
        if plan.contains("direct stencil") {
            // The direct stencil runs it (`depthwise_convs_run_as_direct_stencils`).
            continue;
        }
        assert!(
            !plan.contains(&format!("has stride {s}")),
            "k={k} s={s} w={w}: a strided tap load stayed scalar:\n{plan}"
        );
        if w.div_ceil(s) >= 16 {
            assert!(
                plan.contains("strided loads as two vector loads and a shuffle"),
                "k={k} s={s} w={w}:\n{plan}"
            );
        }
    }
}

/// A conv's im2col of at most 5x5 taps is a concat of shifted slices of the padded input,
/// stored one tap per stage (no tap index or mask; each stage copies rows at affine
/// indices, vector code), and its outer points still run in parallel: every target
/// matches the interpreter, fused and unfused, on 1 and 3 threads, for strides, dilations,
/// asymmetric and oversized padding, and widths that put the padding at every lane.
#[test]
fn conv_im2col_is_one_store_per_tap_and_exact_at_the_edges() {
    for (k, s, d, pad, w) in [
        (3usize, 1i64, 1i64, [1i64, 1], 17usize),
        (3, 2, 1, [1, 1], 16),
        (3, 1, 2, [2, 1], 9),
        (5, 1, 1, [2, 2], 20),
        (2, 2, 1, [0, 0], 8),
        (3, 1, 1, [3, 2], 6),
    ] {
        let g = Graph::new("conv");
        let x = g.input("x", ferrite::f32(&[1, 8, 7, w]));
        let wt = g.input("w", ferrite::f32(&[6, 8, k, k]));
        let y = x.conv2d(&wt, None, [s, s], pad, [d, d], 1).relu();
        g.output(&y);
        let inputs = [random(&[1, 8, 7, w], 11), random(&[6, 8, k, k], 12)];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_everywhere(&g, &refs, 1e-5);
        check_cpu_threads(&g, &refs, &[1, 3], 1e-5);
        let plan = cpu_plan(&g, &format!("im2col-{k}-{s}-{d}-{w}"));
        let case = format!("k={k} s={s} d={d} pad={pad:?} w={w}");
        assert!(
            !plan.contains("i64[") && !plan.contains("bool["),
            "{case}:\n{plan}"
        );
        assert!(
            plan.contains(&format!("stage {} (store", k * k - 1)),
            "{case}: one store stage per tap:\n{plan}"
        );
        assert!(!plan.contains("runs on one thread"), "{case}:\n{plan}");
    }
}

/// A 3x3 max pool is a chain of `maximum`s of shifted slices of the input padded with
/// -inf, and keeps the interpreter's values exactly on every target: NaN propagates,
/// infinities and signed zeros win as they do there, and a window that is all padding
/// but for one tap gives that tap.
#[test]
fn max_pool_of_shifted_slices_keeps_special_values() {
    let g = Graph::new("pool");
    let x = g.input("x", ferrite::f32(&[1, 2, 6, 19]));
    g.output(&x.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], true));
    let mut v = random(&[1, 2, 6, 19], 13).to_f64_vec();
    let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0, 1e-45];
    for (i, x) in v.iter_mut().enumerate() {
        if i % 5 == 0 {
            *x = special[(i / 5) % special.len()];
        }
    }
    let input = Tensor::from_f64(&ferrite::f32(&[1, 2, 6, 19]), &v).unwrap();
    check_everywhere(&g, &[&input], 0.0);
    // check_close takes -0 for +0: compare the signs of zeros too.
    let run = |target: Target| {
        compile(&g, &Options::default().target(target))
            .unwrap()
            .run(&[&input])
            .unwrap()[0]
            .to_f64_vec()
    };
    let want = run(Target::Interp);
    for target in Target::ALL {
        let got = run(target);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                a.is_nan() && b.is_nan() || a.to_bits() == b.to_bits(),
                "{target}: element {i}: {a:?} where the interpreter has {b:?}"
            );
        }
    }
    let plan = cpu_plan(&g, "maxpool-slices");
    assert!(!plan.contains("i64[") && !plan.contains("bool["), "{plan}");
}

/// A max pool of one tap at stride 1 without padding is an identity: its rewrite is its
/// input, and the node's name (here an output's) goes on a no-op reshape of it (an
/// internal error before; found by the ONNX model fuzzer). 1-D and 2-D, ceil mode, a
/// named intermediate and a named output, every target, fused and unfused.
#[test]
fn one_tap_max_pools_are_identities_that_keep_their_names() {
    let src = "graph g(x: f32[1, 3, 4, 5], z: f32[1, 3, 8]) {
  a = max_pool(x, kernel=[1, 1], stride=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], ceil_mode=true)
  b = add(a, x)
  c = max_pool(z, kernel=[1], stride=[1], padding=[0, 0], dilation=[1])
  return b, c
}";
    let g = ferrite::parse("g.fg", src).unwrap_or_else(|d| panic!("{d}"));
    let (x, z) = (random(&[1, 3, 4, 5], 3), random(&[1, 3, 8], 4));
    let want: Vec<f64> = x.to_f64_vec().iter().map(|v| 2.0 * v).collect();
    for target in Target::ALL {
        for fuse in [true, false] {
            let out = ferrite::compile_ir(&g, &Options::default().target(target).fuse(fuse))
                .and_then(|exe| exe.run(&[&x, &z]))
                .unwrap_or_else(|e| panic!("{target} fuse={fuse}: {e}"));
            assert_eq!(out[0].to_f64_vec(), want, "{target} fuse={fuse}");
            assert_eq!(out[1].to_f64_vec(), z.to_f64_vec(), "{target} fuse={fuse}");
        }
    }
}

/// A `pad` into rows of at most 16 (`fuse::SHORT_PADDED_ROW`: MobileNetV2's 14x14 and
/// 7x7 depthwise convs, ResNet's late im2col) is stored once by a kernel of its own, the
/// input copied inside and the fill stored over each border, with no guard anywhere;
/// its consumers read it at plain indices. Zero and `-inf` fills (a conv, a max pool),
/// stride 1 and 2, on every target fused and unfused, and on 1 and 3 CPU threads.
#[test]
fn short_padded_rows_are_stored_once_without_guards() {
    for (w, stride) in [(7usize, 1i64), (14, 1), (14, 2), (9, 2)] {
        let g = Graph::new("short-rows");
        let x = g.input("x", ferrite::f32(&[1, 5, w, w]));
        let wd = g.input("wd", ferrite::f32(&[5, 1, 3, 3]));
        let y = x
            .conv2d(&wd, None, [stride, stride], [1, 1], [1, 1], 5)
            .relu6();
        let m = x.max_pool2d([3, 3], [stride, stride], [1, 1], [1, 1], false);
        g.output(&y);
        g.output(&m);
        let inputs = [random(&[1, 5, w, w], 8), random(&[5, 1, 3, 3], 9)];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_everywhere(&g, &refs, 1e-5);
        check_cpu_threads(&g, &refs, &[1, 3], 1e-5);
        let plan = cpu_plan(&g, &format!("short-rows-{w}-{stride}"));
        let kernels: Vec<&str> = plan.split("\nkernel ").skip(1).collect();
        let pads: Vec<&&str> = kernels.iter().filter(|k| k.contains("_pad(")).collect();
        assert!(!pads.is_empty(), "w={w}: no pad kernel:\n{plan}");
        for k in &kernels {
            assert!(!k.contains(" if "), "w={w}: a guarded load is left:\n{k}");
        }
    }
}

/// A convolution's product gathers its taps from the (padded) input as it runs
/// (`ferrite_cpu::taps`): no im2col kernel runs (nor is compiled), weights are packed once when they are
/// constants, a stride-1 convolution packs each channel's kernel column once (its rows
/// read through offsets), and the result is the interpreter's at every geometry the
/// im2col test covers, on 1, 3 and 7 threads, with the output positions split across
/// blocks and the blocks into pieces that idle threads steal.
#[test]
fn conv_products_gather_their_taps_without_an_im2col() {
    // The gather runs on Ferrite's own kernel, which needs AVX2 + FMA.
    #[cfg(target_arch = "x86_64")]
    let wide = std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::env::var("FERRITE_CPU_ISA").map_or(true, |v| v != "sse");
    #[cfg(not(target_arch = "x86_64"))]
    let wide = false;
    if !wide {
        return;
    }
    for (k, s, d, pad, w, constant) in [
        (3usize, 1i64, 1i64, [1i64, 1], 17usize, true),
        (3, 2, 1, [1, 1], 16, false),
        (3, 1, 2, [2, 1], 9, true),
        (5, 1, 1, [2, 2], 20, false),
        (7, 2, 1, [3, 3], 40, true),
        (3, 1, 1, [3, 2], 6, true),
    ] {
        let g = Graph::new("conv");
        let x = g.input("x", ferrite::f32(&[1, 8, 7, w]));
        let mut inputs = vec![random(&[1, 8, 7, w], 11)];
        let wt = if constant {
            g.constant("w", &random(&[70, 8, k, k], 12))
        } else {
            inputs.push(random(&[70, 8, k, k], 12));
            g.input("w", ferrite::f32(&[70, 8, k, k]))
        };
        let y = x.conv2d(&wt, None, [s, s], pad, [d, d], 1).relu();
        g.output(&y);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_cpu_threads(&g, &refs, &[1, 3, 7], 1e-5);
        let exe = compile(&g, &Options::default().target(Target::Cpu)).unwrap();
        let code = exe.code_text().unwrap_or_default();
        let case = format!("k={k} s={s} d={d} pad={pad:?} w={w}");
        assert!(
            code.contains("not run: the next kernel's product gathers"),
            "{case}:\n{code}"
        );
        // The skipped im2col gets no machine code (only a row program would run it).
        assert!(code.contains("(no code generated)"), "{case}:\n{code}");
        assert!(
            code.contains(&format!("({} taps)", k * k)),
            "{case}:\n{code}"
        );
        // Stride 1: the taps of one column of the kernel (every kh) are one packed row
        // per channel, shifted by whole output rows (`k` times fewer rows packed).
        if s == 1 {
            let shared = format!("its {} rows are {} packed rows shifted", 8 * k * k, 8 * k);
            assert!(code.contains(&shared), "{case}: {shared}\n{code}");
        }
    }
}

/// Padded windows over rows wider than 16 (guarded loads, not a pad kernel): the first and
/// last rows, where a guard fixed for the row fails, run their interior as vector code
/// too, and every row starts and ends with one guarded vector group; rows shorter than 32
/// of 40 channels are each channel's inner loops (`nest`). Widths put the window's edges
/// at every lane; a window dilated as wide as a row of 17 leaves no element there with
/// all of its taps inside (an empty interval). Max pools (`-inf` fill, compared bit for
/// bit) and a depthwise conv (zero fill), stride 1 and 2, every target, 1 and 3 threads.
#[test]
fn padded_window_rows_are_vector_code_from_the_first_row_to_the_last() {
    let c = 40;
    for (w, stride) in [
        (17usize, 1i64),
        (18, 1),
        (19, 2),
        (20, 2),
        (23, 1),
        (31, 2),
        (36, 1),
    ] {
        let g = Graph::new("window-rows");
        let x = g.input("x", ferrite::f32(&[1, c, 6, w]));
        let wd = g.input("wd", ferrite::f32(&[c, 1, 3, 3]));
        let s = [stride, stride];
        g.output(&x.conv2d(&wd, None, s, [1, 1], [1, 1], c as i64).relu6());
        g.output(&x.max_pool2d([3, 3], s, [1, 1], [1, 1], false));
        g.output(&x.max_pool2d([3, 3], [1, 1], [1, 9], [1, 9], false));
        let mut v = random(&[1, c, 6, w], 21).to_f64_vec();
        for (i, x) in v.iter_mut().enumerate() {
            if i % 7 == 0 {
                *x = [-0.0, 0.0, f64::NAN, f64::NEG_INFINITY][(i / 7) % 4];
            }
        }
        let inputs = [
            Tensor::from_f64(&ferrite::f32(&[1, c, 6, w]), &v).unwrap(),
            random(&[c, 1, 3, 3], 22),
        ];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let plan = cpu_plan(&g, &format!("window-rows-{w}-{stride}"));
        check_everywhere(&g, &refs, 1e-5);
        check_cpu_threads(&g, &refs, &[1, 3], 1e-5);
        let run = |target: Target| {
            compile(&g, &Options::default().target(target))
                .unwrap()
                .run(&refs)
                .unwrap()
        };
        let (want, got) = (run(Target::Interp), run(Target::Cpu));
        for out in [1, 2] {
            let (a, b) = (got[out].to_f64_vec(), want[out].to_f64_vec());
            for (i, (a, b)) in a.iter().zip(&b).enumerate() {
                assert!(
                    a.is_nan() && b.is_nan() || a.to_bits() == b.to_bits(),
                    "w={w} s={stride}: output {out} element {i}: {a:?}, interpreter {b:?}"
                );
            }
        }
        assert!(plan.contains("vector f32x4"), "w={w} s={stride}:\n{plan}");
        if w.div_ceil(stride as usize) < 32 {
            assert!(plan.contains("nested"), "w={w} s={stride}:\n{plan}");
        }
    }
}
