//! `ferrite::compile_dynamic`: a graph with size symbols compiled once and run at any
//! binding, differentially on interp, cpu and sim, through the per-binding cache.

use ferrite::ir::sym::{Binding, SymGraph};
use ferrite::ir::text::Parsed;
use ferrite::{compile_dynamic, Error, JitEvent, Options, Target, Tensor};
use std::sync::{Arc, Mutex};

fn block() -> SymGraph {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/dynamic/transformer_block.fg"
    );
    match ferrite::load_parsed(path).unwrap() {
        Parsed::Symbolic(g) => g,
        Parsed::Graph(_) => panic!("the dynamic block has no symbols"),
    }
}

/// Random inputs of the block at batch `b` and length `t`.
fn inputs(g: &SymGraph, b: i64, t: i64, seed: u64) -> Vec<Tensor> {
    let mut binding = Binding::new();
    binding.set("B", b);
    binding.set("T", t);
    g.params()
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| {
            let ty = ty.bind(&binding).unwrap();
            // Small weights keep the block's values in a range where f32 and f64 agree.
            let x = Tensor::random(&ty, seed + i as u64).unwrap();
            let scaled: Vec<f32> = x
                .as_slice::<f32>()
                .unwrap()
                .iter()
                .map(|v| v * if i == 0 { 1.0 } else { 0.1 })
                .collect();
            Tensor::from_vec(&ty.shape, scaled).unwrap()
        })
        .collect()
}

#[test]
fn the_block_runs_random_bindings_alike_on_every_target() {
    let g = block();
    let targets = [Target::Interp, Target::Cpu, Target::Sim];
    let programs: Vec<_> = targets
        .iter()
        .map(|&t| compile_dynamic(&g, &Options::default().target(t)).unwrap())
        .collect();
    // SplitMix64-style bindings: batches 1..=3, lengths 1..=24 (sim is slow), and the edges.
    let mut state = 0x5eedu64;
    let mut next = |m: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % m
    };
    let mut bindings = vec![(1, 1), (2, 24)];
    for _ in 0..3 {
        bindings.push((next(3) as i64 + 1, next(24) as i64 + 1));
    }
    for (k, &(b, t)) in bindings.iter().enumerate() {
        let x = inputs(&g, b, t, 100 * k as u64);
        let want = programs[0].run(&x).unwrap();
        assert_eq!(want[0].shape(), &[b as usize, t as usize, 256]);
        for (p, target) in programs.iter().zip(targets).skip(1) {
            let got = p.run(&x).unwrap();
            got[0]
                .check_close(&want[0], 1e-4, 1e-4)
                .unwrap_or_else(|m| panic!("{target:?} at B={b}, T={t}: {m}"));
        }
    }
    // One compile per binding and target, each reused on a second run.
    let cpu = &programs[1];
    let before = cpu.stats();
    let (b, t) = bindings[1];
    cpu.run(&inputs(&g, b, t, 7)).unwrap();
    let after = cpu.stats();
    assert_eq!(
        after.compiles, before.compiles,
        "a cached binding is not recompiled"
    );
    assert_eq!(after.hits, before.hits + 1);
    // Attention mixes the rows of a sequence: two row programs around an attention
    // kernel, compiled once (`tests/dynamic_attention.rs`), on sim too
    // (`tests/dynamic_sim.rs`).
    let summary = cpu.summary();
    assert!(
        summary.contains("one program for every binding (2 row programs over rows B*T")
            && summary.contains("between 1 attention kernels"),
        "{summary}"
    );
    assert_eq!(cpu.stats().compiles, 2, "{summary}");
    let sim = &programs[2];
    assert!(sim.is_symbolic(), "{}", sim.summary());
    assert_eq!(sim.stats().compiles, 2, "{}", sim.summary());
}

#[test]
fn bindings_are_evicted_least_recently_used_and_reported() {
    let src = "graph scale(x: f32[N]) {\n  return mul(x, 2.0)\n}\n";
    let Parsed::Symbolic(g) =
        ferrite::ir::text::parse_any("scale.fg", src, &mut ferrite::ir::text::NoWeights).unwrap()
    else {
        panic!("not symbolic");
    };
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let d = compile_dynamic(&g, &Options::default().target(Target::Cpu))
        .unwrap()
        .cache_limit(2)
        .on_event(move |e| sink.lock().unwrap().push(e.clone()));
    let x = |n: usize| Tensor::from_vec(&[n], vec![1.5f32; n]).unwrap();
    for n in [3, 4, 3, 5, 4] {
        let y = d.run(&[x(n)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), vec![3.0f32; n].as_slice());
    }
    let s = d.stats();
    // 3 and 4 compile; 3 hits; 5 evicts 4 (least recently used); 4 evicts 3.
    assert_eq!(
        (s.calls, s.hits, s.compiles, s.evictions, s.cache_entries),
        (5, 1, 4, 2, 2)
    );
    let evicted: Vec<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            JitEvent::Evicted { evicted, .. } => Some(format!("{:?}", evicted[0].shape)),
            _ => None,
        })
        .collect();
    assert_eq!(evicted, ["[4]", "[3]"]);
}

#[test]
fn broken_bindings_are_user_errors_naming_the_symbol() {
    let g = block();
    let d = compile_dynamic(&g, &Options::default().target(Target::Interp)).unwrap();
    let mut x = inputs(&g, 2, 5, 1);
    // A length beyond the declared range.
    x[0] = Tensor::from_vec(&[1, 513, 256], vec![0.0f32; 513 * 256]).unwrap();
    let e = d.run(&x).unwrap_err();
    assert!(matches!(e, Error::Binding { .. }), "{e:?}");
    assert!(!e.is_internal());
    assert!(
        e.to_string()
            .starts_with("T = 513 but T must be in 1..=512"),
        "{e}"
    );
    // A weight whose fixed extent is wrong names the input and axis.
    let mut x = inputs(&g, 1, 2, 1);
    x[1] = Tensor::from_vec(&[255], vec![0.0f32; 255]).unwrap();
    let e = d.run(&x).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("input `ln1_w` has shape [255] but is declared f32[256]"),
        "{e}"
    );
}
