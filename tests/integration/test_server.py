"""`deskllm serve` on the starter model, driven by clients nobody here wrote: the official
`openai` SDK, curl and a plain HTTP client."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import httpx2
import openai
import pytest
from server_helpers import API_KEY, running_server

GREEDY = {"temperature": 0, "max_tokens": 16}
# Long enough that only a cancel ends it early (the context ends it at the latest).
LONG = {"temperature": 0, "max_tokens": 2048, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, session_home: Path, extra_bufts: bool):
    home = tmp_path_factory.mktemp("serve-home")
    with running_server(home, session_home, "--api-key", API_KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def ask(text: str) -> list[dict]:
    return [{"role": "system", "content": "You are brief."}, {"role": "user", "content": text}]


def metric(server, line_start: str) -> float:
    text = httpx2.get(server.url + "/metrics", headers=auth()).text
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def auth(key: str = API_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_models_lists_the_loaded_model_and_auto(client):
    # No remote endpoint is registered: the loaded model, then the router on it.
    card, auto = client.models.list().data
    # An id a client can type: the library name "SmolLM2-135M-Instruct (Q4_1)" as an id.
    assert card.id == "smollm2-135m-instruct-q4_1"
    assert card.owned_by == "deskllm" and card.object == "model"
    assert auto.id == "auto" and auto.model_extra["loaded"]
    assert auto.model_extra["context_length"] == card.model_extra["context_length"]


def test_a_model_is_named_by_its_id_its_library_name_or_a_part_of_it(client):
    for name in ("smollm2-135m-instruct-q4_1", "SmolLM2-135M-Instruct (Q4_1)",
                 "SmolLM2-135M-Instruct", "smollm2"):  # fmt: skip
        reply = client.chat.completions.create(model=name, messages=ask("Hi"), max_tokens=2)
        assert reply.model == "smollm2-135m-instruct-q4_1", name
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="llama", messages=ask("Hi"), max_tokens=2)


def test_chat_answers_with_usage_and_timings(client, model):
    reply = client.chat.completions.create(
        model=model, messages=ask("What colour is the sky?"), user="usage", **GREEDY
    )
    [choice] = reply.choices
    assert choice.message.role == "assistant" and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    usage = reply.usage
    assert usage.prompt_tokens > 10 and 0 < usage.completion_tokens <= 16
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    timings = reply.model_extra["timings"]
    assert timings["predicted_n"] == usage.completion_tokens
    assert timings["prompt_n"] + timings["cache_n"] == usage.prompt_tokens
    # The same question again from the same user: its prompt is in the KV cache already.
    again = client.chat.completions.create(
        model=model, messages=ask("What colour is the sky?"), user="usage", **GREEDY
    )
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    assert again.choices[0].message.content == choice.message.content  # greedy


def test_content_as_text_parts_equals_content_as_a_string(client, model):
    parts = [{"type": "text", "text": "What colour "}, {"type": "text", "text": "is grass?"}]
    as_parts = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": parts}], **GREEDY
    )
    as_text = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What colour is grass?"}], **GREEDY
    )
    assert as_parts.choices[0].message.content == as_text.choices[0].message.content


def test_stream_gives_the_same_text_as_a_whole_reply_and_a_usage_chunk(client, model):
    whole = client.chat.completions.create(model=model, messages=ask("Name a fruit."), **GREEDY)
    chunks = list(
        client.chat.completions.create(
            model=model, messages=ask("Name a fruit."), stream=True,
            stream_options={"include_usage": True}, **GREEDY,
        )
    )  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("stop", "length") and not any(finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    without = list(
        client.chat.completions.create(
            model=model, messages=ask("Name a fruit."), stream=True, **GREEDY
        )
    )
    assert all(c.usage is None for c in without)


def test_stop_strings_and_max_tokens_are_obeyed(client, model):
    free = client.chat.completions.create(
        model=model, messages=ask("Count from 1 to 20."), temperature=0, max_tokens=60
    ).choices[0].message.content
    word = free.split()[2]
    stopped = client.chat.completions.create(
        model=model, messages=ask("Count from 1 to 20."), temperature=0, max_tokens=60,
        stop=[word],
    ).choices[0]  # fmt: skip
    assert word not in stopped.message.content and free.startswith(stopped.message.content)
    assert stopped.finish_reason == "stop"
    short = client.chat.completions.create(
        model=model, messages=ask("Count from 1 to 20."), temperature=0,
        max_completion_tokens=3,
    )  # fmt: skip
    assert short.usage.completion_tokens == 3 and short.choices[0].finish_reason == "length"


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_a_json_schema_reply_follows_the_schema(client, model):
    # Unconstrained, this model answers the question in prose.
    reply = client.chat.completions.create(
        model=model, messages=ask("Who wrote Hamlet, and how old did he live to be?"),
        temperature=0, max_tokens=120,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": PERSON, "strict": True}},
    ).choices[0]  # fmt: skip
    assert reply.finish_reason == "stop", reply.message.content
    person = json.loads(reply.message.content)
    assert set(person) == {"name", "age"}
    assert isinstance(person["name"], str) and len(person["name"]) <= 12
    assert isinstance(person["age"], int) and 0 <= person["age"] <= 150


def test_json_object_replies_are_a_json_object(client, model):
    reply = client.chat.completions.create(
        model=model, messages=ask("Describe a cat."), temperature=0, max_tokens=200,
        response_format={"type": "json_object"},
    ).choices[0]  # fmt: skip
    text = reply.message.content.lstrip()
    assert text.startswith("{"), text
    if reply.finish_reason == "stop":  # a reply cut by max_tokens is a prefix of one
        assert isinstance(json.loads(text), dict)


def test_a_schema_that_cannot_become_a_grammar_is_a_bad_request(client, model):
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(
            model=model, messages=ask("Hi"), max_tokens=8,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "x", "schema": {"type": "nonsense"}}},
        )  # fmt: skip
    assert exc.value.code == "invalid_schema" and "nonsense" in exc.value.message


def test_frequency_and_presence_penalties_change_a_repetitive_reply(client, model):
    def reply(**penalties) -> str:
        return client.chat.completions.create(
            model=model, messages=ask("Write the word 'cat' ten times."), temperature=0,
            max_tokens=40, extra_body={"repeat_penalty": 1.0}, **penalties,
        ).choices[0].message.content  # fmt: skip

    plain = reply()
    assert plain.lower().count("cat") >= 3, plain
    assert reply(frequency_penalty=2.0).lower().count("cat") < plain.lower().count("cat")
    assert reply(presence_penalty=2.0) != plain


def test_errors_are_the_sdks_own_exception_types(server, client, model):
    stranger = openai.OpenAI(base_url=server.v1, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        stranger.models.list()
    assert exc.value.code == "invalid_api_key"
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="no-such-model", messages=ask("Hi"))
    assert exc.value.code == "model_not_found" and exc.value.param == "model"
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model=model, messages=ask("Hi"), temperature=5)
    assert exc.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model=model, messages=ask("Hi"), n=2)
    assert exc.value.param == "n"
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model=model, messages=[])
    assert exc.value.param == "messages"


def error_of(response: httpx2.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_http_errors_are_openai_shaped(server):
    chat = server.v1 + "/chat/completions"
    json_headers = auth() | {"Content-Type": "application/json"}
    r = httpx2.post(chat, content=b'{"model": "x", "messages": [', headers=json_headers)
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_json"
    r = httpx2.post(chat, content=b"x" * (5 * 2**20), headers=json_headers)
    assert r.status_code == 413 and error_of(r)["code"] == "request_too_large"
    r = httpx2.post(chat, json={"model": "x", "messages": ask("Hi")})
    assert r.status_code == 401 and error_of(r)["type"] == "authentication_error"
    r = httpx2.get(server.v1 + "/no-such-endpoint", headers=auth())
    assert r.status_code == 404 and error_of(r)["message"]
    r = httpx2.get(chat, headers=auth())
    assert r.status_code == 405 and error_of(r)["message"]
    assert httpx2.get(server.url + "/health").json() == {"status": "ok"}  # no key needed


def test_no_malformed_request_harms_the_server(server, model):
    bodies = [
        [], "text", 42, None, {"model": model}, {"messages": ask("Hi")},
        {"model": model, "messages": "Hi"},
        {"model": model, "messages": [{"role": "wizard", "content": "Hi"}]},
        {"model": model, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        {"model": model, "messages": ask("Hi"), "max_tokens": -1},
        {"model": model, "messages": ask("Hi"), "seed": 2**80},
        {"model": model, "messages": ask("Hi"), "top_k": 2**40},
        {"model": model, "messages": ask("Hi"), "stop": [1, 2]},
        {"model": model, "messages": ask("Hi"), "stream": "sometimes"},
        {"model": model, "messages": ask("Hi"), "tools": [{"type": "function"}]},
        {"model": model, "messages": ask("Hi"), "response_format": {"type": "json_schema"}},
        {"model": model, "messages": [{"role": "tool", "content": "42"}]},
        {"model": model, "messages": ask("\udcff" * 3)},
        {"model": model, "messages": ask("Hi"), "stop": "\udcff"},
    ]
    for body in bodies:
        r = httpx2.post(server.v1 + "/chat/completions",
                        content=json.dumps(body).encode(), headers=auth())  # fmt: skip
        assert r.status_code == 400, (body, r.text)
        assert error_of(r)["message"]
    assert httpx2.get(server.url + "/health").status_code == 200


def test_curl_shows_raw_server_sent_events(server, model):
    body = {"model": model, "messages": ask("Hi"), "stream": True} | GREEDY
    r = subprocess.run(
        ["curl", "-sS", "-N", server.v1 + "/chat/completions", "-H",
         f"Authorization: Bearer {API_KEY}", "-H", "Content-Type: application/json",
         "-d", json.dumps(body)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    events = [line for line in r.stdout.split("\n\n") if line.strip()]
    assert all(e.startswith("data: ") for e in events), r.stdout
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks).strip()


def test_concurrent_streams_each_answer_their_own_prompt(client, model):
    # Prompts whose first tokens win by a wide margin (log-probability ahead of the second
    # choice by more than 1): batched decoding's small drift cannot change them, so a reply
    # that starts differently answered the other prompt.
    prompts = ["Describe the sea.", "Explain gravity."]
    alone = {
        p: client.chat.completions.create(model=model, messages=ask(p), **GREEDY)
        .choices[0].message.content
        for p in prompts
    }  # fmt: skip
    texts: dict[str, str] = {}

    def stream(prompt: str) -> None:
        chunks = client.chat.completions.create(
            model=model, messages=ask(prompt), stream=True, **GREEDY
        )
        texts[prompt] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    threads = [threading.Thread(target=stream, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert texts.keys() == alone.keys()
    for prompt, text in texts.items():
        # The server answers both at once in its slots; batched decoding is not
        # batch-invariant (docs/server.md, "Replies"), so a greedy reply may drift after its
        # first tokens, never at its start.
        assert text.split()[:2] == alone[prompt].split()[:2], (prompt, text, alone[prompt])


def test_a_client_that_disconnects_cancels_its_reply(server, client, model):
    cancelled = metric(server, 'deskllm_replies_total{finish_reason="cancelled"}')
    stream = client.chat.completions.create(model=model, messages=ask("Tell a story."),
                                            stream=True, **LONG)  # fmt: skip
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    stream.close()  # the connection closes mid-stream
    # The next request runs once the engine is free: after the cancelled reply has ended.
    after = client.chat.completions.create(model=model, messages=ask("Hi"), **GREEDY)
    assert after.choices[0].message.content
    assert metric(server, 'deskllm_replies_total{finish_reason="cancelled"}') == cancelled + 1


def test_health_metrics_and_openapi(server, client, model):
    assert httpx2.get(server.url + "/health").json() == {"status": "ok"}
    client.chat.completions.create(model=model, messages=ask("Hi"), **GREEDY)
    text = httpx2.get(server.url + "/metrics", headers=auth()).text
    for name in ("deskllm_requests_total", "deskllm_tokens_total", "deskllm_queue_length",
                 "deskllm_ttft_seconds_bucket", "deskllm_ttft_seconds_count"):  # fmt: skip
        assert name in text
    assert metric(server, 'deskllm_tokens_total{kind="completion"}') > 0
    schema = httpx2.get(server.url + "/openapi.json", headers=auth()).json()
    assert {"/v1/models", "/v1/chat/completions", "/health"} <= set(schema["paths"])
    assert httpx2.get(server.url + "/metrics").status_code == 401


def test_a_full_queue_answers_429_with_retry_after(tmp_path, session_home, extra_bufts):
    # One stream at a time (one slot): a second request has nothing to wait in.
    with running_server(tmp_path, session_home, "--max-queue", "0", "--parallel", "1") as srv:
        client = openai.OpenAI(base_url=srv.v1, api_key="unused", max_retries=0, timeout=300)
        model = client.models.list().data[0].id
        long = client.chat.completions.create(model=model, messages=ask("Tell a story."),
                                              stream=True, **LONG)  # fmt: skip
        try:
            for chunk in long:  # the engine answers it: nothing may wait behind it
                if chunk.choices and chunk.choices[0].delta.content:
                    break
            with pytest.raises(openai.RateLimitError) as exc:
                client.chat.completions.create(model=model, messages=ask("Hi"), **GREEDY)
            assert exc.value.code == "queue_full"
            assert int(exc.value.response.headers["Retry-After"]) >= 1
        finally:
            long.close()
        # Once it has gone, a client that honours Retry-After is answered.
        patient = client.with_options(max_retries=5)
        again = patient.chat.completions.create(model=model, messages=ask("Hi"), **GREEDY)
        assert again.choices[0].message.content


def test_a_request_may_ask_for_speculative_decoding_and_timings_count_the_drafts(
    server, client, model
):
    quote = ("The lighthouse stood on the rock for two hundred years. Its keeper climbed the "
             "stairs every evening, lit the lamp and wrote in her log.")  # fmt: skip
    drafts = metric(server, 'deskllm_tokens_total{kind="draft"}')
    messages = ask(f"Here is a text.\n\n{quote}\n\nQuote the text word for word.")
    # The server's default is the setting's, Automatic (n-gram drafts while they pay): a
    # request that turns speculation off gets none.
    plain = client.chat.completions.create(model=model, messages=messages, temperature=0,
                                           max_tokens=48, extra_body={"speculation": "off",
                                                                      "repeat_penalty": 1.0})
    assert plain.model_extra["timings"]["draft_n"] == 0
    spec = client.chat.completions.create(model=model, messages=messages, temperature=0,
                                          max_tokens=48, extra_body={"speculation": "ngram",
                                                                     "repeat_penalty": 1.0})
    timings = spec.model_extra["timings"]
    assert 0 < timings["draft_n_accepted"] <= timings["draft_n"]
    assert metric(server, 'deskllm_tokens_total{kind="draft"}') == drafts + timings["draft_n"]
    bad = httpx2.post(server.url + "/v1/chat/completions", headers=auth(), json={
        "model": model, "messages": messages, "speculation": "sometimes"})  # fmt: skip
    assert bad.status_code == 400
