"""`deskllm chat --model auto` and `deskllm usage` against real servers: the local starter
model through the router, a second `deskllm serve` as the remote (its /metrics counts every
request it gets), and llama-cpp-python's server as a remote that is killed."""

# ruff: noqa: F811 (the fixtures imported from the remote engines tests are parameters here)
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import threading
from pathlib import Path

import httpx2
import pytest
from remote_helpers import llama_cpp_server
from server_helpers import API_KEY
from test_remote_engines import ALIAS, DESK_MODEL, LCS_KEY, cli, desk  # noqa: F401

from deskllm.store import ConversationStore, open_database

LONG_PART = "the river runs on past the mill and the bridge. "


@pytest.fixture(autouse=True)
def probed(deskllm_home: Path, session_home: Path, extra_bufts: bool) -> None:
    """The crash-safe probe's answer, so each chat does not probe again."""
    if (session_home / "probes").is_dir():
        shutil.copytree(session_home / "probes", deskllm_home / "probes", dirs_exist_ok=True)


def served_requests(server) -> int:
    """Requests the remote answered on its API routes (not /metrics or /health)."""
    text = httpx2.get(server.url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"},
                      timeout=10).text  # fmt: skip
    return sum(int(n) for path, n in re.findall(
        r'deskllm_requests_total\{path="([^"]+)",status="\d+"\} (\d+)', text)
        if path.startswith("/v1"))  # fmt: skip


def replies(home: Path) -> list:
    store = ConversationStore(open_database(home / "deskllm.sqlite3"))
    out = []
    for conversation in reversed(store.list()):
        out += [m for m in store.messages(conversation.id) if m.role == "assistant"]
    return out


def auto(cli, starter_model: Path, *args: str, stdin: str | None = None):
    return cli("chat", "--model", "auto", "--local-model", str(starter_model),
               "--temperature", "0", "--max-tokens", "12", "--metrics", *args,
               stdin=stdin)  # fmt: skip


