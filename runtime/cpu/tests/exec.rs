//! The CPU executor's guarantees: run-time checks become errors, generated functions
//! verify, unprovable accesses do not compile, threads never race, storage reuse never
//! leaks stale data, and the program can run from many threads at once.

mod support;
use support::*;

use ferrite_cpu::emit::{define_kernel, kernel_function};
use ferrite_cpu::CodegenOptions;
use ferrite_cpu::{CpuOptions, CpuProgram, Jit};
use ferrite_ir::loops::*;
use ferrite_ir::types::TensorType;
use ferrite_ir::{DType, Tensor};

#[test]
fn out_of_range_gather_indices_are_errors() {
    let g = graph("graph e(table: f32[10, 37], ids: i64[5]) -> f32[5, 37] {\n  y = index_select(table, ids, axis=0)\n  return y\n}\n");
    let table = Tensor::random(&g.param_types()[0], 1);
    for bad in [10i64, -1, i64::MAX, i64::MIN] {
        let ids = Tensor::from_i64(&g.param_types()[1], &[0, 3, bad, 9, 1]);
        let inputs = vec![table.clone(), ids];
        assert!(ferrite_ir::interpret(&g, &inputs).is_err());
        for fuse in [true, false] {
            let p = schedule(&g, fuse);
            for threads in [1, 2] {
                let c = CpuProgram::compile(&p, &CpuOptions::with_threads(threads)).unwrap();
                let err = c.run(&inputs).unwrap_err();
                assert!(err.to_string().contains("out of range"), "{err}");
            }
        }
    }
    // gather (take_along_dim) with an index past the axis.
    let g = graph("graph e(x: f32[4, 6], ids: i64[4, 6]) -> f32[4, 6] {\n  y = gather(x, ids, axis=1)\n  return y\n}\n");
    let mut ids = vec![0i64; 24];
    ids[17] = 6;
    let inputs = vec![
        Tensor::random(&g.param_types()[0], 2),
        Tensor::from_i64(&g.param_types()[1], &ids),
    ];
    let c = CpuProgram::compile(&schedule(&g, true), &CpuOptions::with_threads(2)).unwrap();
    assert!(c
        .run(&inputs)
        .unwrap_err()
        .to_string()
        .contains("out of range"));
}

#[test]
fn every_generated_function_verifies() {
    let jit = Jit::new().unwrap();
    let mut count = 0;
    for name in example_names() {
        for fuse in [true, false] {
            let p = schedule(&example(&name), fuse);
            for k in &p.kernels {
                for (vectorize, stash) in [(true, true), (false, true), (true, false)] {
                    let opts = CodegenOptions {
                        vectorize,
                        unroll: 4,
                        stash,
                        ..CodegenOptions::default()
                    };
                    let (func, _) = kernel_function(&jit, "k", &p.buffers, k, &opts)
                        .unwrap_or_else(|e| panic!("{name} {}: {e}", k.name));
                    cranelift_codegen::verify_function(&func, jit.isa())
                        .unwrap_or_else(|e| panic!("{name} {}: {e}", k.name));
                    count += 1;
                }
            }
        }
    }
    assert!(count > 50, "{count}");
}

fn buffer(id: u32, kind: BufferKind, dtype: DType, shape: &[usize]) -> Buffer {
    Buffer {
        id: BufferId(id),
        ty: TensorType::new(dtype, shape.to_vec()).unwrap(),
        kind,
        name: format!("b{id}"),
    }
}

fn store_kernel(
    name: &str,
    domain: Vec<usize>,
    body: Block,
    buffer: u32,
    index: IndexExpr,
    value: ExprRef,
) -> Kernel {
    Kernel {
        id: KernelId(0),
        name: name.into(),
        nodes: vec![],
        domain,
        stages: vec![Stage::Store {
            domain: vec![],
            body,
            stores: vec![StoreOp {
                buffer: BufferId(buffer),
                index,
                value,
            }],
        }],
        gemm: None,
        reads: vec![],
        writes: vec![],
    }
}

fn load(body: &mut Block, buffer: u32, index: IndexExpr) -> ExprRef {
    body.push(ExprNode {
        dtype: DType::F32,
        op: ExprOp::Load(Load {
            buffer: BufferId(buffer),
            index,
            guard: vec![],
            other: Value::Float(0.0),
        }),
    })
}

