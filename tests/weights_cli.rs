//! The `ferrite` binary on graphs with a safetensors weights file: the committed example
//! runs, and hostile weights files (missing tensors, mismatched declarations, lying
//! headers, non-files, paths leaving the graph's folder) exit 1 with a located message.

mod common;
use common::{assert_exit, ferrite, stderr, stdout, Scratch};

/// A safetensors file holding `w`, an f32[2, 2] of 1, 2, 3, 4.
fn safetensors_w() -> Vec<u8> {
    let header = br#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#;
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header);
    for v in [1.0f32, 2.0, 3.0, 4.0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn graph(weights: &str, constant: &str) -> String {
    format!("weights \"{weights}\"\ngraph g(x: f32[2]) {{\n  w = {constant}\n  return matmul(x, w)\n}}\n")
}

#[test]
fn the_weights_example_runs() {
    let o = ferrite(&["run", "examples/weights/mlp.fg"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("f32[4, 10]"), "{}", stdout(&o));
    let o = ferrite(&["run", "examples/weights/mlp.fg", "--target", "sim"]);
    assert_exit(&o, 0);
    let o = ferrite(&["check", "examples/weights/mlp.fg"]);
    assert_exit(&o, 0);
    let o = ferrite(&["profile", "examples/weights/mlp.fg", "--target", "sim"]);
    assert_exit(&o, 0);
}

#[test]
fn a_good_weights_file_runs_and_bad_ones_are_located_errors() {
    let s = Scratch::new("weights-cli");
    s.file("w.safetensors", safetensors_w());
    let ok = s.file(
        "ok.fg",
        graph(
            "w.safetensors",
            "constant(name=\"w\", dtype=f32, shape=[2, 2])",
        ),
    );
    let o = ferrite(&["run", &ok, "--out", &s.path("out")]);
    assert_exit(&o, 0);

    let mut lying = safetensors_w();
    lying.truncate(lying.len() - 4);
    s.file("short.safetensors", lying);
    let mut huge = safetensors_w();
    huge[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    s.file("huge.safetensors", huge);
    std::fs::create_dir_all(s.path("dir.safetensors")).unwrap();
    let outside = Scratch::new("weights-cli-outside");
    let target = outside.file("w.safetensors", safetensors_w());
    std::os::unix::fs::symlink(&target, s.path("link.safetensors")).unwrap();

    let c = "constant(name=\"w\")";
    // (file, constant, line:col, what the message says)
    let cases = [
        (
            "w.safetensors",
            "constant(name=\"v\")",
            "3:16",
            "has no tensor named \"v\"",
        ),
        (
            "w.safetensors",
            "constant(name=\"w\", dtype=i64)",
            "3:26",
            "is declared i64",
        ),
        (
            "w.safetensors",
            "constant(name=\"w\", shape=[4])",
            "3:26",
            "declared with shape [4]",
        ),
        (
            "short.safetensors",
            c,
            "1:9",
            "do not cover exactly the data in the file",
        ),
        (
            "huge.safetensors",
            c,
            "1:9",
            "the header declares 1099511627776 bytes",
        ),
        ("dir.safetensors", c, "1:9", "not a regular file"),
        ("missing.safetensors", c, "1:9", "cannot open"),
        ("/etc/passwd", c, "1:9", "an absolute path is refused"),
        ("../w.safetensors", c, "1:9", "a path with `..` is refused"),
        ("link.safetensors", c, "1:9", "outside the graph's folder"),
    ];
    for (i, (file, constant, at, says)) in cases.iter().enumerate() {
        let fg = s.file(&format!("bad{i}.fg"), graph(file, constant));
        for cmd in ["check", "run"] {
            let o = ferrite(&[cmd, &fg]);
            assert_exit(&o, 1);
            let err = stderr(&o);
            let first = err.lines().next().unwrap_or_default();
            assert!(
                first.starts_with(&format!("{fg}:{at}: error: ")) && first.contains(says),
                "{file} {constant}: {err}"
            );
        }
    }
}
