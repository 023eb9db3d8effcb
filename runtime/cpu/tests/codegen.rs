//! The CPU code generator against the loop-IR evaluator and the graph interpreter.

use ferrite_cpu::{CpuOptions, CpuProgram};
use ferrite_ir::loops::*;
use ferrite_ir::types::TensorType;
use ferrite_ir::{BinaryOp, DType, Tensor, UnaryOp};

mod support;
use support::*;

fn buffer(id: u32, kind: BufferKind, dtype: DType, shape: &[usize]) -> Buffer {
    Buffer {
        id: BufferId(id),
        ty: TensorType::new(dtype, shape.to_vec()).unwrap(),
        kind,
        name: format!("b{id}"),
    }
}

fn node(block: &mut Block, dtype: DType, op: ExprOp) -> ExprRef {
    block.push(ExprNode { dtype, op })
}

fn load(block: &mut Block, dtype: DType, buffer: u32, index: IndexExpr) -> ExprRef {
    node(
        block,
        dtype,
        ExprOp::Load(Load {
            buffer: BufferId(buffer),
            index,
            guard: vec![],
            other: Value::zero(dtype),
        }),
    )
}

fn program(name: &str, buffers: Vec<Buffer>, mut kernels: Vec<Kernel>) -> Program {
    for (i, k) in kernels.iter_mut().enumerate() {
        k.id = KernelId(i as u32);
        (k.reads, k.writes) = k.compute_accesses(&buffers);
    }
    let mut inputs: Vec<(usize, BufferId)> = Vec::new();
    let mut outputs: Vec<(usize, BufferId)> = Vec::new();
    for b in &buffers {
        match b.kind {
            BufferKind::Input(i) => inputs.push((i, b.id)),
            BufferKind::Output(o) => outputs.push((o, b.id)),
            BufferKind::Intermediate | BufferKind::Scratch | BufferKind::Constant(_) => {}
        }
    }
    inputs.sort();
    outputs.sort();
    let p = Program {
        name: name.into(),
        buffers,
        inputs: inputs.into_iter().map(|x| x.1).collect(),
        outputs: outputs.into_iter().map(|x| x.1).collect(),
        kernels,
        constants: vec![],
        donated: vec![],
    };
    p.verify().unwrap();
    p
}

fn kernel(name: &str, domain: Vec<usize>, stages: Vec<Stage>) -> Kernel {
    Kernel {
        id: KernelId(0),
        name: name.into(),
        nodes: vec![],
        domain,
        stages,
        gemm: None,
        reads: vec![],
        writes: vec![],
    }
}

fn i(k: usize) -> IndexExpr {
    IndexExpr::Var(Var::outer(k))
}

/// Runs `p` on random inputs with several option sets and compares with `evaluate`.
fn check_against_evaluator(p: &Program, rtol: f64, atol: f64) {
    let inputs: Vec<Tensor> = p
        .inputs
        .iter()
        .enumerate()
        .map(|(k, b)| Tensor::random(&p.buffers[b.index()].ty, 7 + k as u64))
        .collect();
    let want = evaluate(p, &inputs).unwrap();
    for (threads, vectorize) in [(1, true), (2, true), (1, false)] {
        let mut opts = CpuOptions::with_threads(threads);
        opts.codegen.vectorize = vectorize;
        let c = CpuProgram::compile(p, &opts).unwrap_or_else(|e| panic!("{e}"));
        let got = c.run(&inputs).unwrap_or_else(|e| panic!("{e}"));
        for (g, w) in got.iter().zip(&want) {
            g.check_close(w, rtol, atol).unwrap_or_else(|e| {
                panic!(
                    "threads {threads}, vectorize {vectorize}: {e}\n{}",
                    c.report()
                )
            });
        }
    }
}

