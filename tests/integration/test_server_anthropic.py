"""`deskllm serve` speaks Anthropic's Messages API too, checked with the official `anthropic`
SDK and raw HTTP against the starter model."""

from __future__ import annotations

from pathlib import Path

import anthropic
import httpx2
import pytest
from server_helpers import API_KEY, running_server

# Recent SDKs no longer take sampling arguments; the server still reads them from the body.
GREEDY = {"max_tokens": 24, "extra_body": {"temperature": 0}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, session_home: Path, extra_bufts: bool):
    home = tmp_path_factory.mktemp("serve-home")
    with running_server(home, session_home, "--api-key", API_KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(server) -> str:
    headers = {"x-api-key": API_KEY}
    return httpx2.get(server.v1 + "/models", headers=headers).json()["data"][0]["id"]


def say(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_a_message_answers_with_usage(client, model):
    message = client.messages.create(
        model=model, system="You are brief.", messages=say("Name a colour."), **GREEDY
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.model == model
    [block] = message.content
    assert block.type == "text" and block.text.strip()
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens > 5
    assert 0 < message.usage.output_tokens <= GREEDY["max_tokens"]


def test_text_blocks_and_a_system_list_equal_plain_strings(client, model):
    plain = client.messages.create(
        model=model, system="You are brief.", messages=say("Say hello to Ada."), **GREEDY
    )
    blocks = client.messages.create(
        model=model,
        system=[{"type": "text", "text": "You are "}, {"type": "text", "text": "brief."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Say hello to Ada."}]}],
        **GREEDY,
    )
    assert blocks.content[0].text == plain.content[0].text
    # The same prompt again is read from the engine's cache, and Anthropic's usage says so.
    assert blocks.usage.cache_read_input_tokens > 0


def test_a_stream_gives_the_same_text_and_the_final_figures(client, model):
    whole = client.messages.create(model=model, messages=say("Describe the sea."), **GREEDY)
    with client.messages.stream(model=model, messages=say("Describe the sea."), **GREEDY) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == whole.content[0].text == final.content[0].text
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_the_event_sequence_is_anthropics(server, model):
    body = {"model": model, "messages": say("Hi"), "stream": True, "max_tokens": 8}
    with httpx2.stream("POST", server.v1 + "/messages", json=body, timeout=300,
                       headers={"x-api-key": API_KEY}) as response:  # fmt: skip
        assert response.status_code == 200
        names = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) <= {"content_block_delta"}


def test_a_stop_sequence_is_named_in_the_answer(client, model):
    free = client.messages.create(model=model, messages=say("Count from 1 to 20."), **GREEDY)
    words = free.content[0].text.split()
    assert len(words) >= 3, free.content[0].text
    stop = words[2]
    stopped = client.messages.create(
        model=model, messages=say("Count from 1 to 20."), stop_sequences=[stop], **GREEDY
    )
    assert stopped.stop_reason == "stop_sequence"
    assert stopped.stop_sequence == stop
    assert stop not in stopped.content[0].text
    assert free.content[0].text.startswith(stopped.content[0].text)


def test_errors_are_the_sdks_own_exception_types(server, client, model):
    wrong = anthropic.Anthropic(base_url=server.url, api_key="nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as denied:
        wrong.messages.create(model=model, messages=say("Hi"), max_tokens=4)
    assert denied.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="no-such-model", messages=say("Hi"), max_tokens=4)
    assert "no-such-model" in missing.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as tools:
        client.messages.create(
            model=model, messages=say("Hi"), max_tokens=4, tools=[WEATHER],
            tool_choice={"type": "tool", "name": "no_such_tool"},
        )  # fmt: skip
    assert tools.value.body["error"]["type"] == "invalid_request_error"
    assert "no_such_tool" in tools.value.body["error"]["message"]


def test_a_request_without_max_tokens_is_refused_in_anthropics_shape(server, model):
    answer = httpx2.post(server.v1 + "/messages", headers={"x-api-key": API_KEY},
                         json={"model": model, "messages": say("Hi")})  # fmt: skip
    assert answer.status_code == 400
    body = answer.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]


WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city now.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
    },
}
TIME = {
    "name": "get_time",
    "description": "The time in a time zone.",
    "input_schema": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 30}},
                     "required": ["zone"]},
}  # fmt: skip
ASK = say("What is the weather in Paris?")
TOOL_GREEDY = {"max_tokens": 60, "extra_body": {"temperature": 0}}


def test_a_named_tool_choice_answers_with_a_tool_use_block(client, model):
    message = client.messages.create(
        model=model, messages=ASK, tools=[WEATHER, TIME],
        tool_choice={"type": "tool", "name": "get_weather"}, **TOOL_GREEDY,
    )  # fmt: skip
    assert message.stop_reason == "tool_use"
    [use] = [b for b in message.content if b.type == "tool_use"]
    assert isinstance(use, anthropic.types.ToolUseBlock)
    assert use.name == "get_weather" and use.id.startswith("toolu_")
    assert isinstance(use.input["city"], str)  # the schema's, by grammar


def test_any_tool_choice_calls_one_of_the_tools_and_streams_it_whole(client, model):
    kwargs = dict(model=model, messages=ASK, tools=[WEATHER, TIME], tool_choice={"type": "any"},
                  **TOOL_GREEDY)  # fmt: skip
    created = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        kinds = [(e.type, getattr(getattr(e, "delta", None), "type", None)) for e in stream]
        streamed = stream.get_final_message()
    assert created.stop_reason == streamed.stop_reason == "tool_use"
    [made] = [b for b in created.content if b.type == "tool_use"]
    [got] = [b for b in streamed.content if b.type == "tool_use"]
    assert made.name == got.name and made.name in ("get_weather", "get_time")
    assert made.input == got.input  # the SDK put the streamed input_json_delta together
    assert ("content_block_delta", "input_json_delta") in kinds


def test_a_tool_result_goes_back_to_the_model(client, model):
    call = client.messages.create(
        model=model, messages=ASK, tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"}, **TOOL_GREEDY,
    )  # fmt: skip
    [use] = [b for b in call.content if b.type == "tool_use"]
    turns = ASK + [
        {"role": "assistant", "content": [b.model_dump() for b in call.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": "Sunny, 24 degrees Celsius."}]},
    ]  # fmt: skip
    answer = client.messages.create(model=model, messages=turns, tools=[WEATHER],
                                    tool_choice={"type": "none"}, **TOOL_GREEDY)  # fmt: skip
    assert answer.stop_reason in ("end_turn", "max_tokens")
    [block] = answer.content
    assert block.type == "text" and block.text.strip()
    # The call and its result are in the prompt: it is longer than the question alone.
    alone = client.messages.create(model=model, messages=ASK, tools=[WEATHER],
                                   tool_choice={"type": "none"}, **TOOL_GREEDY)  # fmt: skip
    read = lambda m: m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)  # noqa: E731
    assert read(answer) > read(alone) + 10
