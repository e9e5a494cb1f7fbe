"""The OpenAPI document /openapi.json serves, saying what the server really answers: each
route's `responses=` (built here) declares its error statuses with their bodies (OpenAI's
shape, Anthropic's on /v1/messages) and its streamed replies as text/event-stream; FastAPI
turns them into the schema from these pydantic models, as it does the request bodies."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(BaseModel):  # errors.ApiError.body()
    """An error, as OpenAI's API answers it (every route but /v1/messages)."""

    error: OpenAIErrorDetail


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicError(BaseModel):  # errors.ApiError.anthropic_body()
    """An error of /v1/messages, as Anthropic's API answers it."""

    type: Literal["error"]
    error: AnthropicErrorDetail


class OllamaError(BaseModel):  # errors.ApiError.body_for("/api/...")
    """An error of the Ollama API's routes (/api/...), as Ollama answers it."""

    error: str


class Health(BaseModel):
    """GET /health: 200 with `ok`, 503 with any other status."""

    status: Literal["ok", "loading", "restarting", "stopping", "error"]
    model: str | None = Field(None, description="loading: the model being loaded")
    cause: str | None = Field(None, description="restarting: why the engine stopped")
    error: str | None = Field(None, description="error: why the model could not be loaded")
    loading: list[str] | None = Field(None, description="ok: models being loaded beside the "
                                      "served one for requests that wait for them")


class ServerSentEvent(BaseModel):  # an `itemSchema`, as FastAPI writes SSE routes' own
    """One event of a streamed reply."""

    event: str | None = Field(None, description="Anthropic's event name (message_start, …)")
    data: str = Field(description="a JSON object; `[DONE]` ends an OpenAI stream")


_WHY = {
    400: "A body that is not valid (never 422) or asks for what the model cannot do.",
    401: "A missing or wrong API key (when the server has one).",
    403: "A Host or Origin a loopback server does not answer (--allowed-hosts).",
    404: "A model that is neither served nor installed, nor a remote endpoint's.",
    413: "A body over the size limit.",
    429: "The queue is full.",
    499: "The client closed the connection before the reply (logs and metrics only).",
    500: "The engine failed, or a bug.",
    502: "No remote endpoint answered for a remote model.",
    503: "The model is loading, the engine is restarting, or the server is shutting down.",
}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying",
                                "schema": {"type": "integer"}}}  # fmt: skip
_HEADERS = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}}},
    429: _RETRY_AFTER,
    503: _RETRY_AFTER,
}

Responses = dict[int | str, dict[str, Any]]


def error_responses(*codes: int, body: type[BaseModel] = OpenAIError) -> Responses:
    return {
        code: {"model": body, "description": _WHY[code]}
        | ({"headers": _HEADERS[code]} if code in _HEADERS else {})
        for code in codes
    }


def _streamed(what: str) -> Responses:
    sse = {"itemSchema": ServerSentEvent.model_json_schema()}
    return {200: {"description": f"{what}; with `stream: true` server-sent events of its parts.",
                  "content": {"text/event-stream": sse}}}  # fmt: skip


_GUARDS = (401, 403, 500, 503)  # the key, the Host check, a bug, shutting down
_GENERATION = (400, 401, 403, 404, 413, 429, 499, 500, 502, 503)

CHAT_RESPONSES = _streamed("A chat.completion") | error_responses(*_GENERATION)
COMPLETION_RESPONSES = _streamed("A text_completion") | error_responses(*_GENERATION)
MESSAGES_RESPONSES = _streamed("A message") | error_responses(*_GENERATION, body=AnthropicError)
# No 499: an embedding is not cancelled when its client leaves.
EMBEDDINGS_RESPONSES = error_responses(400, 401, 403, 404, 413, 429, 500, 502, 503)
# Ollama's routes: a JSON object, or (streamed, Ollama's default) a line of JSON per part.
OLLAMA_GENERATION_RESPONSES: Responses = {
    200: {"description": "The reply; streamed (the default): one JSON object per line, the "
                         "last with `done: true`, or `{\"error\": ...}` if the engine failed.",
          "content": {"application/json": {"schema": {"type": "object"}},
                      "application/x-ndjson": {"schema": {"type": "string"}}}},
} | error_responses(*_GENERATION, body=OllamaError)  # fmt: skip
OLLAMA_EMBED_RESPONSES = error_responses(400, 401, 403, 404, 413, 429, 500, 502, 503,
                                         body=OllamaError)  # fmt: skip
OLLAMA_MODEL_RESPONSES = error_responses(400, 401, 403, 404, 413, 500, 503, body=OllamaError)
OLLAMA_LIST_RESPONSES = error_responses(*_GUARDS, body=OllamaError)
MODELS_RESPONSES = error_responses(*_GUARDS)
HEALTH_RESPONSES: Responses = {
    200: {"model": Health, "description": "The model is loaded and its engine runs."},
    503: {"model": Health, "description": "Not ready: the status says why.",
          "headers": _RETRY_AFTER},
} | error_responses(403, 500)  # fmt: skip
METRICS_RESPONSES = error_responses(*_GUARDS)


def document(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(
        title=app.title, version=app.version, openapi_version=app.openapi_version,
        summary=app.summary, description=app.description,
        routes=app.routes,
    )  # fmt: skip
    for operations in schema["paths"].values():
        for operation in operations.values():
            # FastAPI adds 422 to every route with a body unless 4XX or default is declared
            # (which would hide the real codes); the server answers bad bodies with 400.
            operation["responses"].pop("422", None)
            for code, response in operation["responses"].items():
                # FastAPI files a response model under the route's media type (text/plain
                # for /metrics); every error is JSON.
                if int(code) >= 400 and "content" in response:
                    (media,) = response["content"].values()
                    response["content"] = {"application/json": media}
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):  # 422's, now unused
        components.pop(name, None)
    return schema


def install(app: FastAPI) -> None:
    """Serve `document(app)` as /openapi.json (built on first use, then kept)."""

    def openapi() -> dict[str, Any]:
        if not app.openapi_schema:
            app.openapi_schema = document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