#[test]
fn add_relu_matches_the_evaluator() {
    let n = 1003;
    let mut body = Block::default();
    let x = load(&mut body, DType::F32, 0, i(0));
    let y = load(&mut body, DType::F32, 1, i(0));
    let s = node(&mut body, DType::F32, ExprOp::Binary(BinaryOp::Add, x, y));
    let r = node(&mut body, DType::F32, ExprOp::Unary(UnaryOp::Relu, s));
    let k = kernel(
        "add_relu",
        vec![n],
        vec![Stage::Store {
            domain: vec![],
            body,
            stores: vec![StoreOp {
                buffer: BufferId(2),
                index: i(0),
                value: r,
            }],
        }],
    );
    let p = program(
        "add_relu",
        vec![
            buffer(0, BufferKind::Input(0), DType::F32, &[n]),
            buffer(1, BufferKind::Input(1), DType::F32, &[n]),
            buffer(2, BufferKind::Output(0), DType::F32, &[n]),
        ],
        vec![k],
    );
    check_against_evaluator(&p, 0.0, 0.0);
}

#[test]
fn every_example_matches_the_interpreter() {
    let names = example_names();
    assert!(names.len() >= 8, "{names:?}");
    for name in names {
        let g = example(&name);
        check_graph(&g, &random_inputs(&g));
    }
}

/// Exact ops (no transcendentals) must give bit-identical results to the loop-IR
/// evaluator: pointwise code in every mode, reductions in scalar mode (f64 accumulation
/// in the same order, like the evaluator; vector lanes accumulate in f32).
#[test]
fn exact_ops_are_bit_identical_to_the_evaluator() {
    let pointwise = [
        "graph e(x: f32[7, 37], y: f32[37], c: bool[7, 37]) -> f32[7, 37] {\n  z = where(c, maximum(div(x, y), mul(x, 3.0)), minimum(sub(x, y), neg(abs(x))))\n  return z\n}\n",
        "graph e(x: f16[7, 37], y: f16[37]) -> f16[7, 37] {\n  z = div(add(mul(x, y), 1.5), sub(y, 2.0))\n  return z\n}\n",
        "graph e(x: bf16[7, 37], y: f32[37]) -> f32[7, 37] {\n  z = mul(cast(add(x, x), to=f32), y)\n  return z\n}\n",
        "graph e(x: i32[7, 37], y: i64[37]) -> i64[7, 37] {\n  z = mul(add(cast(x, to=i64), y), sub(y, 4))\n  return z\n}\n",
        "graph e(x: f32[7, 37]) -> f32[7, 37] {\n  z = cast(cast(mul(x, 1000.0), to=i32), to=f32)\n  return z\n}\n",
        "graph e(x: f32[7, 37]) -> f32[7, 37] {\n  z = sqrt(add(abs(x), floor(mul(x, 3.0))))\n  return z\n}\n",
    ];
    let reducing = [
        "graph e(x: f32[7, 37]) -> f32[7] {\n  z = sum(mul(x, x), axes=[1])\n  return z\n}\n",
        "graph e(x: f32[7, 37], w: f32[37, 5]) -> f32[7, 5] {\n  z = matmul(x, w)\n  return z\n}\n",
        "graph e(x: f32[7, 37]) -> f32[37] {\n  z = div(sum(x, axes=[0]), max(x, axes=[0]))\n  return z\n}\n",
        "graph e(x: f16[7, 37]) -> f16[7] {\n  z = sum(x, axes=[1])\n  return z\n}\n",
    ];
    for (src, scalar_only) in pointwise
        .iter()
        .map(|s| (s, false))
        .chain(reducing.iter().map(|s| (s, true)))
    {
        let g = graph(src);
        let inputs = random_inputs(&g);
        for fuse in [true, false] {
            let p = schedule(&g, fuse);
            let want = evaluate(&p, &inputs).unwrap();
            for vectorize in [false, true] {
                if scalar_only && vectorize {
                    continue;
                }
                let mut opts = CpuOptions::with_threads(2);
                opts.codegen.vectorize = vectorize;
                opts.use_gemm = false;
                let c = CpuProgram::compile(&p, &opts).unwrap();
                let got = c.run(&inputs).unwrap();
                for (x, w) in got.iter().zip(&want) {
                    assert_eq!(
                        x.to_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        w.to_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{} (fuse {fuse}, simd {vectorize})\n{}",
                        g.name,
                        c.report()
                    );
                }
            }
        }
    }
}

