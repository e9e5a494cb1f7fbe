"""Energy over a span of time, from the machine's own counters. Qt-free.

- Linux powercap RAPL (Intel, and AMD Zen through the same interface): each CPU package's
  energy in µJ, wrapping at `max_energy_range_uj`. Since the CVE-2020-8694 fix only root can
  read `energy_uj`; an unreadable counter is reported with how to allow it.
- NVIDIA NVML: `nvmlDeviceGetTotalEnergyConsumption` (mJ since the driver loaded, Volta and
  newer); GPUs without that counter give `nvmlDeviceGetPowerUsage` (mW), integrated between
  samples.
- macOS has no public energy counter without administrator rights (powermetrics needs sudo).
- No sensor: said so, or the user's own watts figure, always labelled "estimated".

    meter = EnergyMeter.for_this_machine(estimated_watts=0.0)
    span = meter.start(); ...; reading = meter.stop(span)   # EnergyReading
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deskllm.hardware.nvml_readings import _error_name, _init_failure_reason, _text

POWERCAP_ROOT = "/sys/class/powercap"
RAPL_PERMISSION_HINT = (
    "the CPU energy counter is readable only by root on this kernel (CVE-2020-8694); to allow "
    "it until the next boot: sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj ; to "
    "keep it, a udev rule in /etc/udev/rules.d/: "
    'ACTION=="add", SUBSYSTEM=="powercap", KERNEL=="intel-rapl:*", '
    'RUN+="/bin/chmod o+r /sys%p/energy_uj"'
)
MACOS_REASON = (
    "unavailable without administrator rights: macOS has no public energy counter "
    "(powermetrics needs sudo)"
)
NO_SENSOR = "no sensor: this machine offers no readable energy counter"
_TOP_ZONE = re.compile(r"^intel-rapl:(\d+)$")
_SUB_ZONE = re.compile(r"^intel-rapl:(\d+):(\d+)$")


@dataclass(frozen=True)
class EnergyReading:
    """Energy over one span. joules None: not known (source None says why in `detail`)."""

    joules: float | None
    seconds: float
    source: str | None  # "rapl" | "nvml" | "rapl+nvml" | "estimated" | None
    detail: str

    @property
    def watts(self) -> float | None:
        if self.joules is None or self.seconds <= 0:
            return None
        return self.joules / self.seconds


@dataclass(frozen=True)
class SensorStatus:
    """One counter found: whether it can be read and whether it is added into the joules."""

    kind: str  # "rapl" | "nvml" | "macos"
    name: str  # "package-0", "dram", "NVIDIA H100 80GB HBM3", ...
    where: str  # the zone's folder, or "GPU 0"
    readable: bool
    counted: bool
    reason: str | None = None


class EnergySensor:
    """A counter: `read()` gives a raw value, `joules(before, after, seconds)` the energy
    between two raw values. `read()` raises OSError or RuntimeError when it cannot read."""

    kind = ""
    name = ""

    def read(self) -> Any:
        raise NotImplementedError

    def joules(self, before: Any, after: Any, seconds: float) -> float:
        raise NotImplementedError


# RAPL ----------------------------------------------------------------------------------------
def rapl_delta_uj(before: int, after: int, max_range_uj: int) -> int:
    """µJ between two readings of a counter that wraps to 0 after `max_range_uj`. One wrap
    at most: the meter samples often enough (a package wraps after minutes at full power)."""
    if after >= before:
        return after - before
    return max_range_uj - before + after


class RaplZone(EnergySensor):
    kind = "rapl"

    def __init__(self, folder: Path, name: str, max_range_uj: int) -> None:
        self.folder, self.name, self.max_range_uj = folder, name, max_range_uj

    def read(self) -> int:
        return int((self.folder / "energy_uj").read_text().strip())

    def joules(self, before: int, after: int, seconds: float) -> float:
        return rapl_delta_uj(before, after, self.max_range_uj) / 1e6


def scan_rapl(root: str | Path = POWERCAP_ROOT) -> tuple[list[RaplZone], list[SensorStatus]]:
    """The package zones to add up (each physical package once: subzones are parts of their
    package, psys contains the packages) and a status for every zone found."""
    root = Path(root)
    try:
        entries = sorted(root.iterdir(), key=lambda p: _zone_key(p.name))
    except OSError:
        return [], []
    tops = [p for p in entries if _TOP_ZONE.match(p.name)]
    has_package = any(_zone_name(p).startswith("package") for p in tops)
    zones: list[RaplZone] = []
    statuses: list[SensorStatus] = []
    for folder in tops + [p for p in entries if _SUB_ZONE.match(p.name)]:
        name = _zone_name(folder)
        top = bool(_TOP_ZONE.match(folder.name))
        counted = top and (name.startswith("package") or (name == "psys" and not has_package))
        reason = None if counted else _not_counted_reason(name, top)
        try:
            value = int((folder / "energy_uj").read_text().strip())
            max_range = int((folder / "max_energy_range_uj").read_text().strip())
        except PermissionError:
            statuses.append(SensorStatus("rapl", name, str(folder), False, False,
                                         RAPL_PERMISSION_HINT))  # fmt: skip
            continue
        except (OSError, ValueError) as exc:
            statuses.append(SensorStatus("rapl", name, str(folder), False, False,
                                         f"cannot read the counter: {exc}"))  # fmt: skip
            continue
        del value  # read only to learn that it can be read
        statuses.append(SensorStatus("rapl", name, str(folder), True, counted, reason))
        if counted:
            zones.append(RaplZone(folder, name, max_range))
    return zones, statuses


def _zone_key(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", name))


def _zone_name(folder: Path) -> str:
    try:
        return (folder / "name").read_text().strip() or folder.name
    except OSError:
        return folder.name


def _not_counted_reason(name: str, top: bool) -> str:
    if not top:
        return f"{name} is part of its package, which is counted"
    if name == "psys":
        return "psys is the whole platform and contains the packages, which are counted"
    return f"{name} is not a CPU package"


# NVML ----------------------------------------------------------------------------------------
def read_nvml_energy(pynvml: Any, index: int, handle: Any) -> dict[str, Any]:
    """One GPU's energy readings as NVML gives them (mJ, mW), JSON-able: a reading the GPU
    does not offer is None with the NVML error's name beside it."""
    reading: dict[str, Any] = {"index": index}
    for key, fn in (("total_energy_mj", pynvml.nvmlDeviceGetTotalEnergyConsumption),
                    ("power_usage_mw", pynvml.nvmlDeviceGetPowerUsage)):  # fmt: skip
        try:
            reading[key], reading[f"{key}_error"] = int(fn(handle)), None
        except pynvml.NVMLError as exc:
            reading[key], reading[f"{key}_error"] = None, _error_name(pynvml, exc) or str(exc)
    return reading


