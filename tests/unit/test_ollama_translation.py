"""How Ollama's requests become the OpenAI requests the server admits: keep_alive durations,
tool turns matched to their calls, options and format, model sizes as Ollama writes them."""

from __future__ import annotations

import json

import pytest

from deskllm.server.errors import ApiError
from deskllm.server.ollama.models import parameter_size
from deskllm.server.ollama.protocol import OllamaChatRequest, OllamaMessage
from deskllm.server.ollama.serving import (
    keep_alive_s,
    model_name,
    openai_fields,
    openai_messages,
)


@pytest.mark.parametrize(("value", "seconds"), [
    (None, None), ("", None), (0, 0.0), (-1, -1.0), ("-1", -1.0), (300, 300.0), ("300", 300.0),
    ("5m", 300.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("250ms", 0.25), ("-5m", -1.0),
])  # fmt: skip
def test_keep_alive_durations(value, seconds):
    assert keep_alive_s(value) == seconds


@pytest.mark.parametrize("value", ["soon", "5 minutes", "m5", "5x", "1h 30"])
def test_keep_alive_refuses_what_is_not_a_duration(value):
    with pytest.raises(ApiError) as refused:
        keep_alive_s(value)
    assert refused.value.status == 400 and refused.value.param == "keep_alive"


def test_tool_turns_answer_the_open_call_with_their_name():
    messages = [OllamaMessage.model_validate(m) for m in [
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"function": {"name": "get_time", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_time", "content": "12:00"},
        {"role": "tool", "content": "Sunny"},  # no name: the call still open
    ]]  # fmt: skip
    turns = openai_messages(messages)
    calls = turns[1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert len({c["id"] for c in calls}) == 2
    assert turns[2]["tool_call_id"] == calls[1]["id"] and turns[2]["name"] == "get_time"
    assert turns[3]["tool_call_id"] == calls[0]["id"]


def test_images_are_refused_with_the_reason():
    with pytest.raises(ApiError) as refused:
        openai_messages([OllamaMessage(role="user", content="What is this?", images=["aGk="])])
    assert refused.value.status == 400 and "text only" in refused.value.message


def test_options_and_format_become_openai_fields():
    req = OllamaChatRequest.model_validate({
        "model": "m", "stream": False, "format": {"type": "object"},
        "options": {"temperature": 0.2, "top_k": 5, "seed": 3, "stop": ["\n"],
                    "num_predict": 5000, "num_ctx": 8192, "mirostat": 2},
    })  # fmt: skip
    fields = openai_fields(req, n_ctx=2048)
    assert fields == {
        "stream": False, "temperature": 0.2, "top_k": 5, "seed": 3, "stop": ["\n"],
        "max_tokens": 2048,  # capped by the context; num_ctx and mirostat are not sampling
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "format", "schema": {"type": "object"}}},
    }  # fmt: skip
    unlimited = OllamaChatRequest.model_validate({"model": "m", "format": "json",
                                                  "options": {"num_predict": -1}})
    assert openai_fields(unlimited, 2048) == {"stream": True,
                                              "response_format": {"type": "json_object"}}


def test_a_format_that_is_neither_json_nor_a_schema_is_refused():
    with pytest.raises(ApiError) as refused:
        openai_fields(OllamaChatRequest(model="m", format="yaml"), 2048)
    assert refused.value.param == "format"


def test_names_and_sizes_as_ollama_writes_them():
    assert model_name("smollm2:latest") == "smollm2" and model_name("a:q4") == "a:q4"
    assert [parameter_size(n) for n in (134_515_008, 8_030_261_248, 270_000_000, 0)] == [
        "134.5M", "8B", "270M", ""]
