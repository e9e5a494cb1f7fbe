"""One list of offload targets: each physical device once, however many APIs saw it.

The same GPU seen through NVML and Vulkan (and OpenCL) is matched by UUID, then PCI bus id,
then name. CPU-type devices (Mesa llvmpipe, PoCL) are kept but not `automatic`: they share
the CPU's cores and RAM, so only a measured, explicit choice should use them.
"""

from __future__ import annotations

from collections.abc import Sequence

from deskllm.hardware.identity import normalized_name
from deskllm.hardware.report import Device, EngineDevice, EngineInfo, OffloadTarget

# Which API's view of a device we trust most, for its name, type and memory figures.
API_PRIORITY = {"nvml": 0, "metal": 1, "vulkan": 2, "opencl": 3}
AUTOMATIC_TYPES = ("discrete", "integrated", "virtual")
SHARED_MEMORY_TYPES = ("integrated", "cpu")
# ggml backend registry name -> the API that sees the same devices.
BACKEND_APIS = {
    "CUDA": "nvml",
    "Vulkan": "vulkan",
    "Metal": "metal",
    "MTL": "metal",
    "OpenCL": "opencl",
}


def merge_offload_targets(
    devices: Sequence[Device], engine: EngineInfo
) -> tuple[OffloadTarget, ...]:
    """Group `devices` into physical devices and say which engine device would drive each."""
    groups: list[list[Device]] = []
    for device in sorted(devices, key=lambda d: (API_PRIORITY.get(d.api, 9), d.index)):
        group = next((g for g in groups if _same_device(g, device)), None)
        if group is None:
            groups.append([device])
        else:
            group.append(device)
    used: set[str] = set()
    targets = [_target(group, engine.devices, used) for group in groups]
    return tuple(sorted(targets, key=lambda t: not t.automatic))


def _same_device(group: list[Device], device: Device) -> bool:
    if any(d.api == device.api for d in group):
        return False  # one API never lists the same device twice
    for known in group:
        if known.uuid and device.uuid:
            return known.uuid == device.uuid
        if known.pci_bus_id and device.pci_bus_id:
            return known.pci_bus_id == device.pci_bus_id
    return any(normalized_name(d.name) == normalized_name(device.name) for d in group)


def _target(
    group: list[Device], engine_devices: Sequence[EngineDevice], used: set[str]
) -> OffloadTarget:
    best = group[0]
    device_type = best.type
    with_free = next((d for d in group if d.memory_free_bytes is not None), None)
    engine_device = _engine_device_for(group, engine_devices, used)
    return OffloadTarget(
        name=best.name,
        type=device_type,
        apis=tuple(d.api for d in group),
        memory_total_bytes=next(
            (d.memory_total_bytes for d in group if d.memory_total_bytes is not None), None
        ),
        memory_free_bytes=with_free.memory_free_bytes if with_free else None,
        automatic=device_type in AUTOMATIC_TYPES,
        shares_system_memory=device_type in SHARED_MEMORY_TYPES,
        engine_device=engine_device,
        vendor=next((d.vendor for d in group if d.vendor), None),
        uuid=next((d.uuid for d in group if d.uuid), None),
        pci_bus_id=next((d.pci_bus_id for d in group if d.pci_bus_id), None),
        bandwidth_gbps=next((d.bandwidth_gbps for d in group if d.bandwidth_gbps), None),
    )


def _engine_device_for(
    group: list[Device], engine_devices: Sequence[EngineDevice], used: set[str]
) -> str | None:
    """The first unused non-CPU ggml device whose description names this device, preferring
    a backend whose API saw it (CUDA for an NVML GPU before Vulkan)."""
    names = {normalized_name(d.name) for d in group}
    apis = [d.api for d in group]
    candidates = [
        e
        for e in engine_devices
        if e.type != "cpu" and e.name not in used and normalized_name(e.description) in names
    ]

    def rank(e: EngineDevice) -> int:
        api = BACKEND_APIS.get(e.backend or "")
        return apis.index(api) if api in apis else len(apis)

    if not candidates:
        return None
    chosen = min(candidates, key=rank)
    used.add(chosen.name)
    return chosen.name
