"""The one builder of LoadParams from the user's settings (the GUI, the CLI, the self-test and
the benchmark all call it; overrides are CLI flags or a benchmark's fixed values)."""

from __future__ import annotations

from typing import Any

from deskllm.engine.protocol import LoadParams
from deskllm.settings import Settings


def params_from_settings(settings: Settings, model_path: str, **overrides: Any) -> LoadParams:
    """How to load `model_path` with `settings`; overrides that are not None win.

    GPU offload: "auto" lets the loader ask the planner for the most layers that fit this
    machine (gpu_auto), "manual" takes n_gpu_layers, "off" loads on the CPU."""
    base: dict[str, Any] = dict(
        model_path=model_path,
        n_ctx=settings.n_ctx,
        n_threads=settings.n_threads,
        n_gpu_layers=settings.n_gpu_layers if settings.gpu_offload == "manual" else 0,
        gpu_auto=settings.gpu_offload == "auto",
        kv_type=settings.kv_type,
        flash_attn=settings.flash_attn,
        kv_ram_budget_mb=settings.kv_ram_budget_mb,
        kv_disk_budget_mb=settings.kv_disk_budget_mb,
        energy_watts=float(settings.energy_watts),
    )
    return LoadParams(**(base | {k: v for k, v in overrides.items() if v is not None}))
