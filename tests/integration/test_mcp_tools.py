"""Tools in the chat through MCP, with real parts: `mcp-server-time` and `mcp-server-git` from
PyPI (stdio), a server written with the SDK's MCPServer over Streamable HTTP (tests/
mcp_test_server.py), the real engine and the starter model (a grammar holds it to a call
where the test requires one), and `deskllm mcp` / `deskllm chat --mcp` as a user runs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from mcp_helpers import BIN, TIME, start_test_server

from deskllm.engine.domain import ChatMessage, Sampling
from deskllm.tools.mcp_config import McpConfig, McpServer
from deskllm.tools.mcp_hub import McpHub
from deskllm.tools.tool_loop import run_tool_turn

GREEDY = Sampling(temperature=0, max_tokens=80)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    """The SDK-written test server on Streamable HTTP; its call counter file."""
    counter = tmp_path_factory.mktemp("mcp-http") / "count"
    process, url = start_test_server(counter)
    try:
        yield McpServer("test", url=url), counter
    finally:
        process.kill()
        process.wait()


def ask(question: str) -> list[ChatMessage]:
    return [ChatMessage("user", question)]


def test_the_time_server_is_called_with_consent_and_the_answer_follows(engine):
    asked = []
    with McpHub([TIME]) as hub:
        assert hub.start() == {}
        assert {t.name for t in hub.tools()} == {"get_current_time", "convert_time"}
        text = []
        turn = run_tool_turn(engine, uuid.uuid4().hex, ask("What time is it in Tokyo?"), GREEDY,
                             hub, lambda call: asked.append(call) or "once",
                             tool_choice="required", on_text=text.append)  # fmt: skip
    assert turn.error is None and len(asked) == 1
    (call, outcome), = turn.calls
    assert call.name in ("get_current_time", "convert_time") and call.tool.server == "time"
    if call.name == "get_current_time":
        assert not outcome.is_error and '"datetime"' in outcome.text
    roles = [m.role for m in turn.messages]
    assert roles == ["assistant", "tool", "assistant"]  # the call, its result, the answer
    assert json.loads(turn.messages[0].tool_calls_json)[0]["function"]["name"] == call.name
    assert turn.messages[1].content == outcome.text and turn.answer == "".join(text)


def test_git_server_reads_a_temporary_repository(engine, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = shutil.which("git")
    if git is None:
        pytest.fail("git is not installed (.ci/run installs it)")
    for command in (["init", "-q"], ["config", "user.email", "t@example.com"],
                    ["config", "user.name", "T"]):  # fmt: skip
        subprocess.run([git, *command], cwd=repo, check=True)
    (repo / "notes.txt").write_text("lighthouse\n")
    subprocess.run([git, "add", "notes.txt"], cwd=repo, check=True)
    subprocess.run([git, "commit", "-q", "-m", "Add the lighthouse notes"], cwd=repo, check=True)
    server = McpServer("git", str(BIN / "mcp-server-git"), ("--repository", str(repo)))
    with McpHub([server]) as hub:
        assert hub.start() == {}
        tools = {t.name: t for t in hub.tools()}
        assert {"git_status", "git_log"} <= set(tools)
        log = hub.call(tools["git_log"], {"repo_path": str(repo)})
        assert not log.is_error and "Add the lighthouse notes" in log.text
        status = hub.call(tools["git_status"], {"repo_path": str(repo)})
        assert not status.is_error and "nothing to commit" in status.text


def test_a_denied_call_never_runs_and_the_model_is_told(engine, http_server):
    server, counter = http_server
    counter.unlink(missing_ok=True)
    with McpHub([server]) as hub:
        assert hub.start() == {}
        only_count = [t for t in hub.tools() if t.name == "count"]
        assert only_count
        turn = run_tool_turn(engine, uuid.uuid4().hex, ask("Count the sheep."), GREEDY, hub,
                             lambda call: "deny", tool_choice="required")  # fmt: skip
    assert not counter.exists(), "a denied tool ran"
    (_call, outcome), *_ = turn.calls
    assert outcome.is_error and "denied" in outcome.text
    assert turn.messages[1].role == "tool" and "denied" in turn.messages[1].content


def test_allowed_calls_run_and_always_is_remembered(engine, http_server):
    server, counter = http_server
    counter.unlink(missing_ok=True)
    allowed: set[str] = set()
    decisions = iter(["always"])
    with McpHub([server]) as hub:
        hub.start()
        count = next(t for t in hub.tools() if t.name == "count")
        from deskllm.tools.tool_loop import ToolCall, _run

        call = ToolCall("c1", "count", {"label": "sheep"}, count)
        first = _run(call, hub, lambda _c: next(decisions), allowed, None, None)
        second = _run(call, hub, lambda _c: pytest.fail("asked again"), allowed, None, None)
    assert "call number 1" in first.text and "call number 2" in second.text
    assert allowed == {"count"} and counter.read_text() == "2"


def test_timeouts_floods_and_crashes_are_told_not_raised(http_server):
    server, _counter = http_server
    with McpHub([server], call_timeout_s=2, output_limit=1000) as hub:
        hub.start()
        tools = {t.name: t for t in hub.tools()}
        started = time.monotonic()
        hung = hub.call(tools["hang"], {"seconds": 60})
        assert hung.is_error and "did not answer within 2 s" in hung.text
        assert time.monotonic() - started < 10
        flood = hub.call(tools["flood"], {"megabytes": 10})
        assert flood.truncated and len(flood.text) < 1200 and "10,485,760 characters" in flood.text
        stop = threading.Event()
        threading.Timer(0.5, stop.set).start()
        stopped = hub.call(tools["hang"], {"seconds": 60}, cancel=stop)
        assert stopped.is_error and "was stopped" in stopped.text


def test_a_server_that_crashes_mid_call_or_is_missing(tmp_path):
    process, url = start_test_server(tmp_path / "count")
    try:
        missing = McpServer("missing", str(tmp_path / "no-such-server"))
        with McpHub([McpServer("test", url=url), missing], call_timeout_s=5) as hub:
            failures = hub.start()
            assert "not found" in failures["missing"]
            tools = {t.name: t for t in hub.tools()}
            assert tools and all(t.server == "test" for t in tools.values())
            crashed = hub.call(tools["crash"], {})
            assert crashed.is_error
            after = hub.call(tools["count"], {"label": "after"})
            assert after.is_error  # the server is gone: said, not hung
    finally:
        process.kill()
        process.wait()


def cli(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = os.environ | {"DESKLLM_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    # A session of its own: no controlling terminal, so consent cannot be asked (denied).
    return subprocess.run([sys.executable, "-m", "deskllm", *args], env=env, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          start_new_session=True)  # fmt: skip


def test_the_command_line(tmp_path, session_home):
    home = tmp_path / "cli-home"
    home.mkdir()
    if (session_home / "probes").is_dir():
        shutil.copytree(session_home / "probes", home / "probes")
    added = cli(home, "mcp", "add", "time", "--", str(BIN / "mcp-server-time"),
                "--local-timezone", "UTC")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert cli(home, "mcp", "add", "time", "--", "x").returncode == 2  # exists: --replace
    unknown = cli(home, "mcp", "remove", "nobody")
    assert unknown.returncode == 1 and unknown.stderr.startswith("deskllm: "), unknown.stderr
    claude = tmp_path / "claude_desktop_config.json"
    claude.write_text(json.dumps({"mcpServers": {
        "missing": {"command": str(tmp_path / "nowhere")},
        "remote": {"url": "https://example.invalid/mcp", "headers": {"Authorization": "Bearer s3"}},
    }}))  # fmt: skip
    imported = cli(home, "mcp", "import", str(claude))
    assert imported.returncode == 0 and "imported 2 MCP servers" in imported.stdout
    assert "s3" not in (home / "mcp.json").read_text()  # the header's value is kept apart
    config = McpConfig(home / "mcp.json")
    assert config.get("remote").headers == {"Authorization": "<keyring>"}
    assert cli(home, "mcp", "remove", "remote").returncode == 0
    listed = cli(home, "mcp", "list", "--json")
    servers = {s["name"]: s for s in json.loads(listed.stdout)["servers"]}
    assert servers["time"]["state"] == "running"
    assert {"get_current_time", "convert_time"} == {t["name"] for t in servers["time"]["tools"]}
    assert servers["missing"]["state"] == "failed" and "not found" in servers["missing"]["error"]
    chat = cli(home, "chat", "--mcp", "time", "--allow", "get_current_time", "--tool-choice",
               "required", "--prompt", "What time is it in Tokyo?", "--temperature", "0",
               "--max-tokens", "60")  # fmt: skip
    assert chat.returncode == 0, chat.stderr
    assert "[note: this model has 135M parameters; models this small often" in chat.stderr
    assert "[call] time/" in chat.stderr
    assert "[result]" in chat.stderr or "[error]" in chat.stderr
    failing = cli(home, "chat", "--mcp", "time,missing", "--tool-choice", "required",
                  "--prompt", "What time is it in Tokyo?", "--temperature", "0",
                  "--max-tokens", "60")  # fmt: skip
    assert failing.returncode == 1  # a server failed: the script says so by its status
    assert "the MCP server missing failed to start" in failing.stderr
    # Not allowed and no terminal to ask: denied, and said.
    assert "no terminal to ask; denied" in failing.stderr
