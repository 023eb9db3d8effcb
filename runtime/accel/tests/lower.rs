//! Loop IR lowered to tile kernels and run on the simulator, against the
//! reference interpreter.

use ferrite_accel::program::{Intermediates, SimProgram};
use ferrite_accel::sim::{self, DeviceReport, KernelArg, Machine};
use ferrite_accel::tile;
use ferrite_accel::Error;
use ferrite_ir::loops::Program;
use ferrite_ir::{interpret, DType, Graph, Tensor, TensorType};
use ferrite_passes::pipeline::{lower_graph, PipelineOptions};
use ferrite_passes::schedule::ScheduleOptions;

fn parse(name: &str, src: &str) -> Graph {
    ferrite_ir::parse(name, src).unwrap_or_else(|d| panic!("{d}"))
}

fn program(g: &Graph, fuse: bool) -> Program {
    let opts = PipelineOptions {
        schedule: if fuse {
            ScheduleOptions::default()
        } else {
            ScheduleOptions::unfused()
        },
        ..PipelineOptions::default()
    };
    lower_graph(g, &opts)
        .unwrap_or_else(|e| panic!("{e}"))
        .scheduled
        .program
}

fn random_inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    g.param_types()
        .iter()
        .enumerate()
        .map(|(i, t)| Tensor::random(t, seed.wrapping_add(i as u64)))
        .collect()
}

/// The relative tolerance for outputs of `dtype`.
fn rtol(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 | DType::Bf16 => 2e-2,
        _ => 0.0,
    }
}

/// Compiles and runs `p` on the simulator with intermediates placed as
/// `placement` says, and compares its outputs with `want`.
fn compare_with(
    p: &Program,
    inputs: &[Tensor],
    want: &[Tensor],
    placement: Intermediates,
) -> Result<DeviceReport, String> {
    let sim = SimProgram::compile_with(p, &Machine::mtia2i(), placement)
        .map_err(|e| format!("compile: {e}\n{p}"))?;
    let (got, report) = sim
        .run(inputs)
        .map_err(|e| format!("run: {e}\n{p}\n{}", sim.kernels_text()))?;
    for (i, (a, e)) in got.iter().zip(want).enumerate() {
        let tol = rtol(e.ty.dtype);
        // Sums accumulate in f32 on the machine and in f64 in the interpreter, so
        // an element that cancels to much less than its terms is compared on the
        // scale of the output.
        let scale = e
            .to_f64()
            .iter()
            .filter(|v| v.is_finite())
            .fold(0.0f64, |m, v| m.max(v.abs()));
        a.check_close(e, tol, tol * scale.max(1.0))
            .map_err(|m| format!("output {i}: {m}\n{p}\n{}", sim.kernels_text()))?;
    }
    let looped = sim
        .launches()
        .filter(|l| l.text.contains("for rb in") || l.text.contains("for jb in"))
        .count();
    let dots = sim
        .launches()
        .filter(|l| l.text.contains("for k0 in"))
        .count();
    LOOPS.with(|c| {
        let (a, b) = c.get();
        c.set((a + looped, b + dots));
    });
    Ok(report)
}

