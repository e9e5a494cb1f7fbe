"""The catalog against a real HTTP server that speaks the Hub (FakeHub), through huggingface_hub."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hub_fixtures import (
    GATED_REPO,
    LADDER,
    MAIN_REPO,
    MMPROJ_NAME,
    PLAIN_REPO,
    SPLIT_REPO,
    STEM,
    UNSLOTH_REPO,
)
from hub_server import FakeHub

from deskllm.catalog.hub import GatedRepoAccess, HubCatalog, HubOffline, RepoNotFound
from deskllm.catalog.remote_header import combine_parts, fetch_remote_header, remote_header
from deskllm.gguf.header import read_header


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def catalog(hub) -> HubCatalog:
    return HubCatalog()


# -- search ---------------------------------------------------------------------------------


def test_search_sorts_and_leaves_out_repos_without_gguf(catalog):
    by = {s: [h.repo_id for h in catalog.search("smollm2", sort=s).hits] for s in
          ("downloads", "likes", "updated")}  # fmt: skip
    assert by["downloads"] == [UNSLOTH_REPO, MAIN_REPO, SPLIT_REPO, GATED_REPO]
    assert by["likes"] == [GATED_REPO, MAIN_REPO, UNSLOTH_REPO, SPLIT_REPO]
    assert by["updated"] == [GATED_REPO, MAIN_REPO, SPLIT_REPO, UNSLOTH_REPO]
    assert PLAIN_REPO not in by["downloads"]  # most downloaded, but no GGUF
    top = catalog.search("SmolLM2", sort="downloads", limit=2)
    assert [h.repo_id for h in top.hits] == by["downloads"][:2]
    assert not top.offline and not top.source.from_cache
    hit = {h.repo_id: h for h in catalog.search("smollm2").hits}
    assert hit[GATED_REPO].gated and not hit[MAIN_REPO].gated
    assert hit[MAIN_REPO].downloads == 5000 and hit[MAIN_REPO].likes == 40
    assert hit[MAIN_REPO].license == "apache-2.0"
    assert hit[MAIN_REPO].last_modified.startswith("2026-01-10")
    assert catalog.search("no-such-model").hits == ()


# -- repo details ---------------------------------------------------------------------------


def test_repo_details_list_every_quant_with_size_and_sha256(catalog, quant_ladder):
    details = catalog.repo(MAIN_REPO)
    assert details.license == "apache-2.0" and details.gated is None and details.access is None
    assert details.revision and len(details.revision) == 40
    assert {f.quant for f in details.files} == {*LADDER, "Q4_1"}
    for f in details.files:
        local = quant_ladder[f.quant]
        assert f.size == local.stat().st_size, f.quant
        assert f.sha256 == sha256(local), f.quant
        assert len(f.parts) == 1 and f.complete
    assert [f.size for f in details.files] == sorted((f.size for f in details.files), reverse=True)
    # The vision projector is noted, but it is not a quant choice; README is not a model.
    assert [m.name for m in details.mmproj] == [MMPROJ_NAME]
    assert all("mmproj" not in f.name and not f.name.endswith(".md") for f in details.files)


def test_split_model_is_one_file_with_parts(catalog, multipart):
    details = catalog.repo(SPLIT_REPO)
    split = details.file(f"Q4_1/{STEM}-Q4_1.gguf")
    assert split is not None and split.quant == "Q4_1"
    assert [p.path for p in split.parts] == [f"Q4_1/{p.name}" for p in multipart]
    assert [p.size for p in split.parts] == [p.stat().st_size for p in multipart]
    assert split.size == sum(p.stat().st_size for p in multipart)
    assert [p.sha256 for p in split.parts] == [sha256(p) for p in multipart]
    assert {f.quant for f in details.files} == {"Q4_1", "Q8_0"}


def test_unusual_labels_and_unknown_repo(catalog):
    assert {f.quant for f in catalog.repo(UNSLOTH_REPO).files} == {"UD-Q4_K_XL", "Q8_0"}
    assert catalog.repo(PLAIN_REPO).files == ()
    with pytest.raises(RepoNotFound, match="nobody/nothing"):
        catalog.repo("nobody/nothing")


# -- gated repos ----------------------------------------------------------------------------


def test_gated_repo_without_token_says_how_to_get_access(catalog, hub):
    details = catalog.repo(GATED_REPO)  # the listing is public, as on the Hub
    assert details.gated == "manual" and details.license == "llama3.2"
    assert details.access == "login"
    assert "hf auth login" in details.access_message
    assert f"{hub.url}/{GATED_REPO}" in details.access_message
    with pytest.raises(GatedRepoAccess) as err:
        remote_header(catalog, GATED_REPO, f"{STEM}-Q4_K_M.gguf")
    assert err.value.status == 401
    assert "hf auth login" in str(err.value) and "accept" in str(err.value)


def test_gated_repo_with_a_token_without_access_and_with_one(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_not_approved")
    details = HubCatalog().repo(GATED_REPO)
    assert details.access == "request" and "accept its conditions" in details.access_message
    monkeypatch.setenv("HF_TOKEN", FakeHub.ACCESS_TOKEN)  # what `hf auth login` leads to
    catalog = HubCatalog()
    assert catalog.repo(GATED_REPO).access == "ok"
    header = remote_header(catalog, GATED_REPO, f"{STEM}-Q4_K_M.gguf")
    assert header.check.status == "match"


# -- remote headers -------------------------------------------------------------------------


def test_remote_header_matches_the_local_one_and_fetches_only_a_prefix(hub, quant_ladder):
    name = f"{STEM}-Q2_K.gguf"
    remote = fetch_remote_header(MAIN_REPO, name)
    local = read_header(quant_ladder["Q2_K"])
    assert remote.header == local
    assert remote.file_size == quant_ladder["Q2_K"].stat().st_size
    assert remote.sha256 == sha256(quant_ladder["Q2_K"])
    assert remote.check.status == "match" and remote.check.header_label == "Q2_K"
    served = hub.served(MAIN_REPO, name)
    assert served == remote.bytes_fetched
    # Only about the header: each growth step asked only for bytes not yet held.
    assert local.data_offset <= served < 2 * local.data_offset
    assert served < remote.file_size / 10
    gets = [r for r in hub.requests if r.method == "GET" and name in r.path]
    assert gets and all(r.range and r.range.startswith("bytes=") for r in gets)


def test_remote_headers_of_split_parts_combine_to_the_whole_model(hub, starter_model):
    catalog = HubCatalog()
    split = catalog.repo(SPLIT_REPO).file(f"Q4_1/{STEM}-Q4_1.gguf")
    parts = [remote_header(catalog, SPLIT_REPO, p.path, sha256=p.sha256) for p in split.parts]
    whole = combine_parts(parts)
    local = read_header(starter_model)
    assert whole.n_params == local.n_params and whole.tensor_bytes == local.tensor_bytes
    assert parts[0].check.status == "match"
    assert parts[1].check.status == "unknown"  # later shards carry no general.file_type


def test_header_check_flags_a_file_named_wrong(hub, quant_ladder):
    hub.add_repo("liar/Wrong-GGUF", {f"{STEM}-Q4_K_M.gguf": quant_ladder["Q8_0"]})
    check = fetch_remote_header("liar/Wrong-GGUF", f"{STEM}-Q4_K_M.gguf").check
    assert check.status == "mismatch" and check.header_label == "Q8_0"
    unsloth = fetch_remote_header(UNSLOTH_REPO, f"{STEM}-UD-Q4_K_XL.gguf").check
    assert unsloth.status == "close"  # a dynamic mix keeps the base type's file_type


# -- cache and offline ----------------------------------------------------------------------


def fill_cache(catalog: HubCatalog) -> dict:
    seen = {
        "search": catalog.search("smollm2", sort="downloads"),
        "repo": catalog.repo(MAIN_REPO),
    }
    seen["header"] = remote_header(catalog, MAIN_REPO, f"{STEM}-Q4_K_M.gguf")
    return seen


def test_offline_mode_answers_from_the_cache(catalog, hub, monkeypatch):
    seen = fill_cache(catalog)
    asked = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    search = catalog.search("smollm2", sort="downloads")
    assert search.offline and search.source.from_cache and "HF_HUB_OFFLINE" in search.source.reason
    assert search.hits == seen["search"].hits
    resorted = catalog.search("SmolLM2", sort="likes", limit=2)  # never asked for: re-sorted
    assert [h.repo_id for h in resorted.hits] == [GATED_REPO, MAIN_REPO] and resorted.offline

    details = catalog.repo(MAIN_REPO)
    assert details.offline and details.files == seen["repo"].files

    header = remote_header(catalog, MAIN_REPO, f"{STEM}-Q4_K_M.gguf")
    assert header.header == seen["header"].header and header.bytes_fetched == 0
    assert header.check.status == "match"
    assert len(hub.requests) == asked  # nothing went to the network

    # Words never searched: the catalog shipped with the app answers, where it has a match.
    shipped = catalog.search("llama instruct")
    assert shipped.offline and not shipped.source.from_cache and shipped.hits
    assert all("llama" in h.repo_id.lower() for h in shipped.hits)
    assert "catalog shipped with deskllm" in shipped.source.reason
    nothing = catalog.search("no-such-model-family")
    assert nothing.offline and nothing.hits == ()
    with pytest.raises(HubOffline, match="not been looked at"):
        catalog.repo(SPLIT_REPO)
    with pytest.raises(HubOffline):
        remote_header(catalog, SPLIT_REPO, f"{STEM}-Q8_0.gguf")


def test_a_dead_server_means_offline_answers_without_a_long_wait(catalog, hub):
    seen = fill_cache(catalog)
    hub.close()
    started = time.monotonic()
    search = catalog.search("smollm2", sort="downloads")
    details = catalog.repo(MAIN_REPO)
    elapsed = time.monotonic() - started
    assert search.offline and search.hits == seen["search"].hits
    assert "cannot reach" in search.source.reason
    assert details.offline and details.files == seen["repo"].files
    # huggingface_hub's own retries would take ~25 s; the catalog gives up at once.
    assert elapsed < 12, elapsed
    with pytest.raises(HubOffline):
        catalog.repo(SPLIT_REPO)


# -- command line ---------------------------------------------------------------------------


def deskllm(*args: str, offline: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ)  # HF_ENDPOINT, HF_HOME and DESKLLM_HOME as the fixtures set them
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "deskllm", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def test_cli_search_and_repo(hub, quant_ladder):
    r = deskllm("search", "smollm2", "--sort", "likes", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [h["repo_id"] for h in data["hits"]][:2] == [GATED_REPO, MAIN_REPO]
    assert data["offline"] is False and data["sort"] == "likes"

    r = deskllm("search", "smollm2", "--limit", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["repo", "downloads", "likes"]
    assert lines[1].startswith(UNSLOTH_REPO) and len(lines) == 3

    r = deskllm("repo", SPLIT_REPO)
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("Q4_1/"))
    assert row.split()[1] == "Q4_1" and row.split()[-1] == "2"

    r = deskllm("repo", MAIN_REPO, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    q8 = next(f for f in data["files"] if f["quant"] == "Q8_0")
    assert q8["size"] == quant_ladder["Q8_0"].stat().st_size
    assert q8["sha256"] == sha256(quant_ladder["Q8_0"])
    assert [m["name"] for m in data["mmproj"]] == [MMPROJ_NAME]

    r = deskllm("repo", MAIN_REPO)
    assert r.returncode == 0 and "mmproj" in r.stdout and "Q6_K" in r.stdout

    # Offline, in a new process: the answers come from the cache the runs above filled.
    r = deskllm("repo", MAIN_REPO, "--json", offline=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["offline"] is True
    r = deskllm("search", "smollm2", "--limit", "2", offline=True)
    assert r.returncode == 0 and "offline" in r.stderr and UNSLOTH_REPO in r.stdout
    r = deskllm("repo", SPLIT_REPO + "-nope", offline=True)
    assert r.returncode == 1 and "HF_HUB_OFFLINE" in r.stderr


def test_cli_gated_repo_says_how_to_get_access(hub):
    r = deskllm("repo", GATED_REPO)
    assert r.returncode == 0, r.stderr
    assert "gated" in r.stdout and "hf auth login" in r.stderr
