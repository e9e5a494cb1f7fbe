"""The hardware report: frozen dataclasses that cross layers (probe -> planner, GUI, CLI).

Sizes are bytes, times milliseconds, bandwidth GB/s (10^9 bytes per second), temperatures
degrees Celsius, power watts. `None` means "unknown", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 1

# Where a device was seen. One physical GPU may appear under several APIs.
API_NAMES = ("nvml", "vulkan", "opencl", "metal")
DEVICE_TYPES = ("discrete", "integrated", "virtual", "cpu", "other")
ENGINE_DEVICE_TYPES = ("cpu", "gpu", "igpu", "accel")


@dataclass(frozen=True)
class CpuInfo:
    """The processor, with the instruction sets llama.cpp's CPU backend cares about.

    Attributes:
        features: names such as "AVX2", "AVX512F", "NEON", "DOTPROD" (see cpu.FEATURE_NAMES).
        features_source: where they were read: "/proc/cpuinfo", "sysctl", "cpuid", ...
    """

    name: str
    cores_physical: int | None
    cores_logical: int | None
    features: tuple[str, ...]
    arch: str = ""
    features_source: str = ""


@dataclass(frozen=True)
class MemoryInfo:
    """System memory in bytes. `available_bytes` is what can be allocated without swapping."""

    total_bytes: int
    available_bytes: int
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None


@dataclass(frozen=True)
class Device:
    """One device as one API sees it. Fields an API does not provide stay None.

    Attributes:
        api: "nvml" | "vulkan" | "opencl" | "metal".
        type: "discrete" | "integrated" | "virtual" | "cpu" | "other".
        memory_total_bytes: VRAM (NVML), the largest device-local heap (Vulkan), global memory
            (OpenCL), the recommended working set (Metal).
        memory_free_bytes: NVML free, Vulkan heap budget minus usage (VK_EXT_memory_budget);
            None where the API cannot tell.
        uuid: lower-case 8-4-4-4-12 hex; NVIDIA's NVML and Vulkan UUIDs are the same bytes.
        pci_bus_id: lower-case "dddd:bb:dd.f".
    """

    api: str
    name: str
    type: str
    memory_total_bytes: int | None
    memory_free_bytes: int | None
    index: int = 0
    vendor: str | None = None
    vendor_id: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    api_version: str | None = None
    driver_version: str | None = None
    driver_info: str | None = None
    platform: str | None = None
    compute_units: int | None = None
    memory_budget_supported: bool | None = None
    cuda_version: str | None = None
    utilization_percent: int | None = None
    temperature_c: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    bandwidth_gbps: float | None = None  # peak memory bandwidth (NVML: bus width x clock)


@dataclass(frozen=True)
class PciDisplay:
    """A display-class PCI device seen by the OS (Linux sysfs), whatever its driver."""

    pci_bus_id: str
    vendor_id: int
    device_id: int
    vendor: str | None
    driver: str | None


@dataclass(frozen=True)
class EngineDevice:
    """A device in the ggml backend registry of the installed llama.cpp build.

    Attributes:
        name: ggml's name, e.g. "CPU", "Vulkan0", "CUDA0".
        description: usually the hardware name, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)".
        type: "cpu" | "gpu" | "igpu" | "accel".
        backend: the registry the device belongs to, e.g. "CPU", "Vulkan", "CUDA", "Metal".
    """

    name: str
    description: str
    type: str
    memory_total_bytes: int | None
    memory_free_bytes: int | None
    backend: str | None = None


@dataclass(frozen=True)
class EngineInfo:
    """What the installed llama.cpp build can use.

    Attributes:
        gpu_offload: llama_supports_gpu_offload().
        cpu_variant: the CPU backend library chosen at run time in builds that load variants
            (e.g. "haswell" from libggml-cpu-haswell.so); None for a single built-in CPU backend.
        cpu_build_features: what the loaded CPU backend was compiled for (ggml's names).
    """

    gpu_offload: bool
    devices: tuple[EngineDevice, ...]
    available: bool = True
    reason: str | None = None
    backends: tuple[str, ...] = ()
    cpu_variant: str | None = None
    cpu_library: str | None = None
    cpu_build_features: tuple[str, ...] = ()
    library_dir: str | None = None


@dataclass(frozen=True)
class OffloadTarget:
    """One physical device that model layers could be placed on.

    Attributes:
        apis: every API this same device was seen through, e.g. ("nvml", "vulkan").
        automatic: the planner may offload to it unasked. False for CPU-type devices (Mesa
            llvmpipe, PoCL): they share system RAM and CPU cores, so only a measured choice
            by the user should pick them.
        shares_system_memory: integrated or CPU-type: its memory is the system RAM.
        engine_device: the ggml device name the installed build would use ("Vulkan0"), or
            None when the build has no backend for it.
        bandwidth_gbps: the device's own peak memory bandwidth where an API tells it (NVML);
            None for shared-memory devices (the system's measured bandwidth applies).
    """

    name: str
    type: str
    apis: tuple[str, ...]
    memory_total_bytes: int | None
    memory_free_bytes: int | None
    automatic: bool
    shares_system_memory: bool
    engine_device: str | None = None
    vendor: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    bandwidth_gbps: float | None = None


@dataclass(frozen=True)
class ApiStatus:
    """Whether one probe found what it looks for, and if not, why (plain words)."""

    api: str
    available: bool
    reason: str | None = None
    library: str | None = None
    version: str | None = None
    wall_ms: float | None = None


@dataclass(frozen=True)
class ProbeError:
    """A probe that failed: an exception, a crashed or a hung child process."""

    api: str
    message: str


@dataclass(frozen=True)
class BandwidthMeasurement:
    """Measured memory read bandwidth (GB/s = 10^9 bytes/s) and how it was measured."""

    gbps: float
    bytes_read: int | None = None
    seconds: float | None = None
    threads: int | None = None
    measured_at: str | None = None
    cached: bool = False


@dataclass(frozen=True)
class HardwareReport:
    """Everything the planner and the GUI need to know about this machine.

    Attributes:
        devices: every device every API reported (one physical GPU may appear several times).
        offload_targets: the same devices merged into physical devices.
        probe_ms: wall time of the probe, bandwidth test excluded.
    """

    cpu: CpuInfo
    memory: MemoryInfo
    devices: tuple[Device, ...]
    engine: EngineInfo
    offload_targets: tuple[OffloadTarget, ...]
    bandwidth_gbps: float | None
    diagnosis: tuple[str, ...]
    schema_version: int = SCHEMA_VERSION
    created_at: str | None = None
    os: str = ""
    apis: tuple[ApiStatus, ...] = ()
    errors: tuple[ProbeError, ...] = ()
    pci_displays: tuple[PciDisplay, ...] = ()
    bandwidth: BandwidthMeasurement | None = None
    probe_ms: float | None = None


@dataclass(frozen=True)
class ApiProbe:
    """What one device API probe returns (also across the child-process pipe)."""

    status: ApiStatus
    devices: tuple[Device, ...] = ()
    errors: tuple[ProbeError, ...] = ()


@dataclass(frozen=True)
class EngineProbe:
    """What the engine probe returns."""

    status: ApiStatus
    engine: EngineInfo
    errors: tuple[ProbeError, ...] = ()