/// Every f16 and bf16 bit pattern converts to f32 exactly, and f32 values round to the
/// nearest even half value (checked against the `half` crate), through loads, casts and
/// stores of generated code.
#[test]
fn half_precision_conversions_are_exact() {
    type H = gemm::f16;
    // f16 -> f32 -> f16 over all bit patterns, and a sweep of f32 bit patterns to f16.
    let n = 1 << 16;
    let halves: Vec<H> = (0..n).map(|b| H::from_bits(b as u16)).collect();
    let g = graph("graph h(x: f16[65536], y: f32[65536]) -> f32[65536], f16[65536] {\n  a = cast(x, to=f32)\n  b = cast(y, to=f16)\n  return a, b\n}\n");
    let floats: Vec<f32> = (0..n as u32)
        .map(|i| f32::from_bits(i.wrapping_mul(65521).wrapping_add(12345)))
        .collect();
    let inputs = vec![
        Tensor {
            ty: g.param_types()[0].clone(),
            data: ferrite_ir::Data::F16(halves.clone()),
        },
        Tensor::from_f32(&[n], floats.clone()).unwrap(),
    ];
    for fuse in [true, false] {
        let p = schedule(&g, fuse);
        let c = CpuProgram::compile(&p, &CpuOptions::with_threads(1)).unwrap();
        let out = c.run(&inputs).unwrap();
        let ferrite_ir::Data::F32(a) = &out[0].data else {
            panic!()
        };
        let ferrite_ir::Data::F16(b) = &out[1].data else {
            panic!()
        };
        for (h, x) in halves.iter().zip(a) {
            let want = h.to_f32();
            assert!(
                want.to_bits() == x.to_bits() || (want.is_nan() && x.is_nan()),
                "{h:?}: {x} vs {want}"
            );
        }
        for (f, h) in floats.iter().zip(b) {
            let want = H::from_f32(*f);
            assert!(
                want.to_bits() == h.to_bits() || (want.is_nan() && h.is_nan()),
                "{f:e}: {h:?} vs {want:?}"
            );
        }
    }
    let bf =
        graph("graph h(y: f32[65536]) -> bf16[65536] {\n  b = cast(y, to=bf16)\n  return b\n}\n");
    let inputs = vec![Tensor::from_f32(&[n], floats.clone()).unwrap()];
    let p = schedule(&bf, true);
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(1)).unwrap();
    let out = c.run(&inputs).unwrap();
    let want = ferrite_ir::interpret(&bf, &inputs).unwrap();
    let (ferrite_ir::Data::Bf16(x), ferrite_ir::Data::Bf16(w)) = (&out[0].data, &want[0].data)
    else {
        panic!()
    };
    for (f, (a, b)) in floats.iter().zip(x.iter().zip(w)) {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{f:e}: {a:?} vs {b:?}"
        );
    }
}

/// Contiguous pointwise kernels with a short last axis are one long vector loop; a
/// broadcast along the last axis keeps the rows (and the row loop is still vectorized
/// when the row is long enough).
#[test]
fn short_rows_are_merged_into_one_vector_loop() {
    let g = graph("graph s(x: f32[999, 3], y: f32[999, 3]) -> f32[999, 3] {\n  z = exp(add(x, y))\n  return z\n}\n");
    check_graph(&g, &random_inputs(&g));
    // (Without wide routine calls, which would cut the row into blocks for the `exp`.)
    let mut opts = CpuOptions::with_threads(1);
    opts.codegen.wide = None;
    let c = CpuProgram::compile(&schedule(&g, true), &opts).unwrap();
    let info = c.kernel_info(0).unwrap();
    assert_eq!(info.stages[0].loops, "i0 < 2997");
    assert!(info.stages[0].vector.is_some(), "{}", c.report());
    let g = graph(
        "graph s(x: f32[999, 3], b: f32[3]) -> f32[999, 3] {\n  z = add(x, b)\n  return z\n}\n",
    );
    check_graph(&g, &random_inputs(&g));
    let c = CpuProgram::compile(&schedule(&g, true), &CpuOptions::with_threads(1)).unwrap();
    assert_eq!(c.kernel_info(0).unwrap().stages[0].loops, "i1 < 3");
}

