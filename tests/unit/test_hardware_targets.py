"""One physical device per offload target, whatever the APIs that saw it."""

from __future__ import annotations

import json
from pathlib import Path

from deskllm.hardware.identity import canonical_pci_bus_id, canonical_uuid
from deskllm.hardware.nvidia import devices_from_readings
from deskllm.hardware.report import Device, EngineDevice, EngineInfo
from deskllm.hardware.targets import merge_offload_targets

FIXTURE = Path(__file__).parent.parent / "data" / "nvml" / "rtx4070_laptop_566.36.json"
MIB = 1 << 20
CPU_ONLY_ENGINE = EngineInfo(
    gpu_offload=False,
    devices=(EngineDevice("CPU", "Intel(R) Xeon(R) Processor", "cpu", 1 << 34, 1 << 34, "CPU"),),
    backends=("CPU",),
)


def nvml_gpu() -> Device:
    (gpu,) = devices_from_readings(json.loads(FIXTURE.read_text())["readings"])
    return gpu


def vulkan_view(**changes: object) -> Device:
    """The same RTX 4070 as NVIDIA's Vulkan driver describes it (its deviceUUID is NVML's)."""
    fields = dict(
        api="vulkan",
        name="NVIDIA GeForce RTX 4070 Laptop GPU",
        type="discrete",
        memory_total_bytes=8188 * MIB,
        memory_free_bytes=7900 * MIB,
        vendor="NVIDIA",
        vendor_id=0x10DE,
        uuid="1b724e78-eef5-4163-d43c-e4da15d41176",
        pci_bus_id="0000:01:00.0",
    )
    fields.update(changes)
    return Device(**fields)  # type: ignore[arg-type]


LLVMPIPE = Device(
    api="vulkan",
    index=1,
    name="llvmpipe (LLVM 15.0.6, 256 bits)",
    type="cpu",
    memory_total_bytes=2 << 30,
    memory_free_bytes=None,
    vendor="Mesa",
    vendor_id=0x10005,
    uuid="6d657361-3232-2e33-2e36-000000000000",
)


def test_nvml_and_vulkan_views_of_one_gpu_are_one_target() -> None:
    (target,) = merge_offload_targets([vulkan_view(), nvml_gpu()], CPU_ONLY_ENGINE)
    assert target.apis == ("nvml", "vulkan")
    assert target.bandwidth_gbps == nvml_gpu().bandwidth_gbps == 256.0  # NVML's, kept
    assert target.automatic
    assert target.memory_free_bytes == 7948 * MIB  # NVML's figure wins over Vulkan's
    assert target.engine_device is None  # this engine has a CPU backend only


def test_matching_falls_back_to_pci_id_then_name() -> None:
    by_pci = vulkan_view(uuid=None)
    by_name = vulkan_view(uuid=None, pci_bus_id=None)
    assert len(merge_offload_targets([nvml_gpu(), by_pci], CPU_ONLY_ENGINE)) == 1
    assert len(merge_offload_targets([nvml_gpu(), by_name], CPU_ONLY_ENGINE)) == 1


def test_two_identical_gpus_stay_two_targets() -> None:
    second_uuid = "1b724e78-eef5-4163-d43c-e4da15d41177"
    devices = [
        nvml_gpu(),
        vulkan_view(),
        vulkan_view(index=1, uuid=second_uuid, pci_bus_id="0000:02:00.0"),
    ]
    targets = merge_offload_targets(devices, CPU_ONLY_ENGINE)
    assert sorted(t.apis for t in targets) == [("nvml", "vulkan"), ("vulkan",)]


def test_cpu_type_devices_are_reported_but_never_automatic() -> None:
    targets = merge_offload_targets([LLVMPIPE, nvml_gpu()], CPU_ONLY_ENGINE)
    assert [t.automatic for t in targets] == [True, False]  # automatic targets first
    llvmpipe = targets[1]
    assert llvmpipe.type == "cpu" and llvmpipe.shares_system_memory


def test_engine_device_prefers_the_backend_of_the_best_api() -> None:
    gpu_desc = "NVIDIA GeForce RTX 4070 Laptop GPU"
    engine = EngineInfo(
        gpu_offload=True,
        devices=(
            EngineDevice("Vulkan0", gpu_desc, "gpu", 8188 * MIB, 7900 * MIB, "Vulkan"),
            EngineDevice("CUDA0", gpu_desc, "gpu", 8188 * MIB, 7948 * MIB, "CUDA"),
            EngineDevice("Vulkan1", LLVMPIPE.name, "gpu", 2 << 30, 2 << 30, "Vulkan"),
        ),
        backends=("CUDA", "Vulkan", "CPU"),
    )
    targets = merge_offload_targets([vulkan_view(), nvml_gpu(), LLVMPIPE], engine)
    assert [(t.name, t.engine_device) for t in targets] == [
        (gpu_desc, "CUDA0"),
        (LLVMPIPE.name, "Vulkan1"),
    ]


def test_canonical_ids() -> None:
    assert canonical_uuid("GPU-1B724E78-EEF5-4163-D43C-E4DA15D41176") == (
        "1b724e78-eef5-4163-d43c-e4da15d41176"
    )
    assert canonical_uuid(bytes(16)) is None  # an all-zero UUID identifies nothing
    assert canonical_uuid(b"\x01" * 11) is None  # not 16 bytes
    assert canonical_pci_bus_id("00000000:01:00.0") == "0000:01:00.0"
    assert canonical_pci_bus_id("0000:C1:00.1") == "0000:c1:00.1"
    assert canonical_pci_bus_id("not a bus id") is None
