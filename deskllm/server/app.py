"""The FastAPI application: routers, the guards in front of them, and error handlers that
answer every failure in OpenAI's shape (FastAPI's 422 becomes OpenAI's 400)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from deskllm.server import errors, openapi
from deskllm.server.chat_completion.api_router import router as chat_router
from deskllm.server.chat_completion.serving import ChatCompletionServing
from deskllm.server.completion.api_router import router as completion_router
from deskllm.server.completion.serving import CompletionServing
from deskllm.server.config import ServerConfig
from deskllm.server.embeddings.api_router import router as embeddings_router
from deskllm.server.embeddings.serving import EmbeddingServing
from deskllm.server.guards import Guards
from deskllm.server.health.api_router import router as health_router
from deskllm.server.messages.api_router import router as messages_router
from deskllm.server.messages.serving import MessagesServing
from deskllm.server.metrics import ServerMetrics
from deskllm.server.model_host import HostState, ModelHost
from deskllm.server.models.api_router import router as models_router
from deskllm.server.ollama.api_router import router as ollama_router
from deskllm.server.ollama.serving import OllamaServing

log = logging.getLogger("deskllm.server")


def _answer(error: errors.ApiError, request: Request) -> JSONResponse:
    body = error.body_for(request.url.path)
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def validation_error(exc: RequestValidationError) -> errors.ApiError:
    """The first problem pydantic found, said the way OpenAI says it."""
    problems = exc.errors()
    if not problems:
        return errors.bad_request("The request is not valid.")
    first = problems[0]
    if first.get("type") == "json_invalid":
        return errors.bad_request(
            f"The body is not valid JSON: {first.get('ctx', {}).get('error', 'parse error')}.",
            code="invalid_json",
        )
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(loc) or None
    where = f"{param}: " if param else ""
    extra = f" ({len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return errors.bad_request(f"{where}{first.get('msg', 'invalid value')}{extra}", param=param)


def create_app(host: ModelHost, config: ServerConfig, *, load_on_start: bool = True) -> FastAPI:
    """The app for `host`. `load_on_start`: load the model when the server starts (the host
    is closed when it stops)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        host.loop = asyncio.get_running_loop()  # for callers on other threads (the window)
        if load_on_start:
            host.start_loading()
        try:
            yield
        finally:
            host.close()

    app = FastAPI(
        title="deskllm",
        summary="A local OpenAI-compatible API for the model deskllm has loaded.",
        lifespan=lifespan,
    )
    metrics = ServerMetrics()
    app.state.host = host
    app.state.metrics = metrics
    app.state.chat = ChatCompletionServing(host)
    app.state.messages = MessagesServing(host)
    app.state.completion = CompletionServing(host)
    app.state.embeddings = EmbeddingServing(host)
    app.state.ollama = OllamaServing(host, app.state.chat, app.state.completion,
                                     app.state.embeddings)  # fmt: skip
    host.queue.on_done = metrics.count_done
    routers = (models_router, chat_router, completion_router, embeddings_router, messages_router,
               health_router, ollama_router)  # fmt: skip
    for router in routers:
        app.include_router(router)
    openapi.install(app)  # what each route really answers, no 422

    @app.exception_handler(errors.ApiError)
    async def _api_error(_request: Request, exc: errors.ApiError) -> JSONResponse:
        return _answer(exc, _request)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return _answer(validation_error(exc), _request)

    @app.exception_handler(HTTPException)
    async def _http(_request: Request, exc: HTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        error = errors.ApiError(exc.status_code, str(exc.detail), type=kind)
        error.headers.update(exc.headers or {})
        return _answer(error, _request)

    @app.exception_handler(Exception)
    async def _bug(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("request failed")
        error = errors.ApiError(500, f"internal error: {exc}", type="server_error")
        return _answer(error, _request)

    app.add_middleware(Guards, config=config, metrics=metrics,
                       stopping=lambda: host.state == HostState.STOPPING)  # fmt: skip
    if config.cors_origins:
        # Added last, so outermost: a browser's preflight (OPTIONS, never with the key) is
        # answered here; the real request still passes the key check.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "x-api-key", "anthropic-version"],
        )
    return app
