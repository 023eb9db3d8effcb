#!/usr/bin/env bash
# Builds the `ferrite` Python package (python/) into a virtual environment and runs its
# pytest suite. The environment is kept in ${XDG_CACHE_HOME:-$HOME/.cache}/ferrite/venv-python,
# outside the checkout, so reruns only rebuild the extension. It holds, from the Python
# registry: maturin, numpy, pytest, ml-dtypes (bf16 arrays) and mypy (the stubtest of the type
# stubs), and torch and transformers at pinned versions for the torch.compile backend's tests
# (python/tests/test_dynamo.py). The registry's Linux torch wheel brings its CUDA libraries
# (about 4 GB installed; the tests use the CPU only): a first run on a clean machine spends
# a few minutes installing, later runs reuse the environment.
#
# FERRITE_TORCH=0 leaves torch out (a quick environment for the rest; the torch tests are then
# skipped). Otherwise the torch tests must run: FERRITE_REQUIRE_TORCH=1 makes a missing torch
# fail them instead of skipping. `FERRITE_PYTHON` picks the interpreter (default python3, 3.9
# or later); pytest arguments pass through (`scripts/python-test.sh -k profile`).
#
# The extension is built in the dev profile, the workspace's own (opt-level 1, dependencies
# at 2), so that it shares target/ with `cargo test`; the tests run small graphs, where
# compile and run times are milliseconds either way.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cache="${XDG_CACHE_HOME:-$HOME/.cache}/ferrite"
venv="$cache/venv-python"
python="${FERRITE_PYTHON:-python3}"
# Bump when the requirements change, so that old environments are rebuilt.
requirements="maturin>=1.9,<2 numpy>=1.21 pytest>=7 ml-dtypes>=0.3 mypy>=1.10"
stamp="$venv/.ferrite-requirements"

if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]]; then
    rm -rf "$venv"
    mkdir -p "$cache"
    "$python" -m venv "$venv"
    # shellcheck disable=SC2086 # the list is words on purpose
    "$venv/bin/python" -m pip install --quiet --upgrade pip $requirements
    echo "$requirements" > "$stamp"
fi

# torch and transformers in a step of their own, so that a change of their pins reinstalls
# only them. Pinned: the backend follows torch's internal APIs (aot_autograd, the partitioner)
# and its tests transformers' model code, which both change between releases.
torch_requirements="torch==2.11.0 transformers==4.57.6"
torch_stamp="$venv/.ferrite-torch-requirements"
if [[ "${FERRITE_TORCH:-1}" != 0 ]]; then
    if [[ "$(cat "$torch_stamp" 2>/dev/null)" != "$torch_requirements" ]]; then
        echo "python-test: installing $torch_requirements into $venv (once)" >&2
        start=$SECONDS
        # shellcheck disable=SC2086 # the list is words on purpose
        "$venv/bin/python" -m pip install --quiet $torch_requirements
        echo "$torch_requirements" > "$torch_stamp"
        echo "python-test: torch installed in $((SECONDS - start)) s" >&2
    fi
    export FERRITE_REQUIRE_TORCH=1
fi

export VIRTUAL_ENV="$venv"
export PATH="$venv/bin:$PATH"
(cd python && maturin develop --quiet --locked)
python -m pytest python/tests -q "$@"
