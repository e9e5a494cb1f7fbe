"""Plain-words diagnosis: why a GPU is or is not used, and what would change that.

A pure function of the probe results, so every case can be tested with recorded data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deskllm.hardware.report import (
    ApiStatus,
    CpuInfo,
    Device,
    EngineInfo,
    MemoryInfo,
    OffloadTarget,
    PciDisplay,
    ProbeError,
)

_MIB = 1 << 20
_GIB = 1 << 30
# Below this much free device memory not even a small model's layers plus their compute
# buffer fit (llama.cpp's --fit itself keeps 1 GiB free per GPU).
MIN_USEFUL_FREE_BYTES = 512 * _MIB
# Vendors whose display controllers compute; others are BMC or virtual VGA (ASPEED, QEMU...).
GPU_VENDOR_IDS = {
    0x10DE: "NVIDIA",
    0x1002: "AMD",
    0x8086: "Intel",
    0x5143: "Qualcomm",
    0x13B5: "ARM",
    0x106B: "Apple",
}
API_LABELS = {
    "nvml": "NVIDIA (NVML)",
    "vulkan": "Vulkan",
    "opencl": "OpenCL",
    "metal": "Metal",
    "engine": "llama.cpp engine",
    "cpu": "CPU",
    "memory": "memory",
    "pci": "PCI",
}
# Our CPU feature name -> the name ggml's CPU backend reports when compiled with it.
GGML_CPU_FEATURES = {
    "AVX": "AVX",
    "AVX2": "AVX2",
    "FMA": "FMA",
    "F16C": "F16C",
    "AVX_VNNI": "AVX_VNNI",
    "AVX512F": "AVX512",
    "AVX512VNNI": "AVX512_VNNI",
    "AVX512BF16": "AVX512_BF16",
    "NEON": "NEON",
    "DOTPROD": "DOTPROD",
    "I8MM": "MATMUL_INT8",
    "SVE": "SVE",
}


@dataclass(frozen=True)
class DiagnosisInput:
    """Everything the diagnosis looks at."""

    cpu: CpuInfo
    memory: MemoryInfo
    devices: Sequence[Device]
    apis: Sequence[ApiStatus]
    engine: EngineInfo
    targets: Sequence[OffloadTarget]
    pci_displays: Sequence[PciDisplay]
    errors: Sequence[ProbeError]
    bandwidth_gbps: float | None = None


def diagnose(facts: DiagnosisInput) -> tuple[str, ...]:
    """One sentence or two per finding, most important first."""
    lines: list[str] = []
    lines += _engine_lines(facts)
    lines += _gpu_lines(facts)
    lines += _cpu_type_lines(facts)
    lines += _cpu_build_lines(facts)
    lines += [f"{API_LABELS.get(e.api, e.api)} check failed: {e.message}." for e in facts.errors]
    return tuple(lines)


def build_hint(target: OffloadTarget) -> str:
    """The llama-cpp-python build that would drive this device."""
    vendor = target.vendor or ""
    if "metal" in target.apis or vendor == "Apple":
        flags, alt = "-DGGML_METAL=on", ""
    elif "nvml" in target.apis or vendor == "NVIDIA":
        flags, alt = "-DGGML_CUDA=on", ' (or "-DGGML_VULKAN=on")'
    elif "vulkan" in target.apis:
        flags = "-DGGML_VULKAN=on"
        alt = {
            "AMD": ' (or "-DGGML_HIP=on" with ROCm)',
            "Intel": ' (or "-DGGML_SYCL=on" with oneAPI)',
        }.get(vendor, "")
    else:
        flags, alt = "-DGGML_OPENCL=on", ""
    return f'llama-cpp-python built with CMAKE_ARGS="{flags}"{alt}'


def _engine_lines(facts: DiagnosisInput) -> list[str]:
    if facts.engine.available:
        return []
    return [f"The llama.cpp engine is not usable: {facts.engine.reason}."]


def _status(facts: DiagnosisInput, api: str) -> ApiStatus | None:
    return next((s for s in facts.apis if s.api == api), None)


def _gpu_lines(facts: DiagnosisInput) -> list[str]:
    lines: list[str] = []
    gpus = [t for t in facts.targets if t.automatic]
    unseen = _unseen_pci_gpus(facts)
    for pci in unseen:
        vulkan = _status(facts, "vulkan")
        why = f" ({vulkan.reason})" if vulkan and vulkan.reason else ""
        driver = f"driver {pci.driver}" if pci.driver else "no driver bound"
        lines.append(
            f"A GPU by {GPU_VENDOR_IDS[pci.vendor_id]} (PCI {pci.pci_bus_id}, {driver}) is "
            f"installed but no GPU API can use it{why}: install its driver with Vulkan "
            "support to run models on it."
        )
    if not gpus and not unseen:
        cores = facts.cpu.cores_physical or facts.cpu.cores_logical
        measured = f" ({facts.bandwidth_gbps:.1f} GB/s here)" if facts.bandwidth_gbps else ""
        lines.append(
            f"No GPU found: models run on the CPU ({facts.cpu.name}, {cores} cores), so "
            f"generation speed is bounded by memory bandwidth{measured}."
        )
    backends = ", ".join(facts.engine.backends) or "none"
    for gpu in gpus:
        if facts.engine.available and gpu.engine_device is None:
            lines += _no_backend_lines(facts, gpu, backends)
        free = gpu.memory_free_bytes
        if free is not None and free < MIN_USEFUL_FREE_BYTES:
            lines.append(
                f"{gpu.name} has only {free / _MIB:.0f} MiB free: too little for a useful "
                "offload; close programs using the GPU, or run on the CPU."
            )
        if gpu.type == "integrated":
            lines.append(
                f"{gpu.name} is an integrated GPU: its memory is the system RAM "
                f"({facts.memory.total_bytes / _GIB:.1f} GiB, shared), so offloading adds "
                "compute but no memory, and speed stays bounded by RAM bandwidth."
            )
    return lines


def _no_backend_lines(facts: DiagnosisInput, gpu: OffloadTarget, backends: str) -> list[str]:
    vulkan = _status(facts, "vulkan")
    vulkan_reason = (
        vulkan.reason if vulkan and vulkan.reason else "the Vulkan driver does not list it"
    )
    if "vulkan" not in gpu.apis and "Vulkan" in facts.engine.backends:
        return [
            f"{gpu.name} works ({_apis(gpu)}) but Vulkan cannot see it ({vulkan_reason}), and "
            "Vulkan is how this llama.cpp build reaches GPUs: install the GPU driver's Vulkan "
            f"support, or use {build_hint(gpu)}."
        ]
    lines = [
        f"{gpu.name} works ({_apis(gpu)}) but this llama.cpp build has no backend for it (it "
        f"has: {backends}); {build_hint(gpu)} would use it."
    ]
    if "vulkan" not in gpu.apis and "metal" not in gpu.apis:
        lines.append(
            f"{gpu.name} is not visible to Vulkan either ({vulkan_reason}): a Vulkan build "
            "would not see it until the driver's Vulkan support is installed."
        )
    return lines


def _unseen_pci_gpus(facts: DiagnosisInput) -> list[PciDisplay]:
    """Compute-capable GPUs the OS lists that no API reported."""
    seen_bus = {d.pci_bus_id for d in facts.devices if d.pci_bus_id}
    seen_vendor = {d.vendor_id for d in facts.devices if d.vendor_id and d.type != "cpu"}
    return [
        p
        for p in facts.pci_displays
        if p.vendor_id in GPU_VENDOR_IDS
        and p.pci_bus_id not in seen_bus
        and p.vendor_id not in seen_vendor
    ]


def _cpu_type_lines(facts: DiagnosisInput) -> list[str]:
    lines = []
    for target in facts.targets:
        if target.type != "cpu":
            continue
        if "vulkan" in target.apis:
            if target.engine_device:
                use = (
                    f"this llama.cpp build can use it as {target.engine_device}; "
                    "measure before choosing it"
                )
            else:
                use = (
                    f"{build_hint(target)} could use it; on some machines llama.cpp's Vulkan "
                    "backend on it decodes faster than the CPU backend, so measure"
                )
            lines.append(
                f"{target.name} is a CPU-type Vulkan device: it runs on the CPU cores and "
                f"system RAM, so it is not used automatically, but you may choose it ({use})."
            )
        else:
            lines.append(
                f"{target.name} is a CPU-type {_apis(target)} device: it runs on the CPU cores "
                "and system RAM and llama.cpp's OpenCL backend targets GPUs, so it is not an "
                "offload target."
            )
    return lines


def _cpu_build_lines(facts: DiagnosisInput) -> list[str]:
    built = set(facts.engine.cpu_build_features)
    if not built:
        return []
    missing = [
        f
        for f in facts.cpu.features
        if f in GGML_CPU_FEATURES and GGML_CPU_FEATURES[f] not in built
    ]
    if not missing:
        return []
    return [
        f"This CPU has {', '.join(missing)} but this llama.cpp build's CPU backend was compiled "
        "without them; a build with -DGGML_NATIVE=ON, or -DGGML_BACKEND_DL=ON "
        "-DGGML_CPU_ALL_VARIANTS=ON, would run faster."
    ]


def _apis(target: OffloadTarget) -> str:
    return ", ".join(API_LABELS.get(a, a) for a in target.apis)
