"""Discover's planning, run on its worker thread: a repo's quantizations (from the Hub or the
curated catalog) and the curated catalog as a whole, for this machine. No Qt here."""

from __future__ import annotations

from dataclasses import dataclass

from deskllm.catalog.cache import CatalogCache
from deskllm.catalog.hub import CatalogError, HubCatalog
from deskllm.hardware.report import HardwareReport
from deskllm.planner.catalog_plan import CatalogPlan
from deskllm.planner.plan_model import ModelPlan


def this_hardware() -> HardwareReport:
    """This machine's report (probed once per process); CatalogError if the probe failed."""
    from deskllm.planner.machine import current_hardware

    hardware = current_hardware()
    if hardware is None:
        raise CatalogError("the hardware probe failed, so nothing can be planned")
    return hardware


def plan_repo(
    repo_id: str, n_ctx: int, usable_tps: float, speeds: dict[str, float], curated: bool
) -> ModelPlan:
    """A Hub repo's files by their remote headers, or a curated repo's from the catalog."""
    from deskllm.planner.plan_model import plan_model

    if curated:
        from deskllm.catalog.curated import load_curated
        from deskllm.planner.catalog_plan import plan_curated_model

        model = load_curated(cache=CatalogCache()).model(repo_id)
        if model is not None:
            return plan_curated_model(
                model, this_hardware(), n_ctx=n_ctx, usable_tps=usable_tps, measured_tps=speeds
            )
    return plan_model(
        repo_id, this_hardware(), n_ctx=n_ctx, usable_tps=usable_tps, measured_tps=speeds
    )


@dataclass(frozen=True)
class CuratedAnswer:
    """The curated catalog planned here, with what the list shows besides the plan; `speeds`
    are the decode speeds measured in chats here, by file name."""

    plan: CatalogPlan
    catalog_date: str
    refreshed_at: float | None
    speeds: dict[str, float]
    qualities: dict[str, dict]  # quality checks run here: file name -> the newest result


def plan_curated(
    n_ctx: int, usable_tps: float, cache: CatalogCache, refresh: HubCatalog | None = None
) -> CuratedAnswer:
    """Every curated repo at `n_ctx` tokens, refreshed entries of `cache` included; with
    `refresh`, first read every repo's real files from the Hub through it."""
    from deskllm.catalog.curated import load_curated, refresh_curated
    from deskllm.planner.catalog_plan import plan_catalog
    from deskllm.store.decode_speeds import measured_decode_speeds
    from deskllm.store.quality_results import QualityResults

    catalog = load_curated(cache=cache)
    if refresh is not None:
        catalog = refresh_curated(catalog, refresh).catalog
    speeds = measured_decode_speeds(cache.db)
    plan = plan_catalog(
        catalog, this_hardware(), n_ctx=n_ctx, usable_tps=usable_tps, measured_tps=speeds
    )
    qualities = QualityResults(cache.db).latest_by_file()
    return CuratedAnswer(plan, catalog.catalog_date, catalog.refreshed_at, speeds, qualities)
