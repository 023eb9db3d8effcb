//! Causal multi-head attention (`ferrite_cpu::attention`) over token rows, head_dim 64,
//! 4 heads: batch 1 at seq 16, 128 and 512, batch 8 at seq 128, on 1 thread
//! (`Parallelism::None`) and on a pool of 2.
//!
//! `cargo bench -p ferrite-cpu --bench cpu_attention`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ferrite_cpu::attention::{attention, AttentionShape, RowsLayout};
use ferrite_cpu::{Parallelism, ThreadPool};

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 - 1.0)
        .collect()
}

fn bench_attention(c: &mut Criterion) {
    let pool = ThreadPool::new(2).expect("a pool of 2 threads");
    let mut group = c.benchmark_group("attention_causal_h4_d64");
    group.sample_size(20);
    for (batch, seq) in [(1, 16), (1, 128), (1, 512), (8, 128)] {
        let shape = AttentionShape {
            batch,
            seq,
            heads: 4,
            kv_heads: 4,
            head_dim: 64,
            value_dim: 64,
            causal: true,
            scale: 0.125,
        };
        let n = batch * seq * 4 * 64;
        let (q, k, v) = (values(n, 1), values(n, 2), values(n, 3));
        let mut out = vec![0.0f32; n];
        let l = RowsLayout {
            offset: 0,
            row_stride: 4 * 64,
        };
        // Multiply-adds of the unmasked half of both products, as FLOPs.
        let flops = 2 * 2 * batch * 4 * 64 * seq * (seq + 1) / 2;
        group.throughput(Throughput::Elements(flops as u64));
        for (threads, par) in [(1, Parallelism::None), (2, Parallelism::Pool(&pool))] {
            group.bench_function(format!("b{batch}_s{seq}/{threads}thread"), |bench| {
                bench.iter(|| {
                    attention(&shape, &q, l, &k, l, &v, l, &mut out, l, par).expect("valid");
                    black_box(&out);
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_attention);
criterion_main!(benches);
