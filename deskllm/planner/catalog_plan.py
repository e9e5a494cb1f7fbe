"""Plan the curated catalog for one machine: per repo the quant the recommendation rule picks,
and across repos the one model to suggest. The library face of `deskllm recommend`, also
what Discover shows when there is no search.

Across repos the rule is: of every quant file that fits and reaches the usable speed (see
FitPlanner.fast_enough) at a good quality or better (Q4_K_S and up: a 2- or 3-bit file of a
bigger model is not offered over a sound one of a smaller), prefer those that run entirely
on the GPU where this machine has one (a split between GPU and CPU decodes at the CPU's pace,
so its ceiling is the least trustworthy), then the most parameters, then the better quant.
Where no file qualifies: the biggest repo whose pick reaches the speed at any quality, else
the fastest pick that fits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from deskllm.catalog.curated import CuratedCatalog, CuratedModel
from deskllm.catalog.quants import kl_divergence, quality_tier
from deskllm.hardware.report import HardwareReport
from deskllm.planner.fit import USABLE_TPS, FitPlanner, QuantPlan, Recommendation
from deskllm.planner.memory import Corrections
from deskllm.planner.plan_model import ModelPlan

SOUND_TIERS = ("near-lossless", "good")


@dataclass(frozen=True)
class CatalogRow:
    """One curated repo planned here.

    Attributes:
        chosen: the recommendation rule's pick among the quants that fit; the smallest file
            when none fits (then `recommendation` is None).
        fast_enough: the pick reaches the usable speed (or is a full fit on a discrete GPU
            whose speed is unknown).
    """

    model: CuratedModel
    n_ctx: int
    plans: tuple[QuantPlan, ...]
    chosen: QuantPlan
    recommendation: Recommendation | None
    fast_enough: bool
    measured_tps: Mapping[str, float]  # by plan file: decode speeds measured here

    @property
    def fits(self) -> bool:
        return self.chosen.plan.fit != "too_big"

    @property
    def quality_tier(self) -> str:
        return quality_tier(self.chosen.quant)


@dataclass(frozen=True)
class CatalogPlan:
    rows: tuple[CatalogRow, ...]  # in catalog order
    recommended: CatalogRow | None
    recommended_quant: QuantPlan | None  # of recommended's repo; not always its row's pick
    reason: str | None  # why `recommended` was chosen, in one line
    usable_tps: float
    planner: FitPlanner


def plan_catalog(
    catalog: CuratedCatalog,
    hardware: HardwareReport,
    *,
    n_ctx: int = 4096,
    kv_type: str = "f16",
    usable_tps: float = USABLE_TPS,
    gpu: str | None = None,
    corrections: Callable[[str], Corrections] | None = None,
    measured_tps: Mapping[str, float] | None = None,
) -> CatalogPlan:
    """Every curated repo planned at `n_ctx` tokens (capped by each model's training context)
    of `kv_type` KV cache; `usable_tps` is the speed floor (tokens/s) of the rule;
    `measured_tps`: decode speeds measured here, by file name (see measured_for)."""
    planner = FitPlanner(hardware, target=gpu, corrections=corrections)
    measured = measured_tps or {}
    rows = tuple(_row(planner, m, n_ctx, kv_type, usable_tps, measured) for m in catalog.models)
    best, quant, reason = _recommend(planner, rows, usable_tps)
    return CatalogPlan(rows, best, quant, reason, usable_tps, planner)


def measured_for(plans: Sequence[QuantPlan], speeds: Mapping[str, float]) -> dict[str, float]:
    """`speeds` by file name (a folder in the repo or on disk does not matter) -> the same by
    each plan's file, as FitPlanner.recommend takes them."""
    return {p.file: speeds[PurePath(p.file).name] for p in plans if PurePath(p.file).name in speeds}


def curated_plans(
    planner: FitPlanner, model: CuratedModel, n_ctx: int, kv_type: str
) -> tuple[QuantPlan, ...]:
    """Each quant file of a curated model planned from its shape (no download, no network)."""
    plans = []
    for f in model.files:
        plan = planner.plan(model.header(f.quant), n_ctx, kv_type)
        plans.append(QuantPlan(f.file, f.quant, f.size_bytes, plan))
    return tuple(plans)


def plan_curated_model(
    model: CuratedModel,
    hardware: HardwareReport,
    *,
    n_ctx: int = 4096,
    kv_type: str = "f16",
    usable_tps: float = USABLE_TPS,
    measured_tps: Mapping[str, float] | None = None,
) -> ModelPlan:
    """One curated repo planned the way plan_model plans a repo on the Hub, offline."""
    planner = FitPlanner(hardware)
    ctx = min(n_ctx, model.shape.context)
    plans = curated_plans(planner, model, ctx, kv_type)
    measured = measured_for(plans, measured_tps or {})
    best = planner.recommend(plans, usable_tps=usable_tps, measured_tps=measured)
    return ModelPlan(model.repo_id, ctx, kv_type, planner, plans, best, ())


def _row(
    planner: FitPlanner,
    model: CuratedModel,
    n_ctx: int,
    kv_type: str,
    usable_tps: float,
    speeds: Mapping[str, float],
) -> CatalogRow:
    ctx = min(n_ctx, model.shape.context)
    plans = curated_plans(planner, model, ctx, kv_type)
    measured = measured_for(plans, speeds)
    rec = planner.recommend(plans, usable_tps=usable_tps, measured_tps=measured)
    if rec is None:
        chosen = min(plans, key=lambda p: p.size_bytes)
        return CatalogRow(model, ctx, plans, chosen, None, False, measured)
    chosen = next(p for p in plans if p.file == rec.file)
    return CatalogRow(model, ctx, plans, chosen, rec, rec.fast_enough, measured)


def _recommend(
    planner: FitPlanner, rows: tuple[CatalogRow, ...], usable_tps: float
) -> tuple[CatalogRow | None, QuantPlan | None, str | None]:
    floor = f"{usable_tps:.10g} tok/s"
    # Every quant of every repo, not only each repo's pick: an 8B model at Q4_K_M wholly on an
    # 8 GB GPU beats the same model at Q8_0 split with the CPU, and its own row's rule (best
    # quality reaching the floor) would pick the split one.
    sound = [
        (r, p)
        for r in rows
        for p in r.plans
        if quality_tier(p.quant) in SOUND_TIERS and _reaches(planner, r, p, usable_tps)
    ]
    if sound:
        on_gpu = [(r, p) for r, p in sound if p.plan.fit == "gpu"]
        pool, where = (on_gpu, " entirely on the GPU") if on_gpu else (sound, "")
        row, best = max(pool, key=_size_then_quality)
        rule = f"the biggest model that runs{where} at a good quality or better and {floor}"
    else:
        usable = [r for r in rows if r.fits and r.fast_enough]
        fitting = [r for r in rows if r.fits]
        if usable:
            row = max(usable, key=lambda r: _size_then_quality((r, r.chosen)))
            rule = f"no model reaches {floor} at a good quality; the biggest that reaches it"
        elif fitting:
            row = max(fitting, key=lambda r: (r.chosen.plan.tps_ceiling or 0.0, -r.model.params))
            rule = f"no model reaches {floor} here; the fastest that fits"
        else:
            return None, None, None
        best = row.chosen
    measured = row.measured_tps.get(best.file)
    speed = measured or best.plan.tps_ceiling
    how = "measured" if measured else "expected"
    expected = f", ~{speed:.0f} tok/s {how}" if speed else ", speed not known"
    tier = quality_tier(best.quant)
    params = f"{row.model.params / 1e9:.1f}B"
    reason = (
        f"{row.model.repo_id} {best.quant} ({params}, {tier}{expected}): {rule}; "
        f"{best.plan.reason}"
    )
    return row, best, reason


def _reaches(planner: FitPlanner, row: CatalogRow, plan: QuantPlan, usable_tps: float) -> bool:
    measured = row.measured_tps.get(plan.file)
    if measured and plan.plan.fit != "too_big":
        return measured >= usable_tps
    return planner.fast_enough(plan.plan, usable_tps)


def _size_then_quality(pair: tuple[CatalogRow, QuantPlan]) -> tuple[int, float]:
    row, plan = pair
    kl = kl_divergence(plan.quant)
    return (row.model.params, -(kl if kl is not None else 1.0))
