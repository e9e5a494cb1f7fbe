"""The one builder of LoadParams from the user's settings (the GUI, the CLI, the self-test and
the benchmark all call it; overrides are CLI flags or a benchmark's fixed values), and the
rates a local reply's cost is figured with (`deskllm usage`, the Usage view)."""

from __future__ import annotations

from typing import Any

from deskllm.engine.domain import LoadParams
from deskllm.hardware.energy_cost import LocalCostRates
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
        auto_metric=settings.auto_config_metric,
        kv_type=settings.kv_type,
        flash_attn=settings.flash_attn,
        speculation=settings.speculation,
        draft_model_path=settings.draft_model,
        kv_ram_budget_mb=settings.kv_ram_budget_mb,
        kv_disk_budget_mb=settings.kv_disk_budget_mb,
        energy_watts=float(settings.energy_watts),
    )
    chosen = base | {k: v for k, v in overrides.items() if v is not None}
    if chosen["speculation"] != "draft":
        chosen["draft_model_path"] = ""  # a draft loads only where its drafts are asked for
    return LoadParams(**chosen)


def cost_rates_from_settings(settings: Settings, **overrides: float | None) -> LocalCostRates:
    """The tariff, watts and hardware share per hour of `settings`; overrides that are not
    None win (CLI flags)."""
    hours = settings.hardware_hours
    per_hour = settings.hardware_cost / hours if settings.hardware_cost > 0 and hours > 0 else 0
    base = dict(
        tariff_per_kwh=settings.electricity_price_per_kwh,
        estimated_watts=float(settings.energy_watts),
        hardware_per_hour=per_hour,
    )
    return LocalCostRates(**(base | {k: v for k, v in overrides.items() if v is not None}))
