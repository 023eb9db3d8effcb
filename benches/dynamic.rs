//! Symbolic programs against static compiles (criterion; `cargo bench --bench dynamic`).
//!
//! `GRAPH/{rows,static}/BxT`: a graph of `examples/dynamic/` run by `compile_dynamic`'s
//! one program for every binding (row programs compiled at 32 x 512 rows, with attention
//! kernels between them for the transformers), against the graph instantiated and
//! compiled at that binding alone, at three bindings each:
//!
//! - `mlp_block`: GPT-2's MLP with its layer norm and residual, d_model 256 (one row
//!   program);
//! - `transformer_block`: the pre-norm block of `examples/transformer_block.fg` (two row
//!   programs and one attention);
//! - `gpt2`: a two-layer GPT-2-style decoder with embeddings and the tied head (three row
//!   programs and two attentions).
//!
//! Both allocate their outputs each run; the symbolic program also binds the symbols from
//! the inputs' shapes.

use criterion::{criterion_group, criterion_main, Criterion};
use ferrite::ir::sym::{Binding, SymGraph};
use ferrite::ir::text::Parsed;
use ferrite::{compile_dynamic, compile_ir, Options, Tensor};
use std::hint::black_box;
use std::time::Duration;

fn load(name: &str) -> SymGraph {
    let path = format!("{}/examples/dynamic/{name}.fg", env!("CARGO_MANIFEST_DIR"));
    match ferrite::load_parsed(&path).unwrap() {
        Parsed::Symbolic(g) => g,
        Parsed::Graph(_) => panic!("no symbols"),
    }
}

fn rows_against_static(c: &mut Criterion) {
    let graphs: [(&str, [(i64, i64); 3]); 3] = [
        ("mlp_block", [(1, 16), (4, 128), (16, 512)]),
        ("transformer_block", [(1, 16), (4, 128), (8, 512)]),
        ("gpt2", [(1, 16), (4, 128), (8, 512)]),
    ];
    for (name, sizes) in graphs {
        against_static(c, name, &sizes);
    }
}

fn against_static(c: &mut Criterion, name: &str, sizes: &[(i64, i64)]) {
    let g = load(name);
    let options = Options::default();
    let dynamic = compile_dynamic(&g, &options).unwrap();
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for &(b, t) in sizes {
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
