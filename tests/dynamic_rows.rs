//! Row programs: graphs whose size symbols are leading rows that no op mixes, compiled
//! once by `compile_dynamic` and run at every binding from that one CPU program.

mod common;

use common::dynamic::{bt, check_against_interp, inputs, load, parse, Draw};
use ferrite::ir::sym::Binding;
use ferrite::{compile_dynamic, Options, Target, Tensor};

#[test]
fn the_mlp_block_runs_random_bindings_from_one_program_fused_and_unfused() {
    let g = load("mlp_block.fg");
    let mut draw = Draw(0x5eed);
    let mut bindings = vec![bt(1, 1), bt(32, 1), bt(1, 512), bt(3, 300)];
    for _ in 0..6 {
        bindings.push(bt(draw.next(32), draw.next(64)));
    }
    assert_eq!(check_against_interp(&g, Options::default(), &bindings), 1);
    assert_eq!(
        check_against_interp(&g, Options::default().fuse(false), &bindings[..6]),
        1
    );
    assert_eq!(
        check_against_interp(&g, Options::default().threads(3), &bindings[..6]),
        1
    );
    // The loop-IR evaluator runs the same row program (`RowProgram::at` each count).
    assert_eq!(
        check_against_interp(&g, Options::default().target(Target::Loops), &bindings[..2]),
        1
    );
}

#[test]
fn fifty_bindings_compile_once() {
    let g = load("mlp_block.fg");
    let mut draw = Draw(7);
    let mut seen = std::collections::BTreeSet::new();
    let mut bindings = Vec::new();
    while bindings.len() < 50 {
        let (b, t) = (draw.next(8), draw.next(40));
        if seen.insert((b, t)) {
            bindings.push(bt(b, t));
        }
    }
    let d = compile_dynamic(&g, &Options::default()).unwrap();
    for (k, b) in bindings.iter().enumerate() {
        let out = d.run(&inputs(&g, b, k as u64)).unwrap();
        assert_eq!(
            out[0].shape()[..2],
            [b.get("B").unwrap() as usize, b.get("T").unwrap() as usize]
        );
    }
    let stats = d.stats();
    assert_eq!(
        (stats.compiles, stats.misses, stats.hits),
        (1, 1, 49),
        "{stats:?}"
    );
    assert!(
        d.summary()
            .contains("one program for every binding (rows B*T up to 16384"),
        "{}",
        d.summary()
    );
}

#[test]
fn graphs_of_many_row_shapes_match_the_interpreter() {
    // Embedding lookup, reshapes and permutes of trailing axes, a softmax, a row
    // reduction with keepdim, a matrix-vector product, two outputs.
    let g = parse(
        "dims N in [1, 64]\n\
         graph rows(ids: i64[N], table: f32[50, 8], w: f32[8, 6], v: f32[6]) {\n\
           e = index_select(table, ids, axis=0)\n\
           h = reshape(matmul(e, w), shape=[N, 2, 3])\n\
           p = permute(h, dims=[0, 2, 1])\n\
           s = softmax(p, axis=-1)\n\
           m = sum(reshape(s, shape=[N, 6]), axes=[1], keepdim=true)\n\
           y = add(mul(reshape(s, shape=[N, 6]), m), v)\n\
           z = matmul(relu(y), v)\n\
           return y, z\n\
         }\n",
    );
    let mut bindings = Vec::new();
    for n in [1, 2, 3, 17, 64] {
        let mut b = Binding::new();
        b.set("N", n);
        bindings.push(b);
    }
    // Ids in range: `Tensor::random` of an i64 tensor may not be.
    let d = compile_dynamic(&g, &Options::default()).unwrap();
    assert!(d.is_symbolic(), "{}", d.summary());
    for b in &bindings {
        let mut x = inputs(&g, b, 3);
        let n = b.get("N").unwrap() as usize;
        let ids: Vec<i64> = (0..n).map(|i| ((i * 7 + 3) % 50) as i64).collect();
        x[0] = Tensor::from_vec(&[n], ids).unwrap();
        let instance = g.instantiate(b).unwrap();
        let raw: Vec<ferrite::ir::Tensor> = x.iter().map(|t| t.as_ir().clone()).collect();
        let want = ferrite::ir::interpret(&instance, &raw).unwrap();
        let got = d.run(&x).unwrap();
        for (got, want) in got.iter().zip(&want) {
            got.as_ir()
                .check_close(want, 1e-5, 1e-5)
                .unwrap_or_else(|m| panic!("N={n}: {m}"));
        }
    }
    assert!(d.is_symbolic(), "{}", d.summary());
    assert_eq!(d.stats().compiles, 1);
}

