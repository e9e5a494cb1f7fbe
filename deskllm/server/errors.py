"""The one builder of OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}`,
so every endpoint fails alike and the official SDKs raise their own exception types."""

from __future__ import annotations

from dataclasses import dataclass, field

from deskllm.engine.errors import ErrorKind


@dataclass
class ApiError(Exception):
    """An error to answer with. `headers` carries Retry-After and WWW-Authenticate."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def anthropic_body(self) -> dict:
        """The same error as Anthropic's API says it: `{"type": "error", "error": {"type",
        "message"}}` (its SDK picks the exception class from the status)."""
        default = "api_error" if self.status >= 500 else "invalid_request_error"
        kind = _ANTHROPIC_TYPES.get(self.status, default)
        return {"type": "error", "error": {"type": kind, "message": self.message}}

    def body_for(self, path: str) -> dict:
        """Each API's clients get errors in that API's shape: Ollama's is `{"error": "..."}`."""
        if path.startswith(OLLAMA_PREFIX):
            return {"error": self.message}
        return self.anthropic_body() if path.startswith(ANTHROPIC_PREFIX) else self.body()


ANTHROPIC_PREFIX = "/v1/messages"
OLLAMA_PREFIX = "/api/"
_ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def unauthorized() -> ApiError:
    return ApiError(
        401,
        "Incorrect or missing API key: send it as 'Authorization: Bearer <key>'.",
        type="authentication_error",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )


def host_not_allowed(header: str, value: str, name: str | None) -> ApiError:
    """A request from a name this loopback server does not answer: a web page whose own name
    was made to resolve to 127.0.0.1 (DNS rebinding) must not drive the API."""
    allow = (f" To allow it, start the server with --allowed-hosts {name}." if name else "")
    return ApiError(
        403,
        f"{header} {value!r} is not allowed: this server listens on this machine only and "
        f"answers requests for localhost, 127.0.0.1 and [::1].{allow}",
        type="permission_error",
        code="host_not_allowed",
    )


def shutting_down() -> ApiError:
    return ApiError(503, "The server is shutting down; retry in a few seconds.",
                    type="server_error", code="shutting_down",
                    headers={"Retry-After": "5"})  # fmt: skip


def model_not_found(name: str, served: str, installed: tuple[str, ...] = ()) -> ApiError:
    others = [m for m in installed if m != served]
    also = f" and can load {', '.join(map(repr, others))}" if others else ""
    return ApiError(
        404,
        f"The model {name!r} does not exist on this server; it serves {served!r}{also} "
        "(GET /v1/models lists them).",
        param="model",
        code="model_not_found",
    )


def does_not_fit(model_id: str, reason: str) -> ApiError:
    """An installed model this machine cannot hold: the planner's numbers, nothing unloaded."""
    return ApiError(400, f"The model {model_id!r} does not fit this machine: {reason}",
                    param="model", code="model_does_not_fit")  # fmt: skip


def body_too_large(limit: int) -> ApiError:
    return ApiError(413, f"The request body is larger than {limit} bytes.",
                    code="request_too_large")  # fmt: skip


def queue_full(waiting: int, retry_after_s: int) -> ApiError:
    return ApiError(
        429,
        f"The engine is answering another request and its queue ({waiting} waiting) is full; "
        "retry later.",
        type="rate_limit_error",
        code="queue_full",
        headers={"Retry-After": str(retry_after_s)},
    )


def loading(reason: str | None = None) -> ApiError:
    message = reason or "The model is still loading; retry in a few seconds."
    return ApiError(503, message, type="server_error", code="model_loading",
                    headers={"Retry-After": "5"})  # fmt: skip


def from_engine(kind: ErrorKind, reason: str) -> ApiError:
    """An engine failure as an answer: what the request asked for is 400, the rest 5xx."""
    if kind == ErrorKind.BAD_REQUEST:
        return ApiError(400, reason, param="response_format", code="invalid_schema")
    if kind in (ErrorKind.CONTEXT, ErrorKind.TEMPLATE):
        code = "context_length_exceeded" if kind == ErrorKind.CONTEXT else "template_error"
        return ApiError(400, reason, param="messages", code=code)
    if kind in (ErrorKind.NO_MODEL, ErrorKind.CRASH_LOOP):
        return ApiError(503, reason, type="server_error", code=str(kind))
    if kind in (ErrorKind.EXITED, ErrorKind.HUNG):  # a fresh engine is on its way: retry
        return ApiError(503, f"{reason}; it is being restarted, retry in a few seconds",
                        type="server_error", code=str(kind),
                        headers={"Retry-After": "5"})  # fmt: skip
    return ApiError(500, reason, type="server_error", code=str(kind))
