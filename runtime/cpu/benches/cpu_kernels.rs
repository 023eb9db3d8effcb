//! Generated CPU code through the real pipeline (parse, decompose, schedule, compile), in
//! criterion benches rather than printed from tests:
//!
//! - `pointwise_chain_4M`: the `pointwise_chain` example at 2048 x 2048 and the same chain
//!   without transcendentals, fused into one kernel vs one kernel per op, at 1 and 2 threads;
//! - `stream_4M`: a memory-bound fused kernel (`x * 1.5 + y`) beside `memcpy` of the same
//!   bytes, so its share of the copy bandwidth reads off one run;
//! - `vmath_1M`: transcendental-heavy kernels over 1M `f32` on one thread (per element:
//!   divide by 2^20), with a plain `x * 1.5` as the memory-bound yardstick;
//! - `wide_16K`: the JIT'd `f32x4` vector math (`narrow`) beside the rustc-compiled wide
//!   routines of `ferrite_cpu::wide` at each width the CPU has, over 16K `f32` (L2-resident),
//!   and `x * sigmoid(x)` fused in one JIT kernel beside wide `sigmoid` on 1K blocks then a
//!   multiply (what a call from the JIT loop on a stashed block would do);
//! - `wide_fused`: generated kernels with their transcendentals computed by the wide
//!   routines on blocks (`plan/wide.rs`) beside the same kernels in `f32x4` code
//!   (`narrow`): a fused sigmoid chain over 1M `f32` (`x*sigmoid(x)`, a sigmoid of it and
//!   a tanh, as in `big_pointwise`) and a row softmax at 1024 x 1024, one thread;
//! - `compile_transformer_block`: Cranelift compile time of the example's kernels.
//!
//! Every program is checked against the reference interpreter once before it is timed, so
//! a faster but wrong variant cannot go unnoticed here.
//!
//! `cargo bench -p ferrite-cpu --bench cpu_kernels`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ferrite_cpu::kernels::define_elementwise_f32;
use ferrite_cpu::{CpuOptions, CpuProgram, Isa, Jit, UnaryFn, UnaryKernel, VMath};
use ferrite_ir::loops::Program;
use ferrite_ir::{Graph, Tensor};
use ferrite_passes::decompose::decompose;
use ferrite_passes::schedule::{schedule, ScheduleOptions};

fn graph(src: &str) -> Graph {
    ferrite_ir::parse("bench.fg", src).unwrap_or_else(|d| panic!("{d}"))
}

fn program(g: &Graph, fuse: bool) -> Program {
    let d = decompose(g).expect("decompose");
    let opts = if fuse {
        ScheduleOptions::default()
    } else {
        ScheduleOptions::unfused()
    };
    schedule(&d, &opts).expect("schedule").program
}

fn inputs(g: &Graph) -> Vec<Tensor> {
    g.param_types()
        .iter()
        .enumerate()
        .map(|(i, ty)| Tensor::random(ty, i as u64))
        .collect()
}

/// Compiles `g` and checks its first output against the interpreter.
fn compiled(g: &Graph, fuse: bool, threads: usize, xs: &[Tensor]) -> CpuProgram {
    let c = CpuProgram::compile(&program(g, fuse), &CpuOptions::with_threads(threads))
        .expect("compile");
    let want = ferrite_ir::interpret(g, xs).expect("interpret");
    let got = c.run(xs).expect("run");
    got[0]
        .check_close(&want[0], 1e-4, 1e-5)
        .unwrap_or_else(|e| panic!("{}: {e}", g.name));
    c
}

/// The `pointwise_chain` chain without `tanh`, `log` and `exp`: memory-bound when unfused.
const ALGEBRAIC_CHAIN: &str = "graph algebraic_chain(x: f32[2048, 2048], y: f32[2048, 2048], bias: f32[2048]) -> f32[2048, 2048] {
  a = add(x, bias)
  t = mul(a, 0.5)
  dt = sub(1.0, mul(t, t))
  g = mul(add(t, dt), y)
  m = maximum(abs(g), 1e-3)
  out = minimum(mul(sign(g), m), 2.0)
  return out
}
";