thread_local! {
    /// Kernels this test has run that loop over blocks of an inner domain, and
    /// GEMMs with a K loop.
    static LOOPS: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// [`compare_with`] with intermediates in SRAM where they fit (the default).
fn compare(p: &Program, inputs: &[Tensor], want: &[Tensor]) -> Result<DeviceReport, String> {
    compare_with(p, inputs, want, Intermediates::SramWhenFits)
}

/// Runs an example graph fused and unfused with intermediates placed as
/// `placement` says; checks both against the interpreter and returns the reports.
fn run_example(name: &str, placement: Intermediates) -> (DeviceReport, DeviceReport) {
    let g = ferrite_testkit::example_graph(name);
    let inputs = random_inputs(&g, 7);
    let want = interpret(&g, &inputs).unwrap();
    let run = |fuse: bool| {
        compare_with(&program(&g, fuse), &inputs, &want, placement)
            .unwrap_or_else(|e| panic!("{name} ({}): {e}", if fuse { "fused" } else { "unfused" }))
    };
    (run(true), run(false))
}

/// Runs graph `src` fused and unfused on the simulator with `inputs` (random
/// when `None`) and compares with the interpreter; returns the fused report.
fn check_graph(src: &str, inputs: Option<Vec<Tensor>>) -> DeviceReport {
    let g = parse("case.fg", src);
    let inputs = inputs.unwrap_or_else(|| random_inputs(&g, 11));
    let want = interpret(&g, &inputs).unwrap_or_else(|e| panic!("interpreter: {e}"));
    let fused =
        compare(&program(&g, true), &inputs, &want).unwrap_or_else(|e| panic!("fused {src}\n{e}"));
    compare(&program(&g, false), &inputs, &want).unwrap_or_else(|e| panic!("unfused {src}\n{e}"));
    fused
}

fn tensor(dtype: DType, shape: &[usize], values: &[f64]) -> Tensor {
    Tensor::from_f64(&TensorType::new(dtype, shape.to_vec()).unwrap(), values)
}

#[test]
fn every_example_matches_the_interpreter_fused_and_unfused() {
    for name in [
        "softmax_rows",
        "layer_norm_rows",
        "pointwise_chain",
        "mlp",
        "embedding",
        "llama_mlp",
        "attention",
        "transformer_block",
    ] {
        let (f, u) = run_example(name, Intermediates::SramWhenFits);
        println!(
            "{name:<18} fused {:>2} kernels {:>7} cycles {:>9} LPDDR B | \
             unfused {:>2} kernels {:>7} cycles {:>9} LPDDR B",
            f.launches.len(),
            f.cycles(),
            f.bytes().lpddr(),
            u.launches.len(),
            u.cycles(),
            u.bytes().lpddr()
        );
    }
}

/// `unfused / fused`.
fn ratio(fused: u64, unfused: u64) -> f64 {
    unfused as f64 / fused.max(1) as f64
}

#[test]
fn fusion_saves_cycles_and_bytes_on_the_simulator() {
    // Intermediates in SRAM (the default): fusion saves launches, vector work and
    // SRAM traffic everywhere, and LPDDR traffic where unfused kernels re-read an
    // input (each launch starts with a cold SRAM read cache). The pointwise chain
    // reads each input once either way, so its LPDDR bytes are equal.
    for (name, min_cycles, min_lpddr, min_bytes) in [
        ("pointwise_chain", 1.5, 1.0, 5.0),
        ("layer_norm_rows", 2.5, 1.3, 3.0),
        ("transformer_block", 1.8, 1.01, 1.3),
    ] {
        let (f, u) = run_example(name, Intermediates::SramWhenFits);
        let (c, l) = (
            ratio(f.cycles(), u.cycles()),
            ratio(f.bytes().lpddr(), u.bytes().lpddr()),
        );
        let total = ratio(
            f.bytes().lpddr() + f.bytes().sram(),
            u.bytes().lpddr() + u.bytes().sram(),
        );
        println!(
            "{name}: unfused/fused cycles {c:.2}, LPDDR bytes {l:.3}, LPDDR+SRAM bytes {total:.2}"
        );
        assert!(c >= min_cycles, "{name}: cycles ratio {c:.2}");
        assert!(l >= min_lpddr, "{name}: LPDDR ratio {l:.3}");
        assert!(total >= min_bytes, "{name}: bytes ratio {total:.2}");
    }
    // Every intermediate in LPDDR (an eager framework's placement): fusion keeps
    // them on chip altogether, so LPDDR traffic drops sharply on all three.
    for (name, min_cycles, min_lpddr) in [
        ("pointwise_chain", 5.0, 8.0),
        ("layer_norm_rows", 4.0, 4.0),
        ("transformer_block", 2.0, 2.0),
    ] {
        let (f, u) = run_example(name, Intermediates::Lpddr);
        let (c, l) = (
            ratio(f.cycles(), u.cycles()),
            ratio(f.bytes().lpddr(), u.bytes().lpddr()),
        );
        println!(
            "{name} (intermediates in LPDDR): unfused/fused cycles {c:.2}, LPDDR bytes {l:.2}"
        );
        assert!(c >= min_cycles, "{name}: cycles ratio {c:.2}");
        assert!(l >= min_lpddr, "{name}: LPDDR ratio {l:.2}");
    }
}

#[test]
fn lowered_kernels_are_readable_and_use_the_memory_hierarchy() {
    let g = ferrite_testkit::example_graph("softmax_rows");
    let sim = SimProgram::compile(&program(&g, true), &Machine::mtia2i()).unwrap();
    let text = sim.kernels_text();
    // One kernel: the row is loaded once and shared by the max, the sum and the store.
    assert_eq!(sim.launches().count(), 1);
    assert_eq!(text.matches("load(").count(), 1, "{text}");
    for line in [
        "  o = (program_id(0) * BO + arange(0, BO))[:, None]",
        // x / 0.7 stays a division (a rounded reciprocal would be an ulp off), so
        // the maximum is of the scaled row.
        "  acc0 = max(t, axis=1)[:, None]",
        "#   buf1   f32[128, 512]        LPDDR    output 0",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
    // GEMMs stream K through local memory with asynchronous copies.
    let g = ferrite_testkit::example_graph("mlp");
    let sim = SimProgram::compile(&program(&g, true), &Machine::mtia2i()).unwrap();
    let text = sim.kernels_text();
    for piece in [
        "local_alloc((BM, BK), f32)",
        "dma_async(a_buf",
        "dma_wait(ta)",
        "dot(x, y, acc)",
    ] {
        assert!(text.contains(piece), "missing `{piece}` in\n{text}");
    }
    let inputs = random_inputs(&g, 1);
    let (_, report) = sim.run(&inputs).unwrap();
    // The first GEMM's operands come from LPDDR: a staging launch copies them
    // to SRAM first.
    assert!(report.launches[0].kernel.ends_with("_stage"), "{report}");
    let k0 = &report.launches[1];
    assert!(k0.bytes.local_write > 0 && k0.dot_flops == 2 * 64 * 784 * 256);
    // Every launch is a kernel that parses back from its own text, to the very
    // kernel that runs.
    for l in sim.launches() {
        let again = ferrite_accel::tile::parse_and_check("again.tile", &l.text).unwrap();
        assert_eq!(again.name(), l.name);
        assert_eq!(again.kernel(), l.kernel.kernel());
    }
}

#[test]
fn blocks_shrink_to_fit_a_small_local_memory() {
    // 16 KiB of local memory per PE: GEMM buffers and reduction tiles get smaller,
    // and the simulator (which rejects a launch whose local buffers overflow)
    // still runs every kernel to the same results.
    let preset = ferrite_accel::sim::machine::MTIA2I_PRESET
        .replace("local_memory_kib = 384", "local_memory_kib = 16");
    let small = Machine::from_preset_str(&preset).unwrap();
    assert_eq!(small.local_memory_bytes, 16 * 1024);
    for name in ["mlp", "softmax_rows", "transformer_block"] {
        let g = ferrite_testkit::example_graph(name);
        let inputs = random_inputs(&g, 5);
        let want = interpret(&g, &inputs).unwrap();
        let p = program(&g, true);
        let sim = SimProgram::compile(&p, &small).unwrap();
        for l in sim.launches() {
            assert!(l.kernel.local_memory_bytes() <= small.local_memory_bytes);
        }
        let (got, _) = sim.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (a, e) in got.iter().zip(&want) {
            let scale = e.to_f64().iter().fold(0.0f64, |m, v| m.max(v.abs()));
            a.check_close(e, 1e-4, 1e-4 * scale.max(1.0)).unwrap();
        }
    }
}

#[test]
fn offsets_beyond_31_bits_are_computed_in_i64() {
    // Compiling needs no data, so a graph too big to run still lowers and checks.
    let g = parse(
        "big.fg",
        "graph big(x: f32[40000, 30000], w: f32[30000]) {
           y = add(permute(x, dims=[1, 0]), 1.0)
           s = sum(mul(x, w), axes=[1])
           return y, s
         }",
    );
    let sim = SimProgram::compile(&program(&g, true), &Machine::mtia2i()).unwrap();
    let text = sim.kernels_text();
    assert!(text.contains("cast(program_id(0), i64)"), "{text}");
    let small = parse(
        "small.fg",
        "graph small(x: f32[40, 30]) {\n  y = add(x, 1.0)\n  return y\n}",
    );
    let sim = SimProgram::compile(&program(&small, true), &Machine::mtia2i()).unwrap();
    assert!(!sim.kernels_text().contains("i64"));
}

#[test]
fn wrong_inputs_are_errors() {
    let g = ferrite_testkit::example_graph("mlp");
    let sim = SimProgram::compile(&program(&g, true), &Machine::mtia2i()).unwrap();
    let mut inputs = random_inputs(&g, 1);
    let err = sim.run(&inputs[1..]).unwrap_err();
    assert!(matches!(err, Error::Input(_)), "{err:?}");
    assert!(err.to_string().contains("takes 5 inputs"), "{err}");
    inputs[2] = Tensor::zeros(&TensorType::new(DType::F32, vec![7]).unwrap());
    let err = sim.run(&inputs).unwrap_err();
    assert!(!err.is_internal());
    assert!(err.to_string().contains("input 2 has type f32[7]"), "{err}");
}

#[test]
fn unary_ops() {
    check_graph(
        "graph g(x: f32[37, 50]) {
           a = abs(x)
           r = add(add(exp(x), log(add(a, 1.0))), add(sqrt(a), rsqrt(add(a, 0.5))))
           s = add(add(sin(x), cos(x)), add(tanh(x), sigmoid(x)))
           t = add(add(relu(x), gelu(x)), add(gelu(x, approximate=\"tanh\"), silu(x)))
           u = add(add(erf(x), floor(mul(x, 3.0))), add(ceil(mul(x, 3.0)), sign(x)))
           v = add(neg(x), reciprocal(add(a, 0.25)))
           w = not(gt(x, 0.0))
           return r, s, t, u, v, w
         }",
        None,
    );
}

#[test]
fn binary_ops_broadcast() {
    check_graph(
        "graph g(x: f32[6, 1, 40], y: f32[5, 1], z: f32[40]) {
           a = add(x, y)
           b = sub(y, z)
           c = mul(x, z)
           d = div(x, add(abs(y), 0.5))
           e = pow(abs(x), y)
           f = pow(x, 3.0)
           h = pow(abs(x), 0.37)
           i = maximum(x, y)
           j = minimum(z, x)
           k = and(gt(x, 0.0), le(y, 0.2))
           l = or(eq(x, z), ne(y, 0.1))
           m = where(lt(x, y), x, ge(z, 0.0))
           return a, b, c, d, e, f, h, i, j, k, l, m
         }",
        None,
    );
}

#[test]
fn integer_bool_and_half_dtypes() {
    check_graph(
        "graph g(a: i32[9, 33], b: i64[33], h: f16[9, 33], k: bf16[33]) {
           s = add(mul(a, 3), b)
           p = pow(a, 3)
           m = maximum(a, sub(b, 2))
           q = where(gt(a, 0), a, neg(a))
           n = not(a)
           c = cast(h, to=f32)
           d = cast(mul(h, 0.5), to=bf16)
           e = add(cast(k, to=f16), h)
           f = cast(exp(h), to=i32)
           x = sign(a)
           y = cast(gt(a, 1), to=f16)
           z = div(a, 4)
           return s, p, m, q, n, c, d, e, f, x, y, z
         }",
        None,
    );
}

#[test]
fn reductions_over_axes() {
    check_graph(
        "graph g(x: f32[7, 9, 11], i: i32[7, 9], b: bool[6, 10]) {
           a = sum(x, axes=[1])
           c = mean(x, axes=[0, 2], keepdim=true)
           d = max(x, axes=[2])
           e = min(x, axes=[0])
           f = prod(add(mul(x, 0.01), 1.0), axes=[1, 2])
           h = sum(x)
           j = argmax(x, axis=1)
           k = argmin(x, axis=-1, keepdim=true)
           l = sum(i, axes=[1])
           m = max(i, axes=[0])
           n = max(b, axes=[1])
           o = min(b, axes=[0])
           p = prod(i, axes=[0])
           q = argmax(x)
           return a, c, d, e, f, h, j, k, l, m, n, o, p, q
         }",
        None,
    );
}