#[test]
fn graphs_that_mix_rows_are_specialized_and_say_why() {
    let cases = [
        // A reduction over the rows.
        ("dims N in [1, 8]\ngraph g(x: f32[N, 4]) {\n  return sum(x, axes=[0])\n}\n", "reduces across rows"),
        // A softmax along the rows.
        ("dims N in [1, 8]\ngraph g(x: f32[N, 4]) {\n  return softmax(x, axis=0)\n}\n", "(softmax) mixes rows"),
        // A transpose that moves the rows.
        ("dims N in [1, 8]\ngraph g(x: f32[N, 4]) {\n  return transpose(x, dim0=0, dim1=1)\n}\n", "has type f32[4, N]"),
        // No upper bound to size the program by.
        ("graph g(x: f32[N, 4]) {\n  return relu(x)\n}\n", "no upper bound"),
        // A symbol that is not leading.
        ("dims N in [1, 8], K in [1, 8]\ngraph g(x: f32[N, 4], y: f32[4, K]) {\n  return matmul(x, y)\n}\n", "size symbol `K` is not a leading axis"),
    ];
    for (src, why) in cases {
        let g = parse(src);
        let d = compile_dynamic(&g, &Options::default()).unwrap();
        assert!(!d.is_symbolic());
        assert!(d.summary().contains(why), "{}", d.summary());
    }
    // A row graph on another target.
    let g = load("mlp_block.fg");
    let d = compile_dynamic(&g, &Options::default().target(Target::Interp)).unwrap();
    assert!(
        d.summary().contains("cpu, loops and sim targets only"),
        "{}",
        d.summary()
    );
}

#[test]
fn bindings_outside_the_ranges_are_located_errors() {
    let g = load("mlp_block.fg");
    let d = compile_dynamic(&g, &Options::default()).unwrap();
    let err = d.run(&inputs(&g, &bt(33, 2), 1)).unwrap_err().to_string();
    assert!(err.contains('B') && err.contains("33"), "{err}");
    assert!(err.contains("mlp_block.fg"), "{err}");
    // A shape that disagrees with another input's symbol.
    let mut x = inputs(&g, &bt(2, 3), 1);
    x[0] = Tensor::from_vec(&[2, 3, 255], vec![0f32; 2 * 3 * 255]).unwrap();
    let err = d.run(&x).unwrap_err().to_string();
    assert!(err.contains("x"), "{err}");
    // Nothing was compiled for them, and the program still runs.
    d.run(&inputs(&g, &bt(2, 3), 1)).unwrap();
    assert_eq!(d.stats().compiles, 1);
}

#[test]
fn a_row_program_over_the_memory_budget_is_specialized() {
    let g = load("mlp_block.fg");
    // 16384 rows of 1024 floats do not fit in 16 MiB; one small binding does.
    let options = Options::default().memory_limit(16 << 20);
    let d = compile_dynamic(&g, &options).unwrap();
    let b = bt(2, 3);
    let x = inputs(&g, &b, 5);
    let got = d.run(&x).unwrap();
    assert!(!d.is_symbolic());
    assert!(
        d.summary().contains(
            "specialized per binding (the row program's storage at 16384 rows: running graph "
        ),
        "{}",
        d.summary()
    );
    let instance = g.instantiate(&b).unwrap();
    let raw: Vec<ferrite::ir::Tensor> = x.iter().map(|t| t.as_ir().clone()).collect();
    let want = ferrite::ir::interpret(&instance, &raw).unwrap();
    got[0].as_ir().check_close(&want[0], 1e-4, 1e-4).unwrap();
}

#[test]
fn threads_run_one_row_program_at_different_bindings_at_once() {
    let g = load("mlp_block.fg");
    let d = compile_dynamic(&g, &Options::default().threads(2)).unwrap();
    let cases: Vec<(Binding, Vec<Tensor>, Vec<ferrite::ir::Tensor>)> =
        [(1, 3), (2, 17), (5, 9), (3, 40)]
            .iter()
            .enumerate()
            .map(|(k, &(b, t))| {
                let binding = bt(b, t);
                let x = inputs(&g, &binding, 50 + k as u64);
                let raw: Vec<ferrite::ir::Tensor> = x.iter().map(|t| t.as_ir().clone()).collect();
                let want = ferrite::ir::interpret(&g.instantiate(&binding).unwrap(), &raw).unwrap();
                (binding, x, want)
            })
            .collect();
    std::thread::scope(|s| {
        for (binding, x, want) in &cases {
            let d = &d;
            s.spawn(move || {
                for _ in 0..5 {
                    let got = d.run(x).unwrap();
                    got[0]
                        .as_ir()
                        .check_close(&want[0], 1e-4, 1e-4)
                        .unwrap_or_else(|m| panic!("{binding}: {m}"));
                }
            });
        }
    });
    assert!(d.is_symbolic(), "{}", d.summary());
    assert_eq!(d.stats().compiles, 1);
}