fn pointwise_chains(c: &mut Criterion) {
    let chain = graph(
        &ferrite_testkit::example_source("pointwise_chain")
            .1
            .replace("1024", "2048"),
    );
    let algebraic = graph(ALGEBRAIC_CHAIN);
    let mut group = c.benchmark_group("pointwise_chain_4M");
    group.sample_size(10);
    for g in [&chain, &algebraic] {
        let xs = inputs(g);
        for threads in [1, 2] {
            for fuse in [true, false] {
                let p = compiled(g, fuse, threads, &xs);
                let name = format!(
                    "{}/{}/{threads}t",
                    g.name,
                    if fuse { "fused" } else { "unfused" }
                );
                group.bench_function(name, |b| b.iter(|| black_box(p.run(&xs).expect("run"))));
            }
        }
    }
    group.finish();
}

fn stream(c: &mut Criterion) {
    const N: usize = 4 << 20;
    let g = graph(&format!(
        "graph axpy(x: f32[{N}], y: f32[{N}]) -> f32[{N}] {{\n  z = add(mul(x, 1.5), y)\n  return z\n}}\n"
    ));
    let xs = inputs(&g);
    let mut group = c.benchmark_group("stream_4M");
    group.sample_size(20);
    // x*a+y moves 12 bytes per element; memcpy of 4M f32 moves 8.
    group.throughput(Throughput::Bytes((N * 12) as u64));
    for threads in [1, 2] {
        let p = compiled(&g, true, threads, &xs);
        group.bench_function(format!("axpy/{threads}t"), |b| {
            b.iter(|| black_box(p.run(&xs).expect("run")))
        });
    }
    let src: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let mut dst = vec![0f32; N];
    group.throughput(Throughput::Bytes((N * 8) as u64));
    group.bench_function("memcpy", |b| {
        b.iter(|| {
            dst.copy_from_slice(&src);
            black_box(&mut dst);
        })
    });
    group.finish();
}

const CHAIN: &str = "  a = add(x, bias)
  t = tanh(mul(a, 0.5))
  dt = sub(1.0, mul(t, t))
  g = mul(add(t, dt), y)
  m = maximum(abs(g), 1e-3)
  l = log(m)
  out = minimum(mul(sign(g), exp(mul(l, 0.5))), 2.0)";

fn vmath(c: &mut Criterion) {
    let cases: &[(&str, &str, bool)] = &[
        ("copy", "  out = mul(x, 1.5)", true),
        ("exp", "  out = exp(x)", true),
        ("exp_wide", "  out = exp(mul(x, 40.0))", true),
        // Every result subnormal (arguments in [-100, -92]).
        ("exp_subnormal", "  out = exp(sub(mul(x, 4.0), 96.0))", true),
        ("tanh", "  out = tanh(x)", true),
        ("log", "  out = log(abs(x))", true),
        ("sigmoid", "  out = sigmoid(x)", true),
        ("erf", "  out = erf(x)", true),
        ("sin", "  out = sin(x)", true),
        ("exp_log", "  out = exp(log(abs(x)))", true),
        ("chain_fused", CHAIN, true),
        ("chain_unfused", CHAIN, false),
    ];
    let mut group = c.benchmark_group("vmath_1M");
    group.sample_size(20);
    group.throughput(Throughput::Elements(1 << 20));
    for &(name, body, fuse) in cases {
        let g = graph(&format!(
            "graph {name}(x: f32[1024, 1024], y: f32[1024, 1024], bias: f32[1024]) -> f32[1024, 1024] {{\n{body}\n  return out\n}}\n"
        ));
        let xs = inputs(&g);
        let p = compiled(&g, fuse, 1, &xs);
        group.bench_function(name, |b| b.iter(|| black_box(p.run(&xs).expect("run"))));
    }
    group.finish();
}