#[test]
fn long_reductions_loop_over_blocks() {
    // Rows longer than one block (4096) with ragged tails, and whole-tensor sums.
    let r = check_graph(
        "graph g(x: f32[3, 10007], y: f16[2, 5000]) {
           s = sum(x, axes=[1])
           m = max(x, axes=[1])
           n = min(x, axes=[-1], keepdim=true)
           a = argmax(x, axis=1)
           b = argmin(x, axis=1)
           t = sum(x)
           h = sum(y, axes=[1])
           sm = softmax(x, axis=-1)
           ln = layer_norm(y, cast(max(y, axes=[0]), to=f16), cast(min(y, axes=[0]), to=f16))
           return s, m, n, a, b, t, h, sm, ln
         }",
        None,
    );
    assert!(r.cycles() > 0);
}

#[test]
fn argmax_takes_the_first_of_ties_and_nans() {
    // Ties in different blocks and a NaN after them: the NaN wins argmax and argmin.
    let n = 9000;
    let mut v = vec![0.0; 2 * n];
    v[100] = 5.0;
    v[6000] = 5.0;
    v[200] = -5.0;
    v[8000] = -5.0;
    v[n + 300] = 7.0;
    v[n + 7000] = f64::NAN;
    v[n + 8999] = 7.0;
    let x = tensor(DType::F32, &[2, n], &v);
    let g = "graph g(x: f32[2, 9000]) {
               a = argmax(x, axis=1)
               b = argmin(x, axis=1)
               return a, b
             }";
    check_graph(g, Some(vec![x.clone()]));
    let gr = parse("g.fg", g);
    let out = interpret(&gr, &[x]).unwrap();
    assert_eq!(out[0].to_i64(), vec![100, 7000]);
    assert_eq!(out[1].to_i64(), vec![200, 7000]);
}

#[test]
fn products_run_one_point_at_a_time() {
    check_graph(
        "graph g(x: f32[5, 300], i: i64[4, 20]) {
           p = prod(add(mul(x, 0.01), 1.0), axes=[1])
           q = prod(i, axes=[1])
           return p, q
         }",
        None,
    );
}

#[test]
fn normalizations_and_softmax() {
    check_graph(
        "graph g(x: f32[24, 96], w: f32[96], b: f32[96]) {
           a = softmax(x, axis=-1)
           c = log_softmax(x, axis=0)
           d = layer_norm(x, w, b, eps=1e-5)
           e = rms_norm(x, w, eps=1e-6)
           return a, c, d, e
         }",
        None,
    );
}

/// Rows whose programs loop over several blocks of rows, reading the affine
/// weight and bias once before the loop: 301 rows of 1000 are 151 blocks of 2
/// (what fits local memory) on 64 PEs, three per program, the last program's
/// last row masked off.
#[test]
fn row_loops_read_the_weights_once() {
    let src = "graph g(x: f32[301, 1000], w: f32[1000], b: f32[1000]) {
           d = layer_norm(x, w, b, eps=1e-5)
           e = rms_norm(x, w, eps=1e-6)
           return d, e
         }";
    check_graph(src, None);
    let g = parse("case.fg", src);
    let sim = SimProgram::compile(&program(&g, true), &Machine::mtia2i()).unwrap();
    let text = sim.kernels_text();
    assert!(text.contains("for ob in range(0, LOOPS"), "{text}");
    assert!(text.contains("o < 301"), "{text}");
}

