#!/usr/bin/env bash
# Build llama.cpp's own `llama-server` and `llama-batched-bench`, CPU only, into OUT_DIR
# (default build/llama-server), from the llama.cpp sources vendored in the llama-cpp-python
# sdist of the version installed in the venv: the same sources the engine runs (packaging/lib/
# llama_sources.sh says how). They are the yardstick of `deskllm serve` (bench/serve.py) and a
# remote engine in the tests. On a CPU whose extra buffer types crash (deskllm's probe finds
# it: deskllm/engine/extra_bufts_probe.py) run the server with `--no-repack`, as the engine
# turns them off.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=packaging/lib/llama_sources.sh
. packaging/lib/llama_sources.sh

OUT_DIR="${OUT_DIR:-build/llama-server}"
PYTHON="${PYTHON:-.venv/bin/python}"
stamp="llama-cpp-python==$(llama_tools_version "$PYTHON") native"
if [ -x "$OUT_DIR/llama-server" ] && [ -x "$OUT_DIR/llama-batched-bench" ] &&
    [ "$(cat "$OUT_DIR/.built" 2>/dev/null)" = "$stamp" ]; then
    echo "llama-server already built in $OUT_DIR" >&2
    exit 0
fi

bin="$(llama_tools_build "$PYTHON" llama-server llama-batched-bench)"
mkdir -p "$OUT_DIR"
cp "$bin/llama-server" "$bin/llama-batched-bench" "$OUT_DIR/"
echo "$stamp" > "$OUT_DIR/.built"
echo "llama-server built in $OUT_DIR ($stamp)" >&2
