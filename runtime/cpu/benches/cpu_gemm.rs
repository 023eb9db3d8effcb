//! GEMM throughput, single-threaded, in GFLOP/s (criterion's "elements/s" here are
//! floating-point operations per second):
//!
//! - `gemm_f32_1thread`: square products through `ferrite_cpu::gemm::gemm` (whichever
//!   kernel it picks);
//! - `gemm_small_m`: the shapes of `mlp_large` and of the small ONNX models' layers
//!   (M x K x N: 32x256x1024, 32x1024x1024, 64x256x1024) and two squares (128, 512),
//!   each through the `gemm` crate directly (`crate`, packing B on every call, as
//!   Ferrite ran them before) and through Ferrite's own kernel at each width the CPU has
//!   (`ferrite_cpu::sgemm`, B read in place): the measurement behind
//!   `ferrite_cpu::gemm::OURS_MAX_ROWS`.
//!
//! `cargo bench -p ferrite-cpu --bench cpu_gemm`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ferrite_cpu::gemm::gemm;
use ferrite_cpu::sgemm::{self, Operands};
use ferrite_cpu::{GemmShape, Isa, MatLayout, MatMut, MatRef, Parallelism, Scale};

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

/// `m x k` by `k x n`, row-major, through the crate and through ours at each width.
fn bench_small_m(c: &mut Criterion, m: usize, k: usize, n: usize) {
    let shape = GemmShape::new(m, n, k);
    let a: Vec<f32> = (0..m * k).map(|i| (i % 17) as f32 * 0.1 - 0.8).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
    let mut out = vec![0.0f32; m * n];
    let mut group = c.benchmark_group("gemm_small_m");
    group.throughput(Throughput::Elements(shape.flops() as u64));
    group.sample_size(20);
    let name = format!("{m}x{k}x{n}");
    group.bench_function(format!("crate/{name}"), |bench| {
        bench.iter(|| {
            // SAFETY: dense row-major operands of exactly these sizes; `out` is not
            // shared with `a` or `b`.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    out.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    1,
                    k as isize,
                    b.as_ptr(),
                    1,
                    n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            };
            black_box(&out);
        })
    });
    for isa in [Isa::Avx2, Isa::Avx512] {
        if !isa.supported() {
            continue;
        }
        group.bench_function(format!("{}/{name}", isa.name()), |bench| {
            bench.iter(|| {
                let ops = Operands::row_major(a.as_ptr(), k, b.as_ptr(), n, out.as_mut_ptr());
                // SAFETY: as above; the ISA is supported.
                unsafe { sgemm::product(isa, &ops, m, n, k) };
                black_box(&out);
            })
        });
    }
    group.finish();
}

fn gemm_benches(c: &mut Criterion) {
    bench_square(c, 512);
    bench_square(c, 1024);
    for (m, k, n) in [
        (32, 256, 1024),
        (32, 1024, 1024),
        (64, 256, 1024),
        (128, 128, 128),
        (512, 512, 512),
    ] {
        bench_small_m(c, m, k, n);
    }
}

criterion_group!(benches, gemm_benches);
criterion_main!(benches);
