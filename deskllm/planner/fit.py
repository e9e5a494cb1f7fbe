"""FitPlanner: will a model run on this machine, how, and which quantization to take.

Fit classes: `gpu` (every layer offloaded), `partial` (N of the block_count + 1 layer slots on
the GPU, the rest on the CPU), `cpu`, `too_big`. The GPU is the automatic offload target of
the hardware report (CPU-type devices such as llvmpipe only when the user names them); its
free memory minus VRAM_MARGIN is the budget, and n_gpu_layers is the most that fit it. RAM is
checked against available memory minus a margin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from deskllm.catalog.quants import kl_divergence
from deskllm.engine.domain import LoadParams
from deskllm.gguf.header import GgufHeader
from deskllm.hardware.report import HardwareReport
from deskllm.planner.memory import (
    Corrections,
    EstimateParams,
    MemoryEstimate,
    bytes_read_per_token,
    cpu_repack_types,
    estimate_memory,
)
from deskllm.planner.model_shape import ModelShape, model_shape

GIB = 1 << 30
MIB = 1 << 20
VRAM_MARGIN = 1024 * MIB  # what llama.cpp's --fit keeps free per GPU (driver, other apps)
RAM_MARGIN_MIN = 512 * MIB
RAM_MARGIN_FRACTION = 0.05  # of total RAM: the desktop and the app itself keep running
FIT_CLASSES = ("gpu", "partial", "cpu", "too_big")
# Decode speed (tokens/s) below which a reply reads slower than people read: the default of
# the `usable_tps` setting, which callers hand to recommend().
USABLE_TPS = 5.0
RECOMMEND_RULES = ("usable_speed", "gpu_speed_unknown", "fastest", "speed_unknown")


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


@dataclass(frozen=True)
class GpuTarget:
    """The device layers would be offloaded to. Memory in bytes, bandwidth in GB/s."""

    name: str
    engine_device: str | None
    free_bytes: int | None
    shares_system_memory: bool
    bandwidth_gbps: float | None = None


@dataclass(frozen=True)
class LoadSettings:
    """The load parameters a plan proposes (LoadParams fields of the same names)."""

    n_ctx: int
    n_gpu_layers: int
    kv_type: str
    flash_attn: bool


@dataclass(frozen=True)
class FitPlan:
    """How one model file would run here.

    Attributes:
        layer_slots: block_count + 1 (the output layer is a slot of its own).
        tps_ceiling: decode tokens/s can not exceed this: memory bandwidth / bytes read per
            token (weights and half the context's KV cache); None where a bandwidth is unknown.
    """

    fit: str
    n_gpu_layers: int
    layer_slots: int
    estimate: MemoryEstimate
    load: LoadSettings
    tps_ceiling: float | None
    reason: str
    ram_budget_bytes: int
    vram_budget_bytes: int | None
    target: str | None


@dataclass(frozen=True)
class QuantPlan:
    """One file of a model (one quantization, all its shards) and its plan."""

    file: str
    quant: str
    size_bytes: int
    plan: FitPlan


@dataclass(frozen=True)
class Recommendation:
    """The quant to take. `rule`: which rule of FitPlanner.recommend chose it, one of
    RECOMMEND_RULES; `reason` says the same in words, with the plan's own reason."""

    file: str
    quant: str
    reason: str
    plan: FitPlan
    rule: str = "usable_speed"

    @property
    def fast_enough(self) -> bool:
        """It reaches the usable speed, or counts as reaching it (full fit, discrete GPU)."""
        return self.rule in ("usable_speed", "gpu_speed_unknown")


def choose_target(hardware: HardwareReport, named: str | None = None) -> GpuTarget | None:
    """The automatic offload target the engine can drive, or the one the user named (by name
    or engine device, e.g. "Vulkan0"); None: CPU only."""
    wanted = named.lower() if named else None
    for t in hardware.offload_targets:
        if wanted is not None:
            if wanted not in (t.name.lower(), (t.engine_device or "").lower()):
                continue
            if t.engine_device is None:
                raise ValueError(f"{t.name} has no backend in the installed llama.cpp build")
        elif not t.automatic or t.engine_device is None:
            continue
        engine = next((e for e in hardware.engine.devices if e.name == t.engine_device), None)
        free = t.memory_free_bytes
        if free is None:
            free = engine.memory_free_bytes if engine else t.memory_total_bytes
        shared = t.shares_system_memory
        return GpuTarget(
            t.name,
            t.engine_device,
            free,
            shared,
            hardware.bandwidth_gbps if shared else t.bandwidth_gbps,
        )
    if wanted is not None:
        for e in hardware.engine.devices:
            if e.type != "cpu" and wanted in (e.name.lower(), e.description.lower()):
                shared = e.type == "igpu"
                bw = hardware.bandwidth_gbps if shared else None
                return GpuTarget(e.description, e.name, e.memory_free_bytes, shared, bw)
        raise ValueError(f"no offload device named {named!r} on this machine")
    return None


def engine_gpu(hardware: HardwareReport, cpu_type_named: bool = False) -> GpuTarget | None:
    """The device llama.cpp itself offloads to when asked for GPU layers: its first non-CPU
    device, with the offload target's memory figures where the probe matched one. ggml skips
    CPU-type devices (llvmpipe) unless the user named them (GGML_VK_VISIBLE_DEVICES)."""
    for engine in hardware.engine.devices:
        if engine.type == "cpu":
            continue
        target = next((t for t in hardware.offload_targets if t.engine_device == engine.name), None)
        if target is not None and target.type == "cpu" and not cpu_type_named:
            continue
        free = target.memory_free_bytes if target else None
        shared = target.shares_system_memory if target else engine.type == "igpu"
        return GpuTarget(
            target.name if target else engine.description,
            engine.name,
            free if free is not None else engine.memory_free_bytes,
            shared,
            hardware.bandwidth_gbps if shared else (target.bandwidth_gbps if target else None),
        )
    return None


class FitPlanner:
    """Plans loads against one HardwareReport (this machine's, or a saved profile's).

    `corrections` gives the calibration for an architecture (see calibration.corrections_for);
    without it the raw estimate is used. `use_extra_bufts` False: the engine runs without
    llama.cpp's extra buffer types (no repacked weight copies); None: assume the default, on.
    """

    def __init__(
        self,
        hardware: HardwareReport,
        *,
        target: str | None = None,
        corrections: Callable[[str], Corrections] | None = None,
        n_ubatch: int = 512,
        use_extra_bufts: bool | None = None,
    ) -> None:
        self.hardware = hardware
        self.gpu = choose_target(hardware, target)
        self._corrections = corrections
        self.n_ubatch = n_ubatch
        # llama.cpp's extra buffer types are on unless the engine's probe turned them off.
        off = use_extra_bufts is False
        self.repack_types = frozenset() if off else cpu_repack_types(hardware.cpu.features)
        memory = hardware.memory
        self.ram_margin = max(RAM_MARGIN_MIN, int(memory.total_bytes * RAM_MARGIN_FRACTION))
        self.ram_budget = max(0, memory.available_bytes - self.ram_margin)
        free = self.gpu.free_bytes if self.gpu else None
        self.vram_budget = max(0, free - VRAM_MARGIN) if free is not None else None
        # A GPU the probe saw that the installed llama.cpp build has no backend for.
        self.unusable_gpu = next(
            (t.name for t in hardware.offload_targets if t.automatic and not t.engine_device),
            None,
        )

    # Estimates --------------------------------------------------------------------------------
    def corrections(self, architecture: str) -> Corrections:
        return self._corrections(architecture) if self._corrections else Corrections()

    def params(self, n_ctx: int, kv_type: str, n_gpu_layers: int) -> EstimateParams:
        return EstimateParams(
            n_ctx=n_ctx,
            kv_type=kv_type,
            n_gpu_layers=n_gpu_layers,
            n_ubatch=self.n_ubatch,
            gpu_available=self.gpu is not None,
            repack_types=self.repack_types,
        )

    def estimate(
        self,
        header: GgufHeader | ModelShape,
        n_ctx: int,
        kv_type: str = "f16",
        n_gpu_layers: int = 0,
    ) -> MemoryEstimate:
        shape = header if isinstance(header, ModelShape) else model_shape(header)
        params = self.params(n_ctx, kv_type, n_gpu_layers)
        return estimate_memory(shape, params, self.corrections(shape.architecture))

    def _ram_needed(self, est: MemoryEstimate) -> int:
        # An integrated GPU's memory is the system RAM.
        shared = self.gpu is not None and self.gpu.shares_system_memory
        return est.ram_bytes + (est.vram_bytes if shared else 0)

    # Plans ------------------------------------------------------------------------------------
    def plan(self, header: GgufHeader | ModelShape, n_ctx: int, kv_type: str = "f16") -> FitPlan:
        """The most GPU layers that fit, the fit class, load settings and a one-line reason."""
        shape = header if isinstance(header, ModelShape) else model_shape(header)
        slots = shape.block_count + 1
        chosen = self.estimate(shape, n_ctx, kv_type, 0)
        n_gpu = 0
        if self.gpu is not None and self.vram_budget is not None:
            for n in range(slots, 0, -1):
                est = self.estimate(shape, n_ctx, kv_type, n)
                if est.vram_bytes <= self.vram_budget:
                    chosen, n_gpu = est, n
                    break
        ram = self._ram_needed(chosen)
        if ram > self.ram_budget:
            fit = "too_big"
        elif n_gpu == slots:
            fit = "gpu"
        elif n_gpu > 0:
            fit = "partial"
        else:
            fit = "cpu"
        params = self.params(n_ctx, kv_type, n_gpu)
        return FitPlan(
            fit=fit,
            n_gpu_layers=n_gpu,
            layer_slots=slots,
            estimate=chosen,
            load=LoadSettings(n_ctx, n_gpu, kv_type, params.uses_flash_attn),
            tps_ceiling=self._tps_ceiling(shape, params),
            reason=self._reason(fit, chosen, n_gpu, slots, ram),
            ram_budget_bytes=self.ram_budget,
            vram_budget_bytes=self.vram_budget,
            target=self.gpu.name if self.gpu else None,
        )

    def tps_ceiling(
        self,
        header: GgufHeader | ModelShape,
        n_ctx: int,
        kv_type: str = "f16",
        n_gpu_layers: int = 0,
    ) -> float | None:
        """The decode ceiling with exactly `n_gpu_layers` offloaded (see FitPlan)."""
        shape = header if isinstance(header, ModelShape) else model_shape(header)
        return self._tps_ceiling(shape, self.params(n_ctx, kv_type, n_gpu_layers))

    def _tps_ceiling(self, shape: ModelShape, params: EstimateParams) -> float | None:
        cpu_bytes, gpu_bytes = bytes_read_per_token(shape, params, params.n_ctx // 2)
        cpu_bw = self.hardware.bandwidth_gbps
        gpu_bw = self.gpu.bandwidth_gbps if self.gpu else None
        blocks_on_cpu = params.n_gpu_layers < shape.block_count + 1
        if gpu_bytes and gpu_bw is None:
            # Unknown GPU speed: the CPU's share still bounds a partial offload from above.
            if not (blocks_on_cpu and cpu_bw):
                return None
            return cpu_bw * 1e9 / cpu_bytes
        if not cpu_bw:
            return None
        seconds = cpu_bytes / (cpu_bw * 1e9) + (gpu_bytes / (gpu_bw * 1e9) if gpu_bytes else 0)
        return 1.0 / seconds

    def _reason(self, fit: str, est: MemoryEstimate, n_gpu: int, slots: int, ram: int) -> str:
        avail = self.hardware.memory.available_bytes
        ram_text = f"{gib(ram)} of RAM ({gib(avail)} available, {gib(self.ram_margin)} kept free)"
        gpu = self.gpu.name if self.gpu else None
        vram = (
            f"{gib(est.vram_bytes)} of {gib(self.vram_budget or 0)} usable on {gpu}" if gpu else ""
        )
        if fit == "too_big":
            return f"too big: needs {ram_text}" + (f"; {n_gpu} layers fit {gpu}" if n_gpu else "")
        if fit == "gpu":
            return f"fully on the GPU: {vram}; {gib(ram)} of RAM"
        if fit == "partial":
            return f"{n_gpu} of {slots} layers on the GPU ({vram}), the rest on the CPU: {ram_text}"
        if gpu is None and self.unusable_gpu:
            why = f"{self.unusable_gpu} is here, but this llama.cpp build cannot use it"
        elif gpu is None:
            why = "no GPU the engine can use"
        elif self.vram_budget is None:
            why = f"{gpu} does not say how much memory is free"
        else:
            why = f"{gpu} has no room for a layer"
        return f"on the CPU ({why}): {ram_text}"

    # Quantizations ----------------------------------------------------------------------------
    def recommend(
        self,
        plans: Sequence[QuantPlan],
        *,
        usable_tps: float = USABLE_TPS,
        measured_tps: Mapping[str, float] | None = None,
    ) -> Recommendation | None:
        """Among the quants that fit: the best quality (lowest KL-divergence, then the smaller
        file) whose decode speed reaches `usable_tps` tokens/s, else the fastest. The speed is
        `measured_tps[file]` (or by the file's name) where given, else the plan's ceiling. A
        full fit on a discrete GPU whose speed is unknown counts as fast enough. None when
        nothing fits."""
        fitting = [p for p in plans if p.plan.fit != "too_big"]
        if not fitting:
            return None
        given = measured_tps or {}
        # By the plan's file, or by its name alone (speeds measured on files on disk).
        measured = {
            p.file: given.get(p.file) or given[PurePath(p.file).name]
            for p in fitting
            if given.get(p.file) or given.get(PurePath(p.file).name)
        }
        by_quality = sorted(fitting, key=_quality_key)
        floor = f"{usable_tps:.10g} tok/s"
        for p in by_quality:
            speed = measured.get(p.file) or p.plan.tps_ceiling
            if speed is not None and speed >= usable_tps:
                how = "measured" if p.file in measured else "expected"
                return self._recommendation(
                    p, f"best quality reaching {floor} (~{speed:.0f} tok/s {how})", "usable_speed"
                )
            if speed is None and self._fast_when_unknown(p.plan):
                return self._recommendation(
                    p,
                    f"best quality fully on {self.gpu.name if self.gpu else 'the GPU'} (speed "
                    f"not known; a full fit on a discrete GPU counts as reaching {floor})",
                    "gpu_speed_unknown",
                )
        timed = [p for p in by_quality if (measured.get(p.file) or p.plan.tps_ceiling)]
        if not timed:
            # Nothing to compare speeds by (no bandwidth known): quality decides.
            return self._recommendation(
                by_quality[0], "best quality that fits (decode speed not known)", "speed_unknown"
            )
        fastest = max(timed, key=lambda p: measured.get(p.file) or p.plan.tps_ceiling or 0.0)
        speed = measured.get(fastest.file) or fastest.plan.tps_ceiling or 0.0
        how = "measured" if fastest.file in measured else "expected"
        words = f"none reaches {floor}; fastest that fits (~{speed:.1f} tok/s {how})"
        return self._recommendation(fastest, words, "fastest")

    def _fast_when_unknown(self, plan: FitPlan) -> bool:
        return plan.fit == "gpu" and self.gpu is not None and not self.gpu.shares_system_memory

    def fast_enough(self, plan: FitPlan, usable_tps: float = USABLE_TPS) -> bool:
        """The plan fits and its decode ceiling reaches `usable_tps` tokens/s, or it is a full
        fit on a discrete GPU whose speed is unknown (the rule of `recommend`)."""
        if plan.fit == "too_big":
            return False
        if plan.tps_ceiling is None:
            return self._fast_when_unknown(plan)
        return plan.tps_ceiling >= usable_tps

    @staticmethod
    def _recommendation(p: QuantPlan, words: str, rule: str) -> Recommendation:
        return Recommendation(p.file, p.quant, f"{p.quant}: {words}; {p.plan.reason}", p.plan, rule)

    # Refusal before a load --------------------------------------------------------------------
    def refusal(self, header: GgufHeader, load: LoadParams) -> str | None:
        """Why loading with exactly `load` cannot fit, with the numbers; None if it can.
        No margins here: a user who asks for a tight fit gets to try it."""
        shape = model_shape(header)
        gpu = engine_gpu(self.hardware, getattr(load, "vulkan_devices", None) is not None)
        params = EstimateParams(
            n_ctx=load.n_ctx,
            kv_type=load.kv_type,
            n_gpu_layers=load.n_gpu_layers,
            n_ubatch=load.n_batch,
            flash_attn=load.flash_attn,
            gpu_available=gpu is not None,
            repack_types=(
                frozenset()
                if load.use_extra_bufts is False
                else cpu_repack_types(self.hardware.cpu.features)
            ),
        )
        est = estimate_memory(shape, params, self.corrections(shape.architecture))
        shared = gpu is not None and gpu.shares_system_memory
        ram = est.ram_bytes + (est.vram_bytes if shared else 0)
        avail = self.hardware.memory.available_bytes
        if avail and ram > avail:
            return (
                f"needs {gib(ram)} of RAM ({ram} bytes: {_breakdown(est, 'cpu')}) but only "
                f"{gib(avail)} ({avail} bytes) is available. Close other programs, choose a "
                "smaller quantization or a shorter context."
            )
        free = gpu.free_bytes if gpu else None
        if est.vram_bytes and free is not None and not shared and est.vram_bytes > free:
            return (
                f"needs {gib(est.vram_bytes)} on {gpu.name} ({est.vram_bytes} bytes: "
                f"{_breakdown(est, 'gpu')}) but only {gib(free)} ({free} bytes) is free. "
                "Offload fewer layers (n_gpu_layers) or choose a smaller quantization."
            )
        return None


def _quality_key(p: QuantPlan) -> tuple[float, int]:
    kl = kl_divergence(p.quant)
    return (kl if kl is not None else float("inf"), p.size_bytes)


def _breakdown(est: MemoryEstimate, device: str) -> str:
    names = {
        "weights": "weights",
        "kv": "KV cache",
        "compute": "compute",
        "output": "output",
        "engine": "engine",
    }
    return ", ".join(f"{names[p.name]} {gib(p.bytes)}" for p in est.parts if p.device == device)
