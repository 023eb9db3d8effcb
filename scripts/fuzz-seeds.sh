#!/bin/sh
# Many seeds of one stable-Rust fuzz target at once (tests/fuzz.rs), for a many-core machine:
#
#   scripts/fuzz-seeds.sh TARGET SECONDS PROCESSES [FIRST_SEED]
#
# TARGET is fg_parser, npy_decoder, tile_kernels, pipeline or onnx_models. Builds the fuzz
# test binary in release once, then runs PROCESSES copies of TARGET for SECONDS each, seeds
# FIRST_SEED, FIRST_SEED+1, ... (default 1), and prints each copy's cases, accepted inputs
# and failures; PROCESSES x SECONDS is the target's fuzzing time (16 copies for 225 s are an
# hour). `pipeline` runs without the huge inputs (FERRITE_FUZZ_NO_HUGE=1) unless HUGE=1 is
# set; `onnx_models` mutates the cached ONNX node tests when scripts/fetch-onnx-node-tests.sh
# has fetched them. Each copy writes its case in flight to target/fuzz-seeds/inflight-SEED
# first, so an abort (an allocation failure) leaves its input behind. Findings land in
# target/fuzz-findings/TARGET/; replay one with FERRITE_FUZZ_REPLAY=FILE (tests/fuzz.rs).
# Exits 1 when any copy failed.
set -eu

if [ $# -lt 3 ]; then
    echo "usage: $0 TARGET SECONDS PROCESSES [FIRST_SEED]" >&2
    exit 2
fi
target=$1
seconds=$2
procs=$3
first=${4:-1}
case $target in
    fg_parser | npy_decoder | tile_kernels | pipeline | onnx_models) ;;
    *) echo "$0: unknown target $target" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bin=$(cargo test --release --locked --test fuzz --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\/deps\/fuzz-[^"]*\)".*/\1/p' | tail -1)
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "$0: could not build the fuzz test binary (cargo test --release --test fuzz --no-run)" >&2
    exit 1
fi
logs=target/fuzz-seeds
mkdir -p "$logs"
rm -f "$logs/$target"-*.txt
if [ "$target" = pipeline ] && [ "${HUGE:-0}" != 1 ]; then
    export FERRITE_FUZZ_NO_HUGE=1
fi
i=0
while [ "$i" -lt "$procs" ]; do
    seed=$((first + i))
    FERRITE_FUZZ_SECONDS=$seconds FERRITE_FUZZ_SEED=$seed \
        FERRITE_FUZZ_INFLIGHT="$logs/inflight-$seed" \
        "$bin" --exact "$target" --test-threads 1 --nocapture \
        > "$logs/$target-$seed.txt" 2>&1 &
    i=$((i + 1))
done
wait
failed=0
for f in "$logs/$target"-*.txt; do
    line=$(grep -h "fuzz target $target:" "$f" | tail -1)
    if [ -z "$line" ]; then
        line="no summary (aborted? see $f and its inflight file)"
        failed=1
    fi
    case $line in *" 0 failures"*) ;; *) failed=1 ;; esac
    echo "$(basename "$f" .txt): $line"
done
exit $failed
