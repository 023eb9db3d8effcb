//! Graphs with size symbols on the simulated accelerator: row programs lowered once to
//! tile kernels that take the row count as an argument, and transformers run as those
//! programs with the tile attention kernel between them, every binding from the one
//! compile, against the interpreter.

mod common;

use common::dynamic::{bt, check_against_interp, inputs, load, Draw};
use ferrite::ir::sym::{Binding, SymGraph};
use ferrite::{compile_dynamic, compile_ir, Options, Target};

fn sim() -> Options {
    Options::default().target(Target::Sim)
}

/// `n` distinct random bindings with batch in `1..=batch` and length in `1..=len`,
/// after `fixed`.
fn bindings(seed: u64, fixed: &[(i64, i64)], n: usize, batch: u64, len: u64) -> Vec<Binding> {
    let mut draw = Draw(seed);
    let mut seen: std::collections::BTreeSet<(i64, i64)> = fixed.iter().copied().collect();
    let mut out: Vec<Binding> = fixed.iter().map(|&(b, t)| bt(b, t)).collect();
    while out.len() < fixed.len() + n {
        let (b, t) = (draw.next(batch), draw.next(len));
        if seen.insert((b, t)) {
            out.push(bt(b, t));
        }
    }
    out
}

#[test]
fn the_mlp_block_runs_random_bindings_from_one_tile_program() {
    let g = load("mlp_block.fg");
    let b = bindings(0x5eed, &[(1, 1), (2, 64)], 10, 4, 64);
    assert_eq!(check_against_interp(&g, sim(), &b), 1);
}

#[test]
fn the_transformer_block_runs_random_bindings_from_one_compile_on_sim() {
    let g = load("transformer_block.fg");
    let b = bindings(0xb10c, &[(1, 1), (3, 17)], 10, 4, 64);
    assert_eq!(check_against_interp(&g, sim(), &b), 2);
    let d = compile_dynamic(&g, &sim()).unwrap();
    d.run(&inputs(&g, &bt(2, 3), 1)).unwrap();
    let summary = d.summary();
    assert!(
        summary.contains("one program for every binding (2 row programs")
            && summary.contains("on sim, ")
            && summary.contains("the tile attention kernel"),
        "{summary}"
    );
}

/// The ranges, batch 1..=32 and length 1..=512, at random bindings of at most
/// 4096 tokens (slow: run with `--ignored`). Past that the simulator's work budget
/// (`sim::MAX_WORK_PER_LAUNCH`) stops the largest GEMMs, of a static compile as well.
#[test]
#[ignore]
fn the_transformers_run_bindings_over_the_whole_range_on_sim() {
    for (name, programs) in [("transformer_block.fg", 2), ("gpt2.fg", 3)] {
        let g = load(name);
        let b: Vec<Binding> = bindings(
            0x51de,
            &[(8, 512), (1, 512), (32, 128), (32, 1)],
            40,
            32,
            512,
        )
        .into_iter()
        .filter(|b| b.get("B").unwrap() * b.get("T").unwrap() <= 4096)
        .take(14)
        .collect();
        assert_eq!(check_against_interp(&g, sim(), &b), programs);
    }
}

/// A static compile at the bound (32 x 512) on sim, to see whether the simulator's
/// budget allows it (run with `--ignored`).
#[test]
#[ignore]
fn a_static_compile_at_the_bound_on_sim() {
    let g = load("transformer_block.fg");
    let b = bt(32, 512);
    let exe = compile_ir(&g.instantiate(&b).unwrap(), &sim()).unwrap();
    let r = exe.run(&inputs(&g, &b, 1));
    eprintln!("static at 32 x 512: {:?}", r.map(|_| ()));
}

#[test]
fn a_gpt2_style_decoder_runs_random_bindings_from_one_compile_on_sim() {
    let g = load("gpt2.fg");
    let b = bindings(0x6e72, &[(1, 1), (2, 9)], 10, 4, 64);
    assert_eq!(check_against_interp(&g, sim(), &b), 3);
}

/// Simulated cycles of one run of `g` at `b`: compiled once for every binding, and
/// compiled for `b` alone.
fn cycles(d: &ferrite::Dynamic, g: &SymGraph, b: &Binding) -> (u64, u64) {
    let x = inputs(g, b, 1);
    let symbolic = d.execute(&x).unwrap();
    let exe = compile_ir(&g.instantiate(b).unwrap(), &sim()).unwrap();
    let fixed = exe.execute(&x).unwrap();
    for (s, f) in symbolic.outputs().iter().zip(fixed.outputs()) {
        s.as_ir().check_close(f.as_ir(), 1e-4, 1e-4).unwrap();
    }
    (
        symbolic.device_report().unwrap().cycles(),
        fixed.device_report().unwrap().cycles(),
    )
}

#[test]
fn symbolic_cycles_are_close_to_a_static_compile() {
    let sizes = [(1, 1), (1, 64), (4, 33), (8, 64), (2, 200), (16, 64)];
    for (name, programs) in [
        ("mlp_block.fg", 1),
        ("transformer_block.fg", 2),
        ("gpt2.fg", 3),
    ] {
        let g = load(name);
        let d = compile_dynamic(&g, &sim()).unwrap();
        for (b, t) in sizes {
            let (s, f) = cycles(&d, &g, &bt(b, t));
            let ratio = s as f64 / f as f64;
            eprintln!("| {name} | {b} | {t} | {s} | {f} | {ratio:.3} |");
            assert!(
                ratio < 1.1,
                "{name} at B={b}, T={t}: {s} cycles against {f}"
            );
        }
        assert!(d.is_symbolic(), "{}", d.summary());
        // No recompilation: one compile per part, whatever the binding.
        assert_eq!(d.stats().compiles, programs, "{}", d.summary());
    }
}

#[test]
#[ignore]
fn launches_side_by_side() {
    let name = std::env::var("GRAPH").unwrap_or("mlp_block.fg".into());
    let g = load(&name);
    let d = compile_dynamic(&g, &sim()).unwrap();
    let t: i64 = std::env::var("T").map_or(64, |t| t.parse().unwrap());
    let bb: i64 = std::env::var("B").map_or(1, |t| t.parse().unwrap());
    let b = bt(bb, t);
    let x = inputs(&g, &b, 1);
    let s = d.execute(&x).unwrap();
    let exe = compile_ir(&g.instantiate(&b).unwrap(), &sim()).unwrap();
    let f = exe.execute(&x).unwrap();
    for l in &s.device_report().unwrap().launches {
        eprintln!("sym {} {:?} {}", l.kernel, l.grid, l.cycles);
    }
    for l in &f.device_report().unwrap().launches {
        eprintln!("fix {} {:?} {}", l.kernel, l.grid, l.cycles);
    }
}

/// Compile times, symbolic (every part, all variants) against a static compile at one
/// binding (printed; run with `--ignored --nocapture`).
#[test]
#[ignore]
fn compile_times() {
    for name in ["mlp_block.fg", "transformer_block.fg", "gpt2.fg"] {
        let g = load(name);
        let b = bt(1, 16);
        let x = inputs(&g, &b, 1);
        let t = std::time::Instant::now();
        let d = compile_dynamic(&g, &sim()).unwrap();
        d.run(&x).unwrap();
        let symbolic = t.elapsed();
        let t = std::time::Instant::now();
        let exe = compile_ir(&g.instantiate(&b).unwrap(), &sim()).unwrap();
        exe.run(&x).unwrap();
        eprintln!(
            "{name}: symbolic {symbolic:?} (first run included), static {:?}; {}",
            t.elapsed(),
            d.summary()
        );
    }
}