/// Matmul kernels call the extern GEMM: straight into their output when they store the
/// product (with any epilogue applied in place), else into a temporary; transposed and
/// batched operands go by strides.
#[test]
fn matmul_kernels_run_through_the_extern_gemm() {
    let g = example("mlp");
    let p = schedule(&g, true);
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap();
    let gemm_kernels: Vec<usize> = (0..p.kernels.len())
        .filter(|&k| p.kernels[k].gemm.is_some())
        .collect();
    assert!(!gemm_kernels.is_empty());
    for k in gemm_kernels {
        assert!(c.uses_gemm(k), "{}", c.report());
    }
    assert!(!c.report().contains("temporary"), "{}", c.report());
    // A product read at a transposed position needs a temporary.
    let g = graph("graph t(a: f32[8, 16], b: f32[12, 16]) -> f32[12, 8] {\n  y = transpose(relu(matmul(a, transpose(b, dim0=0, dim1=1))), dim0=0, dim1=1)\n  return y\n}\n");
    check_graph(&g, &random_inputs(&g));
    let c = CpuProgram::compile(&schedule(&g, true), &CpuOptions::with_threads(1)).unwrap();
    assert!(c.uses_gemm(0), "{}", c.report());
}

/// Outputs of `g` compiled fused with stashing on and off, on 1 and 2 threads: they must
/// be bit-identical (a stashed value is the same rounded value the stage would compute).
/// Returns the stash notes of the compiled kernels.
fn stash_on_off_identical(g: &ferrite_ir::Graph) -> Vec<String> {
    let inputs = random_inputs(g);
    let p = schedule(g, true);
    let mut notes = Vec::new();
    let mut first: Option<Vec<Tensor>> = None;
    for stash in [true, false] {
        for threads in [1, 2] {
            let mut opts = CpuOptions::with_threads(threads);
            opts.codegen.stash = stash;
            let c = CpuProgram::compile(&p, &opts).unwrap();
            if stash && threads == 1 {
                for k in 0..p.kernels.len() {
                    if let Some(info) = c.kernel_info(k) {
                        // The wide routine calls (`wide_apply.rs` tests them) aside.
                        notes.extend(
                            info.notes
                                .iter()
                                .filter(|n| !n.starts_with("wide:"))
                                .cloned(),
                        );
                    }
                }
            }
            let out = c.run(&inputs).unwrap();
            match &first {
                None => first = Some(out),
                Some(want) => {
                    for (x, w) in out.iter().zip(want) {
                        assert_eq!(
                            x.data,
                            w.data,
                            "{}: stash {stash}, threads {threads}\n{}",
                            g.name,
                            c.report()
                        );
                    }
                }
            }
        }
    }
    check_graph(g, &inputs);
    notes
}

/// A softmax row's `exp(x - max)` is computed once per element: written to a stack
/// scratch row by the sum stage and read back by the store stage, not recomputed.
#[test]
fn shared_transcendentals_are_computed_once_per_point() {
    let notes = stash_on_off_identical(&example("softmax_rows"));
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].starts_with("stash: exp("), "{notes:?}");
    // Attention's masked softmax (`where(r0 <= i2, .., -inf)`) too.
    let notes = stash_on_off_identical(&example("attention"));
    assert!(notes.iter().any(|n| n.contains("exp(where(")), "{notes:?}");
    // A row with a scalar tail (37 = 9 vectors + 1), in f16 (computed in f32 inside).
    let g =
        graph("graph s(x: f16[5, 37]) -> f16[5, 37] {\n  y = softmax(x, axis=1)\n  return y\n}\n");
    assert_eq!(stash_on_off_identical(&g).len(), 1);
    // A two-axis inner domain: the scratch is indexed row-major over both axes.
    let g = graph("graph s(x: f32[3, 6, 10]) -> f32[3, 6, 10] {\n  e = tanh(x)\n  s = sum(e, axes=[1, 2], keepdim=true)\n  y = div(e, s)\n  return y\n}\n");
    let notes = stash_on_off_identical(&g);
    assert!(
        notes.len() == 1 && notes[0].starts_with("stash: tanh("),
        "{notes:?}"
    );
    // A softmax over a middle axis runs with lanes across the last axis and stashes
    // every lane of a group (16 per inner point), with scalar points at the row ends.
    let g = graph(
        "graph s(x: f32[3, 20, 33]) -> f32[3, 20, 33] {\n  y = softmax(x, axis=1)\n  return y\n}\n",
    );
    let notes = stash_on_off_identical(&g);
    assert!(
        notes.len() == 2 && notes[1].contains("hold the 16 lanes"),
        "{notes:?}"
    );
    let inputs = random_inputs(&g);
    let report = simd_matches_scalar_bitwise(&g, &inputs, true);
    assert!(
        report.contains("stash: exp(") && report.contains("across i1"),
        "{report}"
    );
}

