"""The CPU: name, core counts and the instruction sets llama.cpp's CPU backend uses.

Read the native way per OS: /proc/cpuinfo on Linux, sysctl on macOS, CPUID (with
IsProcessorFeaturePresent as the fallback) on Windows.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys
from collections.abc import Iterable
from pathlib import Path

import psutil

from deskllm.hardware import cpuid
from deskllm.hardware.report import CpuInfo

# Our names, in the order a reader expects them.
X86_FEATURES = (
    "SSE3",
    "SSSE3",
    "SSE4_2",
    "AVX",
    "FMA",
    "F16C",
    "AVX2",
    "AVX_VNNI",
    "AVX512F",
    "AVX512BW",
    "AVX512VBMI",
    "AVX512VNNI",
    "AVX512BF16",
    "AMX_BF16",
    "AMX_TILE",
    "AMX_INT8",
)
ARM_FEATURES = ("NEON", "FP16", "DOTPROD", "I8MM", "SVE", "SVE2", "SME")
FEATURE_NAMES = X86_FEATURES + ARM_FEATURES

# /proc/cpuinfo flag -> our name. The kernel lists a flag only when it can use it.
_LINUX_X86_FLAGS = {
    "pni": "SSE3",
    "ssse3": "SSSE3",
    "sse4_2": "SSE4_2",
    "avx": "AVX",
    "fma": "FMA",
    "f16c": "F16C",
    "avx2": "AVX2",
    "avx_vnni": "AVX_VNNI",
    "avx512f": "AVX512F",
    "avx512bw": "AVX512BW",
    "avx512vbmi": "AVX512VBMI",
    "avx512_vnni": "AVX512VNNI",
    "avx512_bf16": "AVX512BF16",
    "amx_bf16": "AMX_BF16",
    "amx_tile": "AMX_TILE",
    "amx_int8": "AMX_INT8",
}
_LINUX_ARM_FLAGS = {
    "asimd": "NEON",
    "asimdhp": "FP16",
    "asimddp": "DOTPROD",
    "i8mm": "I8MM",
    "sve": "SVE",
    "sve2": "SVE2",
    "sme": "SME",
}
# macOS sysctl names (Intel: words of machdep.cpu.features / leaf7_features).
_MAC_X86_WORDS = {
    "SSE3": "SSE3",
    "SSSE3": "SSSE3",
    "SSE4.2": "SSE4_2",
    "AVX1.0": "AVX",
    "FMA": "FMA",
    "F16C": "F16C",
    "AVX2": "AVX2",
    "AVX512F": "AVX512F",
    "AVX512BW": "AVX512BW",
    "AVX512VBMI": "AVX512VBMI",
    "AVX512VNNI": "AVX512VNNI",
}
_MAC_ARM_SYSCTLS = {
    "hw.optional.AdvSIMD": "NEON",
    "hw.optional.arm.FEAT_FP16": "FP16",
    "hw.optional.arm.FEAT_DotProd": "DOTPROD",
    "hw.optional.arm.FEAT_I8MM": "I8MM",
    "hw.optional.arm.FEAT_SME": "SME",
}
# winnt.h PF_* constants (documented for IsProcessorFeaturePresent).
_WINDOWS_PF = {
    13: "SSE3",
    39: "AVX",
    40: "AVX2",
    41: "AVX512F",  # x86
    19: "NEON",
    43: "DOTPROD",
    46: "SVE",
    47: "SVE2",
    57: "I8MM",  # ARM64 (57: SVE I8MM)
}


def probe_cpu() -> CpuInfo:
    """Probe this machine's CPU."""
    arch = normalized_arch(platform.machine())
    if sys.platform.startswith("linux"):
        name, features = _linux(Path("/proc/cpuinfo"), arch)
        source = "/proc/cpuinfo"
    elif sys.platform == "darwin":
        name, features = _macos(arch)
        source = "sysctl"
    elif sys.platform == "win32":
        name, features, source = _windows(arch)
    else:
        name, features, source = platform.processor() or arch, (), "none"
    return CpuInfo(
        name=name or platform.processor() or arch,
        arch=arch,
        cores_physical=psutil.cpu_count(logical=False),
        cores_logical=psutil.cpu_count(logical=True),
        features=ordered(features),
        features_source=source,
    )


