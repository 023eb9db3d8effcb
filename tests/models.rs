//! Real models: the tiny random-init GPT-2, BERT and LLaMA-style models under
//! `examples/onnx/`, exported from PyTorch by `scripts/export-models.py`, and the
//! ResNet-18- and MobileNetV2-style convolutional ones written with onnx.helper by
//! `scripts/export-conv-models.py` (no torch needed), run on the
//! interpreter, the CPU backend (fused and unfused, 1 and 3 threads) and the simulator,
//! against the outputs ONNX Runtime gave for the same inputs (committed beside them).
//! The same for the recurrent layers under `tests/onnx/recurrent/`, written by
//! `scripts/gen-recurrent-cases.py` with the attributes the ONNX node tests leave out.
//! And the full-size ResNet-18 and MobileNetV2 (`scripts/export-conv-models.py --full`),
//! whose weights are not committed but redrawn here from `weights.txt` (a splitmix64 of
//! each float's index, the script's `draw`), at 224x224 on the CPU and at 64x64 (the same
//! weights) on the interpreter (56 s at 224 in a debug build), the unfused CPU and the
//! simulator.
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
        // Every buffer of the CPU program is written whole by its kernel: a run clears
        // nothing first (an im2col's taps and a pad's borders are several stores).
        if label.starts_with("cpu") {
            let code = exe.code_text().unwrap_or_default();
            let zeroed: Vec<&str> = code.lines().filter(|l| l.contains("zeroes ")).collect();
            assert!(zeroed.is_empty(), "{name} on {label}: {zeroed:?}");
        }
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

/// The script's `draw`: `f32(a + b * u)` for the indices `start .. start + count`, `u`
/// uniform in [-1, 1) from the top 24 bits of splitmix64(index).
fn draw(start: u64, count: usize, a: f64, b: f64) -> Vec<f32> {
    (0..count as u64)
        .map(|i| {
            let mut z = (start + i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let u = (z >> 40) as f64 * (-23f64).exp2() - 1.0;
            (a + b * u) as f32
        })
        .collect()
}

/// The script's `IMAGE_START`: the input image's draws start there.
const IMAGE_START: u64 = 1 << 40;

/// A drawn model's folder under the test's scratch directory: its model files and
/// `weights.bin` rebuilt from the committed `weights.txt`.
fn drawn_model(name: &str) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/onnx")
        .join(name);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("drawn-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = std::fs::read_to_string(src.join("weights.txt")).unwrap();
    let mut bytes = Vec::new();
    for line in manifest.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 4, "{name}: weights.txt line `{line}`");
        let (start, count): (u64, usize) = (f[0].parse().unwrap(), f[1].parse().unwrap());
        let (a, b): (f64, f64) = (f[2].parse().unwrap(), f[3].parse().unwrap());
        assert_eq!(start * 4, bytes.len() as u64, "{name}: regions end to end");
        for v in draw(start, count, a, b) {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(dir.join("weights.bin"), bytes).unwrap();
    for file in ["model.onnx", "model_64.onnx"] {
        std::fs::copy(src.join(file), dir.join(file)).unwrap();
    }
    dir
}

/// `name`'s model at `size`x`size` on each of `configs`, against ONNX Runtime's logits
/// for the drawn image.
fn check_drawn(name: &str, dir: &Path, size: usize, configs: &[(&str, Options)]) {
    let (file, suffix) = match size {
        224 => ("model.onnx".to_string(), String::new()),
        s => (format!("model_{s}.onnx"), format!("_{s}")),
    };
    let model = ferrite::onnx::load(dir.join(&file))
        .unwrap_or_else(|e| panic!("{name} {file}: import failed: {e}"));
    let image = Tensor::from_vec(
        &[1, 3, size, size],
        draw(IMAGE_START, 3 * size * size, 0.0, 1.0),
    )
    .unwrap();
    let expected = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/onnx")
        .join(name)
        .join(format!("expected/logits{suffix}.npy"));
    let want = ferrite::files::read_npy(&expected, 1 << 30).unwrap();
    for (label, opts) in configs {
        let exe = ferrite::compile_ir(&model.graph, opts)
            .unwrap_or_else(|e| panic!("{name} {size} on {label}: compile failed: {e}"));
        let got = exe
            .run(std::slice::from_ref(&image))
            .unwrap_or_else(|e| panic!("{name} {size} on {label}: run failed: {e}"));
        assert_eq!(got.len(), 1, "{name} {size} on {label}: output count");
        if let Err(m) = close(&got[0], &want) {
            panic!("{name} {size} on {label}: logits: {m}");
        }
    }
}

fn check_full_size(name: &str) {
    let dir = drawn_model(name);
    let cpu = |threads| Options::default().target(Target::Cpu).threads(threads);
    check_drawn(
        name,
        &dir,
        224,
        &[("cpu", cpu(1)), ("cpu, 3 threads", cpu(3))],
    );
    check_drawn(
        name,
        &dir,
        64,
        &[
            ("interp", Options::default().target(Target::Interp)),
            ("cpu, unfused", cpu(1).fuse(false)),
            ("sim", Options::default().target(Target::Sim)),
        ],
    );
}

#[test]
fn resnet18_matches_onnx_runtime() {
    check_full_size("resnet18");
}

#[test]
fn mobilenetv2_matches_onnx_runtime() {
    check_full_size("mobilenetv2");
}

/// The Rust `draw` is the script's, value for value (numpy's shortest f32 reprs of these).
#[test]
fn draw_matches_the_export_script() {
    assert_eq!(
        draw(0, 3, 0.0, 1.0),
        [0.766_621_6, -0.136_944_06, -0.947_132_47]
    );
    assert_eq!(draw(IMAGE_START, 2, 0.5, 0.25), [0.299_248_4, 0.272_698_28]);
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