#[test]
fn movement_ops_are_index_arithmetic() {
    check_graph(
        "graph g(x: f32[4, 6, 10], y: f32[4, 3, 10]) {
           a = permute(x, dims=[2, 0, 1])
           b = reshape(transpose(x, dim0=0, dim1=2), shape=[20, 12])
           c = expand(reshape(y, shape=[4, 3, 1, 10]), shape=[4, 3, 5, 10])
           d = slice(x, axis=2, start=1, end=9, step=3)
           e = concat(x, y, x, axis=1)
           f = pad(x, pads=[1, 2, 0, 0, 3, -2], value=-1.5)
           h = unsqueeze(squeeze(slice(x, axis=1, start=2, end=3), axes=[1]), axis=0)
           i = add(permute(pad(y, pads=[0, 0, 2, 1, 0, 0]), dims=[0, 2, 1]), 1.0)
           return a, b, c, d, e, f, h, i
         }",
        None,
    );
}

#[test]
fn gather_and_index_select_load_their_indices() {
    let ids = tensor(DType::I64, &[5], &[3.0, 0.0, 9.0, 3.0, 7.0]);
    let idx = tensor(
        DType::I32,
        &[4, 2],
        &[1.0, 0.0, 5.0, 5.0, 2.0, 3.0, 0.0, 4.0],
    );
    let table = random_inputs(&parse("t.fg", "graph t(a: f32[10, 33]) { return a }"), 3).remove(0);
    let x = random_inputs(&parse("t.fg", "graph t(a: f32[4, 6]) { return a }"), 4).remove(0);
    check_graph(
        "graph g(t: f32[10, 33], ids: i64[5], x: f32[4, 6], idx: i32[4, 2]) {
           e = index_select(t, ids, axis=0)
           c = index_select(t, ids, axis=1)
           h = gather(x, idx, axis=1)
           p = pad(index_select(t, ids, axis=0), pads=[1, 1, 0, 0])
           return e, c, h, p
         }",
        Some(vec![table, ids, x, idx]),
    );
}

#[test]
fn an_index_out_of_range_is_an_error_naming_the_kernel() {
    let g = parse(
        "g.fg",
        "graph g(t: f32[10, 8], ids: i64[3]) {
           e = index_select(t, ids, axis=0)
           return e
         }",
    );
    let t = random_inputs(&g, 1).remove(0);
    let ids = tensor(DType::I64, &[3], &[1.0, 10.0, 2.0]);
    assert!(interpret(&g, &[t.clone(), ids.clone()]).is_err());
    let sim = SimProgram::compile(&program(&g, true), &Machine::mtia2i()).unwrap();
    let err = sim.run(&[t, ids]).unwrap_err();
    assert!(
        matches!(err, Error::Sim(_)) && !err.is_internal(),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(
        err.contains("out-of-bounds") && err.contains("k0_index_select"),
        "{err}"
    );
}

#[test]
fn matmuls_tile_with_k_loops_tails_batches_and_transposes() {
    let r = check_graph(
        "graph g(a: f32[37, 300], b: f32[300, 45], c: f32[3, 17, 70], d: f32[70, 19],
                 e: f32[2, 1, 5, 8], f: f32[3, 8, 6], w: f32[45, 300], v: f32[300]) {
           p = matmul(a, b)
           q = matmul(c, d)
           r = matmul(e, f)
           s = relu(add(matmul(a, transpose(w, dim0=0, dim1=1)), 0.5))
           t = matmul(a, v)
           u = matmul(v, b)
           return p, q, r, s, t, u
         }",
        None,
    );
    assert!(r.dot_flops() > 0);
}

#[test]
fn half_precision_and_integer_matmuls() {
    check_graph(
        "graph g(a: f16[20, 130], b: f16[130, 24], c: bf16[9, 40], d: bf16[40, 7],
                 i: i32[6, 5], j: i32[5, 4]) {
           p = matmul(a, b)
           q = add(matmul(c, d), 1.0)
           r = matmul(i, j)
           return p, q, r
         }",
        None,
    );
}

#[test]
fn creation_ops() {
    check_graph(
        "graph g(x: f32[3, 8]) {
           a = arange(start=2, end=26, step=3)
           b = add(x, cast(arange(start=0, end=8), to=f32))
           c = full(shape=[2, 5], value=1.5)
           d = add(x, full(shape=[8], value=-2.0))
           e = arange(start=0.5, end=4.0, step=0.25, dtype=f32)
           return a, b, c, d, e
         }",
        None,
    );
}

/// `decompose`, then the scheduler, fused or not (skipping the optimizer keeps
/// random graphs' programs close to the graphs).
fn schedule(g: &Graph, fuse: bool) -> Program {
    let d = ferrite_passes::decompose::decompose(g).unwrap_or_else(|e| panic!("decompose: {e}"));
    let opts = if fuse {
        ScheduleOptions::default()
    } else {
        ScheduleOptions::unfused()
    };
    ferrite_passes::schedule::schedule(&d, &opts)
        .unwrap_or_else(|e| panic!("schedule: {e}"))
        .program
}

#[test]
fn random_graphs_match_the_interpreter_fused_and_unfused() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for seed in 0..1000 {
        // Every fourth graph has axes thousands long.
        let rg = ferrite_testkit::random_graph_with(seed, 6, seed % 2 == 0, seed % 4 == 3);
        let inputs = ferrite_testkit::inputs_for(&rg, seed);
        let Ok(want) = interpret(&rg.graph, &inputs) else {
            continue;
        };
        for fuse in [true, false] {
            let p = schedule(&rg.graph, fuse);
            checked += 1;
            if let Err(e) = compare(&p, &inputs, &want) {
                failures.push(format!(
                    "seed {seed} ({}):\n{}\n{e}",
                    if fuse { "fused" } else { "unfused" },
                    ferrite_ir::print(&rg.graph)
                ));
            }
        }
    }
    let (looped, dots) = LOOPS.with(|c| c.get());
    println!(
        "{checked} programs checked, {} failed; {looped} kernels looped over inner blocks, \
         {dots} GEMMs over K",
        failures.len()
    );
    // The long axes must exercise the block loops.
    assert!(looped >= 20 && dots >= 2, "{looped} {dots}");
    for f in failures.iter().take(3) {
        println!("{f}\n-----");
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} failed",
        failures.len()
    );
}