fn finish(
    name: &str,
    buffers: Vec<Buffer>,
    mut kernels: Vec<Kernel>,
    inputs: Vec<BufferId>,
    outputs: Vec<BufferId>,
) -> Program {
    for (i, k) in kernels.iter_mut().enumerate() {
        k.id = KernelId(i as u32);
        (k.reads, k.writes) = k.compute_accesses(&buffers);
    }
    let p = Program {
        name: name.into(),
        buffers,
        inputs,
        outputs,
        kernels,
        constants: vec![],
        donated: vec![],
    };
    p.verify().unwrap();
    p
}

#[test]
fn unprovable_accesses_do_not_compile() {
    // x[i0 + 1] over i0 in 0..8 reads past an 8-element buffer: the program verifier
    // rejects it, and so does the code generator on its own.
    let buffers = vec![
        buffer(0, BufferKind::Input(0), DType::F32, &[8]),
        buffer(1, BufferKind::Output(0), DType::F32, &[8]),
    ];
    let i0 = IndexExpr::Var(Var::outer(0));
    let mut body = Block::default();
    let v = load(&mut body, 0, i0.clone() + IndexExpr::Const(1));
    let k = store_kernel("shift", vec![8], body, 1, i0.clone(), v);
    let mut jit = Jit::new().unwrap();
    let err =
        define_kernel(&mut jit, "shift", &buffers, &k, &CodegenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("cannot prove"), "{err}");
    // The same for a store.
    let mut body = Block::default();
    let v = load(&mut body, 0, i0.clone());
    let k = store_kernel("shift", vec![8], body, 1, i0 * 2, v);
    let err =
        define_kernel(&mut jit, "shift2", &buffers, &k, &CodegenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("cannot prove"), "{err}");
}

#[test]
fn kernels_whose_points_overlap_run_on_one_thread() {
    // Every outer point writes element i0 // 4: the last write of each group wins, so
    // the result is only right if the points run in order.
    let buffers = vec![
        buffer(0, BufferKind::Input(0), DType::F32, &[4096]),
        buffer(1, BufferKind::Output(0), DType::F32, &[1024]),
    ];
    let i0 = IndexExpr::Var(Var::outer(0));
    let mut body = Block::default();
    let v = load(&mut body, 0, i0.clone());
    let k = store_kernel("overlap", vec![4096], body, 1, i0.floor_div(4), v);
    let p = finish(
        "overlap",
        buffers,
        vec![k],
        vec![BufferId(0)],
        vec![BufferId(1)],
    );
    let x = Tensor::random(&p.buffers[0].ty, 3);
    let want = evaluate(&p, std::slice::from_ref(&x)).unwrap();
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap();
    assert!(!c.kernel_info(0).unwrap().parallel);
    assert!(c.report().contains("one thread"), "{}", c.report());
    for _ in 0..20 {
        assert_eq!(c.run(std::slice::from_ref(&x)).unwrap(), want);
    }
}

#[test]
fn partially_written_buffers_start_at_zero_on_every_run() {
    // k0 fills an intermediate t with x, k1 copies t out; k2 writes only the even
    // elements of a second intermediate u of the same size after t is dead (so u may
    // share t's storage, which then holds x), and k3 copies u out: its odd elements must
    // read as 0, as in the evaluator, on every run.
    let buffers = vec![
        buffer(0, BufferKind::Input(0), DType::F32, &[128]),
        buffer(1, BufferKind::Input(1), DType::F32, &[64]),
        buffer(2, BufferKind::Intermediate, DType::F32, &[128]),
        buffer(3, BufferKind::Output(0), DType::F32, &[128]),
        buffer(4, BufferKind::Intermediate, DType::F32, &[128]),
        buffer(5, BufferKind::Output(1), DType::F32, &[128]),
    ];
    let i0 = IndexExpr::Var(Var::outer(0));
    let copy = |from: u32, to: u32, n: usize, scale: i64| {
        let mut body = Block::default();
        let v = load(&mut body, from, i0.clone());
        store_kernel("copy", vec![n], body, to, i0.clone() * scale, v)
    };
    let kernels = vec![
        copy(0, 2, 128, 1),
        copy(2, 3, 128, 1),
        copy(1, 4, 64, 2),
        copy(4, 5, 128, 1),
    ];
    let p = finish(
        "partial",
        buffers,
        kernels,
        vec![BufferId(0), BufferId(1)],
        vec![BufferId(3), BufferId(5)],
    );
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap();
    for seed in 0..3 {
        let inputs: Vec<Tensor> = (0..2)
            .map(|i| Tensor::random(&p.buffers[i].ty, seed * 2 + i as u64))
            .collect();
        let want = evaluate(&p, &inputs).unwrap();
        let got = c.run(&inputs).unwrap();
        assert_eq!(got, want);
        assert!(got[1].to_f64().iter().skip(1).step_by(2).all(|&v| v == 0.0));
    }
}

