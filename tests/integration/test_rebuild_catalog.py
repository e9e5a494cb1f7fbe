"""packaging/rebuild_catalog.py against the local fake Hub: a curated repo served there gets
its real files (sizes, sha256) and the shape read from a GGUF header by Range requests; the
other entries stay as they were; --estimate reproduces the shipped file offline."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from curated_helpers import REPO, STEM, serve_curated_repo

from deskllm.catalog.curated import curated_path, parse_curated

SCRIPT = Path(__file__).parent.parent.parent / "packaging" / "rebuild_catalog.py"


def rebuild(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True, text=True, env=dict(os.environ), timeout=300,
    )  # fmt: skip


def test_a_served_repo_is_rebuilt_from_the_hub(hub, quant_ladder, tmp_path):
    serve_curated_repo(hub, quant_ladder)
    out = tmp_path / "curated.json"
    r = rebuild("--only", REPO, "--out", str(out))
    assert r.returncode == 0, r.stderr
    shipped = json.loads(curated_path().read_text())
    rebuilt = json.loads(out.read_text())
    catalog = parse_curated(rebuilt)  # what the app will read
    entry = next(e for e in rebuilt["models"] if e["repo_id"] == REPO)
    files = {f["quant"]: f for f in entry["files"]}
    assert set(files) == {"Q4_K_M", "Q8_0"}
    for quant, f in files.items():
        path = quant_ladder[quant]
        assert f["file"] == f"{STEM}-{quant}.gguf"
        assert f["size_bytes"] == path.stat().st_size and f["size_estimated"] is False
        assert f["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    # The shape now is the served file's (the starter model's), read from its header.
    assert entry["shape"] == {
        "architecture": "llama", "layers": 30, "embedding": 576, "feed_forward": 1536,
        "heads": 9, "kv_heads": 3, "vocab": 49152, "context": 8192, "tied_embeddings": True,
    }  # fmt: skip
    assert "GGUF header of" in entry["source"]
    # Family, parameter count and license stay as curated; every other entry is untouched.
    before = next(e for e in shipped["models"] if e["repo_id"] == REPO)
    assert (entry["family"], entry["params"], entry["license"]) == (
        before["family"], before["params"], before["license"])  # fmt: skip
    others = [e for e in rebuilt["models"] if e["repo_id"] != REPO]
    assert others == [e for e in shipped["models"] if e["repo_id"] != REPO]
    assert len(catalog.models) == len(shipped["models"])
    # Only the header was read, never a whole model file.
    assert hub.served(REPO, f"{STEM}-Q4_K_M.gguf") < quant_ladder["Q4_K_M"].stat().st_size


def test_a_repo_the_hub_lacks_is_kept_and_reported(hub, tmp_path):
    out = tmp_path / "curated.json"
    r = rebuild("--only", "bartowski/gemma-2-2b-it-GGUF", "--out", str(out))
    assert r.returncode == 1 and "kept as it was" in r.stderr
    rebuilt = json.loads(out.read_text())
    assert rebuilt["models"] == json.loads(curated_path().read_text())["models"]


def test_estimate_reproduces_the_shipped_file(tmp_path):
    out = tmp_path / "curated.json"
    r = rebuild("--estimate", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text() == curated_path().read_text()