/// Reliability finding F05 (and issue 16's sweep): the simulator's `pow` gave NaN for
/// `pow(-inf, y)` and `pow(-1, +-inf)`. Every pair of special values, with a tensor
/// exponent and with literal ones, must match the interpreter (IEEE / PyTorch).
#[test]
fn pow_special_values_match_the_interpreter() {
    let inf = f64::INFINITY;
    let xs = [
        -inf,
        -2.0,
        -1.0,
        -0.5,
        -0.0,
        0.0,
        0.5,
        1.0,
        2.0,
        inf,
        f64::NAN,
    ];
    let ys = [
        -inf,
        -3.0,
        -2.5,
        -1.0,
        -0.5,
        0.0,
        0.5,
        1.0,
        2.0,
        2.5,
        3.0,
        inf,
        f64::NAN,
    ];
    let n = xs.len() * ys.len();
    let (mut x, mut y) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for &a in &xs {
        for &b in &ys {
            x.push(a);
            y.push(b);
        }
    }
    let inputs = vec![tensor(DType::F32, &[n], &x), tensor(DType::F32, &[n], &y)];
    check_graph(
        &format!(
            "graph p(x: f32[{n}], y: f32[{n}]) -> f32[{n}] {{\n  z = pow(x, y)\n  return z\n}}\n"
        ),
        Some(inputs),
    );
    for e in ["2.5", "-1.5", "3.0", "-3.0", "1e10"] {
        let inputs = vec![tensor(DType::F32, &[xs.len()], &xs)];
        check_graph(
            &format!(
                "graph p(x: f32[{}]) -> f32[{}] {{\n  z = pow(x, {e})\n  return z\n}}\n",
                xs.len(),
                xs.len()
            ),
            Some(inputs),
        );
    }
}

/// Found by the whole-pipeline fuzzer (`tests/fuzz.rs`, `pipeline`): an integer `arange`
/// whose step truncates to 0 is a constant index, and `relu`/`maximum` of it lowered to
/// `maximum(1, 0)`, which the tile checker rejects (exit 2). Constant indices are literals
/// now, folded like any constant.
#[test]
fn ops_on_a_constant_index_fold() {
    check_graph(
        "graph g(x: i32[22]) {\n  t = arange(start=1.0, end=12.0, step=0.5, dtype=i32)\n  \
         y = add(x, relu(relu(t)))\n  return y\n}",
        None,
    );
    check_graph(
        "graph g(p: bool[1, 2, 1]) {\n  t = arange(start=4.0, end=12.0, step=0.5, dtype=i32)\n  \
         y = sign(maximum(slice(where(p, t, t), axis=-2, start=-2, end=3), t))\n  return y\n}",
        None,
    );
}

/// Simulated cycles of the hand-written kernel `examples/kernels/NAME.tile` on
/// machine `m`, on `grid` with `args` (buffers in LPDDR, as `ferrite sim` places
/// them).
fn hand_written_cycles_on(
    m: &Machine,
    name: &str,
    grid: [usize; 3],
    mut args: Vec<KernelArg>,
) -> u64 {
    let (shown, src) = ferrite_testkit::tile_example_source(name);
    let k = tile::parse_and_check(&shown, &src).unwrap_or_else(|d| panic!("{d}"));
    sim::run(m, &k, grid, &mut args)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .cycles
}

/// Simulated cycles of graph `src`, fused and lowered for `m`, on inputs of zeros.
fn lowered_cycles_on(m: &Machine, src: &str) -> u64 {
    let g = parse("case.fg", src);
    let sim = SimProgram::compile(&program(&g, true), m).unwrap();
    let inputs: Vec<Tensor> = g.param_types().iter().map(Tensor::zeros).collect();
    sim.run(&inputs).unwrap().1.cycles()
}

fn zeros(shape: &[usize]) -> KernelArg {
    KernelArg::Buffer(Tensor::zeros(
        &TensorType::new(DType::F32, shape.to_vec()).unwrap(),
    ))
}

/// The "lowered <= hand-written" on both presets (mtia1's 128 KiB of
/// local memory take fewer rows per block than mtia2i's 384).
#[test]
fn lowered_kernels_are_at_least_as_fast_as_the_hand_written_examples() {
    lowered_against_hand_written(&Machine::mtia2i());
}

#[test]
fn lowered_kernels_are_at_least_as_fast_as_the_hand_written_examples_on_mtia1() {
    lowered_against_hand_written(&Machine::mtia1());
}

fn lowered_against_hand_written(mach: &Machine) {
    let hand_written_cycles =
        |name: &str, grid, args| hand_written_cycles_on(mach, name, grid, args);
    let lowered_cycles = |src: &str| lowered_cycles_on(mach, src);
    let int = |v: usize| KernelArg::Int(v as i64);
    let mut cases: Vec<(String, u64, u64)> = Vec::new();
    for s in [256, 512, 1024] {
        let hand = hand_written_cycles(
            "matmul_bias_relu",
            // The example's 128 x 64 blocks.
            [s / 128, s / 64, 1],
            vec![
                zeros(&[s, s]),
                zeros(&[s, s]),
                zeros(&[s]),
                zeros(&[s, s]),
                int(s),
                int(s),
                int(s),
            ],
        );
        let src = format!(
            "graph g(a: f32[{s}, {s}], b: f32[{s}, {s}], bias: f32[{s}]) {{\n  \
             h = matmul(a, b)\n  y = relu(add(h, bias))\n  return y\n}}\n"
        );
        cases.push((format!("matmul_bias_relu {s}"), hand, lowered_cycles(&src)));
    }
    // Rows of 1000 (not a power of two) and 1001 rows (not a multiple of
    // the hand-written kernels' 4 rows per program) are ragged: the
    // hand-written kernels pad each row to 1024 lanes and mask them, the
    // lowered ones take a block of the row's own length.
    for (m, n) in [
        (256usize, 1024usize),
        (1024, 512),
        (4096, 1024),
        (4096, 1000),
        (1001, 1000),
    ] {
        let grid = [m.div_ceil(4), 1, 1];
        let hand = hand_written_cycles(
            "softmax_rows",
            grid,
            vec![zeros(&[m, n]), zeros(&[m, n]), int(m), int(n)],
        );
        let src =
            format!("graph g(x: f32[{m}, {n}]) {{\n  y = softmax(x, axis=-1)\n  return y\n}}\n");
        cases.push((format!("softmax_rows {m}x{n}"), hand, lowered_cycles(&src)));
        let hand = hand_written_cycles(
            "layer_norm",
            grid,
            vec![
                zeros(&[m, n]),
                zeros(&[n]),
                zeros(&[n]),
                zeros(&[m, n]),
                int(m),
                int(n),
                KernelArg::Float(1e-5),
            ],
        );
        let src = format!(
            "graph g(x: f32[{m}, {n}], w: f32[{n}], b: f32[{n}]) {{\n  \
             y = layer_norm(x, w, b, eps=1e-5)\n  return y\n}}\n"
        );
        cases.push((format!("layer_norm {m}x{n}"), hand, lowered_cycles(&src)));
    }
    for n in [1usize << 16, 1 << 20, 3_000_000] {
        let hand = hand_written_cycles(
            "vector_add",
            [n.div_ceil(1024), 1, 1],
            vec![zeros(&[n]), zeros(&[n]), zeros(&[n]), int(n)],
        );
        let src =
            format!("graph g(x: f32[{n}], y: f32[{n}]) {{\n  z = add(x, y)\n  return z\n}}\n");
        cases.push((format!("vector_add {n}"), hand, lowered_cycles(&src)));
    }
    let mut slower = Vec::new();
    for (name, hand, lowered) in &cases {
        let ratio = *lowered as f64 / *hand as f64;
        println!(
            "{} {name:<24} hand-written {hand:>8} cycles, lowered {lowered:>8} ({ratio:.3}x)",
            mach.name
        );
        if lowered > hand {
            slower.push(name.as_str());
        }
    }
    assert!(
        slower.is_empty(),
        "{}: lowered slower than hand-written: {slower:?}",
        mach.name
    );
}

