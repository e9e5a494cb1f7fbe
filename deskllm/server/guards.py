"""ASGI middleware in front of every route: the Host and Origin check (DNS rebinding), the
API key, a server that is stopping, the body size limit, and the request counter. Pure ASGI
(not BaseHTTPMiddleware) so streamed responses pass untouched and the route still hears the
client's disconnect."""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deskllm.server import errors
from deskllm.server.config import ServerConfig
from deskllm.server.metrics import ServerMetrics

OPEN_PATHS = frozenset({"/health"})  # load balancers and the GUI probe it without a key


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def host_name(host_header: str) -> str:
    """The name of a Host header: 'localhost:8383' → 'localhost', '[::1]:8383' → '::1'."""
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    if host_header.count(":") > 1:
        return host_header  # a bare IPv6 address (not valid in Host, but unambiguous)
    return host_header.partition(":")[0]


def refused_host(config: ServerConfig, headers: dict[str, str]) -> errors.ApiError | None:
    """403 for a Host, or a browser's Origin, that a loopback server does not answer."""
    host = headers.get("host")
    if host is not None and not config.host_allowed(host_name(host)):
        return errors.host_not_allowed("Host", host, host_name(host))
    origin = headers.get("origin")
    if origin is not None and origin not in config.cors_origins:
        try:
            name = urlsplit(origin).hostname
        except ValueError:
            name = None
        if not name or not config.host_allowed(name):
            return errors.host_not_allowed("Origin", origin, name)
    return None


def presented_key(headers: dict[str, str]) -> str | None:
    """The key from 'Authorization: Bearer KEY' (OpenAI's SDK) or 'x-api-key' (Anthropic's)."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return headers.get("x-api-key")


def key_matches(expected: str, presented: str | None) -> bool:
    """Constant time, so the answer's timing does not tell how much of a guess was right."""
    return presented is not None and hmac.compare_digest(
        expected.encode("utf-8"), presented.encode("utf-8")
    )


async def send_error(send: Send, error: errors.ApiError, path: str) -> None:
    body = json.dumps(error.body_for(path)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guards:
    """`stopping`: whether the server is shutting down (new requests get 503)."""

    def __init__(self, app: ASGIApp, config: ServerConfig, metrics: ServerMetrics,
                 stopping: Callable[[], bool]) -> None:  # fmt: skip
        self.app = app
        self.config = config
        self.api_key = config.api_key
        self.max_body_bytes = config.max_body_bytes
        self.metrics = metrics
        self.stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self._guarded(scope, receive, counting_send)
        finally:
            path = scope["path"] if scope["path"] in _KNOWN_PATHS else "other"
            self.metrics.count_request(path, status["code"])

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        path = scope["path"]
        refusal = refused_host(self.config, headers)
        if (refusal is None and self.api_key and path not in OPEN_PATHS
                and not key_matches(self.api_key, presented_key(headers))):  # fmt: skip
            refusal = errors.unauthorized()
        if refusal is None and path not in OPEN_PATHS and self.stopping():
            refusal = errors.shutting_down()
        if refusal is not None:
            await send_error(send, refusal, path)
            return
        body = await self._read_body(scope, receive)
        if body is None:
            await send_error(send, errors.body_too_large(self.max_body_bytes), scope["path"])
            return
        replayed = False

        async def replay() -> Message:
            # The whole body once, then the client's own messages (its disconnect).
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The request body, or None when it is over the limit (by its Content-Length or
        as it arrives, for chunked bodies)."""
        for name, value in scope["headers"]:
            if name.lower() == b"content-length":
                try:
                    if int(value) > self.max_body_bytes:
                        return None
                except ValueError:
                    pass
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away: the app sees an empty body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


_KNOWN_PATHS = frozenset({"/health", "/metrics", "/v1/models", "/v1/chat/completions",
                          "/v1/completions", "/v1/embeddings", "/v1/messages", "/openapi.json",
                          "/docs", "/api/chat", "/api/generate", "/api/embed",
                          "/api/embeddings", "/api/tags", "/api/show", "/api/ps",
                          "/api/version", "/api/delete"})  # fmt: skip