def nvml_gpu_status(gpu: Mapping[str, Any]) -> SensorStatus:
    """Pure: one GPU's recorded readings -> what the meter can do with it."""
    name, where = gpu.get("name") or f"NVIDIA GPU {gpu['index']}", f"GPU {gpu['index']}"
    if gpu.get("total_energy_mj") is not None:
        return SensorStatus("nvml", name, where, True, True)
    if gpu.get("power_usage_mw") is not None:
        why = _nvml_error_words(gpu.get("total_energy_mj_error"))
        return SensorStatus("nvml", name, where, True, True,
                            f"no energy counter ({why}): power samples are integrated")  # fmt: skip
    why = _nvml_error_words(gpu.get("power_usage_mw_error"))
    return SensorStatus("nvml", name, where, False, False,
                        f"neither an energy counter nor a power reading ({why})")  # fmt: skip


def nvml_joules(before: Mapping[str, Any], after: Mapping[str, Any], seconds: float) -> float:
    """Pure: joules between two readings of one GPU: the energy counter's difference, or
    without one the mean of the two power readings times the seconds between them."""
    if before.get("total_energy_mj") is not None and after.get("total_energy_mj") is not None:
        return (after["total_energy_mj"] - before["total_energy_mj"]) / 1e3
    if before.get("power_usage_mw") is None or after.get("power_usage_mw") is None:
        raise RuntimeError("the GPU stopped giving energy or power readings")
    return (before["power_usage_mw"] + after["power_usage_mw"]) / 2 / 1e3 * seconds


