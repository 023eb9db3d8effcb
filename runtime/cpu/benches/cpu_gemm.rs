//! GEMM throughput through the `gemm` crate wrapper, single-threaded, in GFLOP/s
//! (criterion's "elements/s" here are floating-point operations per second).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ferrite_cpu::gemm::gemm;
use ferrite_cpu::{GemmShape, MatLayout, MatMut, MatRef, Parallelism, Scale};

fn bench_square(c: &mut Criterion, n: usize) {
    let shape = GemmShape::new(n, n, n);
    let a: Vec<f32> = (0..n * n).map(|i| (i % 17) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 13) as f32 * 0.1).collect();
    let mut out = vec![0.0f32; n * n];
    let l = MatLayout::row_major(n, n);
    let mut group = c.benchmark_group("gemm_f32_1thread");
    group.throughput(Throughput::Elements(shape.flops() as u64));
    group.sample_size(10);
    group.bench_function(format!("{n}x{n}x{n}"), |bench| {
        bench.iter(|| {
            gemm(
                shape,
                MatRef::new(&a, l),
                MatRef::new(&b, l),
                MatMut::new(&mut out, l),
                Scale::overwrite(),
                Parallelism::None,
            )
            .expect("valid product");
            black_box(&out);
        })
    });
    group.finish();
}

fn gemm_benches(c: &mut Criterion) {
    bench_square(c, 512);
    bench_square(c, 1024);
}

criterion_group!(benches, gemm_benches);
criterion_main!(benches);
