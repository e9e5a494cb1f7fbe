"""NVML readings through pynvml, as NVML returns them (bytes, milliwatts, degrees C, %, bits,
MHz).

Runs in a child process (see isolation.py): nvmlInit can hang on a GPU that fell off the
bus. Returns plain data, JSON-able, so a real machine's readings can be recorded as a test
fixture; nvidia.py turns them into Devices.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any

from deskllm.hardware.timing import elapsed_ms

# Readings some GPUs simply lack (laptop power sensors, temperature under MIG): not errors.
_QUIET_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_NO_DATA")


def read_nvml_plain() -> dict[str, Any]:
    """{"unavailable": reason or None, "readings": see read_nvml, "errors": [str],
    "wall_ms": float}. Never raises for NVML's own failures."""
    start = time.perf_counter()
    try:
        readings, errors = read_nvml()
    except _NvmlUnavailable as exc:
        return {
            "unavailable": str(exc),
            "readings": None,
            "errors": [],
            "wall_ms": elapsed_ms(start),
        }
    return {
        "unavailable": None,
        "readings": readings,
        "errors": errors,
        "wall_ms": elapsed_ms(start),
    }


class _NvmlUnavailable(Exception):
    """NVML cannot be used at all; the message says why in plain words."""


def read_nvml() -> tuple[dict[str, Any], list[str]]:
    """Raw NVML readings: {"driver_version", "cuda_driver_version", "gpus": [...]}.

    Units are NVML's: bytes, milliwatts, degrees C, percent. A reading the GPU does not
    offer is None. Returns the readings and messages for readings that failed unexpectedly.
    """
    with warnings.catch_warnings():
        # pynvml>=12 warns on import that it is now a shim over nvidia-ml-py.
        warnings.simplefilter("ignore", FutureWarning)
        try:
            import pynvml
        except ImportError as exc:
            raise _NvmlUnavailable(f"pynvml is not installed ({exc})") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise _NvmlUnavailable(_init_failure_reason(pynvml, exc)) from exc
    errors: list[str] = []
    try:

        def read(what: str, fn: Any, *args: Any) -> Any:
            try:
                return fn(*args)
            except pynvml.NVMLError as exc:
                if _error_name(pynvml, exc) not in _QUIET_ERRORS:
                    errors.append(f"{what}: {exc}")
                return None

        readings: dict[str, Any] = {
            "driver_version": _text(read("driver version", pynvml.nvmlSystemGetDriverVersion)),
            "cuda_driver_version": read("CUDA version", pynvml.nvmlSystemGetCudaDriverVersion),
            "gpus": [],
        }
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu = f"GPU {index}"
            pci = read(f"{gpu} PCI info", pynvml.nvmlDeviceGetPciInfo, handle)
            memory = read(f"{gpu} memory", pynvml.nvmlDeviceGetMemoryInfo, handle)
            util = read(f"{gpu} utilization", pynvml.nvmlDeviceGetUtilizationRates, handle)
            readings["gpus"].append(
                {
                    "index": index,
                    "name": _text(read(f"{gpu} name", pynvml.nvmlDeviceGetName, handle)),
                    "uuid": _text(read(f"{gpu} UUID", pynvml.nvmlDeviceGetUUID, handle)),
                    "pci_bus_id": _text(pci.busId) if pci is not None else None,
                    "memory_total": memory.total if memory is not None else None,
                    "memory_free": memory.free if memory is not None else None,
                    "memory_used": memory.used if memory is not None else None,
                    "utilization_gpu": util.gpu if util is not None else None,
                    "utilization_memory": util.memory if util is not None else None,
                    "temperature_gpu": read(
                        f"{gpu} temperature",
                        pynvml.nvmlDeviceGetTemperature,
                        handle,
                        pynvml.NVML_TEMPERATURE_GPU,
                    ),
                    "power_usage_mw": read(
                        f"{gpu} power draw", pynvml.nvmlDeviceGetPowerUsage, handle
                    ),
                    "power_limit_mw": read(
                        f"{gpu} power limit", pynvml.nvmlDeviceGetEnforcedPowerLimit, handle
                    ),
                    "memory_bus_width_bits": read(
                        f"{gpu} memory bus width", pynvml.nvmlDeviceGetMemoryBusWidth, handle
                    ),
                    "max_memory_clock_mhz": read(
                        f"{gpu} max memory clock",
                        pynvml.nvmlDeviceGetMaxClockInfo,
                        handle,
                        pynvml.NVML_CLOCK_MEM,
                    ),
                }
            )
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return readings, errors


def _init_failure_reason(pynvml: Any, exc: Exception) -> str:
    name = _error_name(pynvml, exc)
    if name == "NVML_ERROR_LIBRARY_NOT_FOUND":
        return "no NVIDIA driver: the NVML library (libnvidia-ml / nvml.dll) was not found"
    if name == "NVML_ERROR_DRIVER_NOT_LOADED":
        return "the NVIDIA driver is installed but not running (no GPU, or the module not loaded)"
    if name == "NVML_ERROR_LIB_RM_VERSION_MISMATCH":
        return "the NVIDIA driver was updated but not reloaded: restart the computer"
    if name == "NVML_ERROR_NO_PERMISSION":
        return "no permission to talk to the NVIDIA driver"
    return f"NVML failed to start: {exc}"


def _error_name(pynvml: Any, exc: Exception) -> str | None:
    value = getattr(exc, "value", None)
    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_") and getattr(pynvml, name) == value:
            return name
    return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value).strip() or None
