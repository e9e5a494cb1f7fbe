# shellcheck shell=bash
# Sourced by packaging/build_release_engine.sh. `vulkan_sdk WORK_DIR` prints the CMake arguments
# that build llama.cpp's Vulkan backend, or nothing (saying why on stderr) where it cannot be
# built, so that the caller builds without it. In order:
#  - a LunarG Vulkan SDK named by VULKAN_SDK (Windows, macOS, any Linux): CMake finds it;
#  - system headers new enough for this llama.cpp (it uses vk::LayerSettingEXT) and glslc;
#  - Debian/Ubuntu with apt: glslc, glslang and the loader are installed, and Debian 13's
#    libvulkan-dev and spirv-headers packages are downloaded with a private apt configuration
#    and unpacked into WORK_DIR (nothing from Debian 13 is installed): Debian 12's own headers
#    (1.3.239) are too old.
vulkan_sdk() {
    local work="$1"
    if [ -n "${VULKAN_SDK:-}" ]; then
        echo "-DGGML_VULKAN=ON"
        return 0
    fi
    if command -v glslc >/dev/null &&
        grep -qs LayerSettingEXT /usr/include/vulkan/vulkan_structs.hpp; then
        echo "-DGGML_VULKAN=ON"
        return 0
    fi
    if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
        echo "no apt here: building without the Vulkan backend" >&2
        return 0
    fi
    if ! command -v glslc >/dev/null || ! dpkg -s libvulkan1 >/dev/null 2>&1; then
        if ! { DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                glslc glslang-tools libvulkan1 mesa-vulkan-drivers >&2; }; then
            echo "could not install glslc and the Vulkan loader: building without Vulkan" >&2
            return 0
        fi
    fi
    mkdir -p "$work"
    work="$(cd "$work" && pwd)"
    if [ ! -f "$work/usr/include/vulkan/vulkan.hpp" ]; then
        local apt_dir="$work/apt" mirror
        mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$work/debs"
        mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null |
            head -1)"
        mirror="${mirror:-http://deb.debian.org/debian}"
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" \
            > "$apt_dir/sources.list"
        local apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=-"
            -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
            -o "Debug::NoLocking=1")
        if ! { apt-get "${apt_opts[@]}" update -q >&2 &&
            (cd "$work/debs" && apt-get "${apt_opts[@]}" download libvulkan-dev spirv-headers >&2); }
        then
            echo "could not fetch newer Vulkan headers: building without Vulkan" >&2
            return 0
        fi
        local deb
        for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$work"; done
    fi
    # The unpacked libvulkan.so symlink points into the build folder; link against the
    # system's loader instead.
    local loader
    loader="$(ldconfig -p | sed -n 's/.*libvulkan.so.1 (libc6,x86-64) => //p' | head -1)"
    loader="${loader:-/usr/lib/x86_64-linux-gnu/libvulkan.so.1}"
    echo "-DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR=$work/usr/include -DVulkan_LIBRARY=$loader" \
        "-DCMAKE_PREFIX_PATH=$work/usr -DCMAKE_CXX_FLAGS=-I$work/usr/include"
}
