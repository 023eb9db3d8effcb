//! Helpers of the tests of graphs with size symbols (`dynamic_rows.rs`,
//! `dynamic_attention.rs`, `onnx.rs`): loading them, inputs at a binding, and the check of
//! `compile_dynamic` against the interpreter.

use ferrite::ir::sym::{Binding, SymGraph};
use ferrite::ir::text::Parsed;
use ferrite::{compile_dynamic, JitEvent, Options, Tensor};
use std::sync::{Arc, Mutex};

/// `examples/dynamic/NAME`.
pub fn load(name: &str) -> SymGraph {
    let path = format!("{}/examples/dynamic/{name}", env!("CARGO_MANIFEST_DIR"));
    match ferrite::load_parsed(&path).unwrap() {
        Parsed::Symbolic(g) => g,
        Parsed::Graph(_) => panic!("{name} has no symbols"),
    }
}

/// A `.fg` text with size symbols.
pub fn parse(text: &str) -> SymGraph {
    match ferrite::ir::text::parse_any("test.fg", text, &mut ferrite::ir::text::NoWeights).unwrap()
    {
        Parsed::Symbolic(g) => g,
        Parsed::Graph(_) => panic!("no symbols"),
    }
}

/// Random inputs at `binding`, weights scaled by 0.1.
pub fn inputs(g: &SymGraph, binding: &Binding, seed: u64) -> Vec<Tensor> {
    g.params()
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| {
            let ty = ty.bind(binding).unwrap();
            let x = Tensor::random(&ty, seed + i as u64).unwrap();
            if ty.dtype != ferrite::DType::F32 {
                return x;
            }
            let scale = if i == 0 { 1.0 } else { 0.1 };
            let v: Vec<f32> = x
                .as_slice::<f32>()
                .unwrap()
                .iter()
                .map(|v| v * scale)
                .collect();
            Tensor::from_vec(&ty.shape, v).unwrap()
        })
        .collect()
}

/// `B = b, T = t`.
pub fn bt(b: i64, t: i64) -> Binding {
    let mut binding = Binding::new();
    binding.set("B", b);
    binding.set("T", t);
    binding
}

/// `g` by `compile_dynamic` with `options` against the interpreter on the instance at each
/// binding, one program for all of them (it must stay symbolic, one call per binding);
/// returns how many programs it compiled (each reported as an event).
pub fn check_against_interp(g: &SymGraph, options: Options, bindings: &[Binding]) -> usize {
    let events = Arc::new(Mutex::new(0usize));
    let seen = events.clone();
    let d = compile_dynamic(g, &options).unwrap().on_event(move |e| {
        if let JitEvent::Compiled { .. } = e {
            *seen.lock().unwrap() += 1;
        }
    });
    assert!(d.is_symbolic(), "{}", d.summary());
    for (k, b) in bindings.iter().enumerate() {
        let x = inputs(g, b, 10 * k as u64);
        let instance = g.instantiate(b).unwrap();
        let raw: Vec<ferrite::ir::Tensor> = x.iter().map(|t| t.as_ir().clone()).collect();
        let want = ferrite::ir::interpret(&instance, &raw).unwrap();
        let got = d.run(&x).unwrap();
        assert_eq!(got.len(), want.len());
        for (o, (got, want)) in got.iter().zip(&want).enumerate() {
            assert_eq!(got.shape(), &want.ty.shape[..], "output {o} at {b}");
            got.as_ir()
                .check_close(want, 1e-4, 1e-4)
                .unwrap_or_else(|m| panic!("output {o} at {b}: {m}"));
        }
    }
    assert!(d.is_symbolic(), "{}", d.summary());
    let stats = d.stats();
    assert_eq!(stats.calls, bindings.len() as u64);
    let compiles = stats.compiles as usize;
    assert_eq!(*events.lock().unwrap(), compiles);
    compiles
}

/// Draws in `1..=m` from a linear congruential sequence (Knuth's MMIX constants), for
/// random bindings that stay the same from run to run.
pub struct Draw(pub u64);

impl Draw {
    /// The next draw in `1..=m`.
    pub fn next(&mut self, m: u64) -> i64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % m) as i64 + 1
    }
}
