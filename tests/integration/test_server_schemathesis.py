"""schemathesis against the OpenAPI schema `deskllm serve` serves: requests generated from the
schema (valid ones, and with GenerationMode.NEGATIVE ones that break it) never get a 5xx and
every answer comes within a timeout. Generation is kept short: a request's max_tokens is at
most MAX_TOKENS, so a case costs a prompt and a few tokens, not a whole context."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from server_helpers import API_KEY, running_server

MODEL = "SmolLM2-135M-Instruct (Q4_1)"
MAX_TOKENS = 4
ANSWER_TIMEOUT_S = 60  # the slowest case: a long generated prompt on two CPU cores
EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 6}  # per operation
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, session_home: Path, extra_bufts: bool):
    home = tmp_path_factory.mktemp("serve-home")
    with running_server(home, session_home, "--api-key", API_KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def schema(server):
    return schemathesis.openapi.from_url(server.url + "/openapi.json", headers=AUTH, timeout=30)


def served(body: object) -> object:
    """The generated body naming the served model where it names one (a random name only
    reaches the 404), with a small max_tokens where it has one (or has none), so each case
    generates a few tokens; other values, however odd, are sent as generated."""
    if isinstance(body, dict):
        if isinstance(body.get("model"), str):
            body["model"] = MODEL
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
            "/v1/messages", "/health", "/metrics"} <= paths  # fmt: skip


@pytest.mark.parametrize("mode", list(EXAMPLES))
def test_generated_requests_never_get_a_server_error_or_hang(server, schema, mode):
    answered: dict[str, set[int]] = {}
    for operation in operations(schema):
        if mode == GenerationMode.NEGATIVE and not len(operation.body):
            continue  # nothing to break in a request without a body (GET /health)

        @given(case=operation.as_strategy(generation_mode=mode))
        # No shrinking: cases are slow; the failing one is printed whole.
        @settings(max_examples=EXAMPLES[mode], deadline=None, database=None,
                  phases=(Phase.generate,),
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def check(case) -> None:
            if case.body is not None:
                case.body = served(case.body)
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
            answered.setdefault(case.operation.label, set()).add(response.status_code)

        check()
    assert server.process.poll() is None, server.stderr()
    print({label: sorted(codes) for label, codes in answered.items()})
