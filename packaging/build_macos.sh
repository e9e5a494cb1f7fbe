#!/usr/bin/env bash
# Build dist/deskllm-<version>-macos-<arch>.dmg on macOS: the release engine (Metal and the CPU
# variants of this architecture), the frozen deskllm.app, its self-test, then a disk image with
# the app and a link to /Applications to drag it onto. Needs Python 3.11+, Xcode's command-line
# tools and CMake. The app is signed ad hoc only: a downloaded copy must be opened with
# right-click > Open the first time until it is signed and notarized with a Developer ID.
# The engine must have its Metal backend (packaging/check_release_engine.sh), unless a CPU-only
# package is asked for: --cpu-only (or CPU_ONLY=1) builds the engine without it on purpose.
#     ./packaging/build_macos.sh [--cpu-only]
set -euo pipefail
cd "$(dirname "$0")/.."

CPU_ONLY="${CPU_ONLY:-0}"
for arg in "$@"; do
    case "$arg" in
        --cpu-only) CPU_ONLY=1 ;;
        *) echo "usage: $0 [--cpu-only]" >&2; exit 2 ;;
    esac
done
export CPU_ONLY

./dev setup
PYTHON=.venv/bin/python
VERSION="$("$PYTHON" -c 'import deskllm; print(deskllm.__version__)')"
./packaging/build_release_engine.sh
./packaging/check_release_engine.sh .engines/release

DESKLLM_ENGINE_DIR=.engines/release "$PYTHON" -m PyInstaller --noconfirm --log-level WARN \
    --distpath dist --workpath build/pyinstaller packaging/deskllm.spec
self_test_home="$(mktemp -d)"  # not the user's own data
DESKLLM_HOME="$self_test_home" QT_QPA_PLATFORM=offscreen \
    dist/deskllm.app/Contents/MacOS/deskllm --self-test
rm -rf "$self_test_home"

stage=build/dmg
rm -rf "$stage"
mkdir -p "$stage"
cp -R dist/deskllm.app "$stage/"
ln -s /Applications "$stage/Applications"
dmg="dist/deskllm-$VERSION-macos-$(uname -m).dmg"
rm -f "$dmg"
hdiutil create -volname deskllm -srcfolder "$stage" -ov -format UDZO "$dmg"
ls -l "$dmg" >&2
