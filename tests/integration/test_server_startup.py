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
from server_helpers import free_port, running_server, serve_env

from deskllm.engine.domain import LoadParams
from deskllm.server import ModelHost, ServerConfig, create_app
from deskllm.server.api_key import stored_key
from deskllm.server.config import is_loopback


def serve(home: Path, session_home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deskllm", "serve", "--port", str(free_port()), *args],
        env=serve_env(home, session_home), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_another_address_without_a_key_uses_the_stored_key(tmp_path, session_home):
    home = tmp_path / "serve-home"
    home.mkdir()
    with running_server(home, session_home, "--host", "0.0.0.0") as server:
        key_file = home / "server" / "api_key"
        key = key_file.read_text().strip()
        assert key.startswith("dsk-") and len(key) > 40
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert key in server.stderr() and str(key_file) in server.stderr()
        models = server.v1 + "/models"
        assert httpx2.get(models).status_code == 401
        assert httpx2.get(models, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx2.get(models, headers={"Authorization": f"Bearer {key}"}).status_code == 200


def test_the_stored_key_is_kept_and_a_damaged_one_replaced(tmp_path):
    path = tmp_path / "api_key"
    first = stored_key(path)
    assert stored_key(path) == first
    path.write_text("short\n")
    second = stored_key(path)
    assert second != first and second.startswith("dsk-")
    path.write_bytes(b"\xff\xfe not text")
    assert stored_key(path) not in (first, second)


def test_an_origin_must_be_named_exactly():
    for bad in ("*", "example.com", "https://example.com/"):
        assert "--cors-origin" in ServerConfig(cors_origins=(bad,)).refusal()
    assert ServerConfig(cors_origins=("https://editor.example",)).refusal() is None


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
def loading_server(starter_model: Path, request: pytest.FixtureRequest):
    """A real server whose model has not been loaded yet (nothing starts the load); a test
    may parametrize its ServerConfig fields indirectly."""
    host = ModelHost(LoadParams(str(starter_model)), "starter", max_queue=1)
    config = ServerConfig(port=free_port(), **getattr(request, "param", {}))
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


PREFLIGHT = {"Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}  # fmt: skip


def test_cors_is_off_by_default(loading_server):
    r = httpx2.options(loading_server + "/v1/chat/completions",
                       headers={"Origin": "https://editor.example", **PREFLIGHT})  # fmt: skip
    assert "access-control-allow-origin" not in r.headers
    r = httpx2.get(loading_server + "/health", headers={"Origin": "https://editor.example"})
    assert "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize("loading_server", [{"cors_origins": ("https://editor.example",),
                                             "api_key": "k"}], indirect=True)  # fmt: skip
def test_only_allow_listed_origins_get_cors_headers(loading_server):
    chat = loading_server + "/v1/chat/completions"
    allowed = httpx2.options(chat, headers={"Origin": "https://editor.example", **PREFLIGHT})
    assert allowed.status_code == 200  # a preflight never carries the key
    assert allowed.headers["access-control-allow-origin"] == "https://editor.example"
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    other = httpx2.options(chat, headers={"Origin": "https://evil.example", **PREFLIGHT})
    assert "access-control-allow-origin" not in other.headers
    # The real request still needs the key.
    r = httpx2.get(loading_server + "/v1/models", headers={"Origin": "https://editor.example"})
    assert r.status_code == 401
    assert r.headers["access-control-allow-origin"] == "https://editor.example"
