#!/usr/bin/env bash
# Engine speed and prompt-cache figures as one JSON object (see bench/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
./dev setup >&2
exec .venv/bin/deskllm bench --json "$@"
