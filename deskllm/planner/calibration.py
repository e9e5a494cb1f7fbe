"""Calibration: each load's estimate against what llama.cpp and the OS reported.

After a load, `record_load` stores the uncorrected estimate (weights, KV cache, compute buffers,
engine RSS) next to llama.cpp's reported buffer sizes (Loaded.buffers) and the engine's RSS,
per machine and architecture. `corrections_for` turns the recent records into bounded
corrections for later estimates: a factor on the compute buffers (the part that is a fitted
formula, per architecture) and an offset on the engine's fixed memory (per machine: GPU
runtimes and other platforms' libraries differ). Weights and KV cache are exact rules and
are only recorded, never corrected: a difference there is a bug to fix, not to learn.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from sqlite_utils import Database

from deskllm.engine.domain import Loaded, LoadParams
from deskllm.gguf.header import GgufHeader
from deskllm.hardware.report import CpuInfo, MemoryInfo
from deskllm.planner.memory import Corrections, EstimateParams, cpu_repack_types, estimate_memory
from deskllm.planner.model_shape import model_shape

MIB = 1 << 20
WINDOW = 20  # recent loads a correction is taken from
COMPUTE_FACTOR_BOUNDS = (0.5, 2.0)
OVERHEAD_BOUNDS = (-256 * MIB, 2048 * MIB)
TABLE = "calibration"


@dataclass(frozen=True)
class LoadMeasurement:
    """Predicted (uncorrected) and measured sizes of one load, bytes.

    Keys of predicted / measured: model, kv, compute (summed over devices), rss, and the
    same with a `_gpu` suffix for the part on GPUs."""

    machine: str
    architecture: str
    predicted: dict[str, int]
    measured: dict[str, int]
    compute_ratio: float | None
    rss_offset: int
    total_error: float


@functools.cache
def this_cpu() -> CpuInfo:
    from deskllm.hardware.cpu import probe_cpu

    return probe_cpu()


def machine_id(cpu: CpuInfo, memory: MemoryInfo) -> str:
    """Whose loads a record describes: this machine with the llama.cpp build in use, whose
    libraries and GPU runtime weigh on the engine's memory."""
    from deskllm.hardware.keys import machine_engine_key

    return machine_engine_key(cpu, memory)


@functools.cache
def this_machine() -> str:
    from deskllm.hardware.memory import probe_memory

    return machine_id(this_cpu(), probe_memory())


def is_host_buffer(name: str) -> bool:
    """llama.cpp buffer names: "CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host" are system RAM;
    "CUDA0", "Vulkan0", "Metal" are device memory."""
    device = name.split(" ", 1)[0]
    return device.startswith("CPU") or device.endswith("_Host")


def measured_sizes(loaded: Loaded) -> dict[str, int]:
    """Loaded.buffers ("<device> model|KV|compute ...") summed by kind and by GPU share."""
    sizes = {"model": 0, "kv": 0, "compute": 0, "model_gpu": 0, "kv_gpu": 0, "compute_gpu": 0}
    for key, value in loaded.buffers.items():
        parts = key.rsplit(" ", 1)
        kind = parts[-1].lower()
        if kind not in ("model", "kv", "compute"):
            continue
        sizes[kind] += int(value)
        if not is_host_buffer(key):
            sizes[f"{kind}_gpu"] += int(value)
    sizes["rss"] = int(loaded.rss_bytes)
    return sizes


def predicted_sizes(
    header: GgufHeader, params: LoadParams, loaded: Loaded, cpu_features: tuple[str, ...]
) -> dict[str, int]:
    """The raw estimate for the load that happened (its n_ctx, GPU layers, extra buffers)."""
    on_gpu = any(not is_host_buffer(k) for k in loaded.buffers)
    repack = cpu_repack_types(cpu_features) if loaded.use_extra_bufts else frozenset()
    est = estimate_memory(
        model_shape(header),
        EstimateParams(
            n_ctx=loaded.n_ctx,
            kv_type=params.kv_type,
            n_gpu_layers=loaded.n_gpu_layers,
            n_ubatch=params.n_batch,
            flash_attn=params.flash_attn,
            gpu_available=on_gpu,
            repack_types=repack,
        ),
    )
    sizes = {kind: est.buffer(kind) for kind in ("model", "kv", "compute")}
    sizes |= {f"{kind}_gpu": est.buffer(kind, "gpu") for kind in ("model", "kv", "compute")}
    return sizes | {"rss": est.rss_at_load_bytes}


def compare(
    header: GgufHeader,
    params: LoadParams,
    loaded: Loaded,
    machine: str,
    cpu_features: tuple[str, ...],
) -> LoadMeasurement:
    predicted = predicted_sizes(header, params, loaded, cpu_features)
    measured = measured_sizes(loaded)
    total_p = predicted["model"] + predicted["kv"] + predicted["compute"]
    total_m = measured["model"] + measured["kv"] + measured["compute"]
    return LoadMeasurement(
        machine=machine,
        architecture=header.architecture,
        predicted=predicted,
        measured=measured,
        compute_ratio=(
            measured["compute"] / predicted["compute"]
            if predicted["compute"] and measured["compute"]
            else None
        ),
        rss_offset=measured["rss"] - predicted["rss"],
        total_error=(total_m - total_p) / total_p if total_p else 0.0,
    )


def record_load(
    db: Database,
    header: GgufHeader,
    params: LoadParams,
    loaded: Loaded,
    *,
    machine: str | None = None,
    cpu_features: tuple[str, ...] | None = None,
) -> LoadMeasurement:
    """Store how far the estimate was from this load (call it after EngineClient.load with the
    client's resolved params). `machine` and `cpu_features` default to this machine's."""
    features = this_cpu().features if cpu_features is None else cpu_features
    m = compare(header, params, loaded, machine or this_machine(), features)
    db[TABLE].insert(
        {
            "machine": m.machine,
            "architecture": m.architecture,
            "model": Path(loaded.model_path).name,
            "n_ctx": loaded.n_ctx,
            "kv_type": params.kv_type,
            "flash_attn": int(params.flash_attn),
            "n_gpu_layers": loaded.n_gpu_layers,
            "predicted": json.dumps(m.predicted),
            "measured": json.dumps(m.measured),
            "compute_ratio": m.compute_ratio,
            "rss_offset": m.rss_offset,
            "total_error": m.total_error,
            "created_at": time.time(),
        }
    )
    return m


def _clamp(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])


def corrections_for(db: Database, machine: str, architecture: str) -> Corrections:
    """Bounded corrections from the last WINDOW loads: the median compute ratio of this
    architecture on this machine, the median RSS offset of any model on this machine."""
    if TABLE not in db.table_names():
        return Corrections()
    ratios = [
        r["compute_ratio"]
        for r in db[TABLE].rows_where(
            "machine = ? and architecture = ? and compute_ratio is not null",
            [machine, architecture],
            order_by="id desc",
            limit=WINDOW,
        )
    ]
    offsets = [
        r["rss_offset"]
        for r in db[TABLE].rows_where(
            "machine = ? and rss_offset is not null", [machine], order_by="id desc", limit=WINDOW
        )
    ]
    return Corrections(
        compute_factor=_clamp(statistics.median(ratios), COMPUTE_FACTOR_BOUNDS) if ratios else 1.0,
        overhead_bytes=int(_clamp(statistics.median(offsets), OVERHEAD_BOUNDS)) if offsets else 0,
        samples=len(offsets),
    )