/// The GEMM against the hand-written example on the MTIA-1 preset too (its
/// 128 KiB of local memory take other blocks and splits than mtia2i's).
#[test]
fn lowered_gemms_beat_the_hand_written_example_on_mtia1() {
    let m = Machine::mtia1();
    for s in [256, 512, 1024] {
        let hand = hand_written_cycles_on(
            &m,
            "matmul_bias_relu",
            [s / 128, s / 64, 1],
            vec![
                zeros(&[s, s]),
                zeros(&[s, s]),
                zeros(&[s]),
                zeros(&[s, s]),
                KernelArg::Int(s as i64),
                KernelArg::Int(s as i64),
                KernelArg::Int(s as i64),
            ],
        );
        let src = format!(
            "graph g(a: f32[{s}, {s}], b: f32[{s}, {s}], bias: f32[{s}]) {{\n  \
             h = matmul(a, b)\n  y = relu(add(h, bias))\n  return y\n}}\n"
        );
        let lowered = lowered_cycles_on(&m, &src);
        let ratio = lowered as f64 / hand as f64;
        println!(
            "mtia1 matmul_bias_relu {s}: hand-written {hand}, lowered {lowered} ({ratio:.2}x)"
        );
        assert!(lowered <= hand, "{s}: lowered {ratio:.2}x hand-written");
    }
}

/// The roofline of `relu(a @ b + bias)` in f32 on `m`: the larger of the dot
/// engine's time for its flops and LPDDR's time for its operands and output.
fn gemm_roofline_cycles(m: &Machine, s: usize) -> f64 {
    let hz = m.clock_hz();
    let dot = 2.0 * (s * s * s) as f64 / (m.dot_tflops_f32 * 1e12 / hz);
    let bytes = (3 * s * s + s) as f64 * 4.0;
    let lpddr = bytes / (m.lpddr_bandwidth_gbps * 1e9 / hz);
    dot.max(lpddr)
}

#[test]
fn large_gemms_approach_the_roofline() {
    let m = Machine::mtia2i();
    // 512 reaches 60% with a staging launch and one 64 x 64 block per PE.
    // 1024 is split along K (`lower/split.rs`): the launch that multiplies the
    // first part copies the rest of the operands from LPDDR while its dot
    // engines work, and the last launch stores its blocks a chunk of rows at a
    // time while the next chunk is multiplied (see BENCHMARKS.md).
    //
    // On the MTIA-1 preset 1024 is split in two parts of 448 (69%): a second
    // part launch multiplies K [448, 896) while it copies the last 128. 512
    // cannot reach 60%. Its roofline is the dot engine's (16,777 cycles), but
    // every PE's memory port carries, one transfer after another, its share of
    // LPDDR for the operands and the output (14,300 cycles when spread over all
    // 64 PEs) and the operand tiles it multiplies from SRAM. With one 64 x 64
    // block per PE (the largest that both fills the grid and fits 128 KiB of
    // local memory) those are 16 flops per SRAM byte, exactly the dot engine's
    // rate against a PE's SRAM share, so the SRAM reads alone take the dot's
    // time, and the staging copy's SRAM writes and two launches come on top:
    // about 48% at best. Splitting K over PEs for larger blocks moves as many
    // bytes again as partial sums. 512 is held at what the lowering reaches
    // (45.5%).
    let mtia1 = Machine::mtia1();
    for (m, s, least) in [
        (&m, 512, 0.60),
        (&m, 1024, 0.60),
        (&mtia1, 512, 0.45),
        (&mtia1, 1024, 0.65),
    ] {
        let src = format!(
            "graph g(a: f32[{s}, {s}], b: f32[{s}, {s}], bias: f32[{s}]) {{\n  \
             h = matmul(a, b)\n  y = relu(add(h, bias))\n  return y\n}}\n"
        );
        let cycles = lowered_cycles_on(m, &src) as f64;
        let fraction = gemm_roofline_cycles(m, s) / cycles;
        println!(
            "{} {s}: {cycles} cycles, {:.1}% of the roofline",
            m.name,
            100.0 * fraction
        );
        assert!(
            fraction >= least,
            "{} {s}: {:.1}% of the roofline",
            m.name,
            100.0 * fraction
        );
    }
    // f16 and bf16 products run on the dot engine at the preset's f16 rate (f32
    // accumulation): the 1024^3 GEMM launch takes less than the f32 engine's
    // time for its flops alone, and the whole reaches 60% of its roofline.
    let hz = m.clock_hz();
    for d in ["f16", "bf16"] {
        let s = 1024;
        let g = parse(
            "g.fg",
            &format!("graph g(a: {d}[{s}, {s}], b: {d}[{s}, {s}]) {{\n  y = matmul(a, b)\n  return y\n}}\n"),
        );
        let sim = SimProgram::compile(&program(&g, true), &m).unwrap();
        let inputs: Vec<Tensor> = g.param_types().iter().map(Tensor::zeros).collect();
        let report = sim.run(&inputs).unwrap().1;
        let gemm = report.launches.iter().find(|l| l.dot_flops > 0).unwrap();
        let f32_dot = gemm.dot_flops as f64 / (m.dot_tflops_f32 * 1e12 / hz);
        assert!(
            (gemm.cycles as f64) < f32_dot,
            "{d}: {} cycles",
            gemm.cycles
        );
        let roofline = (2.0 * (s * s * s) as f64 / (m.dot_tflops_f16 * 1e12 / hz))
            .max((3 * s * s * 2) as f64 / (m.lpddr_bandwidth_gbps * 1e9 / hz));
        let fraction = roofline / report.cycles() as f64;
        println!(
            "{d} {s}: {} cycles, {:.1}% of the roofline",
            report.cycles(),
            100.0 * fraction
        );
        assert!(
            fraction >= 0.6,
            "{d}: {:.1}% of the roofline",
            100.0 * fraction
        );
    }
}

