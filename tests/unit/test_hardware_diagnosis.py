"""Diagnosis in plain words, one test per case the issue lists."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from deskllm.hardware.diagnosis import DiagnosisInput, diagnose
from deskllm.hardware.nvidia import devices_from_readings
from deskllm.hardware.report import (
    ApiStatus,
    CpuInfo,
    Device,
    EngineDevice,
    EngineInfo,
    MemoryInfo,
    PciDisplay,
    ProbeError,
)
from deskllm.hardware.targets import merge_offload_targets

FIXTURE = Path(__file__).parent.parent / "data" / "nvml" / "rtx4070_laptop_566.36.json"
MIB = 1 << 20
GIB = 1 << 30
CPU = CpuInfo("Intel(R) Xeon(R) Processor", 2, 2, ("AVX", "AVX2", "AVX512F"), "x86_64")
MEMORY = MemoryInfo(16 * GIB, 12 * GIB)
CPU_ENGINE = EngineInfo(
    gpu_offload=False,
    devices=(EngineDevice("CPU", CPU.name, "cpu", 16 * GIB, 16 * GIB, "CPU"),),
    backends=("CPU",),
    cpu_build_features=("AVX", "AVX2", "AVX512"),
)
NO_VULKAN = ApiStatus("vulkan", False, "no Vulkan loader (libvulkan.so.1 not found)")
LLVMPIPE = Device("vulkan", "llvmpipe (LLVM 15.0.6, 256 bits)", "cpu", 2 * GIB, None)
POCL = Device("opencl", "pthread-skylake-avx512-Intel(R) Xeon(R) Processor", "cpu", 5 * GIB, None)


def nvml_gpu(**changes: object) -> Device:
    (gpu,) = devices_from_readings(json.loads(FIXTURE.read_text())["readings"])
    return dataclasses.replace(gpu, **changes)  # type: ignore[arg-type]


def diagnosis(
    devices: list[Device],
    engine: EngineInfo = CPU_ENGINE,
    apis: tuple[ApiStatus, ...] = (),
    pci: tuple[PciDisplay, ...] = (),
    errors: tuple[ProbeError, ...] = (),
    cpu: CpuInfo = CPU,
) -> str:
    targets = merge_offload_targets(devices, engine)
    facts = DiagnosisInput(cpu, MEMORY, devices, apis, engine, targets, pci, errors)
    return "\n".join(diagnose(facts))


def test_no_gpu() -> None:
    text = diagnosis([])
    assert "No GPU found" in text
    assert "Intel(R) Xeon(R) Processor, 2 cores" in text
    facts = DiagnosisInput(CPU, MEMORY, [], [], CPU_ENGINE, [], [], [], bandwidth_gbps=15.84)
    assert "bounded by memory bandwidth (15.8 GB/s here)" in diagnose(facts)[0]


def test_cpu_type_devices_are_explained_and_not_counted_as_gpus() -> None:
    text = diagnosis([LLVMPIPE, POCL])
    assert "No GPU found" in text
    assert "llvmpipe (LLVM 15.0.6, 256 bits) is a CPU-type Vulkan device" in text
    assert 'CMAKE_ARGS="-DGGML_VULKAN=on"' in text
    assert "measure" in text
    assert f"{POCL.name} is a CPU-type OpenCL device" in text


def test_gpu_with_a_pci_id_but_no_driver() -> None:
    amd = PciDisplay("0000:03:00.0", 0x1002, 0x73BF, "AMD", None)
    text = diagnosis([], apis=(NO_VULKAN,), pci=(amd,))
    assert "A GPU by AMD (PCI 0000:03:00.0, no driver bound) is installed" in text
    assert "no Vulkan loader" in text
    assert "No GPU found" not in text


def test_virtual_display_adapters_are_not_gpus() -> None:
    qemu_vga = PciDisplay("0000:00:02.0", 0x1234, 0x1111, None, "bochs-drm")
    assert "No GPU found" in diagnosis([], pci=(qemu_vga,))


def test_gpu_whose_driver_works_but_vulkan_cannot_see_it() -> None:
    vulkan_engine = dataclasses.replace(CPU_ENGINE, backends=("CPU", "Vulkan"))
    text = diagnosis([nvml_gpu()], engine=vulkan_engine, apis=(NO_VULKAN,))
    assert "NVIDIA GeForce RTX 4070 Laptop GPU works (NVIDIA (NVML))" in text
    assert "Vulkan cannot see it (no Vulkan loader" in text


def test_driver_present_but_engine_build_lacks_the_backend() -> None:
    text = diagnosis([nvml_gpu()])
    assert "this llama.cpp build has no backend for it (it has: CPU)" in text
    assert 'CMAKE_ARGS="-DGGML_CUDA=on"' in text


def test_no_backend_line_when_the_engine_drives_the_gpu() -> None:
    cuda = EngineDevice("CUDA0", "NVIDIA GeForce RTX 4070 Laptop GPU", "gpu", 0, 0, "CUDA")
    engine = dataclasses.replace(CPU_ENGINE, devices=(cuda,), backends=("CUDA", "CPU"))
    assert "no backend" not in diagnosis([nvml_gpu()], engine=engine)


def test_too_little_free_memory() -> None:
    text = diagnosis([nvml_gpu(memory_free_bytes=300 * MIB)])
    assert "has only 300 MiB free: too little for a useful offload" in text


def test_integrated_gpu_shares_system_ram() -> None:
    igpu = Device("vulkan", "Intel(R) Iris(R) Xe Graphics", "integrated", 8 * GIB, 7 * GIB)
    text = diagnosis([igpu])
    assert "is an integrated GPU: its memory is the system RAM (16.0 GiB, shared)" in text


def test_engine_cpu_backend_built_without_the_cpus_features() -> None:
    generic = dataclasses.replace(CPU_ENGINE, cpu_build_features=("SSE3", "SSSE3"))
    text = diagnosis([], engine=generic)
    assert "This CPU has AVX, AVX2, AVX512F but this llama.cpp build's CPU backend" in text


def test_probe_errors_are_listed() -> None:
    crash = ProbeError("vulkan", "the vulkan probe crashed: its process was killed by SIGSEGV")
    assert "Vulkan check failed: the vulkan probe crashed" in diagnosis([], errors=(crash,))


def test_missing_engine() -> None:
    engine = EngineInfo(False, (), available=False, reason="llama-cpp-python is not installed")
    assert "The llama.cpp engine is not usable: llama-cpp-python" in diagnosis([], engine=engine)