/// Nothing is stashed where nothing expensive is shared, and rows beyond the scratch
/// limit recompute (and are still right).
#[test]
fn stashing_only_where_it_pays_and_fits() {
    // layer norm shares only cheap subtractions between its stages.
    assert!(stash_on_off_identical(&example("layer_norm_rows")).is_empty());
    // A log_softmax feeding a layer norm shares `x - max - log(sum)`, whose `log` is of an
    // accumulator: computed once per row anyway, so nothing is worth a scratch row.
    let g = graph("graph s(x: f32[4, 300], w: f32[300], b: f32[300]) -> f32[4, 300] {\n  y = layer_norm(log_softmax(x, axis=1), w, b)\n  return y\n}\n");
    assert!(stash_on_off_identical(&g).is_empty());
    // exp(x) needed by three stages is written once and read back by both later ones.
    let g = graph("graph s(x: f32[4, 300]) -> f32[4, 300] {\n  e = exp(x)\n  a = sum(e, axes=[1], keepdim=true)\n  b = sum(mul(e, sub(e, a)), axes=[1], keepdim=true)\n  y = div(e, b)\n  return y\n}\n");
    let notes = stash_on_off_identical(&g);
    assert!(
        notes.len() == 2 && notes[1].contains("also read back by stage 2"),
        "{notes:?}"
    );
    // 20,000 f32 per row = 80,000 bytes > the 64 KiB limit.
    let g = graph(
        "graph s(x: f32[2, 20000]) -> f32[2, 20000] {\n  y = softmax(x, axis=1)\n  return y\n}\n",
    );
    assert!(stash_on_off_identical(&g).is_empty());
}

/// Notes of kernel `k` of `g` compiled fused on one thread (but those of wide routine
/// calls, which `wide_apply.rs` tests).
fn kernel_notes(g: &ferrite_ir::Graph, k: usize) -> Vec<String> {
    let c = CpuProgram::compile(&schedule(g, true), &CpuOptions::with_threads(1)).unwrap();
    let notes = &c.kernel_info(k).unwrap().notes;
    notes
        .iter()
        .filter(|n| !n.starts_with("wide:"))
        .cloned()
        .collect()
}