#[test]
fn gemms_split_along_k_give_the_interpreters_results() {
    // Square, ragged (no side a multiple of a block or of a copy's chunk) and
    // with a transposed rhs: each is split, and matches the interpreter.
    for src in [
        "graph g(a: f32[1024, 1024], b: f32[1024, 1024], bias: f32[1024]) {\n  \
         h = matmul(a, b)\n  y = relu(add(h, bias))\n  return y\n}\n",
        "graph g(a: f32[1000, 1100], b: f32[1100, 900], bias: f32[900]) {\n  \
         h = matmul(a, b)\n  y = relu(add(h, bias))\n  return y\n}\n",
        "graph g(a: f32[777, 1024], w: f32[1030, 1024]) {\n  \
         y = matmul(a, transpose(w, dim0=0, dim1=1))\n  return y\n}\n",
    ] {
        let report = check_graph(src, None);
        assert!(
            report.launches.iter().any(|l| l.kernel.ends_with("_part")),
            "{src}: not split\n{report}"
        );
    }
}

#[test]
fn staged_gemm_operands_give_the_interpreters_results() {
    // 256 x 256 operands in LPDDR are read by many programs: both are staged,
    // and a batched product with a broadcast weight stages the weight.
    let report = check_graph(
        "graph g(a: f32[256, 192], b: f32[192, 320], bias: f32[320]) {\n  \
         h = matmul(a, b)\n  y = relu(add(h, bias))\n  return y\n}\n",
        None,
    );
    assert!(
        report.launches.iter().any(|l| l.kernel.ends_with("_stage")),
        "{report}"
    );
    check_graph(
        "graph g(a: f32[4, 200, 96], w: f32[96, 300]) {\n  y = matmul(a, w)\n  return y\n}\n",
        None,
    );
}

#[test]
fn every_example_runs_on_both_presets() {
    for machine in [Machine::mtia2i(), Machine::mtia1()] {
        for name in [
            "softmax_rows",
            "layer_norm_rows",
            "pointwise_chain",
            "mlp",
            "embedding",
            "llama_mlp",
            "attention",
            "transformer_block",
        ] {
            let g = ferrite_testkit::example_graph(name);
            let inputs = random_inputs(&g, 3);
            let want = interpret(&g, &inputs).unwrap();
            let sim = SimProgram::compile(&program(&g, true), &machine).unwrap();
            let (got, report) = sim.run(&inputs).unwrap();
            for (a, e) in got.iter().zip(&want) {
                let scale = e
                    .to_f64()
                    .iter()
                    .filter(|v| v.is_finite())
                    .fold(0.0f64, |m, v| m.max(v.abs()));
                let tol = rtol(e.ty.dtype);
                a.check_close(e, tol, tol * scale.max(1.0))
                    .unwrap_or_else(|m| panic!("{name} on {}: {m}", machine.name));
            }
            assert!(report.launches.iter().all(|l| l.machine == machine.name));
            println!(
                "{name:<18} on {:<7} {:>8} cycles",
                machine.name,
                report.cycles()
            );
        }
    }
}

