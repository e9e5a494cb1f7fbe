"""This machine's hardware report for planning, probed once per process.

A full probe takes a few hundred milliseconds (child processes for Vulkan, NVML, OpenCL and
the engine), too slow for every load; devices do not change while the app runs. Available RAM
does, so it is read again (psutil, microseconds) on every call.
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from deskllm.hardware.report import HardwareReport

log = logging.getLogger("deskllm.planner")

_lock = threading.Lock()
_report: HardwareReport | None = None


def current_hardware() -> HardwareReport | None:
    """The cached report with fresh RAM figures; None when the probe itself failed."""
    global _report
    from deskllm.hardware.memory import probe_memory

    with _lock:
        if _report is None:
            from deskllm.hardware.probe import probe_hardware

            try:
                _report = probe_hardware(bandwidth=False)
            except Exception:  # a planner without a report must not stop a load
                log.exception("hardware probe failed; loads are not checked against memory")
                return None
        report = _report
    return dataclasses.replace(report, memory=probe_memory())


def remember_hardware(report: HardwareReport | None) -> None:
    """Share a report probed elsewhere (the app's hardware panel), or forget it (None)."""
    global _report
    with _lock:
        _report = report
