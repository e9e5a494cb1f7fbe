"""The keys under which measurements of this machine are remembered, in one place so that
every cache agrees on what "the same machine" and "the same engine build" mean:

- `machine_key`: the computer (host, architecture, CPU, cores, RAM): memory bandwidth;
- `engine_key`: the llama.cpp build on this CPU model (what decides whether a kernel crashes):
  the extra-buffer-type probe;
- `machine_engine_key`: both (what the engine allocates on this computer): calibration.
"""

from __future__ import annotations

import hashlib
import platform

from deskllm.hardware.report import CpuInfo, MemoryInfo
from deskllm.llamacpp.build import build_id

_MIB = 1 << 20


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def machine_key(cpu: CpuInfo, memory: MemoryInfo) -> str:
    """Identifies this computer, so a shared or roaming data dir never reuses another's
    result."""
    ram_quarter_gib = round(memory.total_bytes / (256 * _MIB))  # firmware reserves vary a little
    return _digest(
        [platform.node(), platform.machine(), cpu.name, str(cpu.cores_logical),
         str(ram_quarter_gib)]
    )  # fmt: skip


def engine_key(cpu: CpuInfo) -> str:
    """The engine build's libraries on this CPU model and instruction sets."""
    return _digest([build_id(), platform.machine(), cpu.name, " ".join(cpu.features)])


def machine_engine_key(cpu: CpuInfo, memory: MemoryInfo) -> str:
    """This computer with this engine build (GPU runtimes and libraries weigh on memory)."""
    return f"{machine_key(cpu, memory)}/{build_id()}"
