#!/usr/bin/env bash
# Build llama.cpp's own `llama-perplexity` tool, CPU only, into TOOLS_DIR (default
# .engines/tools), from the llama.cpp sources vendored in the llama-cpp-python sdist of the
# version installed in the venv: the same sources the engine runs (packaging/lib/
# llama_sources.sh says how). The tests check `deskllm quality` against its --kl-divergence
# numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=packaging/lib/llama_sources.sh
. packaging/lib/llama_sources.sh

TOOLS_DIR="${TOOLS_DIR:-.engines/tools}"
PYTHON="${PYTHON:-.venv/bin/python}"
stamp="llama-cpp-python==$(llama_tools_version "$PYTHON") native"
if [ -x "$TOOLS_DIR/llama-perplexity" ] && [ "$(cat "$TOOLS_DIR/.built" 2>/dev/null)" = "$stamp" ]
then
    echo "llama-perplexity already built in $TOOLS_DIR" >&2
    exit 0
fi

bin="$(llama_tools_build "$PYTHON" llama-perplexity)"
mkdir -p "$TOOLS_DIR"
cp "$bin/llama-perplexity" "$TOOLS_DIR/llama-perplexity"
echo "$stamp" > "$TOOLS_DIR/.built"
echo "llama-perplexity built in $TOOLS_DIR ($stamp)" >&2
