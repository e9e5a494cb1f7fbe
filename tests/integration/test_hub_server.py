"""The FakeHub speaks the Hub as real huggingface_hub expects, and the fixtures are real files."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from hub_fixtures import GATED_REPO, MAIN_REPO, PLAIN_REPO, SPLIT_REPO, STEM
from hub_server import FakeHub
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import GatedRepoError, RemoteEntryNotFoundError

from deskllm.gguf.header import read_header


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_ladder_files_are_real_quantizations(quant_ladder):
    # llama_ftype ids written by llama.cpp's quantizer into general.file_type
    expected = {"Q8_0": 7, "Q6_K": 18, "Q5_K_M": 17, "Q4_K_M": 15, "Q3_K_M": 12, "Q2_K": 10}
    for label, ftype in expected.items():
        assert read_header(quant_ladder[label]).metadata["general.file_type"] == ftype, label
    assert read_header(quant_ladder["Q4_1"]).metadata["general.file_type"] == 3


def test_multipart_shards_load_in_llama_cpp(multipart, starter_model):
    first, second = (read_header(p) for p in multipart)
    assert first.metadata["split.count"] == second.metadata["split.count"] == 2
    assert (first.metadata["split.no"], second.metadata["split.no"]) == (0, 1)
    total = len(read_header(starter_model).tensors)
    assert first.metadata["split.tensors.count"] == len(first.tensors) + len(second.tensors)
    assert len(first.tensors) + len(second.tensors) == total
    # llama.cpp finds shard 2 from shard 1 and loads every weight (in a child: it may abort).
    code = (
        "import sys, llama_cpp\n"
        "m = llama_cpp.Llama(sys.argv[1], n_ctx=64, n_threads=2, verbose=False)\n"
        "print(m._model.n_params())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(multipart[0])], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == read_header(starter_model).n_params


def test_list_models_search_sort_expand_and_pages(hub):
    api = HfApi()
    found = api.list_models(search="smollm2", filter="gguf", sort="downloads", expand=["likes"])
    ids = [m.id for m in found]
    assert PLAIN_REPO not in ids and ids[0].startswith("unsloth/")
    assert len(ids) == 4
    hub.page_size = 1  # every result on its own page: the client must follow Link headers
    paged = [m.id for m in api.list_models(search="smollm2", filter="gguf", sort="downloads")]
    assert paged == ids
    assert sum("cursor=" in r.path for r in hub.requests) == 3
    liked = [m.id for m in api.list_models(filter="gguf", sort="likes", limit=2)]
    assert liked == [GATED_REPO, MAIN_REPO]


def test_model_info_and_tree(hub, quant_ladder):
    api = HfApi()
    info = api.model_info(MAIN_REPO, files_metadata=True)
    assert info.card_data.license == "apache-2.0" and info.gated is False
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes[f"{STEM}-Q8_0.gguf"] == quant_ladder["Q8_0"].stat().st_size
    lfs = {s.rfilename: s.lfs for s in info.siblings}
    assert lfs["README.md"] is None
    assert lfs[f"{STEM}-Q2_K.gguf"].sha256 == sha256(quant_ladder["Q2_K"])
    assert api.model_info(GATED_REPO).gated == "manual"  # gated repos' info stays public

    top = list(api.list_repo_tree(SPLIT_REPO))
    assert {e.path for e in top} == {"Q4_1", f"{STEM}-Q8_0.gguf"}
    deep = {e.path: e for e in api.list_repo_tree(SPLIT_REPO, recursive=True)}
    shard = deep[f"Q4_1/{STEM}-Q4_1-00001-of-00002.gguf"]
    assert shard.lfs is not None and shard.lfs.size == shard.size
    hub.page_size = 2
    assert {e.path for e in api.list_repo_tree(SPLIT_REPO, recursive=True)} == set(deep)
    with pytest.raises(Exception, match="RevisionNotFound|Revision Not Found"):
        api.model_info(MAIN_REPO, revision="nope")


def test_resolve_metadata_redirect_and_range(hub, quant_ladder):
    name = f"{STEM}-Q4_K_M.gguf"
    meta = get_hf_file_metadata(hf_hub_url(MAIN_REPO, name))
    assert meta.etag == sha256(quant_ladder["Q4_K_M"])
    assert meta.size == quant_ladder["Q4_K_M"].stat().st_size
    assert meta.commit_hash == hub.repos[MAIN_REPO].sha
    assert "/cdn-lfs/" in meta.location  # the LFS redirect, not followed by HEAD

    with httpx2.Client(follow_redirects=True) as client:
        r = client.get(hub.file_url(MAIN_REPO, name), headers={"Range": "bytes=0-99"})
        assert r.status_code == 206 and len(r.content) == 100
        assert r.headers["Content-Range"] == f"bytes 0-99/{meta.size}"
        assert r.content == quant_ladder["Q4_K_M"].read_bytes()[:100]
        bad = client.get(hub.file_url(MAIN_REPO, name), headers={"Range": f"bytes={meta.size}-"})
        assert bad.status_code == 416
        same = {"Range": "bytes=10-19", "If-Range": f'"{meta.etag}"'}
        assert client.get(hub.file_url(MAIN_REPO, name), headers=same).status_code == 206
        # A client whose partial copy is of other bytes gets the whole file (streamed, unread).
        other = {"Range": "bytes=10-19", "If-Range": '"0000"'}
        with client.stream("GET", hub.file_url(MAIN_REPO, name), headers=other) as whole:
            assert whole.status_code == 200
            assert int(whole.headers["Content-Length"]) == meta.size
    assert hub.served(MAIN_REPO, name) >= 110
    with pytest.raises(RemoteEntryNotFoundError):
        get_hf_file_metadata(hf_hub_url(MAIN_REPO, "missing.gguf"))


def test_download_survives_drops_and_counts_bytes(hub, quant_ladder, tmp_path):
    name = f"{STEM}-Q2_K.gguf"
    size = quant_ladder["Q2_K"].stat().st_size
    hub.fault(MAIN_REPO, name, drop_after_bytes=size // 3, drop_times=2)
    path = hf_hub_download(MAIN_REPO, name, cache_dir=tmp_path)
    assert sha256(path) == sha256(quant_ladder["Q2_K"])
    ranges = [r.range for r in hub.requests if r.path.startswith("/cdn-lfs/") and r.method == "GET"]
    assert ranges[0] is None and all(r and r.startswith("bytes=") for r in ranges[1:])
    assert len(ranges) == 3
    # Two cut responses of size//3 plus whatever the resumed requests sent.
    assert hub.served(MAIN_REPO, name) >= size


def test_corrupt_byte_and_fail_status(hub, tmp_path):
    with httpx2.Client(follow_redirects=True) as client:
        url = hub.file_url(MAIN_REPO, "README.md")
        good = client.get(url).content
        hub.fault(MAIN_REPO, "README.md", corrupt_byte_at=3, corrupt_times=1)
        bad = client.get(url).content
        assert len(bad) == len(good) and bad != good and bad[3] == good[3] ^ 0xFF
        assert client.get(url).content == good
        hub.fault(MAIN_REPO, "README.md", fail_status=503, fail_times=1)
        assert client.get(url).status_code == 503
        assert client.get(url).status_code == 200
        hub.fault(MAIN_REPO, "README.md", throttle_bytes_per_s=200)
        assert client.get(url).content == good  # slower, not different (no timing asserted)


def test_gated_repo_errors(hub, tmp_path):
    name = f"{STEM}-Q4_K_M.gguf"
    with pytest.raises(GatedRepoError) as no_token:
        hf_hub_download(GATED_REPO, name, cache_dir=tmp_path)
    assert no_token.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as wrong:
        hf_hub_download(GATED_REPO, name, cache_dir=tmp_path, token="hf_wrong")
    assert wrong.value.response.status_code == 403
    path = hf_hub_download(GATED_REPO, name, cache_dir=tmp_path, token=FakeHub.ACCESS_TOKEN)
    assert Path(path).stat().st_size > 0
    # The token went to the Hub but not to the CDN host.
    cdn = [r for r in hub.requests if r.path.startswith("/cdn-lfs/")]
    assert cdn and not any(r.authorized for r in cdn)


def test_stopped_server_refuses_connections(hub):
    url = hub.url
    hub.close()
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(url + "/api/models", timeout=2)
