"""Starting `deskllm serve`: what it refuses, what it answers while the model loads, and a
model that cannot be loaded."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import httpx2
import pytest
import uvicorn
from server_helpers import free_port, serve_env

from deskllm.engine.protocol import LoadParams
from deskllm.server import ModelHost, ServerConfig, create_app
from deskllm.server.config import is_loopback


def serve(home: Path, session_home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deskllm", "serve", "--port", str(free_port()), *args],
        env=serve_env(home, session_home), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_another_address_without_a_key_is_refused(deskllm_home, session_home):
    r = serve(deskllm_home, session_home, "--host", "0.0.0.0")
    assert r.returncode == 2
    assert "0.0.0.0" in r.stderr and "--api-key" in r.stderr


def test_loopback_addresses():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    assert not is_loopback("example.com")
    assert ServerConfig(host="0.0.0.0", api_key="k").refusal() is None


def test_a_model_that_cannot_load_ends_the_server_with_the_reason(deskllm_home, session_home,
                                                                   tmp_path):  # fmt: skip
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model at all" * 10)
    r = serve(deskllm_home, session_home, "--model", str(broken))
    assert r.returncode == 1
    assert "broken.gguf" in r.stderr and "not a GGUF" in r.stderr


def test_an_unknown_model_name_is_refused_before_serving(deskllm_home, session_home):
    r = serve(deskllm_home, session_home, "--model", "no-such-model")
    assert r.returncode != 0 and "no-such-model" in r.stderr


@pytest.fixture
def loading_server(starter_model: Path):
    """A real server whose model has not been loaded yet (nothing starts the load)."""
    host = ModelHost(LoadParams(str(starter_model)), "starter", max_queue=1)
    config = ServerConfig(port=free_port())
    server = uvicorn.Server(uvicorn.Config(create_app(host, config, load_on_start=False),
                                           host=config.host, port=config.port,
                                           log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{config.port}"
    for _ in range(200):
        if server.started:
            break
        thread.join(0.05)
    yield url
    server.should_exit = True
    thread.join(30)


def test_while_the_model_loads_health_and_chat_answer_503(loading_server):
    health = httpx2.get(loading_server + "/health")
    assert health.status_code == 503 and health.json()["status"] == "loading"
    r = httpx2.post(loading_server + "/v1/chat/completions",
                    json={"model": "starter", "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 503 and r.headers["Retry-After"]
    assert r.json()["error"]["code"] == "model_loading"
