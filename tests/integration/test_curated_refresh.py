"""The curated catalog refreshed from the local fake Hub: real sizes and sha256 replace the
estimates, the answer is kept in the catalog cache with its time, and offline the cached
answer is what loads."""

from __future__ import annotations

import dataclasses
import hashlib

from curated_helpers import REPO, STEM, serve_curated_repo

from deskllm.catalog.cache import CatalogCache
from deskllm.catalog.curated import load_curated, refresh_curated
from deskllm.catalog.hub import HubCatalog


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_refresh_replaces_estimates_with_the_hubs_sizes(hub, quant_ladder, monkeypatch):
    serve_curated_repo(hub, quant_ladder)
    shipped = load_curated()
    only = shipped.__class__(shipped.catalog_date, (shipped.model(REPO),))
    cache = CatalogCache()
    result = refresh_curated(only, HubCatalog(cache))
    assert result.refreshed == (REPO,) and result.errors == ()
    model = result.catalog.model(REPO)
    assert [f.quant for f in model.files] == ["Q4_K_M", "Q8_0"]  # what the repo has
    for f in model.files:
        path = quant_ladder[f.quant]
        assert (f.size_bytes, f.sha256) == (path.stat().st_size, sha256(path))
        assert not f.size_estimated and f.file == f"{STEM}-{f.quant}.gguf"
    assert model.refreshed_at is not None

    # Kept with its time: the next load lays it over the shipped file, for this Hub only.
    loaded = load_curated(cache=CatalogCache())
    again = loaded.model(REPO)
    assert again.files == model.files and again.refreshed_at == model.refreshed_at
    assert loaded.refreshed_at == model.refreshed_at
    others = [m for m in loaded.models if m.repo_id != REPO]
    assert all(m.refreshed_at is None and m.files[0].size_estimated for m in others)
    elsewhere = load_curated(cache=CatalogCache(), endpoint="https://huggingface.co")
    assert elsewhere.model(REPO).files[0].size_estimated

    # A quant the repo gained since the catalog was made joins it (here: Q8_0 left out).
    older = dataclasses.replace(
        shipped.model(REPO), files=tuple(f for f in shipped.model(REPO).files if f.quant != "Q8_0")
    )
    gained = refresh_curated(only.__class__(only.catalog_date, (older,)), HubCatalog(cache))
    assert [f.quant for f in gained.catalog.model(REPO).files] == ["Q4_K_M", "Q8_0"]

    # Offline, a refresh answers from what was cached and says it did not reach the Hub.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = refresh_curated(only, HubCatalog(CatalogCache()))
    assert offline.refreshed == () and "offline" in offline.errors[0][1]


def test_a_repo_missing_from_the_hub_keeps_its_entry(hub):
    shipped = load_curated()
    model = shipped.model("bartowski/gemma-2-2b-it-GGUF")
    result = refresh_curated(shipped.__class__(shipped.catalog_date, (model,)), HubCatalog())
    assert result.refreshed == ()
    assert "not found" in result.errors[0][1]
    assert result.catalog.model(model.repo_id) == model
