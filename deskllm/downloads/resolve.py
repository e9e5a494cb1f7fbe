"""From `REPO [QUANT|FILE]` to a DownloadItem, through the catalog (deskllm.catalog.hub): the
repo's model files with their parts, sizes and LFS sha256, pinned to the commit listed."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from deskllm.downloads.errors import AuthError, DownloadError, NotFoundError, OfflineError
from deskllm.downloads.item import DownloadItem
from deskllm.downloads.transfer import RemoteFile
from deskllm.downloads.units import human_bytes

if TYPE_CHECKING:
    from deskllm.catalog.hub_types import ModelFile, RepoDetails

log = logging.getLogger("deskllm.downloads")


def repo_details(repo_id: str) -> RepoDetails:
    """The catalog's answer, its errors turned into download errors (same words)."""
    from deskllm.catalog.hub import (
        CatalogError,
        GatedRepoAccess,
        HubCatalog,
        HubOffline,
        RepoNotFound,
    )

    try:
        details = HubCatalog().repo(repo_id)
    except HubOffline as exc:
        raise OfflineError(f"cannot look up {repo_id}: {exc}") from exc
    except RepoNotFound as exc:
        raise NotFoundError(str(exc)) from exc
    except GatedRepoAccess as exc:
        raise AuthError(str(exc)) from exc
    except CatalogError as exc:
        raise DownloadError(str(exc)) from exc
    if details.access in ("login", "request"):
        raise AuthError(details.access_message or f"{repo_id} is gated: no access to its files")
    return details


def items_of(
    repo_id: str, files: Iterable[ModelFile], revision: str = "main"
) -> list[DownloadItem]:
    """One item per complete model file (all its shards), smallest first."""
    items = [
        DownloadItem(
            repo_id,
            tuple(RemoteFile(repo_id, p.path, p.size, p.sha256, revision) for p in f.parts),
            f.quant,
        )
        for f in files
        if f.complete and f.parts
    ]
    return sorted(items, key=lambda i: i.total)


def choose(
    items: list[DownloadItem],
    selector: str | None,
    repo_id: str,
    side_files: list[DownloadItem] | None = None,
    *,
    n_ctx: int = 4096,
    kv_type: str = "f16",
    usable_tps: float = 5.0,
) -> DownloadItem:
    """The item a `QUANT` label or a `FILE` path (or file name) names; without one, the
    default. Side files (mmproj) are found by their path only, never chosen as a quant."""
    if not items:
        raise NotFoundError(f"{repo_id} has no complete GGUF model files")
    if not selector:
        return default_item(items, repo_id, n_ctx=n_ctx, kv_type=kv_type, usable_tps=usable_tps)
    wanted = selector.strip().strip("/")
    for item in items + (side_files or []):
        paths = [p.path for p in item.parts]
        if wanted in paths or wanted in [p.rsplit("/", 1)[-1] for p in paths]:
            return item
    matches = [i for i in items if i.quant and i.quant.upper() == wanted.upper()]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(i.name for i in matches)
        raise NotFoundError(f"{repo_id} has several {wanted} files ({names}); name one")
    choices = ", ".join(f"{i.quant or i.name} ({human_bytes(i.total)})" for i in items)
    raise NotFoundError(f"{repo_id} has no {wanted!r}; it has: {choices}")


def default_item(
    items: list[DownloadItem],
    repo_id: str | None = None,
    *,
    n_ctx: int = 4096,
    kv_type: str = "f16",
    usable_tps: float = 5.0,
) -> DownloadItem:
    """The quant to download when none was named: the planner's recommendation for this
    machine (the best quality that fits, KV cache and GPU offload included, and reaches
    `usable_tps` tokens/s; else the fastest that fits). When
    the planner cannot answer (nothing fits, the probe failed), the smallest file, with the
    planner's refusal coming later at load time."""
    if repo_id is not None:
        recommended = _recommended_path(repo_id, n_ctx, kv_type, usable_tps)
        for item in items:
            if recommended in [p.path for p in item.parts]:
                return item
    return min(items, key=lambda i: i.total)


def _recommended_path(repo_id: str, n_ctx: int, kv_type: str, usable_tps: float) -> str | None:
    from deskllm.planner.machine import current_hardware
    from deskllm.planner.plan_model import plan_model

    hardware = current_hardware()
    if hardware is None:
        return None
    try:
        planned = plan_model(
            repo_id, hardware, n_ctx=n_ctx, kv_type=kv_type, usable_tps=usable_tps
        )
    except Exception as exc:  # planning is advice: the download can still go ahead
        log.warning("could not plan %s (%s); taking the smallest file", repo_id, exc)
        return None
    return planned.recommended.file if planned.recommended else None


def resolve(
    repo_id: str,
    selector: str | None = None,
    *,
    n_ctx: int = 4096,
    kv_type: str = "f16",
    usable_tps: float = 5.0,
) -> DownloadItem:
    """The file(s) to download: `selector` (a quant or file name) or, without it, the
    planner's recommendation for this machine at `n_ctx` tokens of `kv_type` KV cache,
    reaching `usable_tps` tokens/s where a quant can."""
    details = repo_details(repo_id)
    revision = details.revision or "main"  # the commit the sizes and sha256 are of
    return choose(
        items_of(repo_id, details.files, revision),
        selector,
        repo_id,
        items_of(repo_id, details.mmproj, revision),
        n_ctx=n_ctx,
        kv_type=kv_type,
        usable_tps=usable_tps,
    )
