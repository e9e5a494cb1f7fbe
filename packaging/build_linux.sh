#!/usr/bin/env bash
# Build the Linux packages: the release engine (packaging/build_release_engine.sh; kept when
# already built), the frozen app with it, its self-test, then dist/deskllm_<version>_<arch>.deb
# (installs under /opt/deskllm, a `deskllm` command on the PATH, a menu entry with its icon)
# and a portable dist/deskllm-<version>-linux-<arch>.tar.gz of the same folder.
# The engine must have its Vulkan backend (packaging/check_release_engine.sh), unless a CPU-only
# package is asked for: --cpu-only (or CPU_ONLY=1) builds the engine without it on purpose.
#     ./packaging/build_linux.sh [--cpu-only]
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

PYTHON="${PYTHON:-.venv/bin/python}"
ENGINE_DIR="${ENGINE_DIR:-.engines/release}"
VERSION="$("$PYTHON" -c 'import deskllm; print(deskllm.__version__)')"
ARCH="$(dpkg --print-architecture 2>/dev/null || uname -m)"

ENGINE_DIR="$ENGINE_DIR" PYTHON="$PYTHON" ./packaging/build_release_engine.sh
./packaging/check_release_engine.sh "$ENGINE_DIR"
DESKLLM_ENGINE_DIR="$ENGINE_DIR" "$PYTHON" -m PyInstaller --noconfirm --log-level WARN \
    --distpath dist --workpath build/pyinstaller packaging/deskllm.spec
# The frozen folder must work before it is packaged (offscreen: no display needed).
self_test_home="$(mktemp -d)"
DESKLLM_HOME="$self_test_home" QT_QPA_PLATFORM=offscreen dist/deskllm/deskllm --self-test >&2
rm -rf "$self_test_home"

tar -C dist -czf "dist/deskllm-$VERSION-linux-$ARCH.tar.gz" deskllm

root="build/deb/deskllm"
rm -rf "$root"
mkdir -p "$root/DEBIAN" "$root/opt" "$root/usr/bin" "$root/usr/share/applications" \
    "$root/usr/share/icons/hicolor/scalable/apps" "$root/usr/share/icons/hicolor/256x256/apps"
cp -a dist/deskllm "$root/opt/deskllm"
ln -s /opt/deskllm/deskllm "$root/usr/bin/deskllm"
sed 's|^Exec=.*|Exec=/opt/deskllm/deskllm %F|' resources/deskllm.desktop \
    > "$root/usr/share/applications/deskllm.desktop"
cp resources/icons/deskllm.svg "$root/usr/share/icons/hicolor/scalable/apps/deskllm.svg"
cp resources/icons/deskllm.png "$root/usr/share/icons/hicolor/256x256/apps/deskllm.png"
size_kb="$(du -sk "$root" | cut -f1)"
cat > "$root/DEBIAN/control" <<CONTROL
Package: deskllm
Version: $VERSION
Architecture: $ARCH
Maintainer: deskllm developers <dev@deskllm.invalid>
Installed-Size: $size_kb
Depends: libc6, libegl1, libgl1, libfontconfig1, libxkbcommon0, libxkbcommon-x11-0, libglib2.0-0,
 libdbus-1-3, libxcb-cursor0, libxcb-icccm4, libxcb-keysyms1, libxcb-image0,
 libxcb-render-util0, libxcb-xkb1, libxcb-shape0
Recommends: libvulkan1, mesa-vulkan-drivers
Section: utils
Priority: optional
Description: Run large language models on your own computer
 A desktop app that finds out what this machine can run, picks and downloads a model that
 fits, and chats with it offline. A small starter model is included.
CONTROL
dpkg-deb --root-owner-group --build "$root" "dist/deskllm_${VERSION}_${ARCH}.deb" >/dev/null
ls -l "dist/deskllm_${VERSION}_${ARCH}.deb" "dist/deskllm-$VERSION-linux-$ARCH.tar.gz" >&2
