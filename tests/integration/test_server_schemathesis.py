"""schemathesis against the OpenAPI schema `deskllm serve` serves: requests generated from the
schema (valid ones, and with GenerationMode.NEGATIVE ones that break it) never get a 5xx,
every answer comes within a timeout, and every answer is one the schema documents (its
status code, content type, body and headers). Cases come from a fixed seed (SEED), so a
failure is the same on every run. Generation is kept short: a request's max_tokens is at
most MAX_TOKENS, so a case costs a prompt and a few tokens, not a whole context. Generated
requests only meet 200 and 400; the refusals (401, 403, 413, 503) are sent on purpose, to a
server whose model is never loaded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from server_helpers import API_KEY, running_server

from deskllm.engine.domain import LoadParams
from deskllm.server import ModelHost, ServerConfig, create_app

MODEL = "smollm2-135m-instruct-q4_1"
MAX_TOKENS = 4
ANSWER_TIMEOUT_S = 60  # the slowest case: a long generated prompt on two CPU cores
EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 6}  # per operation
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SEED = 29  # a failure reproduces with the same cases; change it to explore others
CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance,
               response_headers_conformance]  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, session_home: Path, extra_bufts: bool):
    home = tmp_path_factory.mktemp("serve-home")
    with running_server(home, session_home, "--api-key", API_KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def schema(server):
    return schemathesis.openapi.from_url(server.url + "/openapi.json", headers=AUTH, timeout=30)


def served(body: object, path: str) -> object:
    """The generated body naming the served model where it names one (a random name only
    reaches the 404), with a small max_tokens where it has one (or has none), so each case
    generates a few tokens; other values, however odd, are sent as generated. Ollama's routes
    (/api/...) say it as options.num_predict. /api/delete keeps its generated name: the served
    model is refused, and nothing else is installed."""
    if isinstance(body, dict):
        if isinstance(body.get("model"), str) and path != "/api/delete":
            body["model"] = MODEL
        if path.startswith("/api/"):
            options = body.get("options")
            if options is None or isinstance(options, dict):
                body["options"] = (options or {}) | {"num_predict": MAX_TOKENS}
            return body
        for key in ("max_tokens", "max_completion_tokens"):
            value = body.get(key)
            number = type(value) in (int, float)  # pydantic takes 4096.0 as 4096
            if (value is None and key == "max_tokens") or (number and value > MAX_TOKENS):
                body[key] = MAX_TOKENS
    return body


def operations(schema) -> list:
    return [result.ok() for result in schema.get_all_operations()]


def test_the_schema_has_every_endpoint(schema):
    paths = {op.path for op in operations(schema)}
    assert {"/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/embeddings",
            "/v1/messages", "/health", "/metrics", "/api/chat", "/api/generate", "/api/embed",
            "/api/tags", "/api/show", "/api/ps", "/api/version", "/api/delete"} <= paths


@pytest.mark.parametrize("mode", list(EXAMPLES))
def test_generated_requests_are_answered_as_documented(server, schema, mode):
    answered: dict[str, set[int]] = {}
    for operation in operations(schema):
        if mode == GenerationMode.NEGATIVE and not len(operation.body):
            continue  # nothing to break in a request without a body (GET /health)

        @seed(SEED)
        @given(case=operation.as_strategy(generation_mode=mode))
        # No shrinking: cases are slow; the failing one is printed whole.
        @settings(max_examples=EXAMPLES[mode], deadline=None, database=None,
                  phases=(Phase.generate,),
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def check(case) -> None:
            if case.body is not None:
                case.body = served(case.body, case.path)
            started = time.monotonic()
            where = f"{case.method} {case.path} {json.dumps(case.body, default=repr)[:4000]}"
            try:
                response = case.call(base_url=server.url, headers=AUTH, timeout=ANSWER_TIMEOUT_S)
            except requests.Timeout:
                pytest.fail(f"no answer in {ANSWER_TIMEOUT_S} s: {where}")
            took = time.monotonic() - started
            assert response.status_code < 500, (
                f"{where} → {response.status_code}: {response.text:.500}"
            )
            assert took < ANSWER_TIMEOUT_S, f"{where} took {took:.0f} s"
            case.validate_response(response, checks=CONFORMANCE)  # raises with the case
            answered.setdefault(case.operation.label, set()).add(response.status_code)

        check()
    assert server.process.poll() is None, server.stderr()
    print({label: sorted(codes) for label, codes in answered.items()})


def test_refusals_are_answered_as_documented():
    host = ModelHost(LoadParams("unused.gguf"), "m", max_queue=1)  # stays loading: 503
    config = ServerConfig(api_key=API_KEY, max_body_bytes=1000, allowed_hosts=("testserver",))
    app = create_app(host, config, load_on_start=False)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=AUTH)
    turn = [{"role": "user", "content": "Hi"}]
    chat = {"model": "m", "messages": turn}
    wrong_key = {"Authorization": "Bearer wrong"}
    cases = [  # path, method, body, headers, the status expected
        ("/v1/chat/completions", "POST", chat, AUTH, 503),
        ("/v1/messages", "POST", {"model": "m", "max_tokens": 4, "messages": turn}, AUTH, 503),
        ("/v1/messages", "POST", {"model": "m"}, wrong_key, 401),
        ("/v1/completions", "POST", {"model": "m", "prompt": "Hi"}, wrong_key, 401),
        ("/v1/chat/completions", "POST", chat, AUTH | {"Host": "rebound.example"}, 403),
        ("/v1/embeddings", "POST", {"model": "m", "input": "x" * 2000}, AUTH, 413),
        ("/v1/models", "GET", None, wrong_key, 401),
        ("/health", "GET", None, {}, 503),
        ("/metrics", "GET", None, wrong_key, 401),
        ("/api/chat", "POST", chat, AUTH, 503),
        ("/api/tags", "GET", None, wrong_key, 401),
        ("/api/generate", "POST", {"model": "m", "prompt": "Hi"}, AUTH | {"Host": "x.example"},
         403),
    ]
    for path, method, body, headers, status in cases:
        operation = schema[path][method]
        case = operation.Case(body=body) if body is not None else operation.Case()
        response = case.call(headers=headers)
        assert response.status_code == status, (path, response.text)
        case.validate_response(response, checks=CONFORMANCE)
