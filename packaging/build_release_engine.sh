#!/usr/bin/env bash
# Build the engine (llama-cpp-python) for distribution into ENGINE_DIR (default
# .engines/release), outside the default install:
#   GGML_NATIVE=OFF          code for any CPU of the architecture, not for this build machine;
#   GGML_BACKEND_DL=ON       every backend is a library loaded at run time, so a missing GPU
#                            driver only disables that backend;
#   GGML_CPU_ALL_VARIANTS=ON one CPU library per instruction-set level; ggml loads the best
#                            one this CPU supports;
#   GGML_VULKAN=ON           (Linux, Windows) NVIDIA, AMD and Intel GPUs through one backend;
#   Metal                    (macOS) llama-cpp-python turns it on by itself.
# Where the Vulkan backend cannot be built (no headers, no glslc) the engine is built without
# it and the script says so; the installer scripts then stop (packaging/check_release_engine.sh)
# unless CPU_ONLY=1, which builds without any GPU backend (no Vulkan, no Metal) on purpose.
# deskllm uses the build when DESKLLM_ENGINE_DIR points at it; packaging/build_linux.sh freezes
# it into the app. BUILD_INFO in ENGINE_DIR lists the backend libraries that were built.
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINE_DIR="${ENGINE_DIR:-.engines/release}"
LLAMA_CPP_PYTHON="${LLAMA_CPP_PYTHON:-llama-cpp-python==0.3.36}"
PYTHON="${PYTHON:-.venv/bin/python}"
WORK="${WORK:-build/engine-sdk}"
VULKAN="${VULKAN:-auto}"   # auto | off
CPU_ONLY="${CPU_ONLY:-0}"  # 1: no GPU backend at all
stamp="$LLAMA_CPP_PYTHON vulkan=$VULKAN"
if [ "$CPU_ONLY" = 1 ]; then
    VULKAN=off
    stamp="$LLAMA_CPP_PYTHON cpu-only"
fi
if [ -f "$ENGINE_DIR/.built" ] && [ "$(cat "$ENGINE_DIR/.built")" = "$stamp" ]; then
    echo "release engine already built in $ENGINE_DIR" >&2
    exit 0
fi

cmake_args="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON"
case "$(uname -s)" in
    Darwin) if [ "$CPU_ONLY" = 1 ]; then cmake_args+=" -DGGML_METAL=OFF"; fi ;;
    *)
        vulkan_args=""
        if [ "$VULKAN" != off ]; then
            # shellcheck source=packaging/lib/vulkan_sdk.sh
            . packaging/lib/vulkan_sdk.sh
            vulkan_args="$(vulkan_sdk "$WORK")"
        fi
        if [ -n "$vulkan_args" ]; then
            cmake_args+=" $vulkan_args"
        else
            echo "NOTE: this engine build has no Vulkan backend (CPU only)" >&2
        fi
        ;;
esac

export CMAKE_ARGS="$cmake_args"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(getconf _NPROCESSORS_ONLN)}"
rm -rf "$ENGINE_DIR"
mkdir -p "$ENGINE_DIR"
echo "building $LLAMA_CPP_PYTHON with: $CMAKE_ARGS" >&2
# --no-cache-dir: the wheel cache would hand back the default build of the same version.
# A kept build folder makes a rebuild after a failure incremental.
build_dir="$(pwd)/build/release-engine-cmake"
if command -v cygpath >/dev/null; then build_dir="$(cygpath -m "$build_dir")"; fi  # Git bash
"$PYTHON" -m pip install --no-deps --no-cache-dir --target "$ENGINE_DIR" \
    --config-settings=build-dir="$build_dir" "$LLAMA_CPP_PYTHON"
# llama.cpp installs the run-time backend libraries (the CPU variants) into bin/;
# llama-cpp-python installs the rest into llama_cpp/lib. deskllm loads them all from there.
# (GGML_BACKEND_DIR cannot say so: CMake turns its relative path into a build-machine path.)
shopt -s nullglob
for module in "$ENGINE_DIR"/bin/*ggml-*; do
    mv -f "$module" "$ENGINE_DIR/llama_cpp/lib/"
done
shopt -u nullglob
# The top-level lib/, bin/ and include/ copies of the CMake install are not used.
rm -rf "${ENGINE_DIR:?}/lib" "${ENGINE_DIR:?}/bin" "${ENGINE_DIR:?}/include"
if ! ls "$ENGINE_DIR"/llama_cpp/lib/*ggml-cpu* >/dev/null 2>&1; then
    echo "no CPU backend library in $ENGINE_DIR/llama_cpp/lib: the build is unusable" >&2
    exit 1
fi
# The GPU backends are the libraries that were actually built, not the ones that were asked for.
backends="cpu(all variants)"
for gpu in vulkan metal; do
    if compgen -G "$ENGINE_DIR/llama_cpp/lib/*ggml-$gpu*" >/dev/null; then backends+=" $gpu"; fi
done
printf '{"llama_cpp_python": "%s", "backends": "%s", "cmake_args": "%s"}\n' \
    "$LLAMA_CPP_PYTHON" "$backends" "$CMAKE_ARGS" > "$ENGINE_DIR/BUILD_INFO"
echo "$stamp" > "$ENGINE_DIR/.built"
echo "release engine built in $ENGINE_DIR: $backends" >&2
ls "$ENGINE_DIR/llama_cpp/lib" >&2
