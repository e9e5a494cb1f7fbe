#!/usr/bin/env bash
# Build llama.cpp's own `llama-perplexity` tool, CPU only, into TOOLS_DIR (default
# .engines/tools), from the llama.cpp sources vendored in the llama-cpp-python sdist of the
# version installed in the venv: the same sources the engine runs. The tests check
# `deskllm quality` against its --kl-divergence numbers. Only that one target is built:
#   GGML_NATIVE=ON        this machine's instruction set (the tool never leaves it);
#   BUILD_SHARED_LIBS=OFF one self-contained binary;
#   LLAMA_OPENSSL=OFF     no HTTPS model downloads (this llama.cpp's successor of LLAMA_CURL).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS_DIR="${TOOLS_DIR:-.engines/tools}"
PYTHON="${PYTHON:-.venv/bin/python}"
WORK="${WORK:-build/llama-perplexity}"
version="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')"
stamp="llama-cpp-python==$version native"
if [ -x "$TOOLS_DIR/llama-perplexity" ] && [ "$(cat "$TOOLS_DIR/.built" 2>/dev/null)" = "$stamp" ]
then
    echo "llama-perplexity already built in $TOOLS_DIR" >&2
    exit 0
fi

mkdir -p "$WORK"
sdist="$WORK/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: --dest "$WORK" \
        "llama-cpp-python==$version"
fi
src="$WORK/llama_cpp_python-$version"
if [ ! -d "$src/vendor/llama.cpp" ]; then
    tar -xzf "$sdist" -C "$WORK"
fi

generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$src/vendor/llama.cpp" -B "$WORK/cmake" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF \
    >/dev/null
cmake --build "$WORK/cmake" --target llama-perplexity \
    --parallel "${CMAKE_BUILD_PARALLEL_LEVEL:-$(getconf _NPROCESSORS_ONLN)}"
mkdir -p "$TOOLS_DIR"
cp "$WORK/cmake/bin/llama-perplexity" "$TOOLS_DIR/llama-perplexity"
echo "$stamp" > "$TOOLS_DIR/.built"
echo "llama-perplexity built in $TOOLS_DIR ($stamp)" >&2
