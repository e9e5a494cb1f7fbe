"""The check EngineClient.load makes before it asks llama.cpp to allocate anything."""

from __future__ import annotations

from pathlib import Path

from deskllm.catalog.gguf_header import GgufHeader
from deskllm.engine.protocol import LoadParams
from deskllm.hardware.report import HardwareReport
from deskllm.planner.fit import FitPlanner
from deskllm.planner.machine import current_hardware


def auto_gpu_layers(
    header: GgufHeader, params: LoadParams, hardware: HardwareReport | None = None
) -> int:
    """The GPU layers the planner gives this model on this machine: the most that fit the
    automatic offload target's free memory (never a CPU-type device), 0 without one."""
    report = hardware or current_hardware()
    if report is None:
        return 0
    plan = FitPlanner(report, use_extra_bufts=params.use_extra_bufts).plan(
        header, params.n_ctx, params.kv_type
    )
    return plan.n_gpu_layers if plan.fit in ("gpu", "partial") else 0


def load_refusal(
    header: GgufHeader, params: LoadParams, hardware: HardwareReport | None = None
) -> str | None:
    """Why loading with `params` cannot fit `hardware` (this machine's cached report by
    default), with needed and available bytes; None when it can, or when nothing is known."""
    report = hardware or current_hardware()
    if report is None or report.memory.available_bytes <= 0:
        return None
    reason = FitPlanner(report).refusal(header, params)
    return f"{Path(params.model_path).name} {reason}" if reason else None
