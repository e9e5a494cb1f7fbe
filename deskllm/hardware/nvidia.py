"""NVIDIA GPUs: NVML's raw readings (see nvml_readings.py) -> Devices, as pure functions.

Kept apart from the reading so that the parsing can be tested with readings recorded on a
real NVIDIA machine (tests/data/nvml/) without a GPU and without mocking pynvml.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskllm.hardware.identity import canonical_pci_bus_id, canonical_uuid
from deskllm.hardware.report import ApiProbe, ApiStatus, Device, ProbeError


def api_probe_from_nvml(plain: Mapping[str, Any]) -> ApiProbe:
    """The child's `read_nvml_plain()` answer -> ApiProbe."""
    wall_ms = plain.get("wall_ms")
    if plain.get("unavailable"):
        return ApiProbe(ApiStatus("nvml", False, plain["unavailable"], wall_ms=wall_ms))
    readings = plain["readings"]
    devices = devices_from_readings(readings)
    reason = None if devices else "the NVIDIA driver is loaded but reports no GPU"
    status = ApiStatus(
        "nvml", bool(devices), reason, "NVML", _text(readings.get("driver_version")), wall_ms
    )
    return ApiProbe(status, devices, tuple(ProbeError("nvml", e) for e in plain["errors"]))


def devices_from_readings(readings: Mapping[str, Any]) -> tuple[Device, ...]:
    """Pure: NVML's raw readings (see `read_nvml`) -> Devices with our units."""
    driver = _text(readings.get("driver_version"))
    cuda = cuda_version_text(readings.get("cuda_driver_version"))
    devices = []
    for gpu in readings.get("gpus", ()):
        devices.append(
            Device(
                api="nvml",
                index=int(gpu["index"]),
                name=_text(gpu.get("name")) or f"NVIDIA GPU {gpu['index']}",
                # NVML lists NVIDIA's discrete GPUs; unified-memory parts report no free VRAM.
                type="discrete",
                memory_total_bytes=_int_or_none(gpu.get("memory_total")),
                memory_free_bytes=_int_or_none(gpu.get("memory_free")),
                vendor="NVIDIA",
                vendor_id=0x10DE,
                uuid=canonical_uuid(_text(gpu.get("uuid"))),
                pci_bus_id=canonical_pci_bus_id(_text(gpu.get("pci_bus_id"))),
                driver_version=driver,
                cuda_version=cuda,
                utilization_percent=_int_or_none(gpu.get("utilization_gpu")),
                temperature_c=_int_or_none(gpu.get("temperature_gpu")),
                power_draw_w=_milli(gpu.get("power_usage_mw")),
                power_limit_w=_milli(gpu.get("power_limit_mw")),
                bandwidth_gbps=memory_bandwidth_gbps(
                    gpu.get("memory_bus_width_bits"), gpu.get("max_memory_clock_mhz")
                ),
            )
        )
    return tuple(devices)


def memory_bandwidth_gbps(bus_width_bits: Any, max_memory_clock_mhz: Any) -> float | None:
    """Peak memory bandwidth in GB/s (10^9 bytes/s) from NVML's memory bus width (bits) and
    maximum memory clock (NVML_CLOCK_MEM, MHz); None when either is unknown.

    NVML documents the clock only as "MHz". What it reports is half the per-pin data rate on
    every memory type NVIDIA ships (GDDR5/5X, GDDR6, GDDR6X with its PAM4 signalling, HBM2/3),
    so one factor of 2 fits them all; no per-type multiplier is needed. Checked against
    NVIDIA's published figures: RTX 4070 Laptop (GDDR6) 8001 MHz x 128 bit -> 256 GB/s;
    RTX 4070 (GDDR6X) 10501 MHz x 192 bit -> 504 GB/s; H100 SXM (HBM3) 2619 MHz x 5120 bit
    -> 3352 GB/s. A peak: sustained reads reach roughly 80-90% of it.
    """
    if not bus_width_bits or not max_memory_clock_mhz:
        return None
    return round(int(bus_width_bits) / 8 * int(max_memory_clock_mhz) * 1e6 * 2 / 1e9, 1)


def cuda_version_text(version: int | None) -> str | None:
    """NVML's CUDA driver version integer (1000 * major + 10 * minor) -> "12.7"."""
    if not version:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value).strip() or None


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _milli(value: Any) -> float | None:
    return None if value is None else round(int(value) / 1000.0, 3)
