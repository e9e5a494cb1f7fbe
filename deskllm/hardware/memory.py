"""System memory and swap (psutil), in bytes."""

from __future__ import annotations

import psutil

from deskllm.hardware.report import MemoryInfo


def probe_memory() -> MemoryInfo:
    """RAM total/available and swap total/free, in bytes."""
    ram = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return MemoryInfo(
        total_bytes=int(ram.total),
        available_bytes=int(ram.available),
        swap_total_bytes=int(swap.total),
        swap_free_bytes=int(swap.free),
    )
