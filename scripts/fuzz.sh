#!/bin/sh
# Coverage-guided fuzzing with AFL++ through cargo-afl: scripts/fuzz.sh TARGET SECONDS
#
# TARGET is one of fg_parser, npy_decoder, tile_kernels, onnx_import (the harnesses in
# fuzz/src/bin, each a wrapper of tests/targets/mod.rs). Needs `cargo install cargo-afl
# --version 0.18.2` once (it builds its own AFL++ on stable Rust); CI does not. Builds the
# harness instrumented (fuzz/target), seeds a corpus from the repository's own files (and
# the cached ONNX node tests for onnx_import), runs afl-fuzz for SECONDS at nice 19, and
# prints the executions, crashes and hangs. Findings: fuzz/target/afl/TARGET/default/
# {crashes,hangs}; replay one with `fuzz/target/release/TARGET < FILE`.
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 TARGET SECONDS (TARGET: fg_parser npy_decoder tile_kernels onnx_import)" >&2
    exit 2
fi
target=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"

case $target in
    fg_parser | npy_decoder | tile_kernels | onnx_import) ;;
    *) echo "$0: unknown target $target" >&2; exit 2 ;;
esac

nice -n 19 cargo afl build --release --bin "$target"

corpus="target/corpus/$target"
rm -rf "$corpus"
mkdir -p "$corpus"
seed() { # copy files named like $2 under the repository folder $1, at most 16 KiB each
    find "$root/$1" -name "$2" -size -16k -type f 2>/dev/null | while read -r f; do
        cp "$f" "$corpus/$(echo "$f" | sed "s|$root/||; s|/|_|g")"
    done
}
npy() { # name, descr, shape, data bytes (printf escapes)
    header="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
    pad=$(( 64 - (10 + ${#header} + 1) % 64 ))
    { printf '\223NUMPY\001\000'
      len=$(( ${#header} + pad + 1 ))
      printf "\\$(printf %03o $((len % 256)))\\$(printf %03o $((len / 256)))"
      printf '%s' "$header"; printf "%${pad}s" ''; printf '\n'; printf "$4"; } > "$corpus/$1.npy"
}
case $target in
    fg_parser)
        for d in examples tests/parse tests/errors passes/tests/golden; do seed "$d" '*.fg'; done ;;
    tile_kernels)
        for d in examples/kernels tests/filetests; do seed "$d" '*.tile'; done ;;
    npy_decoder)
        npy f32 '<f4' '(2,)' '\000\000\200\077\000\000\000\300'
        npy i64 '<i8' '(1, 1)' '\007\000\000\000\000\000\000\000'
        npy bool '|b1' '(3,)' '\001\000\001'
        npy f16 '<f2' '()' '\000\074' ;;
    onnx_import)
        node="${XDG_CACHE_HOME:-$HOME/.cache}/ferrite/onnx-1.22.0/onnx/backend/test/data/node"
        if [ -d "$node" ]; then
            # One model per op family is plenty for AFL++; it finds the rest.
            find "$node" -name model.onnx -size -4k | sort | awk 'NR % 8 == 0' | while read -r f; do
                cp "$f" "$corpus/$(basename "$(dirname "$f")").onnx"
            done
        fi ;;
esac
if [ -z "$(ls "$corpus")" ]; then
    echo "$0: no seeds for $target" >&2
    exit 1
fi

out="target/afl/$target"
rm -rf "$out"
mkdir -p target/afl  # afl-fuzz makes only the last component
AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_NO_AFFINITY=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_AUTORESUME=0 \
    nice -n 19 cargo afl fuzz -V "$seconds" -t 20000 -i "$corpus" -o "$out" \
    "target/release/$target" > "target/afl-$target.log" 2>&1 || true
stats="$out/default/fuzzer_stats"
if [ ! -f "$stats" ]; then
    echo "$0: afl-fuzz did not run; see fuzz/target/afl-$target.log" >&2
    tail -20 "target/afl-$target.log" >&2
    exit 1
fi
grep -E '^(run_time|execs_done|execs_per_sec|corpus_count|saved_crashes|saved_hangs|bitmap_cvg)' "$stats"