/// A pointwise kernel reading a transposed operand walks its domain in tiles (16x16, or
/// 8x8 when 16 does not divide both axes); results are those of the interpreter, on one
/// and two threads, and kernels whose axes no tile divides stay as they are.
#[test]
fn transposed_reads_are_tiled() {
    let cases = [
        (
            "x: f32[64, 48]",
            "f32[48, 64]",
            "transpose(x, dim0=0, dim1=1)",
            Some(16),
        ),
        (
            "x: f32[40, 24]",
            "f32[24, 40]",
            "transpose(x, dim0=0, dim1=1)",
            Some(8),
        ),
        (
            "x: f32[30, 50]",
            "f32[50, 30]",
            "transpose(x, dim0=0, dim1=1)",
            None,
        ),
        (
            "x: f32[3, 32, 64]",
            "f32[3, 64, 32]",
            "permute(x, dims=[0, 2, 1])",
            Some(16),
        ),
    ];
    for (param, out, expr, tile) in cases {
        let src = format!(
            "graph t({param}, y: {out}) -> {out} {{\n  z = add({expr}, y)\n  w = mul(z, 0.5)\n  return w\n}}\n"
        );
        let g = graph(&src);
        check_graph(&g, &random_inputs(&g));
        let notes = kernel_notes(&g, 0);
        match tile {
            Some(t) => assert!(
                notes
                    .iter()
                    .any(|n| n.starts_with("tiled:") && n.contains(&format!("{t}x{t}"))),
                "{src}{notes:?}"
            ),
            None => assert!(notes.is_empty(), "{src}{notes:?}"),
        }
    }
    // A contiguous kernel is not tiled.
    let g = graph("graph t(x: f32[64, 64]) -> f32[64, 64] {\n  y = exp(x)\n  return y\n}\n");
    assert!(kernel_notes(&g, 0).is_empty());
}

/// Outputs of `g` with SIMD on (`opts`) and off: bit-identical. Returns the report.
fn simd_matches_scalar_bitwise(g: &ferrite_ir::Graph, inputs: &[Tensor], use_gemm: bool) -> String {
    let p = schedule(g, true);
    let mut report = String::new();
    let mut first: Option<Vec<Tensor>> = None;
    for (vectorize, threads) in [(true, 1), (true, 2), (false, 1)] {
        let mut opts = CpuOptions::with_threads(threads);
        opts.use_gemm = use_gemm;
        opts.codegen.vectorize = vectorize;
        let c = CpuProgram::compile(&p, &opts).unwrap();
        if vectorize && threads == 1 {
            report = c.report();
        }
        let out = c.run(inputs).unwrap();
        match &first {
            None => first = Some(out),
            Some(want) => {
                for (x, w) in out.iter().zip(want) {
                    let (xs, ws) = (x.to_f64(), w.to_f64());
                    for (k, (a, b)) in xs.iter().zip(&ws).enumerate() {
                        assert!(
                            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                            "{}: element {k}: {a} vs {b} (simd {vectorize}, threads {threads})\n{report}",
                            g.name
                        );
                    }
                }
            }
        }
    }
    report
}

/// Reductions over a leading or middle axis (inner loops that stride) run with vector
/// lanes across the last outer axis, with results bit-identical to the scalar code (f64
/// accumulation per lane), groups that do not fill a step finished by the scalar code.
#[test]
fn strided_reductions_run_with_lanes_across_outer_points() {
    let cases = [
        // 50 points: three steps of 16 and two scalar points.
        "graph s(x: f32[37, 50]) -> f32[50] {\n  y = sum(x, axes=[0])\n  return y\n}\n",
        "graph s(x: f32[37, 50]) -> f32[50] {\n  y = max(x, axes=[0])\n  return y\n}\n",
        "graph s(x: f32[9, 40]) -> f32[40] {\n  y = prod(x, axes=[0])\n  return y\n}\n",
        // Softmax over a middle axis: outer (i0, i2), three stages.
        "graph s(x: f32[3, 20, 33]) -> f32[3, 20, 33] {\n  y = softmax(x, axis=1)\n  return y\n}\n",
        // An 8-point last axis: two groups per step.
        "graph s(x: f32[4, 64, 8]) -> f32[4, 8] {\n  y = mean(x, axes=[1])\n  return y\n}\n",
        // Layer norm over the leading axis with a broadcast weight.
        "graph s(x: f32[16, 24], w: f32[16, 1]) -> f32[16, 24] {\n  m = mean(x, axes=[0], keepdim=true)\n  d = sub(x, m)\n  v = mean(mul(d, d), axes=[0], keepdim=true)\n  y = mul(div(d, sqrt(add(v, 1e-5))), w)\n  return y\n}\n",
    ];
    for src in cases {
        let g = graph(src);
        let inputs = random_inputs(&g);
        check_graph(&g, &inputs);
        let report = simd_matches_scalar_bitwise(&g, &inputs, true);
        assert!(report.contains("across i"), "{src}{report}");
    }
    // NaN sticks and the first of equal extremes wins, lane by lane as in scalar code.
    let g = graph("graph s(x: f32[3, 8]) -> f32[8] {\n  y = max(x, axes=[0])\n  return y\n}\n");
    let mut v = vec![1.0f64; 24];
    v[1] = f64::NAN;
    v[8 + 2] = f64::NAN;
    v[3] = -0.0;
    v[8 + 3] = 0.0;
    v[16 + 5] = f64::INFINITY;
    let x = Tensor::from_f64(&g.param_types()[0], &v);
    check_graph(&g, std::slice::from_ref(&x));
    simd_matches_scalar_bitwise(&g, &[x], true);
    // A matmul without the extern GEMM: lanes across the output columns, exact products.
    let g = graph("graph m(a: f32[13, 24], b: f32[24, 36]) -> f32[13, 36] {\n  y = matmul(a, b)\n  return y\n}\n");
    let report = simd_matches_scalar_bitwise(&g, &random_inputs(&g), false);
    assert!(report.contains("across i1"), "{report}");
    // argmax has no lane form: the kernel stays scalar and right.
    let g = graph("graph s(x: f32[37, 50]) -> i64[50] {\n  y = argmax(x, axis=0)\n  return y\n}\n");
    check_graph(&g, &random_inputs(&g));
    let c = CpuProgram::compile(&schedule(&g, true), &CpuOptions::with_threads(1)).unwrap();
    assert!(!c.report().contains("across"), "{}", c.report());
}

