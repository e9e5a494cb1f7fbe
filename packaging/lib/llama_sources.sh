# shellcheck shell=bash
# Sourced by the scripts that build llama.cpp's own tools (llama-perplexity, llama-server) from
# the llama.cpp sources vendored in the llama-cpp-python sdist of the version installed for
# PYTHON: the same sources the engine runs, so a tool built from them is a fair peer. One CMake
# build tree (BUILD_DIR, default build/llama-tools) serves every tool: ggml and libllama are
# compiled once. Options:
#   GGML_NATIVE=ON        this machine's instruction set (the tools never leave it);
#   BUILD_SHARED_LIBS=OFF self-contained binaries;
#   LLAMA_OPENSSL=OFF     no HTTPS model downloads (this llama.cpp's successor of LLAMA_CURL);
#   no web UI, no tests or examples, no GPU backend.

# `llama_tools_version PYTHON`: the installed llama-cpp-python's version.
llama_tools_version() {
    "$1" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))'
}

# `llama_tools_build PYTHON TARGET...`: build the targets; prints the directory of the binaries.
llama_tools_build() {
    local python="$1" version work sdist src
    shift
    version="$(llama_tools_version "$python")"
    work="${BUILD_DIR:-build/llama-tools}"
    mkdir -p "$work"
    sdist="$work/llama_cpp_python-$version.tar.gz"
    if [ ! -f "$sdist" ]; then
        "$python" -m pip download --quiet --no-deps --no-binary :all: --dest "$work" \
            "llama-cpp-python==$version" >&2
    fi
    src="$work/llama_cpp_python-$version"
    if [ ! -d "$src/vendor/llama.cpp" ]; then
        tar -xzf "$sdist" -C "$work"
    fi
    local generator=()
    if command -v ninja >/dev/null; then generator=(-G Ninja); fi
    cmake -S "$src/vendor/llama.cpp" -B "$work/cmake-$version" "${generator[@]}" \
        -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DGGML_VULKAN=OFF -DGGML_METAL=OFF >/dev/null
    cmake --build "$work/cmake-$version" --target "$@" \
        --parallel "${CMAKE_BUILD_PARALLEL_LEVEL:-$(getconf _NPROCESSORS_ONLN)}" >&2
    echo "$work/cmake-$version/bin"
}
