"""Discover's planning, run on its worker thread: a repo's quantizations (from the Hub or the
curated catalog) and the curated catalog as a whole, for this machine. No Qt here."""

from __future__ import annotations

from dataclasses import dataclass

from deskllm.catalog.cache import CatalogCache
from deskllm.catalog.hub import CatalogError, HubCatalog
from deskllm.hardware.report import HardwareReport
from deskllm.planner.catalog_plan import CatalogPlan
from deskllm.planner.plan_model import ModelPlan
from deskllm.store.library import DraftPairs, InstalledModel, draft_pairs, vocabulary_key


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


@dataclass(frozen=True)
class QuantPairs:
    """A planned file of a repo and the installed models it pairs with for speculative
    decoding (same vocabulary, one at most DRAFT_SIZE_SHARE of the other's size)."""

    quant: str
    file: str
    pairs: DraftPairs


def repo_draft_pairs(
    catalog: HubCatalog, plan: ModelPlan, models: list[InstalledModel], cached_only: bool
) -> tuple[QuantPairs, ...]:
    """Which installed `models` can draft for each planned file of the repo, and which it can
    draft for, by the file's remote header: planning read and cached it, so this reads none
    again. With `cached_only` (a curated repo: its plan reads no header) only headers read
    earlier count. Best quality first, as `plan.plans`; files that pair with nothing are left
    out."""
    from deskllm.catalog.remote_header import remote_header

    details = catalog.cached_repo(plan.model) if models else None
    if details is None:
        return ()
    first_parts = {f.first_path: f.parts[0] for f in details.files if f.parts}
    found: list[QuantPairs] = []
    for quant_plan in plan.plans:
        part = first_parts.get(quant_plan.file)
        if part is None or (cached_only and not _header_cached(catalog, part.sha256)):
            continue
        try:  # the tokenizer is in the first part's metadata
            header = remote_header(catalog, plan.model, part.path, sha256=part.sha256).header
        except Exception:  # pairs are an aside: any failure leaves the plan as it is
            continue
        pairs = draft_pairs(vocabulary_key(header), quant_plan.size_bytes, models)
        if pairs.drafts or pairs.drafts_for:
            found.append(QuantPairs(quant_plan.quant, quant_plan.file, pairs))
    return tuple(found)


def _header_cached(catalog: HubCatalog, sha256: str | None) -> bool:
    return bool(sha256) and catalog.cache.get("header", sha256) is not None
