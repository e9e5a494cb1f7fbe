"""Remote engines against real servers nobody here wrote: llama-cpp-python's own OpenAI server,
llama.cpp's llama-server and a second `deskllm serve`, driven through `deskllm remote` and
`deskllm chat --model NAME/MODEL` as users run them, and through the client and pool
in-process where a server is killed mid-reply."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from remote_helpers import LLAMA_SERVER, llama_cpp_server, llama_server
from server_helpers import API_KEY, running_server

from deskllm.engine.domain import ChatMessage, Sampling, TextDelta
from deskllm.engine.errors import ErrorKind
from deskllm.remote.client import RemoteClient
from deskllm.remote.endpoint import Endpoint
from deskllm.remote.pool import RemotePool
from deskllm.remote.remote_model import RemoteModel
from deskllm.store import ConversationStore, open_database
from deskllm.store.chat_session import ChatSession
from deskllm.store.export import conversation_dict, conversation_markdown

LCS_KEY = "sk-lcs-3e8a51f0c2"  # llama_cpp.server's key
LS_KEY = "sk-ls-90b4e7d21a"  # llama-server's
ALIAS = "smol"
DESK_MODEL = "smollm2-135m-instruct-q4_1"  # what deskllm serve calls the starter model
SHORT = Sampling(temperature=0, max_tokens=12)
LONG = Sampling(temperature=0, max_tokens=400)
CLI_VERBOSE = "import sys; from deskllm.cli import main; sys.exit(main(['-v', *sys.argv[1:]]))"


@pytest.fixture(scope="module")
def lcs(tmp_path_factory, starter_model: Path, extra_bufts: bool):
    log_dir = tmp_path_factory.mktemp("lcs")
    with llama_cpp_server(starter_model, ALIAS, LCS_KEY, log_dir, extra_bufts) as server:
        yield server


@pytest.fixture(scope="module")
def ls(tmp_path_factory, starter_model: Path, extra_bufts: bool):
    if not LLAMA_SERVER.is_file():
        pytest.skip(f"{LLAMA_SERVER} is absent: run packaging/build_llama_server.sh")
    log_dir = tmp_path_factory.mktemp("ls")
    with llama_server(starter_model, ALIAS, LS_KEY, log_dir, extra_bufts) as server:
        yield server


@pytest.fixture(scope="module")
def desk(tmp_path_factory, session_home: Path, extra_bufts: bool):
    home = tmp_path_factory.mktemp("desk-serve-home")
    with running_server(home, session_home, "--api-key", API_KEY) as server:
        yield server


@pytest.fixture
def cli(deskllm_home: Path, tmp_path: Path):
    """`python -m deskllm ...` in this test's home. No keyring daemon here: keyring's fail
    backend is named, so the key goes to the private-file fallback (as on this box)."""
    env = os.environ | {
        "DESKLLM_HOME": str(deskllm_home),
        "HF_HUB_OFFLINE": "1",
        "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
    }

    def run(*args: str, stdin: str | None = None, timeout: float = 280):
        # The command line with debug logging on (`deskllm -v` alone would open the window):
        # the key must not be in those logs either.
        return subprocess.run([sys.executable, "-c", CLI_VERBOSE, *args], input=stdin,
                              capture_output=True, text=True, env=env, timeout=timeout)  # fmt: skip

    return run


def ask(text: str) -> list[ChatMessage]:
    return [ChatMessage("system", "You are brief."), ChatMessage("user", text)]


def key_nowhere(home: Path, key: str, *outputs: str) -> None:
    """The key is in no output and no byte of the database (with its WAL)."""
    for out in outputs:
        assert key not in out
    for db_file in home.glob("deskllm.sqlite3*"):
        assert key.encode() not in db_file.read_bytes(), db_file


def test_remote_add_list_test_remove_round_trip(cli, lcs, desk, deskllm_home: Path):
    r = cli("remote", "add", "lcs", lcs.url, "--preset", "llama-server", "--key-stdin",
            stdin=LCS_KEY + "\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "remote-keys.json" in r.stdout  # the fallback file: no keyring backend here
    r = cli("remote", "add", "desk", desk.v1, "--preset", "deskllm", "--key-stdin",
            "--allow-routing", stdin=API_KEY)  # fmt: skip
    assert r.returncode == 0, r.stderr
    listing = cli("remote", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    rows = json.loads(listing.stdout)
    assert [sorted(row) for row in rows] == [["allow_routing", "healthy", "models", "name",
                                              "url"]] * 2  # fmt: skip
    assert rows == [
        {"name": "lcs", "url": lcs.v1, "models": [ALIAS], "healthy": True,
         "allow_routing": False},
        {"name": "desk", "url": desk.v1, "models": [DESK_MODEL, "auto"], "healthy": True,
         "allow_routing": True},
    ]  # fmt: skip
    test = cli("remote", "test", "lcs")
    assert test.returncode == 0, test.stderr
    assert f"lcs/{ALIAS}" in test.stdout and "with an API key" in test.stdout
    text = cli("remote", "list")
    assert "lcs" in text.stdout and "healthy" in text.stdout
    key_nowhere(deskllm_home, LCS_KEY, *(p.stdout + p.stderr for p in (r, listing, test, text)))
    key_nowhere(deskllm_home, API_KEY)
    removed = cli("remote", "remove", "lcs")
    assert removed.returncode == 0, removed.stderr
    assert [row["name"] for row in json.loads(cli("remote", "list", "--json").stdout)] == ["desk"]
    assert LCS_KEY not in (deskllm_home / "remote-keys.json").read_text()  # its key went too
    assert cli("remote", "test", "lcs").returncode == 1


@pytest.mark.parametrize("which", ["desk", "lcs", "ls"])
def test_chat_with_a_remote_streams_reports_and_stores(which, cli, request, deskllm_home):
    key, model, preset = {"desk": (API_KEY, DESK_MODEL, "deskllm"),
                          "lcs": (LCS_KEY, ALIAS, "openai"),
                          "ls": (LS_KEY, ALIAS, "llama-server")}[which]  # fmt: skip
    server = request.getfixturevalue(which)
    added = cli("remote", "add", which, server.v1, "--preset", preset, "--key-stdin", stdin=key)
    assert added.returncode == 0, added.stderr
    r = cli("chat", "--model", f"{which}/{model}", "--prompt", "What colour is the sky?",
            "--temperature", "0", "--max-tokens", "12", "--metrics")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert f"engine: remote endpoint {which}" in r.stderr and "tok/s" in r.stderr
    key_nowhere(deskllm_home, key, r.stdout, r.stderr)
    store = ConversationStore(open_database(deskllm_home / "deskllm.sqlite3"))
    [conversation] = store.list()
    assert conversation.model == f"{which}/{model}"
    user, reply = store.messages(conversation.id)
    assert reply.status == "complete" and reply.content == r.stdout.strip()
    m = reply.metrics
    assert m["engine"] == which and m["device"] == "remote" and m["finish_reason"] == "length"
    assert m["generated_tokens"] == 12 and m["ttft_s"] > 0 and m["tg_tps"] > 0
    if which != "lcs":  # usage (deskllm) or timings (llama-server); llama_cpp.server: neither
        assert m["prompt_tokens"] > 10
    exported = json.dumps(conversation_dict(store, conversation.id))
    assert f'"engine": "{which}"' in exported and key not in exported
    assert key not in conversation_markdown(store, conversation.id)


def test_a_wrong_key_is_refused_with_the_endpoint_named(cli, desk, deskllm_home: Path):
    wrong = "sk-wrong-71d0"
    assert cli("remote", "add", "desk", desk.v1, "--key-stdin", stdin=wrong).returncode == 0
    test = cli("remote", "test", "desk")
    assert test.returncode == 1
    assert "endpoint desk refused the API key (401)" in test.stderr
    chat = cli("chat", "--model", f"desk/{DESK_MODEL}", "--prompt", "hi")
    assert chat.returncode == 1
    assert "endpoint desk refused the API key (401)" in chat.stderr
    listing = json.loads(cli("remote", "list", "--json").stdout)
    assert listing[0]["healthy"] is False and listing[0]["models"] == []
    key_nowhere(deskllm_home, wrong, test.stdout, test.stderr, chat.stdout, chat.stderr)


def test_a_hanging_remote_hits_the_read_timeout(cli):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_stay_silent() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept_and_stay_silent, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        assert cli("remote", "add", "hang", url, "--read-timeout", "1.5").returncode == 0
        r = cli("chat", "--model", "hang/any", "--prompt", "hi")
    finally:
        stop.set()
        thread.join()
        for s in [*accepted, listener]:
            s.close()
    assert r.returncode == 1
    assert "endpoint hang sent nothing for 1.5 s (read timeout)" in r.stderr


def test_a_remote_killed_mid_reply_keeps_the_partial_text(tmp_path, starter_model, extra_bufts):
    with llama_cpp_server(starter_model, ALIAS, LCS_KEY, tmp_path, extra_bufts) as doomed:
        store = ConversationStore(open_database())
        remote = RemoteModel(ALIAS, RemoteClient(Endpoint("doomed", doomed.v1), LCS_KEY),
                             f"doomed/{ALIAS}")  # fmt: skip
        session = ChatSession(remote, store)
        conversation = store.create("kill", "", remote.label, {})
        reply = session.send(conversation.id, "Tell me a long story about a dragon.", LONG)
        deltas = 0
        for event in reply.events():
            if isinstance(event, TextDelta):
                deltas += 1
                if deltas == 3:
                    os.kill(doomed.process.pid, signal.SIGKILL)
        remote.close()
    assert reply.error is not None and reply.error.kind == ErrorKind.DROPPED
    assert reply.error.reason.startswith("endpoint doomed dropped the connection mid-reply")
    assert reply.text and deltas >= 3
    [_, stored] = store.messages(conversation.id)
    assert stored.status == "interrupted" and stored.content == reply.text
    assert stored.metrics["engine"] == "doomed" and "dropped" in stored.metrics["error"]


def test_a_pool_keeps_answering_when_one_member_is_killed(tmp_path, starter_model, extra_bufts,
                                                          lcs):
    with llama_cpp_server(starter_model, ALIAS, LCS_KEY, tmp_path, extra_bufts) as doomed:
        pool = RemotePool(ALIAS, [RemoteClient(Endpoint("doomed", doomed.v1), LCS_KEY),
                                  RemoteClient(Endpoint("steady", lcs.v1), LCS_KEY)],
                          recheck_s=3600)  # fmt: skip
        first = pool.chat(ask("Say hi."), SHORT).wait()
        assert first.ok and first.metrics.engine == "doomed"  # tie: the first registered
        # One reply held open: the next request goes to the member with fewer outstanding.
        held = pool.chat(ask("Count to five."), SHORT)
        held_events = held.events()
        next(held_events)
        assert pool.members[0].outstanding == 1
        other = pool.chat(ask("Say hello."), SHORT).wait()
        assert other.ok and other.metrics.engine == "steady"
        for _ in held_events:
            pass
        assert held.ok and held.metrics.engine == "doomed"
        doomed.process.kill()
        doomed.process.wait()
        engines = []
        for i in range(3):
            reply = pool.chat(ask(f"Name a colour ({i})."), SHORT).wait()
            assert reply.ok, reply.error
            engines.append(reply.metrics.engine)
        assert engines == ["steady"] * 3
        assert pool.members[0].healthy is False
        pool.close()
