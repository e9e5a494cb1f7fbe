"""Reasoning models with the real engine: the starter model given a DeepSeek-R1-style template
(its generation prompt opens `<think>`) thinks into reasoning deltas, a budget closes the block
and the model answers; `split_reasoning` False leaves it all in the text; a Qwen3-style
template renders `enable_thinking` off and on; a model without markers is never split. The
server gives the thinking as `reasoning_content` (openai SDK), `thinking` blocks (anthropic
SDK) and Ollama's `thinking` (ollama client)."""

from __future__ import annotations

import uuid
from pathlib import Path

import anthropic
import ollama
import openai
import pytest
from engine_helpers import with_template
from server_helpers import API_KEY, running_server

from deskllm.database import open_database
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Done, Sampling, TextDelta
from deskllm.store import ModelLibrary

CHATML = ("{% for message in messages %}"
          "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}")  # fmt: skip
R1 = CHATML + "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}"
QWEN3 = CHATML + ("{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                  "{% if enable_thinking is defined and enable_thinking is false %}"
                  "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}")  # fmt: skip
ASK = [ChatMessage("user", "What colour is the sky?")]


@pytest.fixture(scope="module")
def reasoning_models(tmp_path_factory, starter_model) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("reasoning")
    return {"r1": with_template(starter_model, folder / "r1.gguf", R1),
            "qwen3": with_template(starter_model, folder / "qwen3.gguf", QWEN3)}  # fmt: skip


def events_of(client: EngineClient, sampling: Sampling) -> tuple[list[TextDelta], Done]:
    deltas, done = [], None
    for event in client.chat(uuid.uuid4().hex, ASK, sampling).events():
        if isinstance(event, TextDelta):
            deltas.append(event)
        elif isinstance(event, Done):
            done = event
    assert done is not None
    return deltas, done


def test_a_budget_closes_the_thinking_and_the_model_answers(load_params, reasoning_models):
    with EngineClient() as client:
        loaded = client.load(load_params(model_path=str(reasoning_models["r1"])))
        assert loaded.reasoning_markers == ("<think>", "</think>")
        deltas, done = events_of(client, Sampling(temperature=0, max_tokens=48,
                                                  reasoning_budget=12))  # fmt: skip
        kinds = [d.reasoning for d in deltas if d.text]
        assert kinds[0] is True and kinds[-1] is False
        assert kinds == sorted(kinds, reverse=True)  # thinking first, then the answer
        assert done.reasoning and done.text.strip()
        assert 12 <= done.reasoning_tokens <= 13 and done.reasoning_s is not None
        assert "<think>" not in done.text + done.reasoning
        assert "</think>" not in done.text + done.reasoning
        assert "".join(d.text for d in deltas if not d.reasoning) == done.text
        # Without a budget the starter model never closes the block: all of it is thinking.
        _, unbounded = events_of(client, Sampling(temperature=0, max_tokens=20))
        assert unbounded.text == "" and unbounded.reasoning and unbounded.reasoning_tokens == 20
        # Not split: the text is the reply as written (the closing marker in it).
        _, raw = events_of(client, Sampling(temperature=0, max_tokens=48, reasoning_budget=12,
                                            split_reasoning=False))  # fmt: skip
        assert raw.reasoning == "" and "</think>" in raw.text
        assert raw.text.split("</think>")[1].strip() == done.text.strip()


def test_enable_thinking_reaches_the_template(load_params, reasoning_models):
    with EngineClient() as client:
        loaded = client.load(load_params(model_path=str(reasoning_models["qwen3"])))
        assert loaded.reasoning_markers == ("<think>", "</think>")
        _, off = events_of(client, Sampling(temperature=0, max_tokens=12, think="off"))
        _, on = events_of(client, Sampling(temperature=0, max_tokens=12, think="on"))
        # Off, the template closes an empty block in the prompt: more prompt tokens.
        assert off.metrics.prompt_tokens > on.metrics.prompt_tokens
        assert off.reasoning == "" and off.text


