"""What this machine can run models on: CPU, memory, GPUs through every API, the engine's
devices, measured memory bandwidth and a plain-words diagnosis. Qt-free.

    report = probe_hardware()            # blocking: the GUI calls it on a TaskRunner
    json.dumps(report_to_dict(report))   # the `deskllm hw --json` shape

Names are resolved on first use (PEP 562): the probe's child process imports
deskllm.hardware.vulkan and friends, and must not pay for importing every other probe.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskllm.hardware.probe import probe_hardware
    from deskllm.hardware.report import (
        ApiStatus,
        BandwidthMeasurement,
        CpuInfo,
        Device,
        EngineDevice,
        EngineInfo,
        HardwareReport,
        MemoryInfo,
        OffloadTarget,
        PciDisplay,
        ProbeError,
    )
    from deskllm.hardware.serialize import report_from_dict, report_to_dict

_EXPORTS = {
    "probe_hardware": "deskllm.hardware.probe",
    "report_from_dict": "deskllm.hardware.serialize",
    "report_to_dict": "deskllm.hardware.serialize",
    **{
        name: "deskllm.hardware.report"
        for name in (
            "ApiStatus",
            "BandwidthMeasurement",
            "CpuInfo",
            "Device",
            "EngineDevice",
            "EngineInfo",
            "HardwareReport",
            "MemoryInfo",
            "OffloadTarget",
            "PciDisplay",
            "ProbeError",
        )
    },
}
__all__ = [
    "ApiStatus",
    "BandwidthMeasurement",
    "CpuInfo",
    "Device",
    "EngineDevice",
    "EngineInfo",
    "HardwareReport",
    "MemoryInfo",
    "OffloadTarget",
    "PciDisplay",
    "ProbeError",
    "probe_hardware",
    "report_from_dict",
    "report_to_dict",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
