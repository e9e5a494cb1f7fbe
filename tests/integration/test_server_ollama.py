"""Ollama's API on `deskllm serve`, driven by the official `ollama` Python client: chat and
generate (streamed and whole, raw), embed, tags, show, ps, version, structured output checked
against its schema, a tool call round trip, a request naming another installed model, delete,
and errors in Ollama's shape with their status codes."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import ollama
import pytest
from pydantic import BaseModel
from server_helpers import API_KEY, running_server

from deskllm.database import open_database
from deskllm.store import ModelLibrary

STARTER = "smollm2-135m-instruct-q4_1"
SECOND_NAME, SECOND = "SmolLM2 requantized (Q8_0)", "smollm2-requantized-q8_0"
SPARE_NAME, SPARE = "Spare copy (Q4_1)", "spare-copy-q4_1"
ASK = [{"role": "user", "content": "What colour is the sky?"}]
GREEDY = {"temperature": 0, "num_predict": 12, "seed": 7}


@pytest.fixture(scope="module")
def spare(tmp_path_factory: pytest.TempPathFactory, starter_model: Path) -> Path:
    path = tmp_path_factory.mktemp("spare") / "spare-copy.Q4_1.gguf"
    shutil.copyfile(starter_model, path)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory, session_home, extra_bufts, quant_ladder, spare):
    home = tmp_path_factory.mktemp("ollama-home")
    db = open_database(home / "deskllm.sqlite3")
    try:
        ModelLibrary(db).add(quant_ladder["Q8_0"], name=SECOND_NAME)
        ModelLibrary(db).add(spare, name=SPARE_NAME)
    finally:
        db.close()
    with running_server(home, session_home, "--api-key", API_KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server) -> ollama.Client:
    return ollama.Client(host=server.url, headers={"Authorization": f"Bearer {API_KEY}"},
                         timeout=300)  # fmt: skip


def test_chat_whole_and_streamed_say_the_same(client):
    whole = client.chat(model=STARTER, messages=ASK, stream=False, options=GREEDY)
    assert whole.done and whole.done_reason in ("stop", "length")
    assert whole.message.role == "assistant" and whole.message.content
    assert 0 < whole.eval_count <= 12 and whole.prompt_eval_count > 5
    assert whole.total_duration > 0 and whole.eval_duration > 0
    parts = list(client.chat(model=STARTER, messages=ASK, stream=True, options=GREEDY))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count
    assert len(parts) > 2  # one line per piece, not one at the end


def test_a_name_with_the_default_tag_is_the_model(client):
    reply = client.chat(model=STARTER + ":latest", messages=ASK, options=GREEDY)
    assert reply.model == STARTER and reply.message.content


def test_generate_with_system_and_raw(client):
    reply = client.generate(model=STARTER, prompt="Name a fruit.", system="Answer in one word.",
                            options=GREEDY)  # fmt: skip
    assert reply.done and reply.response
    streamed = "".join(p.response for p in client.generate(
        model=STARTER, prompt="Name a fruit.", system="Answer in one word.", options=GREEDY,
        stream=True))  # fmt: skip
    assert streamed == reply.response
    raw = client.generate(model=STARTER, prompt="1, 2, 3, 4,", raw=True,
                          options={"temperature": 0, "num_predict": 6})  # fmt: skip
    assert raw.done and "5" in raw.response  # a plain continuation: no chat template


def test_an_empty_request_only_loads_the_model(client):
    reply = client.generate(model=STARTER)
    assert reply.done and reply.done_reason == "load" and reply.response == ""


def test_stop_and_num_predict_are_honoured(client):
    reply = client.generate(model=STARTER, prompt="Count from 1 to 20: 1, 2, 3,",
                            options={"temperature": 0, "num_predict": 40, "stop": ["7"]})
    assert reply.done_reason == "stop" and "7" not in reply.response and "8" not in reply.response
    short = client.generate(model=STARTER, prompt="Tell me a long story.",
                            options={"temperature": 0, "num_predict": 3})  # fmt: skip
    assert short.done_reason == "length" and short.eval_count == 3


class Colour(BaseModel):
    name: str
    hex: str
    warm: bool


def test_structured_output_follows_the_schema(client):
    reply = client.chat(model=STARTER, messages=[{"role": "user", "content": "Describe red."}],
                        format=Colour.model_json_schema(), options={"temperature": 0,
                                                                    "num_predict": 80})  # fmt: skip
    Colour.model_validate_json(reply.message.content)  # raises if it does not
    anything = client.generate(model=STARTER, prompt="Give a JSON object with a key a.",
                               format="json", options={"temperature": 0, "num_predict": 40})
    assert isinstance(json.loads(anything.response), dict)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}  # fmt: skip
# Ollama has no tool_choice; the starter model (135M parameters, no tools in its template)
# does not call tools by itself, so `format` holds it to a call (the Llama 3 JSON form,
# which the server reads as a call like any model's own).
CALL = {"type": "object", "required": ["name", "arguments"], "additionalProperties": False,
        "properties": {"name": {"const": "get_weather"},
                       "arguments": WEATHER["function"]["parameters"]}}  # fmt: skip


def test_a_tool_call_round_trip(client):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    for stream in (False, True):
        parts = client.chat(model=STARTER, messages=ask, tools=[WEATHER], format=CALL,
                            options={"temperature": 0, "num_predict": 60}, stream=stream)
        parts = list(parts) if stream else [parts]
        calls = [c for p in parts for c in (p.message.tool_calls or ())]
        assert len(calls) == 1, parts
        call = calls[0]
        assert call.function.name == "get_weather" and isinstance(call.function.arguments, dict)
        assert isinstance(call.function.arguments.get("city"), str)
        assert not "".join(p.message.content or "" for p in parts).strip()
    turns = ask + [
        {"role": "assistant", "content": "", "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_name": "get_weather", "content": "Sunny, 24 °C."},
    ]
    answer = client.chat(model=STARTER, messages=turns, tools=[WEATHER],
                         options={"temperature": 0, "num_predict": 30})  # fmt: skip
    assert answer.done and answer.message.content and not answer.message.tool_calls


def test_embed_gives_unit_vectors(client):
    result = client.embed(model=STARTER, input=["The sea is blue.", "Gravity pulls."])
    assert len(result.embeddings) == 2 and result.prompt_eval_count > 4
    for vector in result.embeddings:
        assert len(vector) == len(result.embeddings[0]) > 100
        assert math.isclose(math.fsum(v * v for v in vector), 1.0, rel_tol=1e-3)
    assert result.embeddings[0] != result.embeddings[1]
    legacy = client.embeddings(model=STARTER, prompt="The sea is blue.")
    assert legacy.embedding == pytest.approx(result.embeddings[0], abs=1e-4)


def test_tags_show_ps_and_version(client, server):
    models = {m.model: m for m in client.list().models}
    assert {STARTER, SECOND, SPARE} <= set(models)
    starter = models[STARTER]
    assert starter.details.format == "gguf" and starter.details.family == "llama"
    assert starter.details.quantization_level == "Q4_1"
    assert starter.details.parameter_size == "134.5M" and starter.size > 50_000_000
    assert len(starter.digest) == 64
    card = client.show(STARTER)
    assert "im_start" in card.template and "completion" in card.capabilities
    assert card.modelinfo["general.architecture"] == "llama"
    assert card.modelinfo["general.parameter_count"] > 100_000_000
    assert card.modelinfo["tokenizer.ggml.tokens"] is None  # as Ollama shows it, not verbose
    loaded = client.ps().models
    assert [m.model for m in loaded] == [STARTER]
    assert loaded[0].context_length > 0 and loaded[0].size > 0 and loaded[0].expires_at
    version = httpx2.get(server.url + "/api/version", headers={"Authorization":
                                                               f"Bearer {API_KEY}"})  # fmt: skip
    assert version.json()["version"]


def loaded(client) -> dict[str, str]:
    """The models /api/ps lists, with their expires_at."""
    return {m.model: m.expires_at.isoformat() for m in client.ps().models}


def wait_unloaded(client, model: str, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while model in loaded(client):
        assert time.monotonic() < deadline, f"{model} still loaded after {within_s} s"
        time.sleep(0.1)


def test_another_installed_model_loads_beside_the_served_one(client):
    reply = client.chat(model=SECOND, messages=ASK, options=GREEDY)
    assert reply.model == SECOND and reply.message.content
    now = loaded(client)
    assert list(now) == [STARTER, SECOND]  # the served model stays, pinned
    assert now[STARTER].startswith("9999")
    expires = datetime.fromisoformat(now[SECOND])  # the default keep-alive: 10 minutes
    assert timedelta(minutes=9) < expires - datetime.now(UTC) <= timedelta(minutes=10)
    back = client.chat(model=STARTER, messages=ASK, options=GREEDY)
    assert back.model == STARTER and list(loaded(client)) == [STARTER, SECOND]
    forever = client.chat(model=SECOND, messages=ASK, options=GREEDY, keep_alive=-1)
    assert forever.model == SECOND and loaded(client)[SECOND].startswith("9999")


def test_keep_alive_zero_unloads(client):
    client.generate(model=SECOND, keep_alive="5m")  # load only
    assert SECOND in loaded(client)
    unload = client.generate(model=SECOND, keep_alive=0)
    assert unload.done_reason == "unload" and SECOND not in loaded(client)
    reply = client.chat(model=SECOND, messages=ASK, options=GREEDY, keep_alive=0)
    assert reply.model == SECOND and reply.message.content  # loaded for it, then let go
    wait_unloaded(client, SECOND)
    with pytest.raises(ollama.ResponseError) as pinned:
        client.generate(model=STARTER, keep_alive=0)
    assert pinned.value.status_code == 400 and "stays loaded" in pinned.value.error
    assert STARTER in loaded(client)


def deskllm_cli(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deskllm", *args, "--url", server.url],
                          env=os.environ | {"DESKLLM_API_KEY": API_KEY}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_ps_and_unload_on_the_command_line(client, server):
    client.generate(model=SECOND, keep_alive="5m")
    listed = deskllm_cli(server, "ps", "--json")
    assert listed.returncode == 0, listed.stderr
    models = {m["id"]: m for m in json.loads(listed.stdout)["models"]}
    assert set(models) == {STARTER, SECOND}
    assert models[STARTER]["pinned"] and models[STARTER]["keep_alive_left_s"] is None
    assert 240 < models[SECOND]["keep_alive_left_s"] <= 300 and models[SECOND]["memory_bytes"]
    table = deskllm_cli(server, "ps").stdout.splitlines()
    assert table[0].split() == ["MODEL", "MEMORY", "SLOTS", "CONTEXT", "UNLOADS"]
    assert any(line.startswith(SECOND) and line.endswith("in 5 min") for line in table)
    pinned = deskllm_cli(server, "unload", STARTER)
    assert pinned.returncode == 1 and "stays loaded" in pinned.stderr
    unloaded = deskllm_cli(server, "unload", "--all")
    assert unloaded.returncode == 0 and f"unloaded {SECOND}" in unloaded.stdout
    assert list(loaded(client)) == [STARTER]
    wrong = subprocess.run([sys.executable, "-m", "deskllm", "ps", "--url", server.url],
                           env=os.environ | {"DESKLLM_API_KEY": "wrong"}, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert wrong.returncode == 1 and "401" in wrong.stderr


def test_errors_come_in_ollamas_shape(client, server):
    with pytest.raises(ollama.ResponseError) as unknown:
        client.chat(model="no-such-model", messages=ASK)
    assert unknown.value.status_code == 404 and "no-such-model" in unknown.value.error
    with pytest.raises(ollama.ResponseError) as think:
        client.chat(model=STARTER, messages=ASK, think=True)
    assert think.value.status_code == 400 and "thinking" in think.value.error
    with pytest.raises(ollama.ResponseError) as keep:
        client.chat(model=STARTER, messages=ASK, keep_alive="soon")
    assert keep.value.status_code == 400 and "keep_alive" in keep.value.error
    bad = httpx2.post(server.url + "/api/chat", json={"model": STARTER, "messages": "hi"},
                      headers={"Authorization": f"Bearer {API_KEY}"})  # fmt: skip
    assert bad.status_code == 400 and set(bad.json()) == {"error"}
    no_key = httpx2.get(server.url + "/api/tags")
    assert no_key.status_code == 401 and set(no_key.json()) == {"error"}


def test_delete_refuses_the_served_model_and_deletes_another(client, spare):
    with pytest.raises(ollama.ResponseError) as in_use:
        client.delete(STARTER)
    assert in_use.value.status_code == 400 and "in use" in in_use.value.error
    assert client.delete(SPARE).status in (None, "success")
    assert not spare.exists()
    assert SPARE not in {m.model for m in client.list().models}
    with pytest.raises(ollama.ResponseError) as gone:
        client.delete(SPARE)
    assert gone.value.status_code == 404
