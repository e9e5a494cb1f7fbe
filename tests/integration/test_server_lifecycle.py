"""A server you can leave running, checked on a real `deskllm serve` with the real SDKs:
SIGTERM ends open streams with a final event and exits in time, a second signal ends them at
once, loopback refuses other Host and Origin names (DNS rebinding), keys come from the
environment or a private file and never show on the command line, and /health follows a
killed engine through `restarting` back to `ok`."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anthropic
import httpx2
import openai
import psutil
import pytest
from server_helpers import running_server, serve_env

KEY = "env-key-51b9c3"
LONG = 1500  # tokens a reply asks for: far more than the grace lets it write


def _stream_openai(server, out: dict, started: threading.Event) -> None:
    client = openai.OpenAI(base_url=server.v1, api_key=KEY, max_retries=0)
    try:
        stream = client.chat.completions.create(
            model="smollm2-135m-instruct-q4_1", stream=True, max_tokens=LONG,
            messages=[{"role": "user", "content": "Count from one to one thousand."}],
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                started.set()
            if chunk.choices and chunk.choices[0].finish_reason:
                out["finish"] = chunk.choices[0].finish_reason
        out["ended"] = True
    except Exception as exc:  # the test says which
        out["error"] = repr(exc)
    finally:
        started.set()


def _stream_anthropic(server, out: dict, started: threading.Event) -> None:
    client = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)
    try:
        with client.messages.stream(
            model="smollm2-135m-instruct-q4_1", max_tokens=LONG,
            messages=[{"role": "user", "content": "Count from one to one thousand."}],
            extra_body={"ignore_eos": True},
        ) as stream:  # fmt: skip
            for event in stream:
                if event.type == "content_block_delta":
                    started.set()
                if event.type == "message_delta":
                    out["finish"] = event.delta.stop_reason
                if event.type == "message_stop":
                    out["stopped"] = True
        out["ended"] = True
    except Exception as exc:
        out["error"] = repr(exc)
    finally:
        started.set()


def _open_streams(server, *readers) -> list[tuple[threading.Thread, dict]]:
    streams = []
    for reader in readers:
        out: dict = {}
        started = threading.Event()
        thread = threading.Thread(target=reader, args=(server, out, started), daemon=True)
        thread.start()
        assert started.wait(120), "the stream never started"
        assert "error" not in out, out
        streams.append((thread, out))
    return streams


def _exit_seconds(process: subprocess.Popen, limit_s: float) -> float:
    sent = time.monotonic()
    process.wait(limit_s)
    return time.monotonic() - sent


def test_sigterm_ends_open_streams_with_a_final_event_and_exits_in_time(tmp_path, session_home,
                                                                       extra_bufts):  # fmt: skip
    grace = 3.0
    with running_server(tmp_path, session_home, "--parallel", "2", "--shutdown-grace",
                        str(grace), env={"DESKLLM_API_KEY": KEY}) as server:  # fmt: skip
        streams = _open_streams(server, _stream_openai, _stream_anthropic)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        # Stopping: a new request is refused with 503 and a Retry-After, /health says so.
        late = httpx2.post(server.v1 + "/chat/completions",
                           headers={"Authorization": f"Bearer {KEY}"},
                           json={"model": "x", "messages": [{"role": "user", "content": "hi"}]},
                           timeout=10)  # fmt: skip
        assert late.status_code == 503 and late.headers["Retry-After"]
        assert late.json()["error"]["code"] == "shutting_down"
        health = httpx2.get(server.url + "/health", timeout=10)
        assert (health.status_code, health.json()["status"]) == (503, "stopping")
        exit_s = _exit_seconds(server.process, grace + 30)
        for thread, _ in streams:
            thread.join(10)
        (_, chat), (_, messages) = streams
    assert chat == {"finish": "shutdown", "ended": True}, chat
    assert messages == {"finish": "shutdown", "stopped": True, "ended": True}, messages
    assert server.process.returncode == 0, server.stderr()
    assert exit_s <= grace + 2, f"exited {exit_s:.1f} s after SIGTERM (grace {grace} s)"
    assert "may finish for up to 3 s" in server.stderr()


def test_a_second_signal_ends_the_streams_at_once(tmp_path, session_home, extra_bufts):
    grace = 60.0
    with running_server(tmp_path, session_home, "--shutdown-grace", str(grace),
                        env={"DESKLLM_API_KEY": KEY}) as server:  # fmt: skip
        [(thread, out)] = _open_streams(server, _stream_openai)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert "finish" not in out, "the reply did not go on during the grace"
        server.process.send_signal(signal.SIGINT)  # Ctrl+C again
        exit_s = _exit_seconds(server.process, 30)
        thread.join(10)
    assert out == {"finish": "shutdown", "ended": True}, out
    assert exit_s < 5, f"exited {exit_s:.1f} s after the second signal"


@pytest.fixture(scope="module")
def server(tmp_path_factory, session_home, extra_bufts):
    home = tmp_path_factory.mktemp("lifecycle-home")
    with running_server(home, session_home, "--allowed-hosts", "my.box",
                        env={"DESKLLM_API_KEY": KEY}) as srv:  # fmt: skip
        yield srv


def _get(server, path: str = "/v1/models", key: str | None = KEY, **headers: str):
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx2.get(server.url + path, headers=headers, timeout=30)


def test_other_host_names_are_refused_on_loopback(server):
    port = server.url.rsplit(":", 1)[1]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost",
                 f"my.box:{port}", "MY.BOX"):  # fmt: skip
        assert _get(server, Host=host).status_code == 200, host
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "my.box.evil"):
        answer = _get(server, Host=host)
        assert answer.status_code == 403, host
        assert "--allowed-hosts" in answer.json()["error"]["message"]
    # Before the key: a rebinding page learns nothing, not even that a key is wanted.
    assert _get(server, key=None, Host="evil.example").status_code == 403
    assert _get(server, "/health", key=None, Host="evil.example").status_code == 403


def test_browser_origins_are_checked_the_same_way(server):
    assert _get(server, Origin="http://evil.example").status_code == 403
    assert _get(server, Origin="null").status_code == 403
    for origin in ("http://localhost:3000", "http://127.0.0.1", "http://my.box:8080"):
        assert _get(server, Origin=origin).status_code == 200, origin
    anthropic_shape = httpx2.post(
        server.url + "/v1/messages", headers={"x-api-key": KEY, "Origin": "http://evil.example"},
        json={"model": "x", "max_tokens": 1, "messages": []}, timeout=30,
    ).json()  # fmt: skip
    assert anthropic_shape["error"]["type"] == "permission_error"


def test_the_key_from_the_environment_is_required_and_not_on_the_command_line(server):
    assert _get(server, key=None).status_code == 401
    assert _get(server, key="wrong").status_code == 401
    assert _get(server).status_code == 200
    cmdline = Path(f"/proc/{server.process.pid}/cmdline").read_bytes()
    assert KEY.encode() not in cmdline


def test_health_follows_a_killed_engine_through_restarting_to_ok(server):
    engines = psutil.Process(server.process.pid).children(recursive=True)
    assert engines, "no engine process"
    for engine in engines:
        engine.kill()
    seen: list[dict] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        answer = _get(server, "/health", key=None)
        body = answer.json()
        seen.append(body)
        if body["status"] == "restarting":
            assert answer.status_code == 503 and "killed" in body["cause"], body
        if body["status"] == "ok" and any(s["status"] == "restarting" for s in seen):
            break
        time.sleep(0.02)
    statuses = [s["status"] for s in seen]
    assert "restarting" in statuses and statuses[-1] == "ok", statuses
    # It came back by itself (no request asked) and counts the restart.
    metrics = _get(server, "/metrics").text
    assert "deskllm_engine_restarts_total 1" in metrics
    assert _get(server).status_code == 200


def test_a_key_file_works_and_stays_off_the_command_line(tmp_path, session_home, extra_bufts):
    key_file = tmp_path / "key"
    key_file.write_text("file-key-0d2e\n")
    key_file.chmod(0o600)
    with running_server(tmp_path, session_home, "--api-key-file", str(key_file)) as srv:
        assert _get(srv, key="file-key-0d2e").status_code == 200
        assert _get(srv, key=None).status_code == 401
        assert b"file-key-0d2e" not in Path(f"/proc/{srv.process.pid}/cmdline").read_bytes()


def test_a_key_file_others_can_read_is_refused_and_a_key_on_the_command_line_warns(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("file-key-0d2e\n")
    key_file.chmod(0o644)
    env = serve_env(tmp_path, tmp_path)
    refused = subprocess.run([sys.executable, "-m", "deskllm", "serve", "--api-key-file",
                              str(key_file)], env=env, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert refused.returncode == 2
    assert "other users" in refused.stderr and f"chmod 600 {key_file}" in refused.stderr
    # A bad --parallel stops it before a model loads: only the warning is checked here.
    warned = subprocess.run([sys.executable, "-m", "deskllm", "serve", "--api-key", "secret-k",
                             "--parallel", "-1"], env=env, capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert warned.returncode == 2
    assert "visible to every user" in warned.stderr