/// A buffer written by several stores of one kernel (an im2col's taps, a pad's interior
/// and borders, which overlap at the corners) is not zeroed first when the stores'
/// elements cover it, and still is when they leave a gap (`u[2i]` and `u[2i + 2]` never
/// write the odd elements).
#[test]
fn buffers_tiled_by_several_stores_are_not_zeroed_first() {
    let buffers = vec![
        buffer(0, BufferKind::Input(0), DType::F32, &[64]),
        buffer(1, BufferKind::Intermediate, DType::F32, &[128]),
        buffer(2, BufferKind::Output(0), DType::F32, &[128]),
        buffer(3, BufferKind::Intermediate, DType::F32, &[130]),
        buffer(4, BufferKind::Output(1), DType::F32, &[130]),
    ];
    let i0 = IndexExpr::Var(Var::outer(0));
    let two_stores = |to: u32, second: i64| {
        let mut body = Block::default();
        let v = load(&mut body, 0, i0.clone());
        let mut k = store_kernel("pieces", vec![64], body, to, i0.clone() * 2, v);
        let Stage::Store { stores, .. } = &mut k.stages[0] else {
            unreachable!()
        };
        stores.push(StoreOp {
            buffer: BufferId(to),
            index: i0.clone() * 2 + IndexExpr::Const(second),
            value: v,
        });
        k
    };
    let copy = |from: u32, to: u32, n: usize| {
        let mut body = Block::default();
        let v = load(&mut body, from, i0.clone());
        store_kernel("copy", vec![n], body, to, i0.clone(), v)
    };
    let kernels = vec![
        two_stores(1, 1),
        copy(1, 2, 128),
        two_stores(3, 2),
        copy(3, 4, 130),
    ];
    let p = finish(
        "pieces",
        buffers,
        kernels,
        vec![BufferId(0)],
        vec![BufferId(2), BufferId(4)],
    );
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap();
    let report = c.report();
    assert!(!report.contains("zeroes buf1"), "{report}");
    assert!(report.contains("zeroes buf3"), "{report}");
    for seed in 0..3 {
        let x = Tensor::random(&p.buffers[0].ty, seed);
        let want = evaluate(&p, std::slice::from_ref(&x)).unwrap();
        assert_eq!(c.run(std::slice::from_ref(&x)).unwrap(), want);
    }
}

/// A 3x3 convolution's im2col and a 7x7 one's stored pad and im2col are written whole by
/// their kernels, so nothing is zeroed before them, and runs with other inputs after the storage held other
/// values still match the interpreter.
#[test]
fn a_convolutions_pad_and_im2col_are_not_zeroed() {
    let g = graph(
        "graph c(x: f32[1, 8, 20, 20], w: f32[16, 8, 3, 3], v: f32[4, 16, 7, 7]) {\n  \
         y = conv(x, w, padding=[1, 1, 1, 1])\n  \
         z = conv(y, v, stride=[2, 2], padding=[3, 3, 3, 3])\n  return z\n}\n",
    );
    let p = schedule(&g, true);
    for threads in [1, 2] {
        let c = CpuProgram::compile(&p, &CpuOptions::with_threads(threads)).unwrap();
        let report = c.report();
        assert!(!report.contains("zeroes"), "{report}");
        for seed in 0..3 {
            let inputs: Vec<Tensor> = g
                .param_types()
                .iter()
                .enumerate()
                .map(|(i, ty)| Tensor::random(ty, seed * 2 + i as u64))
                .collect();
            let want = ferrite_ir::interpret(&g, &inputs).unwrap();
            let got = c.run(&inputs).unwrap();
            let (rtol, atol) = tolerance(DType::F32);
            for (a, b) in got[0].to_f64().iter().zip(want[0].to_f64()) {
                assert!((a - b).abs() <= atol + rtol * b.abs(), "{a} vs {b}");
            }
        }
    }
}