#[test]
fn the_autotuner_never_loses_to_the_model_and_caches_what_it_found() {
    use ferrite_accel::tune::{Stop, TuneOptions};
    let m = Machine::mtia2i();
    let dir = std::env::temp_dir().join(format!("ferrite-autotune-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let g = parse(
        "g.fg",
        "graph g(a: f32[256, 192], b: f32[192, 320], bias: f32[320]) {\n  \
         h = matmul(a, b)\n  y = relu(add(h, bias))\n  return y\n}\n",
    );
    let p = program(&g, true);
    let zeros: Vec<Tensor> = g.param_types().iter().map(Tensor::zeros).collect();
    let opts = TuneOptions {
        cache_dir: Some(dir.clone()),
        ..TuneOptions::default()
    };
    let tuned = |opts: &TuneOptions, m: &Machine| {
        SimProgram::compile_tuned(&p, m, Intermediates::default(), Some(opts)).unwrap()
    };
    let (sim, tunings) = tuned(&opts, &m);
    assert_eq!(tunings.len(), 1, "one GEMM kernel");
    let t = &tunings[0];
    println!("{t}");
    assert!(t.best_cycles <= t.model_cycles, "{t}");
    assert_eq!(
        t.tried[0].choice, t.model,
        "the model's choice is tried first"
    );
    assert!(t.tried.len() >= 2 && t.tried.len() <= opts.budget, "{t}");
    assert_ne!(t.stop, Stop::Cached);
    // The program runs the best choice: its simulated cycles are the best's.
    assert_eq!(sim.run(&zeros).unwrap().1.cycles(), t.best_cycles);
    // The second compile reads the cache and simulates nothing.
    let (_, again) = tuned(&opts, &m);
    assert_eq!(again[0].stop, Stop::Cached);
    assert_eq!(
        (again[0].best, again[0].best_cycles),
        (t.best, t.best_cycles)
    );
    // Another machine is another signature.
    let (_, other) = tuned(&opts, &Machine::mtia1());
    assert_ne!(other[0].stop, Stop::Cached);
    // A damaged cache file is tuned again, and rewritten.
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in &files {
        std::fs::write(f.path(), "ferrite-autotune 1\nbest 3 nonsense\n").unwrap();
    }
    let (_, fresh) = tuned(&opts, &m);
    assert_ne!(fresh[0].stop, Stop::Cached);
    assert_eq!(fresh[0].best, t.best);
    // A budget of one simulation keeps the model's choice.
    let one = TuneOptions {
        budget: 1,
        cache_dir: None,
        ..TuneOptions::default()
    };
    let (_, single) = tuned(&one, &m);
    assert_eq!((single[0].tried.len(), single[0].stop), (1, Stop::Budget));
    assert_eq!(single[0].best, single[0].model);
    // A work budget too small to simulate even the model's choice tunes
    // nothing: the kernel keeps the model's choice.
    let starved = TuneOptions {
        work: 1000,
        cache_dir: None,
        ..TuneOptions::default()
    };
    let (sim, none) = tuned(&starved, &m);
    assert!(none.is_empty());
    assert_eq!(sim.run(&zeros).unwrap().1.cycles(), t.model_cycles);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_row_blocks_per_program_defer_the_first_store_and_compute_the_same() {
    use ferrite_accel::tune::{Stop, TuneOptions};
    // Ragged M, N and K: masks on rows, columns and the K tail. The choice is
    // forced through the autotuner's cache: a file naming it as the best.
    let dir = std::env::temp_dir().join(format!("ferrite-rows-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let g = parse(
        "g.fg",
        "graph g(a: f32[300, 200], b: f32[200, 260], bias: f32[260]) {\n  \
         h = matmul(a, b)\n  y = relu(add(h, bias))\n  return y\n}\n",
    );
    let p = program(&g, true);
    let m = Machine::mtia2i();
    let opts = TuneOptions {
        cache_dir: Some(dir.clone()),
        budget: 1,
        ..TuneOptions::default()
    };
    let compile = || SimProgram::compile_tuned(&p, &m, Intermediates::default(), Some(&opts));
    compile().unwrap();
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    std::fs::write(
        &file,
        "ferrite-autotune 4\nbest 32 64 16 1 1 2 0 1\nmodel 1\n",
    )
    .unwrap();
    let (sim, t) = compile().unwrap();
    assert_eq!(t[0].stop, Stop::Cached);
    assert_eq!(t[0].best.rows, 2);
    let text = sim.kernels_text();
    assert!(text.contains("2 row blocks per program"), "{text}");
    assert!(text.contains("store(sp, sv, "), "{text}");
    let inputs = random_inputs(&g, 5);
    let want = interpret(&g, &inputs).unwrap();
    let (got, _) = sim.run(&inputs).unwrap();
    got[0]
        .check_close(&want[0], 1e-4, 1e-4)
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    // The same GEMM split along K (the model would not split one this small):
    // ragged blocks, shares and chunks, and the same result. After 112 (more
    // than half of K = 200) one part launch multiplies K [0, 112); after 96,
    // two, K [0, 96) and [96, 192), the second on top of the first's partial
    // sums; after 64, three; the final launch finishes the rest (88, 8, 8).
    for (split, launches) in [(112, 3), (96, 4), (64, 5)] {
        std::fs::write(
            &file,
            format!("ferrite-autotune 4\nbest 64 64 16 1 1 1 {split} 1\nmodel 1\n"),
        )
        .unwrap();
        let (sim, t) = compile().unwrap();
        assert_eq!((t[0].stop, t[0].best.split), (Stop::Cached, split));
        let text = sim.kernels_text();
        assert!(text.contains(&format!("split after K {split}")), "{text}");
        let (got, report) = sim.run(&inputs).unwrap();
        assert_eq!(report.launches.len(), launches, "{report}");
        got[0]
            .check_close(&want[0], 1e-4, 1e-4)
            .unwrap_or_else(|e| panic!("{split}: {e}\n{text}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gemms_that_share_their_lhs_run_as_one_launch() {
    // A transformer's q, k and v projections of one activation, each with an
    // epilogue of its own: three GEMM kernels in the loop IR, one launch whose
    // programs copy each slice of `x` once for all three.
    let g = parse(
        "g.fg",
        "graph g(x: f32[64, 256], wq: f32[256, 256], wk: f32[256, 256], wv: f32[256, 256], \
         bv: f32[256]) {\n  \
         q = matmul(x, wq)\n  k = relu(matmul(x, wk))\n  v = add(matmul(x, wv), bv)\n  \
         return q, k, v\n}\n",
    );
    let p = program(&g, true);
    let gemms = p.kernels.iter().filter(|k| k.gemm.is_some()).count();
    assert_eq!(gemms, 3, "{p}");
    let groups = ferrite_accel::lower::lhs_groups(&p);
    assert!(groups.iter().any(|r| r.len() == 3), "{groups:?}\n{p}");
    let m = Machine::mtia2i();
    let inputs = random_inputs(&g, 3);
    let want = interpret(&g, &inputs).unwrap();
    let run = |group: bool| {
        let (sim, _) =
            SimProgram::compile_grouped(&p, &m, Intermediates::default(), None, group).unwrap();
        let (got, report) = sim.run(&inputs).unwrap();
        for (i, (a, e)) in got.iter().zip(&want).enumerate() {
            a.check_close(e, 1e-4, 1e-4)
                .unwrap_or_else(|err| panic!("output {i}: {err}\n{}", sim.kernels_text()));
        }
        (sim, report)
    };
    let (grouped, one) = run(true);
    let (_, three) = run(false);
    let text = grouped.kernels_text();
    assert!(text.contains("3 GEMMs sharing their lhs"), "{text}");
    // Kernel launches (a staging launch that copies operands to SRAM aside).
    let kernels = |r: &DeviceReport| {
        r.launches
            .iter()
            .filter(|l| !l.kernel.ends_with("_stage"))
            .count()
    };
    assert_eq!((kernels(&one), kernels(&three)), (1, 3), "{text}");
    let merged: Vec<usize> = (0..p.kernels.len())
        .filter(|&i| grouped.merged_into(i).is_some())
        .collect();
    assert_eq!(merged.len(), 2, "{text}");
    // Two launch overheads fewer, and `x` read once per block instead of thrice.
    println!(
        "one launch: {} cycles, {} SRAM+LPDDR B; three: {} cycles, {} B",
        one.cycles(),
        one.bytes().lpddr() + one.bytes().sram(),
        three.cycles(),
        three.bytes().lpddr() + three.bytes().sram()
    );
    assert!(
        one.cycles() < three.cycles(),
        "{} >= {}",
        one.cycles(),
        three.cycles()
    );
    assert!(
        one.bytes().lpddr() + one.bytes().sram() < three.bytes().lpddr() + three.bytes().sram()
    );
    // Ragged M, N and K (masks on rows, columns and the K tail), a transposed
    // rhs, and a larger product, which the model may give two row blocks per
    // program (their stores deferred into the next block's K loop, for both).
    let ragged = parse(
        "r.fg",
        "graph r(x: f32[300, 200], w1: f32[200, 260], w2: f32[260, 200]) {\n  \
         a = matmul(x, w1)\n  b = tanh(matmul(x, transpose(w2, dim0=0, dim1=1)))\n  \
         return a, b\n}\n",
    );
    let pr = program(&ragged, true);
    assert!(
        ferrite_accel::lower::lhs_groups(&pr)
            .iter()
            .any(|r| r.len() == 2),
        "{pr}"
    );
    let inputs = random_inputs(&ragged, 9);
    let want = interpret(&ragged, &inputs).unwrap();
    compare(&pr, &inputs, &want).unwrap();
    // GEMMs that depend on each other, or read different left operands, stay
    // apart: `y` reads `h`.
    let chain = parse(
        "c.fg",
        "graph c(x: f32[64, 256], w1: f32[256, 256], w2: f32[256, 256], w3: f32[256, 256]) {\n  \
         h = matmul(x, w1)\n  y = matmul(h, w2)\n  z = matmul(y, w3)\n  return h, z\n}\n",
    );
    let pc = program(&chain, true);
    let groups = ferrite_accel::lower::lhs_groups(&pc);
    assert!(groups.iter().all(|r| r.len() == 1), "{groups:?}\n{pc}");
}