def _nvml_error_words(name: str | None) -> str:
    if name == "NVML_ERROR_NOT_SUPPORTED":
        return "not supported by this GPU; the energy counter needs Volta or newer"
    if name == "NVML_ERROR_NO_PERMISSION":
        return "no permission"
    return name or "unknown error"


class NvmlGpu(EnergySensor):
    kind = "nvml"

    def __init__(self, pynvml: Any, index: int, handle: Any, name: str) -> None:
        self.pynvml, self.index, self.handle, self.name = pynvml, index, handle, name

    def read(self) -> dict[str, Any]:
        return read_nvml_energy(self.pynvml, self.index, self.handle)

    def joules(self, before: Mapping[str, Any], after: Mapping[str, Any], seconds: float) -> float:
        return nvml_joules(before, after, seconds)


def scan_nvml() -> tuple[list[NvmlGpu], list[SensorStatus], str | None]:
    """NVIDIA GPUs that give energy or power, their statuses, and why NVML is unusable (None
    when it is). NVML stays initialised: the sensors read it for the process's life."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pynvml>=12's shim notice
        try:
            import pynvml
        except ImportError as exc:
            return [], [], f"pynvml is not installed ({exc})"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], [], _init_failure_reason(pynvml, exc)
    gpus: list[NvmlGpu] = []
    statuses: list[SensorStatus] = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = None
        with contextlib.suppress(pynvml.NVMLError):
            name = _text(pynvml.nvmlDeviceGetName(handle))
        status = nvml_gpu_status(read_nvml_energy(pynvml, index, handle) | {"name": name})
        statuses.append(status)
        if status.counted:
            gpus.append(NvmlGpu(pynvml, index, handle, status.name))
    return gpus, statuses, None


# The meter -----------------------------------------------------------------------------------
@dataclass
class EnergySpan:
    """An open measurement (`EnergyMeter.start()`'s token)."""

    started: float
    last_time: float
    last: list[Any]
    joules: list[float]
    broken: str | None = None


@dataclass
class EnergyMeter:
    """Joules over spans of time from `sensors`, added up; with none, `estimated_watts`
    (> 0) times the seconds, labelled "estimated"; else joules None and `why_none`.

    `sample()` between start and stop reads every counter once more: it catches a RAPL wrap
    on long spans and adds power samples for GPUs without an energy counter."""

    sensors: Sequence[EnergySensor] = ()
    estimated_watts: float = 0.0
    why_none: str = NO_SENSOR
    clock: Callable[[], float] = time.perf_counter
    _open: list[EnergySpan] = field(default_factory=list, repr=False)

    @classmethod
    def for_this_machine(
        cls, estimated_watts: float = 0.0, gpu: bool = True, powercap_root: str = POWERCAP_ROOT
    ) -> EnergyMeter:
        """CPU packages always (they run the host side even when a GPU does the math); NVIDIA
        GPUs when `gpu` (the model is offloaded)."""
        sensors: list[EnergySensor] = []
        zones, statuses = scan_rapl(powercap_root)
        sensors += zones
        problems = [s.reason for s in statuses if not s.readable and s.reason]
        if gpu:
            gpus, _, _ = scan_nvml()
            sensors += gpus
        why = NO_SENSOR
        if sys.platform == "darwin":
            why = MACOS_REASON
        elif problems:
            why = problems[0]
        return cls(sensors, estimated_watts, why)

    @property
    def source(self) -> str | None:
        kinds = sorted({s.kind for s in self.sensors})
        if kinds:
            return _source_name(kinds)
        return "estimated" if self.estimated_watts > 0 else None

    def start(self) -> EnergySpan:
        now = self.clock()
        span = EnergySpan(now, now, [], [0.0] * len(self.sensors))
        try:
            span.last = [s.read() for s in self.sensors]
        except (OSError, RuntimeError, ValueError) as exc:
            span.broken = f"a counter could not be read: {exc}"
        self._open.append(span)
        return span

    def sample(self) -> None:
        for span in self._open:
            self._advance(span)

    def stop(self, span: EnergySpan) -> EnergyReading:
        self._advance(span)
        with contextlib.suppress(ValueError):
            self._open.remove(span)
        seconds = span.last_time - span.started
        if not self.sensors:
            if self.estimated_watts > 0:
                return EnergyReading(self.estimated_watts * seconds, seconds, "estimated",
                                     f"estimated from {self.estimated_watts:g} W entered in "
                                     "settings")  # fmt: skip
            return EnergyReading(None, seconds, None, self.why_none)
        if span.broken:
            return EnergyReading(None, seconds, None, span.broken)
        names = ", ".join(s.name for s in self.sensors)
        return EnergyReading(sum(span.joules), seconds, self.source, f"measured: {names}")

    def _advance(self, span: EnergySpan) -> None:
        now = self.clock()
        if span.broken or not self.sensors:
            span.last_time = now
            return
        try:
            values = [s.read() for s in self.sensors]
            seconds = now - span.last_time
            for i, sensor in enumerate(self.sensors):
                span.joules[i] += sensor.joules(span.last[i], values[i], seconds)
        except (OSError, RuntimeError, ValueError) as exc:
            span.broken = f"a counter could not be read: {exc}"
        else:
            span.last = values
        span.last_time = now


def _source_name(kinds: Sequence[str]) -> str:
    """The source's name for the kinds of counters added up: rapl, nvml, or rapl+nvml."""
    return "+".join(sorted(kinds, key=lambda k: k != "rapl"))


# What `deskllm hw --json` reports ------------------------------------------------------------
def energy_report(
    powercap_root: str | Path = POWERCAP_ROOT,
    platform: str = sys.platform,
    nvml: Callable[[], tuple[list, list[SensorStatus], str | None]] = scan_nvml,
) -> dict[str, Any]:
    """{"source": what a reply's joules would come from (None: no sensor), "sensors": every
    counter found with readable / counted / reason, "reason": why nothing is measured}."""
    if platform == "darwin":
        status = SensorStatus("macos", "powermetrics", "", False, False, MACOS_REASON)
        return {
            "source": None,
            "sensors": [asdict(status)],
            "reason": MACOS_REASON,
            "nvml": "NVIDIA's NVML does not exist on macOS",
        }
    _, statuses = scan_rapl(powercap_root)
    _, gpu_statuses, nvml_reason = nvml()
    statuses += gpu_statuses
    kinds = {s.kind for s in statuses if s.counted}
    source = _source_name(kinds) if kinds else None
    reason = None
    if source is None:
        problems = [s.reason for s in statuses if not s.readable and s.reason]
        reason = problems[0] if problems else NO_SENSOR
    report: dict[str, Any] = {
        "source": source,
        "sensors": [asdict(s) for s in statuses],
        "reason": reason,
    }
    report["nvml"] = nvml_reason  # None, or why NVML cannot be used at all
    return report


def reply_energy(
    prompt: EnergyReading | None, decode: EnergyReading | None, generated_tokens: int
) -> dict[str, Any]:
    """A reply's energy figures (the engine's Metrics fields) from its two phases: prompt
    evaluation and decoding. Empty when either phase's energy is unknown."""
    phases = [r for r in (prompt, decode) if r is not None]
    if not phases or any(r.joules is None for r in phases):
        return {}
    per_token = None
    if decode is not None and generated_tokens > 0:
        per_token = decode.joules / generated_tokens
    return {
        "joules": sum(r.joules for r in phases),
        "joules_per_token": per_token,
        "watts_prompt": prompt.watts if prompt else None,
        "watts_decode": decode.watts if decode else None,
        "energy_source": phases[0].source,
    }