#[test]
fn runs_concurrently_from_many_threads() {
    let g = example("softmax_rows");
    let p = schedule(&g, true);
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap();
    std::thread::scope(|s| {
        for seed in 0..4u64 {
            let c = &c;
            let g = &g;
            s.spawn(move || {
                let inputs: Vec<Tensor> = g
                    .param_types()
                    .iter()
                    .map(|ty| Tensor::random(ty, seed))
                    .collect();
                let want = ferrite_ir::interpret(g, &inputs).unwrap();
                for _ in 0..10 {
                    let got = c.run(&inputs).unwrap();
                    got[0].check_close(&want[0], 1e-4, 1e-5).unwrap();
                }
            });
        }
    });
}

#[test]
fn inputs_are_checked() {
    let g = example("mlp");
    let p = schedule(&g, true);
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(1)).unwrap();
    let mut inputs = random_inputs(&g);
    assert!(c
        .run(&inputs[1..])
        .unwrap_err()
        .to_string()
        .contains("inputs"));
    inputs[0] = Tensor::random(&TensorType::new(DType::F32, vec![64, 785]).unwrap(), 0);
    assert!(c.run(&inputs).unwrap_err().to_string().contains("expects"));
    inputs[0] = Tensor::random(&TensorType::new(DType::F16, vec![64, 784]).unwrap(), 0);
    assert!(c.run(&inputs).unwrap_err().to_string().contains("expects"));
}

#[test]
fn profiles_and_dumps_name_every_kernel() {
    let g = example("layer_norm_rows");
    let p = schedule(&g, false);
    let mut opts = CpuOptions::with_threads(1);
    opts.capture_dumps = true;
    let c = CpuProgram::compile(&p, &opts).unwrap();
    let (out, timings) = c.run_profiled(&random_inputs(&g)).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(timings.len(), p.kernels.len());
    let dump = c.dump();
    for (t, k) in timings.iter().zip(&p.kernels) {
        assert_eq!(t.name, k.name);
        assert_eq!(t.bytes, k.bytes_moved());
        assert!(dump.contains(&format!("==== {}", k.name)));
    }
    assert!(
        dump.contains("-- clif") && dump.contains("-- machine code"),
        "{dump}"
    );
    assert!(c.disassembly(0).is_some_and(|d| d.contains("ret")));
}

#[test]
fn malformed_kernels_are_errors_not_panics() {
    let buffers = vec![
        buffer(0, BufferKind::Input(0), DType::F32, &[8]),
        buffer(1, BufferKind::Output(0), DType::F32, &[8]),
    ];
    let i0 = IndexExpr::Var(Var::outer(0));
    let mut jit = Jit::new().unwrap();
    let opts = CodegenOptions::default();
    // A store of a node that does not exist.
    let mut body = Block::default();
    load(&mut body, 0, i0.clone());
    let k = store_kernel("bad", vec![8], body.clone(), 1, i0.clone(), ExprRef(5));
    assert!(define_kernel(&mut jit, "bad", &buffers, &k, &opts).is_err());
    // A node using a later one.
    let mut body = Block::default();
    let x = load(&mut body, 0, i0.clone());
    let y = body.push(ExprNode {
        dtype: DType::F32,
        op: ExprOp::Unary(ferrite_ir::UnaryOp::Neg, ExprRef(2)),
    });
    body.push(ExprNode {
        dtype: DType::F32,
        op: ExprOp::Binary(ferrite_ir::BinaryOp::Add, x, y),
    });
    let k = store_kernel("bad2", vec![8], body, 1, i0.clone(), y);
    assert!(define_kernel(&mut jit, "bad2", &buffers, &k, &opts).is_err());
    // Mismatched dtypes fail Cranelift's verifier: an error too.
    let mut body = Block::default();
    let x = load(&mut body, 0, i0.clone());
    let c = body.push(ExprNode {
        dtype: DType::I32,
        op: ExprOp::Const(Value::Int(1)),
    });
    let s = body.push(ExprNode {
        dtype: DType::F32,
        op: ExprOp::Binary(ferrite_ir::BinaryOp::Add, x, c),
    });
    let k = store_kernel("bad3", vec![8], body, 1, i0.clone(), s);
    assert!(define_kernel(&mut jit, "bad3", &buffers, &k, &opts).is_err());
    // An empty domain compiles to a function that does nothing.
    let mut body = Block::default();
    let x = load(&mut body, 0, i0.clone());
    let k = store_kernel("empty", vec![0], body, 1, i0, x);
    define_kernel(&mut jit, "empty", &buffers, &k, &opts).unwrap();
}

