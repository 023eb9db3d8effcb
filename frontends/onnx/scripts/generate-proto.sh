#!/usr/bin/env bash
# Regenerates src/onnx.pb.rs from proto/onnx.proto with protox + prost-build (pure
# Rust, no protoc), in a throwaway crate outside the repository. Run it after
# replacing proto/onnx.proto (taken from the onnx wheel: onnx/onnx.proto).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/out"
cat > "$work/Cargo.toml" <<'TOML'
[package]
name = "onnxgen"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
prost-build = "0.14"
protox = "0.9"
TOML
cat > "$work/src/main.rs" <<'RS'
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (dir, out) = (&args[1], &args[2]);
    let fds = protox::compile([format!("{dir}/onnx.proto")], [dir.as_str()]).expect("compile onnx.proto");
    // A tensor's raw_data as `Bytes`: decoded from a `Bytes` buffer it is a slice of the
    // model's bytes, not a copy (weights are most of a model file).
    prost_build::Config::new()
        .bytes([".onnx.TensorProto.raw_data"])
        .out_dir(out)
        .compile_fds(fds)
        .expect("generate");
}
RS
cargo run --quiet --release --manifest-path "$work/Cargo.toml" -- "$here/proto" "$work/out"
cp "$work/out/onnx.rs" "$here/src/onnx.pb.rs"
echo "wrote $here/src/onnx.pb.rs"