/// A long vectorized sum folds its f32 lanes into f64 every 16 iterations, so it stays
/// as accurate as the reference's f64 accumulation: 2^20 copies of 0.1 summed in 16 f32
/// lanes alone drift by 6e-4 relative (104922.3 for 104857.6: each lane adds 0.1 to a
/// running 6,000); with the folds the result is within a few ulp (2 measured).
#[test]
fn long_vector_sums_fold_into_f64() {
    let g =
        graph("graph s(x: f32[2, 1048576]) -> f32[2] {\n  y = sum(x, axes=[1])\n  return y\n}\n");
    let x = Tensor::from_f64(&g.param_types()[0], &vec![0.1; 2 << 20]);
    let want = ferrite_ir::interpret(&g, std::slice::from_ref(&x)).unwrap();
    let c = CpuProgram::compile(&schedule(&g, true), &CpuOptions::with_threads(2)).unwrap();
    assert!(
        c.kernel_info(0).unwrap().stages[0].vector.is_some(),
        "{}",
        c.report()
    );
    let got = c.run(std::slice::from_ref(&x)).unwrap();
    for (a, b) in got[0].to_f64().iter().zip(want[0].to_f64()) {
        let ulp = (b as f32).abs() * f32::EPSILON;
        assert!((a - b).abs() <= 4.0 * ulp as f64, "{a} vs {b}");
    }
}

/// A row max's unrolled vector loop takes one `maxps` per vector and keeps its NaNs with an
/// unordered compare and a blend: with the IEEE `maximum` per vector (six instructions,
/// two of them blends) the loop of four groups was 40 instructions, now it is 20 (four
/// loads, twelve for the groups, the index and the branch). With a wide width the row is
/// a routine call (`plan/rows.rs`); this is the loop it replaces and SSE-only CPUs run.
#[cfg(target_arch = "x86_64")]
#[test]
fn row_max_takes_one_maxps_per_vector() {
    let g = graph("graph m(x: f32[8, 1024]) -> f32[8] {\n  y = max(x, axes=[1])\n  return y\n}\n");
    let mut opts = CpuOptions::with_threads(1);
    opts.capture_dumps = true;
    opts.codegen.wide = None;
    let c = CpuProgram::compile(&schedule(&g, true), &opts).unwrap();
    let inputs = random_inputs(&g);
    check_graph(&g, &inputs);
    let disassembly = c.disassembly(0).expect("a dump");
    // The unrolled loop is the block with the most vector loads.
    let blocks: Vec<Vec<&str>> = disassembly
        .split("\nblock")
        .map(|b| {
            b.lines()
                .skip(1)
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect()
        })
        .collect();
    let lp = blocks
        .iter()
        .max_by_key(|b| b.iter().filter(|l| l.starts_with("vmovups")).count())
        .expect("blocks");
    let maxps = lp.iter().filter(|l| l.starts_with("vmaxps")).count();
    assert_eq!(maxps, 4, "{}", lp.join("\n"));
    assert!(
        lp.len() <= 22,
        "{} instructions:\n{}",
        lp.len(),
        lp.join("\n")
    );
}