def normalized_arch(machine: str) -> str:
    machine = machine.lower()
    if machine in ("amd64", "x86_64", "x64"):
        return "x86_64"
    if machine in ("arm64", "aarch64"):
        return "arm64"
    return machine


def ordered(features: Iterable[str]) -> tuple[str, ...]:
    """Our canonical order, without duplicates."""
    present = set(features)
    return tuple(name for name in FEATURE_NAMES if name in present)


def parse_proc_cpuinfo(text: str, arch: str) -> tuple[str, tuple[str, ...]]:
    """(model name, features) from the text of /proc/cpuinfo (first processor block)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if arch == "arm64":
        flags, mapping = fields.get("Features", ""), _LINUX_ARM_FLAGS
    else:
        flags, mapping = fields.get("flags", ""), _LINUX_X86_FLAGS
    features = ordered(mapping[f] for f in flags.split() if f in mapping)
    name = fields.get("model name") or fields.get("Hardware") or fields.get("Processor") or ""
    return name, features


def _linux(path: Path, arch: str) -> tuple[str, tuple[str, ...]]:
    name, features = parse_proc_cpuinfo(path.read_text(errors="replace"), arch)
    if not name and arch == "arm64":
        # ARM kernels print no model name; the device tree often has one.
        model = Path("/sys/firmware/devicetree/base/model")
        if model.exists():
            name = model.read_bytes().rstrip(b"\0").decode(errors="replace")
    return name, features


def _macos(arch: str) -> tuple[str, tuple[str, ...]]:
    name = _sysctl_str("machdep.cpu.brand_string") or ""
    if arch == "arm64":
        found = [f for key, f in _MAC_ARM_SYSCTLS.items() if _sysctl_int(key)]
        if _sysctl_int("hw.optional.neon"):
            found.append("NEON")
        return name, ordered(found)
    words = " ".join(
        _sysctl_str(key) or "" for key in ("machdep.cpu.features", "machdep.cpu.leaf7_features")
    ).split()
    return name, ordered(_MAC_X86_WORDS[w] for w in words if w in _MAC_X86_WORDS)


def _sysctl_raw(key: str) -> bytes | None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    size = ctypes.c_size_t(0)
    if libc.sysctlbyname(key.encode(), None, ctypes.byref(size), None, 0) != 0:
        return None
    buf = ctypes.create_string_buffer(size.value)
    if libc.sysctlbyname(key.encode(), buf, ctypes.byref(size), None, 0) != 0:
        return None
    return buf.raw[: size.value]


def _sysctl_str(key: str) -> str | None:
    raw = _sysctl_raw(key)
    return raw.split(b"\0", 1)[0].decode(errors="replace").strip() if raw else None


def _sysctl_int(key: str) -> int:
    raw = _sysctl_raw(key)
    return int.from_bytes(raw, "little") if raw else 0


def _windows(arch: str) -> tuple[str, tuple[str, ...], str]:
    import winreg

    name = ""
    key_path = r"HARDWARE\DESCRIPTION\System\CentralProcessor\0"
    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, key_path) as key:
            name = str(winreg.QueryValueEx(key, "ProcessorNameString")[0]).strip()
    except OSError:
        pass
    if arch == "x86_64":
        try:
            leaves = cpuid.read_cpuid()
            return name or leaves.brand, cpuid.features_from_cpuid(leaves), "cpuid"
        except OSError:
            pass  # executable memory refused (ACG policy): the coarser API below still works
    present = ctypes.windll.kernel32.IsProcessorFeaturePresent
    found = [feature for pf, feature in _WINDOWS_PF.items() if present(pf)]
    arm = ("NEON", "DOTPROD", "SVE", "SVE2", "I8MM")
    found = [f for f in found if (f in arm) == (arch == "arm64")]
    return name, ordered(found), "IsProcessorFeaturePresent"