def test_a_model_without_markers_is_never_split(load_params):
    with EngineClient() as client:
        loaded = client.load(load_params())
        assert loaded.reasoning_markers is None
        deltas, done = events_of(client, Sampling(temperature=0, max_tokens=12, think="on",
                                                  reasoning_budget=2))  # fmt: skip
        assert done.reasoning == "" and done.reasoning_tokens == 0 and done.text
        assert not any(d.reasoning for d in deltas)


# gpt-oss's frames (harmony) in a template the starter model is given: its vocabulary has
# none of the control tokens, so its replies carry no frames and must read as plain answers.
HARMONY = ("{% for message in messages %}{{ '<|start|>' + message['role'] + '<|message|>' + "
           "message['content'] + '<|end|>' }}{% endfor %}{# <|channel|>analysis<|message|> #}"
           "{% if add_generation_prompt %}{{ '<|start|>assistant' }}{% endif %}")  # fmt: skip


def test_a_harmony_template_on_a_model_that_writes_no_frames_answers_plainly(
    load_params, tmp_path, starter_model
):
    model = with_template(starter_model, tmp_path / "harmony.gguf", HARMONY)
    with EngineClient() as client:
        loaded = client.load(load_params(model_path=str(model)))
        assert loaded.reasoning_markers == ("<think>", "</think>")  # gpt-oss's analysis
        deltas, done = events_of(client, Sampling(temperature=0, max_tokens=16))
    assert done.text.strip() and done.reasoning == ""
    assert "".join(d.text for d in deltas) == done.text and not any(d.reasoning for d in deltas)


@pytest.fixture(scope="module")
def server(tmp_path_factory, session_home, extra_bufts, reasoning_models):
    home = tmp_path_factory.mktemp("reasoning-home")
    db = open_database(home / "deskllm.sqlite3")
    try:
        ModelLibrary(db).add(reasoning_models["r1"], name="R1 style")
    finally:
        db.close()
    with running_server(home, session_home, "--api-key", API_KEY, "--model",
                        str(reasoning_models["r1"])) as srv:  # fmt: skip
        yield srv


def test_the_apis_give_the_thinking_apart(server):
    client = openai.OpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0, timeout=300)
    ask = [{"role": "user", "content": "What colour is the sky?"}]
    whole = client.chat.completions.create(model="r1-style", messages=ask, temperature=0,
                                           max_tokens=48, extra_body={"reasoning_budget": 12})
    message = whole.choices[0].message
    assert message.model_extra["reasoning_content"] and message.content.strip()
    assert "think>" not in message.content
    thinking, answer = [], []
    for chunk in client.chat.completions.create(
        model="r1-style", messages=ask, temperature=0, max_tokens=48, stream=True,
        extra_body={"reasoning_budget": 12},
    ):  # fmt: skip
        for choice in chunk.choices:
            thinking.append((choice.delta.model_extra or {}).get("reasoning_content") or "")
            answer.append(choice.delta.content or "")
    assert "".join(thinking).strip() == message.model_extra["reasoning_content"]
    assert "".join(answer) == message.content
    claude = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
    reply = claude.messages.create(model="r1-style", max_tokens=48, messages=ask,
                                   thinking={"type": "enabled", "budget_tokens": 12},
                                   extra_body={"temperature": 0})  # fmt: skip
    assert [b.type for b in reply.content] == ["thinking", "text"]
    assert reply.content[0].thinking == message.model_extra["reasoning_content"]
    with claude.messages.stream(model="r1-style", max_tokens=48, messages=ask,
                                thinking={"type": "enabled", "budget_tokens": 12},
                                extra_body={"temperature": 0}) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[1].text == reply.content[1].text
    local = ollama.Client(host=server.url, headers={"Authorization": f"Bearer {API_KEY}"})
    said = local.chat(model="r1-style", messages=ask, think=True,
                      options={"temperature": 0, "num_predict": 24})  # fmt: skip
    # Ollama's API has no budget: the starter model thinks to the end of num_predict.
    assert said.message.thinking.startswith("The sky") and said.message.content == ""
    parts = list(local.chat(model="r1-style", messages=ask, think=True, stream=True,
                            options={"temperature": 0, "num_predict": 24}))  # fmt: skip
    assert "".join(p.message.thinking or "" for p in parts).strip() == said.message.thinking