#[test]
fn profiled_runs_report_each_workers_chunks() {
    // A copy of 4 Mi elements is parallel and large enough to be cut into several chunks.
    let p = pointwise_program("copy", 1 << 22, |_, v| v);
    let x = Tensor::random(&p.buffers[0].ty, 5);
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap();
    assert!(c.kernel_info(0).unwrap().parallel);
    let mut saw_both = false;
    // On a busy machine the worker may wake too late to claim a chunk in one run; the
    // per-run properties must hold every time, and some run must use both threads.
    for _ in 0..50 {
        let begin = std::time::Instant::now();
        let (out, timings) = c.run_profiled(std::slice::from_ref(&x)).unwrap();
        let wall = begin.elapsed();
        assert_eq!(out[0], x);
        assert_eq!(timings.len(), 1);
        let t = &timings[0];
        assert!(t.start + t.duration <= wall, "{t:?} in {wall:?}");
        let mut chunks: Vec<usize> = t.spans.iter().map(|s| s.chunk).collect();
        chunks.sort_unstable();
        assert!(chunks.len() > 1, "{t:?}");
        assert_eq!(chunks, (0..chunks.len()).collect::<Vec<_>>(), "{t:?}");
        for w in 0..2 {
            let mut mine: Vec<_> = t.spans.iter().filter(|s| s.worker == w).collect();
            mine.sort_by_key(|s| s.start);
            for s in &mine {
                // Every chunk lies inside the kernel's own interval.
                assert!(s.start >= t.start, "{s:?} before {t:?}");
                assert!(
                    s.start + s.duration <= t.start + t.duration,
                    "{s:?} after {t:?}"
                );
            }
            for pair in mine.windows(2) {
                assert!(
                    pair[0].start + pair[0].duration <= pair[1].start,
                    "worker {w} overlaps itself: {pair:?}"
                );
            }
        }
        assert!(t.spans.iter().all(|s| s.worker < 2), "{t:?}");
        let workers: std::collections::HashSet<usize> = t.spans.iter().map(|s| s.worker).collect();
        saw_both |= workers.len() == 2;
        if saw_both {
            break;
        }
    }
    assert!(saw_both, "no profiled run used both threads");
}

/// A program of one parallel kernel over `n` points, `out[i0] = f(x[i0])`, with `f` the
/// nodes `value` adds after the load.
fn pointwise_program(
    name: &str,
    n: usize,
    value: impl FnOnce(&mut Block, ExprRef) -> ExprRef,
) -> Program {
    let buffers = vec![
        buffer(0, BufferKind::Input(0), DType::F32, &[n]),
        buffer(1, BufferKind::Output(0), DType::F32, &[n]),
    ];
    let i0 = IndexExpr::Var(Var::outer(0));
    let mut body = Block::default();
    let x = load(&mut body, 0, i0.clone());
    let v = value(&mut body, x);
    let k = store_kernel(name, vec![n], body, 1, i0, v);
    finish(name, buffers, vec![k], vec![BufferId(0)], vec![BufferId(1)])
}

/// A parallel kernel with less work than `MIN_PARALLEL_WORK` runs on the calling thread
/// in one chunk (waking the team would cost more than the kernel); one just above it is
/// cut into chunks for the team.
#[test]
fn small_kernels_run_on_the_calling_thread() {
    use ferrite_cpu::exec::MIN_PARALLEL_WORK;
    for (n, split) in [
        (MIN_PARALLEL_WORK - 1, false),
        (2 * MIN_PARALLEL_WORK, true),
    ] {
        let p = pointwise_program("copy", n, |_, v| v);
        let x = Tensor::random(&p.buffers[0].ty, 5);
        let c = CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap();
        assert!(c.kernel_info(0).unwrap().parallel);
        for _ in 0..5 {
            let (out, timings) = c.run_profiled(std::slice::from_ref(&x)).unwrap();
            assert_eq!(out[0], x);
            let spans = &timings[0].spans;
            if split {
                assert!(spans.len() > 1, "{n} points: {spans:?}");
            } else {
                assert_eq!(spans.len(), 1, "{n} points: {spans:?}");
                assert_eq!(spans[0].worker, 0, "{n} points: {spans:?}");
            }
        }
    }
}

