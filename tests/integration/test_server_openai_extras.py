"""`deskllm serve`'s logprobs, /v1/completions and tool calls, driven by the official `openai`
SDK against a real server on the starter model (one slot and several)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import openai
import pytest
from server_helpers import API_KEY, running_server

# Greedy over the raw distribution: no repeat penalty, so the token taken is the most likely.
GREEDY = {"temperature": 0, "max_tokens": 12, "extra_body": {"repeat_penalty": 1.0}}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}},
    "required": ["zone"]}}}  # fmt: skip


@pytest.fixture(scope="module", params=["single", "batched"])
def client(request, tmp_path_factory: pytest.TempPathFactory, session_home: Path, extra_bufts):
    home = tmp_path_factory.mktemp("serve-extras")
    args = ("--parallel", "2") if request.param == "batched" else ("--parallel", "1")
    with running_server(home, session_home, "--api-key", API_KEY, *args) as srv:
        yield openai.OpenAI(base_url=srv.v1, api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def ask(text: str) -> list[dict]:
    return [{"role": "system", "content": "You are brief."}, {"role": "user", "content": text}]


# logprobs ------------------------------------------------------------------------------------
def test_chat_logprobs_in_openais_shape(client, model):
    reply = client.chat.completions.create(
        model=model, messages=ask("Name a fruit."), logprobs=True, top_logprobs=3, **GREEDY
    )
    [choice] = reply.choices
    entries = choice.logprobs.content
    assert len(entries) == reply.usage.completion_tokens
    assert "".join(e.token for e in entries) == choice.message.content
    for e in entries:
        assert e.logprob <= 0 and bytes(e.bytes).decode("utf-8", "replace") == e.token
        assert len(e.top_logprobs) == 3
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        # Greedy on the raw distribution: the token taken is the most likely one.
        assert e.top_logprobs[0].token == e.token
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob)
    without = client.chat.completions.create(model=model, messages=ask("Name a fruit."),
                                             **GREEDY)  # fmt: skip
    assert without.choices[0].logprobs is None
    assert without.choices[0].message.content == choice.message.content


def test_streamed_logprobs_equal_the_whole_replys(client, model):
    whole = client.chat.completions.create(
        model=model, messages=ask("Say hello."), logprobs=True, top_logprobs=2, **GREEDY
    )
    streamed, text = [], ""
    for chunk in client.chat.completions.create(
        model=model, messages=ask("Say hello."), logprobs=True, top_logprobs=2, stream=True,
        **GREEDY,
    ):  # fmt: skip
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed += chunk.choices[0].logprobs.content
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == whole.choices[0].message.content
    assert [(e.token, round(e.logprob, 3)) for e in streamed] == [
        (e.token, round(e.logprob, 3)) for e in whole.choices[0].logprobs.content
    ]


def test_logprobs_stop_at_a_stop_string(client, model):
    reply = client.chat.completions.create(
        model=model, messages=ask("Count: 1, 2, 3, 4, 5, 6"), logprobs=True,
        temperature=0, max_tokens=40, stop=[","],
    )  # fmt: skip
    content = reply.choices[0].message.content
    tokens = "".join(e.token for e in reply.choices[0].logprobs.content)
    assert "," not in content and tokens.startswith(content)
    assert len(tokens) - len(content) < 8  # at most the token that began the stop string


def test_top_logprobs_without_logprobs_is_a_bad_request(client, model):
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model=model, messages=ask("Hi"), top_logprobs=2)
    assert exc.value.param == "top_logprobs"


# /v1/completions ---------------------------------------------------------------------------
def test_completion_continues_the_raw_text(client, model):
    prompt = "The capital of France is"
    reply = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0)
    [choice] = reply.choices
    assert reply.object == "text_completion" and choice.text.strip()
    assert choice.finish_reason in ("length", "stop")
    # No chat template: the prompt is only its own few tokens (the template adds a system
    # prompt of dozens), and a list of one string is the same prompt.
    assert reply.usage.prompt_tokens < 10 and reply.usage.completion_tokens <= 8
    again = client.completions.create(model=model, prompt=[prompt], max_tokens=8, temperature=0)
    assert again.choices[0].text == choice.text


def test_completion_stream_stop_seed_and_logprobs(client, model):
    prompt = "Here is a list of colours: red, green,"
    args = {"model": model, "prompt": prompt, "max_tokens": 24, "temperature": 0}
    whole = client.completions.create(**args)
    chunks = list(client.completions.create(stream=True, **args))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    # A stop string from the middle of the greedy reply ends it there.
    text = whole.choices[0].text
    stop = text.split()[2]
    stopped = client.completions.create(**(args | {"stop": [stop]}))
    assert stopped.choices[0].text == text[: text.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"
    sampled = args | {"temperature": 1.0, "seed": 1234}
    assert (client.completions.create(**sampled).choices[0].text
            == client.completions.create(**sampled).choices[0].text)  # fmt: skip
    lp = client.completions.create(**(args | {"logprobs": 2, "max_tokens": 6})).choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert all(len(top) <= 2 for top in lp.top_logprobs) and lp.text_offset[0] == 0


def test_completion_refusals(client, model):
    for bad in ({"prompt": ["a", "b"]}, {"prompt": "a", "echo": True}, {"prompt": ""},
                {"prompt": "a", "suffix": "b"}):  # fmt: skip
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model=model, max_tokens=4, **bad)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="a")


# Tools -------------------------------------------------------------------------------------
def test_named_tool_call_round_trip(client, model):
    messages = ask("What is the weather in Paris?")
    first = client.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER_TOOL, TIME_TOOL], max_tokens=60,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0,
    )  # fmt: skip
    [choice] = first.choices
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] in ("Paris", "London", "Tokyo")
    # The call and its result go back in the history; the model answers in words.
    history = [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 18}'},
    ]
    final = client.chat.completions.create(
        model=model, messages=history, tools=[WEATHER_TOOL], tool_choice="none", max_tokens=20,
        temperature=0,
    )  # fmt: skip
    assert final.choices[0].message.content and final.choices[0].message.tool_calls is None
    # The call and the tool's answer were written into the prompt (as text: SmolLM2's
    # template knows no tools).
    alone = client.chat.completions.create(model=model, messages=messages, max_tokens=1)
    assert final.usage.prompt_tokens > alone.usage.prompt_tokens + 25


def test_required_tool_call_streams_as_tool_call_deltas(client, model):
    chunks = list(client.chat.completions.create(
        model=model, messages=ask("What time is it in Tokyo?"), tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required", max_tokens=60, temperature=0, stream=True,
    ))  # fmt: skip
    calls = [c for ch in chunks if ch.choices for c in ch.choices[0].delta.tool_calls or ()]
    assert len(calls) == 1 and calls[0].index == 0
    assert calls[0].function.name in ("get_weather", "get_time")
    assert isinstance(json.loads(calls[0].function.arguments), dict)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_tools_reach_the_prompt_unless_tool_choice_is_none(client, model):
    def prompt_tokens(**extra) -> int:
        reply = client.chat.completions.create(model=model, messages=ask("Hi"), max_tokens=1,
                                               temperature=0, **extra)  # fmt: skip
        return reply.usage.prompt_tokens

    plain = prompt_tokens()
    assert prompt_tokens(tools=[WEATHER_TOOL]) > plain + 40  # described in the system message
    assert prompt_tokens(tools=[WEATHER_TOOL], tool_choice="none") == plain
    auto = client.chat.completions.create(
        model=model,
        messages=ask("Weather in London?"),
        tools=[WEATHER_TOOL],
        max_tokens=40,
        temperature=0,
    )
    assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_tool_errors_are_bad_requests(client, model):
    cases = [
        {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "x"}}},
        {"tool_choice": "required"},
        {"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
        {"messages": [{"role": "tool", "content": "42"}]},  # no tool_call_id
    ]
    for case in cases:
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(**({"model": model, "messages": ask("Hi")} | case))


# Embeddings --------------------------------------------------------------------------------
def test_embeddings_are_pooled_normalised_and_in_order(client, model):
    texts = ["The cat sat on the mat.", "A cat is sitting on a rug.", "Quarterly revenue rose 5%."]
    reply = client.embeddings.create(model=model, input=texts)  # the SDK asks for base64
    assert [d.index for d in reply.data] == [0, 1, 2] and reply.model == model
    vectors = np.array([d.embedding for d in reply.data])
    assert vectors.shape == (3, 576)  # SmolLM2-135M's width
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cos = vectors @ vectors.T
    assert cos[0, 1] > cos[0, 2] and cos[0, 1] > cos[1, 2]  # the two cats are closest
    assert reply.usage.prompt_tokens == reply.usage.total_tokens > 15
    as_floats = client.embeddings.create(model=model, input=texts[0], encoding_format="float")
    assert np.allclose(as_floats.data[0].embedding, vectors[0], atol=1e-5)


def test_embeddings_leave_the_chat_cache_alone(client, model):
    def chat():
        return client.chat.completions.create(model=model, messages=ask("Tell me a joke."),
                                              user="emb", temperature=0, max_tokens=4)  # fmt: skip

    first = chat()
    client.embeddings.create(model=model, input=["something else entirely"] * 3)
    again = chat()
    assert again.choices[0].message.content == first.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_embedding_errors_are_bad_requests(client, model):
    for bad in ({"input": []}, {"input": ""}, {"input": ["a", ""]},
                {"input": "a", "dimensions": 8}):  # fmt: skip
        with pytest.raises(openai.BadRequestError):
            client.embeddings.create(model=model, **bad)
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-model", input="a")
