#!/usr/bin/env bash
# Fail unless the release engine in ENGINE_DIR (default .engines/release) has the GPU backend of
# this platform: Vulkan on Linux and Windows, Metal on macOS. build_release_engine.sh builds
# without it where it cannot be built (and says so once, easily missed in a long log), and an
# installer made from that engine would run every model on the CPU. Both its BUILD_INFO and the
# backend library itself are checked.
#     packaging/check_release_engine.sh [--cpu-only] [ENGINE_DIR]
# --cpu-only (or CPU_ONLY=1): a CPU-only package is wanted; the check only reports.
# GPU_BACKEND=vulkan|metal overrides the platform's backend (the tests check both anywhere).
set -euo pipefail

cpu_only="${CPU_ONLY:-0}"
engine_dir=""
for arg in "$@"; do
    case "$arg" in
        --cpu-only) cpu_only=1 ;;
        -*) echo "usage: $0 [--cpu-only] [ENGINE_DIR]" >&2; exit 2 ;;
        *) engine_dir="$arg" ;;
    esac
done
engine_dir="${engine_dir:-${ENGINE_DIR:-.engines/release}}"
case "$(uname -s)" in
    Darwin) default_backend=metal ;;
    *) default_backend=vulkan ;;
esac
backend="${GPU_BACKEND:-$default_backend}"
case "$backend" in
    vulkan) name=Vulkan ;;
    metal) name=Metal ;;
    *) echo "GPU_BACKEND must be vulkan or metal, not '$backend'" >&2; exit 2 ;;
esac

info_file="$engine_dir/BUILD_INFO"
backends=""
if [ -f "$info_file" ]; then
    backends="$(sed -n 's/.*"backends": *"\([^"]*\)".*/\1/p' "$info_file")"
fi
problem=""
if [ ! -f "$info_file" ]; then
    problem="$info_file is missing (not a release engine build)"
elif ! [[ " $backends " =~ [[:space:]]$backend[[:space:]] ]]; then
    problem="its BUILD_INFO lists no $name backend (backends: ${backends:-none})"
elif ! compgen -G "$engine_dir/llama_cpp/lib/*ggml-$backend*" >/dev/null; then
    problem="its BUILD_INFO lists $name but $engine_dir/llama_cpp/lib has no ggml-$backend library"
fi

if [ -z "$problem" ]; then
    echo "release engine in $engine_dir: $name backend present ($backends)" >&2
elif [ "$cpu_only" = 1 ]; then
    echo "NOTE: CPU-only release engine, as asked (--cpu-only): $problem" >&2
else
    cat >&2 <<MESSAGE
ERROR: the release engine in $engine_dir has no $name backend: $problem.
An installer made from it would run every model on the CPU. See "What each build needs" in
packaging/README.md for what the $name backend needs, then delete $engine_dir and build again;
or pass --cpu-only (CPU_ONLY=1) to make a CPU-only package on purpose.
MESSAGE
    exit 1
fi
