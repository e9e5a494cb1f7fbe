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

from collections.abc import Callable
from dataclasses import dataclass

from deskllm.catalog.curated import CuratedCatalog, CuratedModel
from deskllm.catalog.quants import kl_divergence, quality_tier
from deskllm.hardware.report import HardwareReport
from deskllm.planner.fit import USABLE_TPS, FitPlanner, QuantPlan, Recommendation
from deskllm.planner.memory import Corrections

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
) -> CatalogPlan:
    """Every curated repo planned at `n_ctx` tokens (capped by each model's training context)
    of `kv_type` KV cache; `usable_tps` is the speed floor (tokens/s) of the rule."""
    planner = FitPlanner(hardware, target=gpu, corrections=corrections)
    rows = tuple(_row(planner, m, n_ctx, kv_type, usable_tps) for m in catalog.models)
    best, quant, reason = _recommend(planner, rows, usable_tps)
    return CatalogPlan(rows, best, quant, reason, usable_tps, planner)


def _row(
    planner: FitPlanner, model: CuratedModel, n_ctx: int, kv_type: str, usable_tps: float
) -> CatalogRow:
    ctx = min(n_ctx, model.shape.context)
    plans = tuple(
        QuantPlan(f.file, f.quant, f.size_bytes, planner.plan(model.header(f.quant), ctx, kv_type))
        for f in model.files
    )
    rec = planner.recommend(plans, usable_tps=usable_tps)
    if rec is None:
        chosen = min(plans, key=lambda p: p.size_bytes)
        return CatalogRow(model, ctx, plans, chosen, None, False)
    chosen = next(p for p in plans if p.file == rec.file)
    return CatalogRow(model, ctx, plans, chosen, rec, rec.fast_enough)


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
        if quality_tier(p.quant) in SOUND_TIERS and planner.fast_enough(p.plan, usable_tps)
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
    speed = best.plan.tps_ceiling
    expected = f", ~{speed:.0f} tok/s expected" if speed else ", speed not known"
    tier = quality_tier(best.quant)
    params = f"{row.model.params / 1e9:.1f}B"
    reason = (
        f"{row.model.repo_id} {best.quant} ({params}, {tier}{expected}): {rule}; "
        f"{best.plan.reason}"
    )
    return row, best, reason


def _size_then_quality(pair: tuple[CatalogRow, QuantPlan]) -> tuple[int, float]:
    row, plan = pair
    kl = kl_divergence(plan.quant)
    return (row.model.params, -(kl if kl is not None else 1.0))
