"""Plan every quantization of a model for a machine: the library face of `deskllm plan`,
also used by `deskllm download` to pick the quant when none is named."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from deskllm.catalog.quants import quality_rank
from deskllm.hardware.report import HardwareReport
from deskllm.planner.fit import USABLE_TPS, FitPlanner, QuantPlan, Recommendation
from deskllm.planner.memory import Corrections
from deskllm.planner.sources import Unreadable, find_sources


@dataclass(frozen=True)
class ModelPlan:
    model: str
    n_ctx: int
    kv_type: str
    planner: FitPlanner
    plans: tuple[QuantPlan, ...]  # best quality first
    recommended: Recommendation | None
    errors: tuple[Unreadable, ...]


def plan_model(
    model: str,
    hardware: HardwareReport,
    *,
    n_ctx: int = 4096,
    kv_type: str = "f16",
    gpu: str | None = None,
    corrections: Callable[[str], Corrections] | None = None,
    usable_tps: float = USABLE_TPS,
    measured_tps: Mapping[str, float] | None = None,
) -> ModelPlan:
    """MODEL is a .gguf file, a folder of them or a Hub repo id. Raises SourceError (and the
    catalog's errors) when nothing can be read; ValueError for an unknown `gpu`. `n_ctx` is
    capped by the model's training context; callers pass the user's settings (`usable_tps`:
    the decode speed, tokens/s, a recommendation should reach; see FitPlanner.recommend)."""
    sources = find_sources(model)
    planner = FitPlanner(hardware, target=gpu, corrections=corrections)
    if sources.candidates:
        trained = sources.candidates[0].header.context_length
        n_ctx = min(n_ctx, trained) if trained else n_ctx
    kv = kv_type
    plans = sorted(
        (
            QuantPlan(c.file, c.quant, c.size_bytes, planner.plan(c.header, n_ctx, kv))
            for c in sources.candidates
        ),
        key=lambda p: (quality_rank(p.quant), p.size_bytes),
    )
    best = (
        planner.recommend(plans, usable_tps=usable_tps, measured_tps=measured_tps)
        if plans
        else None
    )
    return ModelPlan(model, n_ctx, kv, planner, tuple(plans), best, tuple(sources.errors))
