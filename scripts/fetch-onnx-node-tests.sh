#!/usr/bin/env bash
# Fetches the ONNX backend node tests of the onnx 1.22.0 wheel into a cache outside
# the checkout (they are never committed): pip downloads the wheel, unzip takes
# onnx/backend/test/data/node/ out of it. tests/onnx_node.rs reads them from there.
# Idempotent: does nothing when the tests are already unpacked.
set -euo pipefail
version=1.22.0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ferrite/onnx-$version"
node="$cache/onnx/backend/test/data/node"
if [ -f "$cache/.complete" ]; then
    echo "ONNX node tests: $node"
    exit 0
fi
mkdir -p "$cache"
wheel="$(ls "$cache"/onnx-$version-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$wheel" ]; then
    # The node tests are the same in every wheel; ask for one platform so that the
    # download does not depend on the local Python.
    pip download "onnx==$version" --no-deps --only-binary=:all: \
        --python-version 3.12 --platform manylinux_2_28_x86_64 -d "$cache" >&2
    wheel="$(ls "$cache"/onnx-$version-*.whl | head -n1)"
fi
rm -rf "$cache/onnx"
python3 - "$wheel" "$cache" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("onnx/backend/test/data/node/")]
    z.extractall(dest, names)
print(f"unpacked {len(names)} files", file=sys.stderr)
PY
touch "$cache/.complete"
echo "ONNX node tests: $node"
