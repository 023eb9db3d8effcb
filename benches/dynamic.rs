//! Row programs against static compiles (criterion; `cargo bench --bench dynamic`).
//!
//! `mlp_block/{rows,static}/BxT`: `examples/dynamic/mlp_block.fg` (GPT-2's MLP with its
//! layer norm and residual, d_model 256) run by `compile_dynamic`'s one row program,
//! compiled at 32 x 512 rows, against the graph instantiated and compiled at that
//! binding alone, at three bindings. Both allocate their outputs each run; the row
//! program also binds the symbols from the inputs' shapes.

use criterion::{criterion_group, criterion_main, Criterion};
use ferrite::ir::sym::{Binding, SymGraph};
use ferrite::ir::text::Parsed;
use ferrite::{compile_dynamic, compile_ir, Options, Tensor};
use std::hint::black_box;
use std::time::Duration;

fn mlp_block() -> SymGraph {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/dynamic/mlp_block.fg");
    match ferrite::load_parsed(path).unwrap() {
        Parsed::Symbolic(g) => g,
        Parsed::Graph(_) => panic!("no symbols"),
    }
}

fn rows_against_static(c: &mut Criterion) {
    let g = mlp_block();
    let options = Options::default();
    let dynamic = compile_dynamic(&g, &options).unwrap();
    let mut group = c.benchmark_group("mlp_block");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (b, t) in [(1, 16), (4, 128), (16, 512)] {
        let mut binding = Binding::new();
        binding.set("B", b);
        binding.set("T", t);
        let inputs: Vec<Tensor> = g
            .params()
            .iter()
            .enumerate()
            .map(|(i, (_, ty))| Tensor::random(&ty.bind(&binding).unwrap(), i as u64).unwrap())
            .collect();
        let static_program = compile_ir(&g.instantiate(&binding).unwrap(), &options).unwrap();
        dynamic.run(&inputs).unwrap();
        assert!(dynamic.is_symbolic(), "{}", dynamic.summary());
        let size = format!("{b}x{t}");
        group.bench_function(format!("rows/{size}"), |bench| {
            bench.iter(|| black_box(dynamic.run(&inputs).unwrap()))
        });
        group.bench_function(format!("static/{size}"), |bench| {
            bench.iter(|| black_box(static_program.run(&inputs).unwrap()))
        });
    }
    group.finish();
}

criterion_group!(benches, rows_against_static);
criterion_main!(benches);