/// A parallel kernel below `MIN_PARALLEL_WORK` iterations whose iterations are costly
/// (here 64 rounds of `exp(sin(x))` each, about a millisecond in all) runs on the calling
/// thread while its first `SERIAL_SAMPLES` runs time it, then in chunks on the team, with
/// the same bits.
#[test]
fn costly_small_kernels_go_to_the_team_once_timed() {
    use ferrite_cpu::exec::{MIN_PARALLEL_WORK, SERIAL_SAMPLES};
    use ferrite_ir::UnaryOp;
    let p = pointwise_program("costly", MIN_PARALLEL_WORK / 2, |body, mut v| {
        for _ in 0..64 {
            for op in [UnaryOp::Sin, UnaryOp::Exp] {
                v = body.push(ExprNode {
                    dtype: DType::F32,
                    op: ExprOp::Unary(op, v),
                });
            }
        }
        v
    });
    let x = Tensor::random(&p.buffers[0].ty, 5);
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap();
    assert!(c.kernel_info(0).unwrap().parallel);
    let mut first = None;
    for run in 0..SERIAL_SAMPLES as usize + 3 {
        let (out, timings) = c.run_profiled(std::slice::from_ref(&x)).unwrap();
        let want = first.get_or_insert_with(|| out[0].clone());
        assert_eq!(&out[0], want, "run {run}");
        let spans = &timings[0].spans;
        if run < SERIAL_SAMPLES as usize {
            assert_eq!(spans.len(), 1, "run {run}: {spans:?}");
            assert_eq!(spans[0].worker, 0, "run {run}: {spans:?}");
        } else {
            assert!(spans.len() > 1, "run {run}: {spans:?}");
        }
    }
}

/// Rewrites that reorder outer points (lanes across the last outer axis, transpose tiles)
/// keep out of kernels whose points write the same elements, where the order decides the
/// result: here points `i0` and `i0 + 1` both write `out[i0 + j0 + 1]` (a store stage
/// over `j0` reading `x[j0*16 + i0]`, strided inner and contiguous outer: lanes would
/// apply), and a pointwise kernel reading `x^T` whose anti-diagonals write one element.
#[test]
fn reordering_rewrites_keep_out_of_overlapping_kernels() {
    let i0 = || IndexExpr::Var(Var::outer(0));
    let j0 = IndexExpr::Var(Var::store(0));
    let buffers = vec![
        buffer(0, BufferKind::Input(0), DType::F32, &[64]),
        buffer(1, BufferKind::Output(0), DType::F32, &[20]),
    ];
    let mut body = Block::default();
    let v = load(&mut body, 0, j0.clone() * 16 + i0());
    let mut k = store_kernel("overlap", vec![16], body, 1, i0() + j0, v);
    if let Stage::Store { domain, .. } = &mut k.stages[0] {
        *domain = vec![4];
    }
    let p = finish(
        "overlap",
        buffers,
        vec![k],
        vec![BufferId(0)],
        vec![BufferId(1)],
    );
    let x = Tensor::random(&p.buffers[0].ty, 5);
    let want = evaluate(&p, std::slice::from_ref(&x)).unwrap();
    for threads in [1, 2] {
        let c = CpuProgram::compile(&p, &CpuOptions::with_threads(threads)).unwrap();
        assert!(!c.report().contains("across"), "{}", c.report());
        assert_eq!(c.run(std::slice::from_ref(&x)).unwrap(), want);
    }
    // out[i0 + i1] = x[i1*32 + i0]: every anti-diagonal of points writes one element.
    let buffers = vec![
        buffer(0, BufferKind::Input(0), DType::F32, &[1024]),
        buffer(1, BufferKind::Output(0), DType::F32, &[63]),
    ];
    let i1 = IndexExpr::Var(Var::outer(1));
    let mut body = Block::default();
    let v = load(&mut body, 0, i1.clone() * 32 + i0());
    let k = store_kernel("pairs", vec![32, 32], body, 1, i0() + i1, v);
    let p = finish(
        "pairs",
        buffers,
        vec![k],
        vec![BufferId(0)],
        vec![BufferId(1)],
    );
    let x = Tensor::random(&p.buffers[0].ty, 6);
    let want = evaluate(&p, std::slice::from_ref(&x)).unwrap();
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap();
    assert!(!c.report().contains("tiled"), "{}", c.report());
    assert_eq!(c.run(std::slice::from_ref(&x)).unwrap(), want);
}

