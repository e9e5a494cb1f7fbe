#!/usr/bin/env bash
# Build a second copy of the engine (llama-cpp-python) with llama.cpp's Vulkan backend into
# ENGINE_DIR (default: .engines/vulkan), outside the default install. deskllm uses it when
# DESKLLM_ENGINE_DIR points there (tests of real GPU offload on Mesa lavapipe use it).
#
# Debian 12's Vulkan headers (1.3.239) are too old for this llama.cpp (vk::LayerSettingEXT is
# missing). Newer headers are taken from Debian 13 (trixie) packages, downloaded with apt and
# unpacked into a build folder: nothing is installed from trixie. Debian 12's glslc, glslang
# and Vulkan loader are used as they are.
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINE_DIR="${ENGINE_DIR:-.engines/vulkan}"
LLAMA_CPP_PYTHON="${LLAMA_CPP_PYTHON:-llama-cpp-python==0.3.36}"
PYTHON="${PYTHON:-.venv/bin/python}"
WORK="${WORK:-build/vulkan-sdk}"

if [ -f "$ENGINE_DIR/.built" ] && [ "$(cat "$ENGINE_DIR/.built")" = "$LLAMA_CPP_PYTHON" ]; then
    echo "Vulkan engine already built in $ENGINE_DIR" >&2
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
if ! command -v glslc >/dev/null || ! dpkg -s libvulkan1 >/dev/null 2>&1; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends glslc glslang-tools libvulkan1 \
        mesa-vulkan-drivers
fi

mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
if [ ! -f "$WORK/usr/include/vulkan/vulkan.hpp" ]; then
    # A private apt configuration that knows the trixie suite of the same mirror.
    apt_dir="$WORK/apt"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$WORK/debs"
    mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
    mirror="${mirror:-http://deb.debian.org/debian}"
    cat > "$apt_dir/sources.list" <<SOURCES
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main
SOURCES
    apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=-"
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
        -o "Debug::NoLocking=1")
    apt-get "${apt_opts[@]}" update -q
    (cd "$WORK/debs" && apt-get "${apt_opts[@]}" download libvulkan-dev spirv-headers)
    for deb in "$WORK"/debs/*.deb; do dpkg -x "$deb" "$WORK"; done
fi
# The unpacked libvulkan.so symlink points into the build folder; link against the system's
# loader instead.
loader="$(ldconfig -p | sed -n 's/.*libvulkan.so.1 (libc6,x86-64) => //p' | head -1)"
loader="${loader:-/usr/lib/x86_64-linux-gnu/libvulkan.so.1}"

export CMAKE_ARGS="-DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR=$WORK/usr/include \
-DVulkan_LIBRARY=$loader -DCMAKE_PREFIX_PATH=$WORK/usr -DCMAKE_CXX_FLAGS=-I$WORK/usr/include"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
rm -rf "$ENGINE_DIR"
mkdir -p "$ENGINE_DIR"
# --no-cache-dir: the wheel cache would hand back the CPU-only build of the same version.
"$PYTHON" -m pip install --no-deps --no-cache-dir --target "$ENGINE_DIR" "$LLAMA_CPP_PYTHON"
echo "$LLAMA_CPP_PYTHON" > "$ENGINE_DIR/.built"
echo "Vulkan engine built in $ENGINE_DIR" >&2
