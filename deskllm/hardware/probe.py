"""probe_hardware(): every probe, each failing on its own, assembled into one HardwareReport.

The NVML, Vulkan, OpenCL and engine probes run in child processes started first, so that
their start-up overlaps the in-process probes (CPU, memory, Metal, PCI). It blocks for a few
hundred milliseconds: the GUI runs it on a TaskRunner.
"""

from __future__ import annotations

import dataclasses
import logging
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from deskllm.hardware import bandwidth as bandwidth_test
from deskllm.hardware.cpu import normalized_arch, probe_cpu
from deskllm.hardware.diagnosis import DiagnosisInput, diagnose
from deskllm.hardware.engine_devices import read_engine, unavailable
from deskllm.hardware.isolation import IsolatedProbes
from deskllm.hardware.memory import probe_memory
from deskllm.hardware.metal import probe_metal
from deskllm.hardware.nvidia import api_probe_from_nvml
from deskllm.hardware.nvml_readings import read_nvml_plain
from deskllm.hardware.opencl import read_opencl
from deskllm.hardware.pci import probe_pci_displays
from deskllm.hardware.report import (
    ApiProbe,
    ApiStatus,
    BandwidthMeasurement,
    CpuInfo,
    EngineProbe,
    HardwareReport,
    MemoryInfo,
    ProbeError,
)
from deskllm.hardware.serialize import from_plain
from deskllm.hardware.targets import merge_offload_targets
from deskllm.hardware.timing import elapsed_ms
from deskllm.hardware.vulkan import read_vulkan

log = logging.getLogger("deskllm.hardware")
T = TypeVar("T")


def probe_hardware(*, bandwidth: bool = True, refresh_bandwidth: bool = False) -> HardwareReport:
    """Probe this machine. Never raises for a failing probe: it becomes an error entry.

    Args:
        bandwidth: run the memory-bandwidth test if no result is cached for this machine.
            With False a cached result is still reported, but nothing is measured.
        refresh_bandwidth: measure again even if a result is cached.
    """
    start = time.perf_counter()
    # Native probes run in two children started first, so that their start-up overlaps the
    # in-process probes and each other (an interpreter start costs more than the probes).
    # NVML goes to a child too: nvmlInit can hang on a GPU that fell off the bus.
    vulkan = IsolatedProbes([("vulkan", read_vulkan)])
    others = IsolatedProbes(
        [("nvml", read_nvml_plain), ("opencl", read_opencl), ("engine", read_engine)]
    )
    errors: list[ProbeError] = []
    cpu = _guarded("cpu", probe_cpu, errors, _unknown_cpu)
    memory = _guarded("memory", probe_memory, errors, lambda: MemoryInfo(0, 0))
    pci_displays = _guarded("pci", probe_pci_displays, errors, tuple)
    metal = _guarded_api("metal", probe_metal)
    answers = vulkan.results() | others.results()
    api_probes = [
        _api_probe("nvml", answers["nvml"], api_probe_from_nvml),
        _api_probe("vulkan", answers["vulkan"], lambda d: from_plain(ApiProbe, d)),
        _api_probe("opencl", answers["opencl"], lambda d: from_plain(ApiProbe, d)),
        metal,
    ]
    engine_probe = _engine_probe(answers["engine"])

    devices = tuple(d for p in api_probes for d in p.devices)
    apis = tuple(p.status for p in api_probes) + (engine_probe.status,)
    errors += [e for p in api_probes for e in p.errors] + list(engine_probe.errors)
    targets = merge_offload_targets(devices, engine_probe.engine)
    probe_ms = elapsed_ms(start)
    log.debug("hardware probe took %.1f ms", probe_ms)

    measured = _bandwidth(cpu, memory, bandwidth, refresh_bandwidth, errors)
    diagnosis = diagnose(
        DiagnosisInput(
            cpu,
            memory,
            devices,
            apis,
            engine_probe.engine,
            targets,
            pci_displays,
            errors,
            measured.gbps if measured else None,
        )
    )
    return HardwareReport(
        cpu=cpu,
        memory=memory,
        devices=devices,
        engine=engine_probe.engine,
        offload_targets=targets,
        bandwidth_gbps=measured.gbps if measured else None,
        diagnosis=diagnosis,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        os=f"{platform.system()} {platform.release()}".strip(),
        apis=apis,
        errors=tuple(errors),
        pci_displays=pci_displays,
        bandwidth=measured,
        probe_ms=probe_ms,
    )


def _unknown_cpu() -> CpuInfo:
    arch = normalized_arch(platform.machine())
    return CpuInfo(platform.processor() or arch, None, None, (), arch, "none")


def _guarded(
    api: str, fn: Callable[[], T], errors: list[ProbeError], fallback: Callable[[], T]
) -> T:
    try:
        return fn()
    except Exception as exc:  # a probe's bug or a broken OS interface: report, carry on
        log.warning("%s probe failed", api, exc_info=True)
        errors.append(ProbeError(api, f"{type(exc).__name__}: {exc}"))
        return fallback()


def _guarded_api(api: str, fn: Callable[[], ApiProbe]) -> ApiProbe:
    start = time.perf_counter()
    try:
        return fn()
    except Exception as exc:
        log.warning("%s probe failed", api, exc_info=True)
        message = f"{type(exc).__name__}: {exc}"
        status = ApiStatus(api, False, "the check failed", wall_ms=elapsed_ms(start))
        return ApiProbe(status, (), (ProbeError(api, message),))


def _api_probe(api: str, answer: object, convert: Callable[[Any], ApiProbe]) -> ApiProbe:
    """A child's plain answer -> ApiProbe; a crash, hang or exception -> an error entry."""
    if isinstance(answer, ProbeError):
        return ApiProbe(ApiStatus(api, False, "the check failed"), (), (answer,))
    try:
        return convert(answer)
    except (ValueError, TypeError, KeyError) as exc:  # a malformed answer is our bug
        log.warning("%s probe answered %r", api, answer, exc_info=True)
        return ApiProbe(
            ApiStatus(api, False, "the check failed"),
            (),
            (ProbeError(api, f"unreadable answer: {exc}"),),
        )


def _engine_probe(answer: object) -> EngineProbe:
    if isinstance(answer, ProbeError):
        failed = from_plain(EngineProbe, unavailable("its check failed"))
        return dataclasses.replace(failed, errors=(answer,))
    return from_plain(EngineProbe, answer)  # type: ignore[arg-type]


def _bandwidth(
    cpu: CpuInfo, memory: MemoryInfo, run: bool, refresh: bool, errors: list[ProbeError]
) -> BandwidthMeasurement | None:
    try:
        if run or refresh:
            return bandwidth_test.cached_or_measured(cpu, memory, refresh=refresh)
        return bandwidth_test.cached_only(cpu, memory)
    except (OSError, MemoryError, ImportError) as exc:
        errors.append(ProbeError("bandwidth", f"{type(exc).__name__}: {exc}"))
        return None
