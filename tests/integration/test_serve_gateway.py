"""`deskllm serve` as a gateway: `auto` (the router on the served model) and the registered
remote endpoints' models answer at the same address and key as the local model. The remote
peer is llama-cpp-python's own server; the router's uncertainty check works at one slot and
at four (the one engine gives every slot its token log-probabilities), and each escalation
is counted by reason in /metrics."""

# ruff: noqa: F811 (the fixture imported from the remote engines tests is a parameter here)
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest
from server_helpers import API_KEY, running_server
from test_remote_engines import ALIAS, LCS_KEY, lcs  # noqa: F401

from deskllm.remote.calibration import CALIBRATION_PROMPTS

REMOTE = f"lcs/{ALIAS}"


@pytest.fixture
def gateway_home(tmp_path: Path, lcs, monkeypatch) -> Path:
    """A home whose `auto` sends the least sure half of replies to llama_cpp.server (the
    endpoint `lcs`, routing allowed, its key in the private key file)."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    home = tmp_path / "gateway-home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"router_escalate": "0.5"}))
    added = subprocess.run(
        [sys.executable, "-m", "deskllm", "remote", "add", "lcs", lcs.v1, "--key-stdin",
         "--allow-routing"],
        input=LCS_KEY, capture_output=True, text=True, timeout=120,
        env=os.environ | {"DESKLLM_HOME": str(home), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    return home


def routed(server) -> dict[tuple[str, str], int]:
    """deskllm_routed_total from /metrics: (engine, reason) → replies."""
    text = httpx2.get(server.url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"},
                      timeout=10).text  # fmt: skip
    found = re.findall(r'deskllm_routed_total\{engine="([^"]+)",reason="([^"]+)"\} (\d+)', text)
    return {(engine, reason): int(n) for engine, reason, n in found}


@pytest.mark.parametrize("parallel", [4, 1])
def test_auto_sends_the_least_sure_replies_to_the_remote(parallel, gateway_home, session_home):
    with running_server(gateway_home, session_home, "--api-key", API_KEY,
                        "--parallel", str(parallel)) as server:  # fmt: skip
        client = openai.OpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0, timeout=900)
        ids = [card.id for card in client.models.list().data]
        assert ids[0] == "smollm2-135m-instruct-q4_1" and "auto" in ids and REMOTE in ids

        def ask(prompt: str):
            return client.chat.completions.create(
                model="auto", messages=[{"role": "user", "content": prompt}],
                temperature=0, max_tokens=20,
            )  # fmt: skip

        # Calibration prompts from easy to hard (the first request measures all 24 once, on
        # the served model): the least sure half of them is sent to the remote.
        prompts = CALIBRATION_PROMPTS[::3]
        with ThreadPoolExecutor(parallel) as pool:
            replies = list(pool.map(ask, prompts))
        assert all(r.model == "auto" and r.choices[0].message.content for r in replies)
        counts = routed(server)
        assert sum(counts.values()) == len(prompts), counts
        # llama_cpp.server answers one request at a time and may drop one that comes while
        # it answers: such a reply falls back to local (remote_failed), after escalating.
        escalated = counts.get(("lcs", "uncertain"), 0) + counts.get(("local", "remote_failed"), 0)
        assert counts.get(("lcs", "uncertain"), 0) >= 1 and counts.get(("local", "local"), 0) >= 1
        assert escalated + counts[("local", "local")] == len(prompts), counts

        # A remote model by its name, and a pool of every endpoint serving it.
        for name in (REMOTE, f"*/{ALIAS}"):
            reply = client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8,
            )  # fmt: skip
            assert reply.model == name and reply.choices[0].message.content
        assert routed(server)[("lcs", "asked")] == 2

        # Anthropic's API reaches the same names.
        message = anthropic.Anthropic(base_url=server.url, api_key=API_KEY).messages.create(
            model=REMOTE, max_tokens=8, messages=[{"role": "user", "content": "Say hi."}],
        )  # fmt: skip
        assert message.model == REMOTE and message.content[0].text


def test_gateway_names_refuse_what_they_cannot_pass_on(gateway_home, session_home):
    with running_server(gateway_home, session_home, "--api-key", API_KEY) as server:
        client = openai.OpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0, timeout=300)
        hi = [{"role": "user", "content": "Say hi."}]
        with pytest.raises(openai.NotFoundError) as missing:
            client.chat.completions.create(model="nowhere/x", messages=hi)
        assert "no remote endpoint is named 'nowhere'" in missing.value.body["message"]
        with pytest.raises(openai.BadRequestError) as tools:
            client.chat.completions.create(model=REMOTE, messages=hi, tools=[{
                "type": "function", "function": {"name": "f", "parameters": {}}}])  # fmt: skip
        assert tools.value.body["param"] == "tools"
        with pytest.raises(openai.BadRequestError) as completion:
            client.completions.create(model="auto", prompt="Once upon a time")
        assert "chat requests only" in completion.value.body["message"]
        # Streaming through `auto`: chunks, then the end.
        stream = client.chat.completions.create(model="auto", messages=hi, max_tokens=8,
                                                stream=True)  # fmt: skip
        chunks = list(stream)
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_auto_says_unreachable_when_the_routing_endpoint_does_not_answer(tmp_path, session_home,
                                                                        monkeypatch):  # fmt: skip
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    home = tmp_path / "gone-home"
    home.mkdir()
    added = subprocess.run(
        [sys.executable, "-m", "deskllm", "remote", "add", "gone", "http://127.0.0.1:9/v1",
         "--key-stdin", "--allow-routing"],
        input="k", capture_output=True, text=True, timeout=120,
        env=os.environ | {"DESKLLM_HOME": str(home), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    with running_server(home, session_home, "--api-key", API_KEY) as server:
        client = openai.OpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0)
        reply = client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Hi."}], max_tokens=8,
        )  # fmt: skip
        assert reply.choices[0].message.content
        # Answered here, and said why: not `private` (that is "no endpoint allows routing").
        assert routed(server) == {("local", "unreachable"): 1}
