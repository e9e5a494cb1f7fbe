"""Tools on remote engines, real parts: `deskllm serve` in its own process as the endpoint
(it takes OpenAI's `tools` and `tool_choice` and streams `tool_calls`), the real local engine,
mcp-server-time from PyPI. A turn through Auto's router stays on the engine that began it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_helpers import TIME
from server_helpers import API_KEY, running_server

from deskllm.engine.domain import ChatMessage, Sampling
from deskllm.remote.client import RemoteClient
from deskllm.remote.endpoint import Endpoint
from deskllm.remote.remote_model import RemoteModel
from deskllm.remote.router import Router
from deskllm.tools.mcp_hub import McpHub
from deskllm.tools.tool_loop import run_tool_turn

DESK_MODEL = "smollm2-135m-instruct-q4_1"
GREEDY = Sampling(temperature=0, max_tokens=60)


@pytest.fixture(scope="module")
def desk(tmp_path_factory, session_home: Path, extra_bufts: bool):
    home = tmp_path_factory.mktemp("desk-tools-home")
    with running_server(home, session_home, "--api-key", API_KEY) as server:
        yield server


def remote(desk) -> RemoteModel:
    client = RemoteClient(Endpoint("desk", desk.v1, "deskllm"), API_KEY)
    return RemoteModel(DESK_MODEL, client, f"desk/{DESK_MODEL}")


def turn(backend, hub, question: str = "What time is it in Tokyo?"):
    """One turn with the time server, its call allowed; each model reply's figures."""
    replies = []
    done = run_tool_turn(backend, "remote-tools", [ChatMessage("user", question)], GREEDY, hub,
                         lambda _call: "once", tool_choice="required",
                         on_reply=lambda reply, _text, _calls: replies.append(reply))  # fmt: skip
    return done, replies


def test_a_remote_model_calls_a_tool_natively_and_answers(desk):
    with McpHub([TIME]) as hub, remote(desk) as model:
        assert hub.start() == {}
        done, replies = turn(model, hub)
    assert done.error is None and not done.stopped
    (call, outcome), = done.calls
    assert call.name == "get_current_time" and not outcome.is_error
    assert "datetime" in outcome.text
    assert len(replies) == 2 and all(r.done.metrics.engine == "desk" for r in replies)
    assert "<tool_call>" not in done.answer


def test_the_router_keeps_a_turn_with_tools_on_the_engine_that_began_it(engine, desk):
    with McpHub([TIME]) as hub:
        assert hub.start() == {}
        router = Router(engine, remote(desk))
        try:
            router.ask_remote_next()  # the turn's first reply goes remote
            done, replies = turn(router, hub)
            assert done.error is None and len(done.calls) == 1
            # The reply after the tool's result went to the same (remote) model, not back
            # to the local one that Auto tries first.
            assert [r.done.metrics.model for r in replies] == [f"desk/{DESK_MODEL}"] * 2
            assert replies[1].done.metrics.route_reason == "asked"
            # A new turn is routed afresh: local first.
            done, replies = turn(router, hub, "And in Paris?")
            assert replies[0].done.metrics.model == engine.label
            assert all(r.done.metrics.model == engine.label for r in replies)
        finally:
            router.close()


def test_the_command_line_chats_with_tools_on_a_remote_model(desk, tmp_path, session_home):
    home = tmp_path / "cli-home"
    home.mkdir()
    env = os.environ | {"DESKLLM_HOME": str(home), "HF_HUB_OFFLINE": "1",
                        "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
                        "XDG_DATA_HOME": str(tmp_path / "xdg-data")}  # fmt: skip

    def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "deskllm", *args], input=stdin, env=env,
                              text=True, capture_output=True, timeout=300,
                              start_new_session=True)  # fmt: skip

    added = cli("remote", "add", "desk", desk.v1, "--preset", "deskllm", "--key-stdin",
                stdin=API_KEY)  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert cli("mcp", "add", "time", "--", TIME.command, *TIME.args).returncode == 0
    chat = cli("chat", "--model", f"desk/{DESK_MODEL}", "--mcp", "time", "--allow",
               "get_current_time", "--tool-choice", "required", "--prompt",
               "What time is it in Tokyo?", "--temperature", "0", "--max-tokens", "60")  # fmt: skip
    assert chat.returncode == 0, chat.stderr
    assert "[call] time/get_current_time" in chat.stderr and "[result]" in chat.stderr
    assert "datetime" in chat.stderr and "<tool_call>" not in chat.stdout
