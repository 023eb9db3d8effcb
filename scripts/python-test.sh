#!/usr/bin/env bash
# Builds the `ferrite` Python package (python/) into a virtual environment and runs its
# pytest suite. The environment (maturin, numpy, pytest, ml-dtypes for bf16 arrays and mypy
# for the stubtest of the type stubs, from the Python registry) is kept in
# ${XDG_CACHE_HOME:-$HOME/.cache}/ferrite/venv-python, outside the checkout, so reruns only
# rebuild the extension. The torch tests (python/tests/test_dynamo.py) run when torch (and
# transformers) are installed there too. `FERRITE_PYTHON` picks the interpreter (default
# python3, 3.9 or later); pytest arguments pass through (`scripts/python-test.sh -k profile`).
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

export VIRTUAL_ENV="$venv"
export PATH="$venv/bin:$PATH"
(cd python && maturin develop --quiet --locked)
python -m pytest python/tests -q "$@"