#[test]
fn errors_say_whether_ferrite_or_the_caller_is_at_fault() {
    use ferrite_cpu::Error;
    // Bad data: a gather index past its axis, reported in the context of its kernel.
    let g = graph("graph e(table: f32[10, 37], ids: i64[5]) -> f32[5, 37] {\n  y = index_select(table, ids, axis=0)\n  return y\n}\n");
    let c = CpuProgram::compile(&schedule(&g, true), &CpuOptions::with_threads(1)).unwrap();
    let ids = Tensor::from_i64(&g.param_types()[1], &[0, 3, 10, 9, 1]);
    let err = c
        .run(&[Tensor::random(&g.param_types()[0], 1), ids])
        .unwrap_err();
    assert!(
        matches!(&err, Error::In { source, .. } if matches!(**source, Error::Check { .. })),
        "{err:?}"
    );
    assert!(!err.is_internal());
    // Bad inputs and options.
    let err = c.run(&[]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InputCount {
                expected: 2,
                got: 0,
                ..
            }
        ) && !err.is_internal()
    );
    let err = CpuProgram::compile(&schedule(&g, true), &CpuOptions::with_threads(0)).unwrap_err();
    assert!(matches!(err, Error::Options { .. }) && !err.is_internal());
    // A program that breaks the loop IR's invariants comes from a Ferrite bug.
    let mut p = schedule(&g, true);
    p.kernels[0].reads.clear();
    let err = CpuProgram::compile(&p, &CpuOptions::with_threads(1)).unwrap_err();
    assert!(
        matches!(err, Error::InvalidProgram { .. }) && err.is_internal(),
        "{err}"
    );
}

/// Distinct generated functions of a compiled program, however they were obtained.
fn distinct_functions(c: &CpuProgram) -> usize {
    let s = c.jit_stats();
    s.compiled + s.shared_across_modules
}

#[test]
fn identical_layers_compile_once() {
    // Layers past the first and before the last are alike: each adds kernels but no new
    // generated function. (Counted as functions, not time.)
    let layers = |n| graph(&ferrite_testkit::decoder_source(n, 8, 32, 2));
    let opts = CpuOptions::with_threads(1);
    let three = CpuProgram::compile(&schedule(&layers(3), true), &opts).unwrap();
    let five = CpuProgram::compile(&schedule(&layers(5), true), &opts).unwrap();
    let (s3, s5) = (three.jit_stats(), five.jit_stats());
    assert!(s3.shared_in_module > 0, "{s3:?}");
    assert_eq!(distinct_functions(&three), distinct_functions(&five));
    assert!(s5.shared_in_module > s3.shared_in_module, "{s3:?} {s5:?}");
    // The five-layer program found every function in the live three-layer one.
    assert_eq!(s5.compiled, 0, "{s5:?}");

    // Sharing changes no result.
    let g = layers(5);
    let inputs = random_inputs(&g);
    let want = ferrite_ir::interpret(&g, &inputs).unwrap();
    let got = five.run(&inputs).unwrap();
    let (rtol, atol) = tolerance(DType::F32);
    got[0]
        .check_close(&want[0], rtol, atol + 2e-4 * max_abs(&want[0]))
        .unwrap();
    // And the borrowed code outlives the program that compiled it.
    drop(three);
    let again = five.run(&inputs).unwrap();
    assert_eq!(again[0], got[0]);
}

#[test]
fn programs_with_dumps_keep_a_dump_per_kernel() {
    let g = graph(&ferrite_testkit::decoder_source(3, 8, 32, 2));
    let mut opts = CpuOptions::with_threads(1);
    opts.capture_dumps = true;
    let c = CpuProgram::compile(&schedule(&g, true), &opts).unwrap();
    assert_eq!(c.jit_stats().shared_across_modules, 0);
    assert!(c.jit_stats().shared_in_module > 0);
    for k in 0..c.program().kernels.len() {
        if c.kernel_info(k).is_some() {
            assert!(
                c.disassembly(k).is_some_and(|d| !d.is_empty()),
                "kernel {k}"
            );
        }
    }
}
