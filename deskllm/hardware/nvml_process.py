"""VRAM this process holds on NVIDIA GPUs, through NVML: the engine's live readout."""

from __future__ import annotations

import os


class NvmlProcessMemory:
    """VRAM this process holds on NVIDIA GPUs, through NVML (None where NVML is absent: other
    vendors' drivers give no per-process figure)."""

    def __init__(self) -> None:
        self.handles: list = []
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception:  # no driver, no GPU: nothing to read
            self.handles = []

    def read(self) -> int | None:
        if not self.handles:
            return None
        import pynvml

        pid, total, seen = os.getpid(), 0, False
        for handle in self.handles:
            try:
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.pid == pid and proc.usedGpuMemory is not None:
                        total += proc.usedGpuMemory
                        seen = True
            except pynvml.NVMLError:
                continue
        return total if seen else None
