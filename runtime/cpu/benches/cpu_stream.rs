//! Memory-bound yardsticks over 4M `f32` (16 MiB per array): the JIT'd unrolled `f32x4`
//! copy and add kernels against plain Rust loops and `memcpy`, in bytes moved per second.

use cranelift_codegen::ir::InstBuilder;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ferrite_cpu::kernels::define_elementwise_f32;
use ferrite_cpu::{BinaryKernel, Jit, UnaryKernel};

const N: usize = 4 << 20;

fn stream_benches(c: &mut Criterion) {
    let mut jit = Jit::new().expect("host JIT");
    define_elementwise_f32(&mut jit, "copy_x4", 1, 4, &|_, v| v[0]).expect("copy");
    define_elementwise_f32(&mut jit, "add_x4", 2, 4, &|b, v| b.ins().fadd(v[0], v[1]))
        .expect("add");
    define_elementwise_f32(&mut jit, "add_x1", 2, 1, &|b, v| b.ins().fadd(v[0], v[1]))
        .expect("add");
    let code = jit.finalize().expect("finalize");
    let copy = UnaryKernel::new(&code, "copy_x4").expect("copy kernel");
    let add4 = BinaryKernel::new(&code, "add_x4").expect("add kernel");
    let add1 = BinaryKernel::new(&code, "add_x1").expect("add kernel");

    let a: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..N).map(|i| (N - i) as f32).collect();
    let mut out = vec![0.0f32; N];

    // Bytes that cross the memory bus per element: read + write for copy, 2 reads + write for add.
    let mut group = c.benchmark_group("stream_4M_f32");
    group.sample_size(20);
    group.throughput(Throughput::Bytes((N * 8) as u64));
    group.bench_function("copy/memcpy", |bench| {
        bench.iter(|| {
            out.copy_from_slice(&a);
            black_box(&out);
        })
    });
    group.bench_function("copy/jit_f32x4_unroll4", |bench| {
        bench.iter(|| {
            copy.run(&a, &mut out).expect("lengths");
            black_box(&out);
        })
    });
    group.bench_function("copy/rust_loop", |bench| {
        bench.iter(|| {
            for (o, x) in out.iter_mut().zip(&a) {
                *o = *x;
            }
            black_box(&out);
        })
    });
    group.throughput(Throughput::Bytes((N * 12) as u64));
    group.bench_function("add/jit_f32x4_unroll4", |bench| {
        bench.iter(|| {
            add4.run(&a, &b, &mut out).expect("lengths");
            black_box(&out);
        })
    });
    group.bench_function("add/jit_f32x4_unroll1", |bench| {
        bench.iter(|| {
            add1.run(&a, &b, &mut out).expect("lengths");
            black_box(&out);
        })
    });
    group.bench_function("add/rust_loop", |bench| {
        bench.iter(|| {
            for ((o, x), y) in out.iter_mut().zip(&a).zip(&b) {
                *o = x + y;
            }
            black_box(&out);
        })
    });
    group.finish();

    // The same kernels in L1 (4K elements), where the loop body rather than memory limits.
    let n = 4096;
    let mut group = c.benchmark_group("l1_4K_f32_add");
    group.throughput(Throughput::Bytes((n * 12) as u64));
    group.bench_function("jit_f32x4_unroll4", |bench| {
        bench.iter(|| add4.run(&a[..n], &b[..n], &mut out[..n]).expect("lengths"))
    });
    group.bench_function("jit_f32x4_unroll1", |bench| {
        bench.iter(|| add1.run(&a[..n], &b[..n], &mut out[..n]).expect("lengths"))
    });
    group.bench_function("rust_loop", |bench| {
        bench.iter(|| {
            for ((o, x), y) in out[..n].iter_mut().zip(&a[..n]).zip(&b[..n]) {
                *o = x + y;
            }
            black_box(&out);
        })
    });
    group.finish();
}

criterion_group!(benches, stream_benches);
criterion_main!(benches);