/// Guarded (padded) vector loads whose guards hold on an interval of the innermost
/// variable: the row is peeled into guarded edges and an unguarded inside, for guards
/// with coefficients 1, 2 and -1, at row lengths that put the interval's ends at every
/// lane of a group and rows shorter than one; the last elements of a row run as an
/// overlapping vector group, except in a stage that reads what it stores (rewriting an
/// element twice would add twice). Exact against the evaluator, with and without SIMD,
/// on one and two threads.
#[test]
fn peeled_guarded_rows_and_overlapping_tails_match_the_evaluator() {
    for w in [1usize, 3, 4, 5, 6, 7, 9, 14, 17, 23, 31, 37] {
        let n = 2 * w + 3;
        let text = format!(
            "program peel\n  buf0: f32[5, {n}]  input 0 `x`\n  buf1: f32[5, {w}]  output 0 `y`\n  \
             buf2: f32[5, {w}]  output 1 `z`\n\n\
             kernel k0(buf0: f32[5, {n}]) -> buf1: f32[5, {w}]\n  \
             for i0 in 0..5, i1 in 0..{w} parallel:\n    \
             buf1[i0*{w} + i1] = (buf0[i0*{n} + i1 - 2] if 0 <= i1 - 2 < {w} else 1.5) * \
             (buf0[i0*{n} + i1*2 - 3] if 0 <= i1*2 - 3 < {n} and 1 <= i0 < 4 else -2.0) + \
             (buf0[i0*{n} + i1 + 1] if 0 <= i1 + 1 < {w} else 0.25)\n\n\
             kernel k1(buf1: f32[5, {w}]) -> buf2: f32[5, {w}]\n  \
             for i0 in 0..5, i1 in 0..{w} parallel:\n    \
             buf2[i0*{w} + i1] = buf1[i0*{w} + i1] * 2.0\n\n\
             kernel k2(buf2: f32[5, {w}]) -> buf2: f32[5, {w}]\n  \
             for i0 in 0..5, i1 in 0..{w} parallel:\n    \
             buf2[i0*{w} + i1] = buf2[i0*{w} + i1] + 1.0\n"
        );
        let p = parse_program("peel.loop", &text).unwrap_or_else(|d| panic!("{d}\n{text}"));
        check_against_evaluator(&p, 0.0, 0.0);
        let rev = format!(
            "program rev\n  buf0: f32[3, {w}]  input 0 `x`\n  buf1: f32[3, {w}]  output 0 `y`\n\n\
             kernel k0(buf0: f32[3, {w}]) -> buf1: f32[3, {w}]\n  \
             for i0 in 0..3, i1 in 0..{w} parallel:\n    \
             buf1[i0*{w} + i1] = (buf0[i0*{w} + i1] if 0 <= {w} - 3 - i1 < {w} else 3.0) + \
             (buf0[i0*{w} + i1 - 1] if 0 <= i1 - 1 < {w} else 0.5)\n"
        );
        let q = parse_program("rev.loop", &rev).unwrap_or_else(|d| panic!("{d}\n{rev}"));
        check_against_evaluator(&q, 0.0, 0.0);
        // The guarded stages are vector code (else the peeling would go untested).
        for p in [&p, &q].into_iter().filter(|_| w >= 4) {
            let c = CpuProgram::compile(p, &CpuOptions::with_threads(1)).unwrap();
            let info = c.kernel_info(0).unwrap();
            assert!(info.stages[0].vector.is_some(), "w={w}\n{}", c.report());
        }
    }
}