@contextlib.contextmanager
def counting_listener():
    """A port that counts the connections opened to it (and answers none)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1", accepted
    finally:
        stop.set()
        thread.join()
        for s in [*accepted, listener]:
            s.close()


def test_privacy_default_never_contacts_a_remote(cli, desk, starter_model, deskllm_home):
    assert cli("remote", "add", "desk", desk.v1, "--key-stdin", stdin=API_KEY).returncode == 0
    with counting_listener() as (url, accepted):
        assert cli("remote", "add", "trap", url).returncode == 0
        before = served_requests(desk)
        # Everything that would escalate if routing were allowed: every reply uncertain, and a
        # message longer than the local context.
        turns = [f"Part {i}: {LONG_PART * 12}" for i in range(3)]
        r = auto(cli, starter_model, "--escalate-share", "1.0", "--ctx", "256",
                 stdin="\n".join(turns) + "\n")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "no endpoint allows routing; every reply stays on this machine" in r.stderr
        assert served_requests(desk) == before
        assert accepted == []
    stored = replies(deskllm_home)
    assert len(stored) == 3
    assert all(m.metrics["engine"] == "local" and m.metrics["route_reason"] == "private"
               and m.model == str(starter_model) for m in stored)  # fmt: skip
    assert stored[-1].metrics["dropped_messages"] > 0  # the oldest turns left out, as ever


def test_a_conversation_outgrowing_the_local_context_escalates(
    cli,
    desk,
    starter_model,
    deskllm_home,
):
    add = cli("remote", "add", "desk", desk.v1, "--key-stdin", "--allow-routing", stdin=API_KEY)
    assert add.returncode == 0, add.stderr
    before = served_requests(desk)
    turns = [f"Part {i}: {LONG_PART * 12}" for i in range(3)]
    r = auto(cli, starter_model, "--ctx", "256", stdin="\n".join(turns) + "\n")
    assert r.returncode == 0, r.stderr
    first, *later = replies(deskllm_home)
    assert first.metrics["engine"] == "local" and first.metrics["route_reason"] == "local"
    assert later and all(m.metrics["route_reason"] == "context" for m in later)
    assert all(m.metrics["engine"] == "desk" and m.model == f"desk/{DESK_MODEL}" for m in later)
    assert all(m.status == "complete" and m.content for m in later)
    assert served_requests(desk) == before + 1 + len(later)  # its model list, then the chats
    assert "[route: context; answered by remote endpoint desk" in r.stderr


def test_a_threshold_above_every_score_escalates_and_below_keeps_local(
    cli,
    desk,
    starter_model,
    deskllm_home,
):
    add = cli("remote", "add", "desk", desk.v1, "--key-stdin", "--allow-routing", stdin=API_KEY)
    assert add.returncode == 0, add.stderr
    sent = auto(cli, starter_model, "--escalate-share", "1.0", "--uncertainty-tokens", "4",
                "--prompt", "Name a colour.")  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert "escalates 100% of 24 calibration prompts" in sent.stderr
    kept = auto(cli, starter_model, "--escalate-below", "-1000", "--prompt", "Name a colour.")
    assert kept.returncode == 0, kept.stderr
    remote, local = replies(deskllm_home)
    assert remote.metrics["route_reason"] == "uncertain" and remote.metrics["engine"] == "desk"
    assert remote.metrics["route_score"] < 0
    # The local start that was thrown away was neither shown nor stored.
    assert sent.stdout.strip() == remote.content
    assert local.metrics["route_reason"] == "local" and local.metrics["engine"] == "local"
    logprobs = local.metrics["token_logprobs"]  # K is 16, the reply 12 tokens at most
    assert 0 < len(logprobs) <= 12 and all(lp <= 0 for lp in logprobs)
    assert local.metrics["route_score"] == pytest.approx(sum(logprobs) / len(logprobs))


def test_a_killed_remote_falls_back_to_local_with_a_notice(
    cli,
    starter_model,
    extra_bufts,
    tmp_path,
    deskllm_home,
):
    with llama_cpp_server(starter_model, ALIAS, LCS_KEY, tmp_path, extra_bufts) as doomed:
        add = cli("remote", "add", "lcs", doomed.v1, "--key-stdin", "--allow-routing",
                  stdin=LCS_KEY)  # fmt: skip
        assert add.returncode == 0, add.stderr
        ok = auto(cli, starter_model, "--remote", f"lcs/{ALIAS}", "--escalate-below", "1",
                  "--prompt", "Hi.")  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        os.kill(doomed.process.pid, signal.SIGKILL)
        doomed.process.wait()
        r = auto(cli, starter_model, "--remote", f"lcs/{ALIAS}", "--escalate-below", "1",
                 "--prompt", "Hi.")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "[router: endpoint lcs is unreachable" in r.stderr
    assert "answered by the local model instead" in r.stderr
    went, fell_back = replies(deskllm_home)
    assert went.metrics["engine"] == "lcs" and went.metrics["route_reason"] == "uncertain"
    assert fell_back.metrics["engine"] == "local"
    assert fell_back.metrics["route_reason"] == "remote_failed"
    assert "unreachable" in fell_back.metrics["route_notice"]


def test_usage_counts_tokens_per_engine_with_the_set_price(
    cli,
    desk,
    starter_model,
    deskllm_home,
):
    add = cli("remote", "add", "desk", desk.v1, "--key-stdin", "--allow-routing", stdin=API_KEY)
    assert add.returncode == 0, add.stderr
    price = cli("remote", "price", "desk", DESK_MODEL, "--input", "2.5", "--output", "10")
    assert price.returncode == 0, price.stderr
    for threshold in ("-1000", "1", "-1000"):  # local, remote, local
        r = auto(cli, starter_model, "--escalate-below", threshold, "--prompt", "Hello there.")
        assert r.returncode == 0, r.stderr
    r = cli("chat", "--model", f"desk/{DESK_MODEL}", "--prompt", "Hi.", "--max-tokens", "5")
    assert r.returncode == 0, r.stderr  # a remote chat the router did not place
    out = cli("usage", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert sorted(report) == ["local_share", "rows", "since"] and report["since"] is None
    rows = {row["engine"]: row for row in report["rows"]}
    assert sorted(rows) == ["desk", "local"]
    keys = ["completion_tokens", "cost", "cost_per_mtok", "cost_source", "day", "engine",
            "model", "prompt_tokens", "requests"]  # fmt: skip
    assert all(sorted(r) == keys for r in rows.values())
    local, remote = rows["local"], rows["desk"]
    assert local["model"] == starter_model.name and local["requests"] == 2
    assert local["cost"] is None and local["cost_source"] == "none"
    assert local["prompt_tokens"] > 0 and local["completion_tokens"] == 24
    assert remote["model"] == DESK_MODEL and remote["requests"] == 2
    assert remote["completion_tokens"] == 12 + 5 and remote["prompt_tokens"] > 0
    assert remote["cost_source"] == "price"
    expected = (remote["prompt_tokens"] * 2.5 + remote["completion_tokens"] * 10) / 1e6
    assert remote["cost"] == pytest.approx(expected)
    assert report["local_share"] == pytest.approx(2 / 3)
    later = json.loads(cli("usage", "--json", "--since", "2999-01-01").stdout)
    assert later == {"since": "2999-01-01", "rows": [], "local_share": None}
    table = cli("usage")
    assert "requests" in table.stdout and "desk" in table.stdout and "67%" in table.stdout


def test_routing_is_switched_per_endpoint_and_required_for_auto(cli, starter_model):
    assert cli("remote", "add", "far", "http://127.0.0.1:9/v1").returncode == 0
    refused = auto(cli, starter_model, "--remote", "far/m", "--prompt", "Hi.")
    assert refused.returncode != 0
    assert "endpoint far does not allow routing" in refused.stderr
    on = cli("remote", "routing", "far", "on")
    assert on.returncode == 0, on.stderr
    [row] = json.loads(cli("remote", "list", "--json").stdout)
    assert row["allow_routing"] is True
    assert cli("remote", "routing", "far", "off").returncode == 0
    [row] = json.loads(cli("remote", "list", "--json").stdout)
    assert row["allow_routing"] is False
    assert cli("remote", "routing", "nowhere", "on").returncode == 1


def test_a_conversation_too_long_for_local_with_the_remote_down_is_answered_locally(
    cli, starter_model, deskllm_home
):
    add = cli("remote", "add", "far", "http://127.0.0.1:9/v1", "--allow-routing")
    assert add.returncode == 0, add.stderr
    turns = [f"Part {i}: {LONG_PART * 12}" for i in range(3)]
    r = auto(cli, starter_model, "--remote", "far/m", "--ctx", "256",
             stdin="\n".join(turns) + "\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    first, *later = replies(deskllm_home)
    assert first.metrics["route_reason"] == "local"
    assert later and all(m.metrics["engine"] == "local" for m in later)
    assert all(m.metrics["route_reason"] == "remote_failed" for m in later)
    assert all(m.metrics["dropped_messages"] > 0 and m.content for m in later)
    assert "answered by the local model instead" in r.stderr
