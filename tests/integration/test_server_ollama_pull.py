"""Ollama's /api/pull against a real local Hub server (HF_ENDPOINT), with the official
`ollama` client: a `hf.co/OWNER/REPO:QUANT` name is downloaded (sha256-verified) into the
library with Ollama's status lines, then listed and chatted with; other names, a missing
repo and a missing quant are refused in Ollama's shape."""

from __future__ import annotations

from pathlib import Path

import ollama
import pytest
from hub_fixtures import MAIN_REPO
from server_helpers import API_KEY, running_server

from deskllm.database import open_database
from deskllm.store import ModelLibrary


@pytest.fixture
def pulling(hub, tmp_path, session_home):
    home = tmp_path / "pull-home"
    home.mkdir()
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "hf-home")}
    with running_server(home, session_home, "--api-key", API_KEY, env=env) as server:
        client = ollama.Client(host=server.url, timeout=300,
                               headers={"Authorization": f"Bearer {API_KEY}"})  # fmt: skip
        yield client, home


def test_a_hub_model_is_pulled_verified_listed_and_answers(pulling, quant_ladder):
    client, home = pulling
    name = f"hf.co/{MAIN_REPO}:Q4_K_M"
    lines = list(client.pull(name, stream=True))
    statuses = [line.status for line in lines]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    assert "verifying sha256 digest" in statuses and "writing manifest" in statuses
    layers = [line for line in lines if (line.status or "").startswith("pulling ") and line.total]
    size = quant_ladder["Q4_K_M"].stat().st_size
    assert layers and layers[-1].total == size and layers[-1].completed == size
    assert all(a.completed <= b.completed for a, b in zip(layers, layers[1:], strict=False))
    db = open_database(home / "deskllm.sqlite3")
    try:
        pulled = [m for m in ModelLibrary(db).list() if m.path.endswith("Q4_K_M.gguf")]
    finally:
        db.close()
    assert len(pulled) == 1 and Path(pulled[0].path).stat().st_size == size
    listed = [m.model for m in client.list().models]
    ours = next(m for m in listed if "q4_k_m" in m.lower())
    reply = client.chat(model=ours, messages=[{"role": "user", "content": "Hi"}],
                        options={"temperature": 0, "num_predict": 8})  # fmt: skip
    assert reply.message.content
    # Pulled again: already there, verified, nothing fetched twice.
    assert client.pull(name).status == "success"


def test_names_the_hub_does_not_have_are_refused(pulling):
    client, _home = pulling
    with pytest.raises(ollama.ResponseError) as other:
        client.pull("llama3.2")
    assert other.value.status_code == 400 and "hf.co/OWNER/REPO" in other.value.error
    with pytest.raises(ollama.ResponseError) as missing:
        client.pull("hf.co/nobody/nothing-GGUF:Q4_K_M")
    assert "nobody/nothing-GGUF" in missing.value.error
    with pytest.raises(ollama.ResponseError) as quant:
        list(client.pull(f"hf.co/{MAIN_REPO}:Q9_X", stream=True))
    assert "Q9_X" in quant.value.error
