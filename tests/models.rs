//! Real models: the tiny random-init GPT-2, BERT and LLaMA-style models under
//! `examples/onnx/`, exported from PyTorch by `scripts/export-models.py`, and the
//! ResNet-18- and MobileNetV2-style convolutional ones written with onnx.helper by
//! `scripts/export-conv-models.py` (no torch needed), run on the
//! interpreter, the CPU backend (fused and unfused, 1 and 3 threads) and the simulator,
//! against the outputs ONNX Runtime gave for the same inputs (committed beside them).
//! The same for the recurrent layers under `tests/onnx/recurrent/`, written by
//! `scripts/gen-recurrent-cases.py` with the attributes the ONNX node tests leave out.
//!
//! Tolerance: the ONNX node tests' (`|got - want| <= 1e-4 * max(1, max|want|) + 1e-3 *
//! |want|`), since a model is a chain of such ops and each output is compared at its end.

use ferrite::{Options, Target, Tensor};
use std::path::Path;

const MODELS: [&str; 5] = ["gpt2", "bert", "llama", "resnet_tiny", "mobilenetv2_tiny"];

fn close(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!("got {} where {} is expected", got.ty(), want.ty()));
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let big = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    // The element furthest outside the tolerance (NaN counts as infinitely far).
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let excess = (a - b).abs() - (1e-4 * big + 1e-3 * b.abs());
        let excess = if excess.is_nan() {
            f64::INFINITY
        } else {
            excess
        };
        if excess > 0.0 && worst.is_none_or(|(_, e)| excess > e) {
            worst = Some((i, excess));
        }
    }
    match worst {
        None => Ok(()),
        Some((i, _)) => Err(format!("element {i}: got {}, want {}", g[i], w[i])),
    }
}

fn check_model(name: &str) {
    check_dir(
        name,
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/onnx")
            .join(name),
    );
}

fn check_dir(name: &str, dir: &Path) {
    let model = ferrite::onnx::load(dir.join("model.onnx"))
        .unwrap_or_else(|e| panic!("{name}: import failed: {e}"));
    let inputs: Vec<Tensor> = model
        .inputs
        .iter()
        .map(|b| {
            let path = dir.join("inputs").join(format!("{}.npy", b.onnx));
            ferrite::files::read_npy(&path, 1 << 30)
                .unwrap_or_else(|e| panic!("{name}: {}: {e}", path.display()))
        })
        .collect();
    let want: Vec<Tensor> = model
        .outputs
        .iter()
        .map(|b| {
            let path = dir.join("expected").join(format!("{}.npy", b.onnx));
            ferrite::files::read_npy(&path, 1 << 30)
                .unwrap_or_else(|e| panic!("{name}: {}: {e}", path.display()))
        })
        .collect();
    let configs = [
        ("interp", Options::default().target(Target::Interp)),
        ("cpu", Options::default().target(Target::Cpu).threads(1)),
        (
            "cpu, 3 threads",
            Options::default().target(Target::Cpu).threads(3),
        ),
        (
            "cpu, unfused",
            Options::default()
                .target(Target::Cpu)
                .fuse(false)
                .threads(1),
        ),
        ("sim", Options::default().target(Target::Sim)),
    ];
    for (label, opts) in configs {
        let exe = ferrite::compile_ir(&model.graph, &opts)
            .unwrap_or_else(|e| panic!("{name} on {label}: compile failed: {e}"));
        let got = exe
            .run(&inputs)
            .unwrap_or_else(|e| panic!("{name} on {label}: run failed: {e}"));
        assert_eq!(got.len(), want.len(), "{name} on {label}: output count");
        for ((g, w), b) in got.iter().zip(&want).zip(&model.outputs) {
            if let Err(m) = close(g, w) {
                panic!("{name} on {label}: output `{}`: {m}", b.onnx);
            }
        }
    }
}

#[test]
fn gpt2_matches_onnx_runtime() {
    check_model(MODELS[0]);
}

#[test]
fn bert_matches_onnx_runtime() {
    check_model(MODELS[1]);
}

#[test]
fn llama_matches_onnx_runtime() {
    check_model(MODELS[2]);
}

#[test]
fn recurrent_layers_match_onnx_runtime() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/onnx/recurrent");
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    // One case per op at least, so a lost folder cannot pass silently.
    for op in ["rnn_", "gru_", "lstm_"] {
        assert!(
            cases
                .iter()
                .any(|c| c.file_name().unwrap().to_str().unwrap().starts_with(op)),
            "no {op} case under {}",
            root.display()
        );
    }
    for dir in cases {
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        check_dir(&name, &dir);
    }
}

#[test]
fn resnet_tiny_matches_onnx_runtime() {
    check_model(MODELS[3]);
}

#[test]
fn mobilenetv2_tiny_matches_onnx_runtime() {
    check_model(MODELS[4]);
}

/// The committed data still says what the test reads: every model's inputs and
/// expected outputs are named after its ONNX inputs and outputs.
#[test]
fn every_model_has_its_data() {
    for name in MODELS {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/onnx")
            .join(name);
        let model = ferrite::onnx::load(dir.join("model.onnx")).unwrap();
        assert!(
            !model.inputs.is_empty() && !model.outputs.is_empty(),
            "{name}"
        );
        for b in model.inputs.iter() {
            assert!(
                dir.join("inputs").join(format!("{}.npy", b.onnx)).is_file(),
                "{name}: {}",
                b.onnx
            );
        }
        for b in model.outputs.iter() {
            assert!(
                dir.join("expected")
                    .join(format!("{}.npy", b.onnx))
                    .is_file(),
                "{name}: {}",
                b.onnx
            );
        }
    }
}