fn wide(c: &mut Criterion) {
    const N: usize = 16 << 10;
    const BLOCK: usize = 1024;
    let fns = [
        UnaryFn::Exp,
        UnaryFn::Log,
        UnaryFn::Tanh,
        UnaryFn::Erf,
        UnaryFn::Sigmoid,
    ];
    let mut jit = Jit::new().expect("host JIT");
    let vm = VMath::for_isa(jit.isa());
    for f in fns {
        define_elementwise_f32(&mut jit, f.name(), 1, 4, &|b, v| vm.unary(b, f, v[0]))
            .expect("kernel compiles");
    }
    define_elementwise_f32(&mut jit, "silu", 1, 4, &|b, v| {
        let s = vm.sigmoid(b, v[0]);
        cranelift_codegen::ir::InstBuilder::fmul(b.ins(), v[0], s)
    })
    .expect("kernel compiles");
    let code = jit.finalize().expect("finalize");
    // Arguments in [-10, 10] (log: their absolute values).
    let xs: Vec<f32> = (0..N)
        .map(|i| (i as f32 * 0.618_034).sin() * 10.0)
        .collect();
    let positive: Vec<f32> = xs.iter().map(|x| x.abs()).collect();
    let mut out = vec![0.0f32; N];
    let widths: Vec<Isa> = [Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|isa| isa.supported())
        .collect();
    let mut group = c.benchmark_group("wide_16K");
    group.sample_size(30);
    group.throughput(Throughput::Elements(N as u64));
    for f in fns {
        let src = if f == UnaryFn::Log { &positive } else { &xs };
        let kernel = UnaryKernel::new(&code, f.name()).expect("kernel");
        group.bench_function(format!("{}/narrow", f.name()), |b| {
            b.iter(|| kernel.run(black_box(src), &mut out).expect("run"))
        });
        for &isa in &widths {
            let routine = ferrite_cpu::wide::routine(f, isa).expect("routine");
            group.bench_function(format!("{}/{}", f.name(), isa.name()), |b| {
                b.iter(|| routine(black_box(src), &mut out))
            });
        }
    }
    let silu = UnaryKernel::new(&code, "silu").expect("kernel");
    group.bench_function("silu/narrow_fused", |b| {
        b.iter(|| silu.run(black_box(&xs), &mut out).expect("run"))
    });
    for &isa in &widths {
        let sigmoid = ferrite_cpu::wide::routine(UnaryFn::Sigmoid, isa).expect("routine");
        group.bench_function(format!("silu/{}_blocks", isa.name()), |b| {
            b.iter(|| {
                for (x, o) in black_box(&xs).chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
                    sigmoid(x, o);
                    for (o, x) in o.iter_mut().zip(x) {
                        *o *= x;
                    }
                }
            })
        });
    }
    group.finish();
}

/// The sigmoid chain of `big_pointwise` (1M elements) and a row softmax.
const WIDE_GRAPHS: [&str; 2] = [
    "graph sigmoid_chain_1M(x: f32[256, 4096]) -> f32[256, 4096] {
  s = sigmoid(x)
  t = mul(x, s)
  u = sigmoid(mul(t, 1.5))
  y = add(u, tanh(x))
  return y
}",
    "graph softmax_1024x1024(x: f32[1024, 1024]) -> f32[1024, 1024] {
  y = softmax(x, axis=-1)
  return y
}",
];

fn wide_fused(c: &mut Criterion) {
    let mut group = c.benchmark_group("wide_fused");
    group.sample_size(20);
    let widths: Vec<Option<Isa>> = [None, Some(Isa::Avx2), Some(Isa::Avx512)]
        .into_iter()
        .filter(|isa| isa.is_none_or(Isa::supported))
        .collect();
    for src in WIDE_GRAPHS {
        let g = graph(src);
        let xs = inputs(&g);
        let p = program(&g, true);
        let want = ferrite_ir::interpret(&g, &xs).expect("interpret");
        group.throughput(Throughput::Elements(want[0].ty.numel() as u64));
        for &isa in &widths {
            let mut opts = CpuOptions::with_threads(1);
            opts.codegen.wide = isa;
            let c = CpuProgram::compile(&p, &opts).expect("compile");
            let got = c.run(&xs).expect("run");
            got[0]
                .check_close(&want[0], 1e-4, 1e-5)
                .unwrap_or_else(|e| panic!("{}: {e}", g.name));
            let name = format!("{}/{}", g.name, isa.map_or("narrow", Isa::name));
            group.bench_function(name, |b| b.iter(|| black_box(c.run(&xs).expect("run"))));
        }
    }
    group.finish();
}

fn compile_time(c: &mut Criterion) {
    let g = ferrite_testkit::example_graph("transformer_block");
    let mut group = c.benchmark_group("compile_transformer_block");
    group.sample_size(10);
    for fuse in [true, false] {
        let p = program(&g, fuse);
        group.bench_function(if fuse { "fused" } else { "unfused" }, |b| {
            b.iter(|| {
                black_box(CpuProgram::compile(&p, &CpuOptions::with_threads(1)).expect("compile"))
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    pointwise_chains,
    stream,
    vmath,
    wide,
    wide_fused,
    compile_time
);
criterion_main!(benches);
