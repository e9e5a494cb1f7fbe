"""Ollama's API on the same server and port: /api/chat, /api/generate, /api/embed,
/api/embeddings, /api/tags, /api/show, /api/ps, /api/version, /api/delete, /api/pull (from
the Hugging Face Hub: `hf.co/OWNER/REPO:QUANT`). Errors are
Ollama's `{"error": "..."}` (errors.ApiError.body_for)."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from deskllm import __version__
from deskllm.server import errors
from deskllm.server.ollama import models
from deskllm.server.ollama.protocol import (
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaModelRequest,
    OllamaPullRequest,
)
from deskllm.server.ollama.pull import hub_name, pull_lines
from deskllm.server.ollama.serving import (
    NDJSON,
    OllamaServing,
    keep_alive_s,
    model_name,
    ndjson,
)
from deskllm.server.openapi import (
    OLLAMA_EMBED_RESPONSES,
    OLLAMA_GENERATION_RESPONSES,
    OLLAMA_LIST_RESPONSES,
    OLLAMA_MODEL_RESPONSES,
)

router = APIRouter(tags=["ollama"])


def _ndjson(lines) -> StreamingResponse:
    return StreamingResponse(lines, media_type=NDJSON,
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _one(body: dict):
    yield ndjson(body)


@router.post("/api/chat", responses=OLLAMA_GENERATION_RESPONSES)
async def chat(body: OllamaChatRequest, request: Request):
    serving: OllamaServing = request.app.state.ollama
    started = time.monotonic()
    if not body.messages:  # load (or with keep_alive 0, unload) only
        reply = await serving.load_only(body.model, keep_alive_s(body.keep_alive), chat=True)
        return _ndjson(_one(reply)) if body.stream else reply
    backend = await request.app.state.host.use(model_name(body.model),
                                               keep_alive_s(body.keep_alive))  # fmt: skip
    job, plan = serving.admit_chat(body, backend)  # before any byte: errors keep their status
    if body.stream:
        return _ndjson(serving.stream(job, plan, chat=True, started=started))
    return await serving.whole(job, plan, chat=True, started=started,
                               disconnected=request.is_disconnected)  # fmt: skip


@router.post("/api/generate", responses=OLLAMA_GENERATION_RESPONSES)
async def generate(body: OllamaGenerateRequest, request: Request):
    serving: OllamaServing = request.app.state.ollama
    started = time.monotonic()
    if not body.prompt and not body.system:  # load (or with keep_alive 0, unload) only
        reply = await serving.load_only(body.model, keep_alive_s(body.keep_alive), chat=False)
        return _ndjson(_one(reply)) if body.stream else reply
    backend = await request.app.state.host.use(model_name(body.model),
                                               keep_alive_s(body.keep_alive))  # fmt: skip
    job, plan = serving.admit_generate(body, backend)
    if body.stream:
        return _ndjson(serving.stream(job, plan, chat=False, started=started))
    return await serving.whole(job, plan, chat=False, started=started,
                               disconnected=request.is_disconnected)  # fmt: skip


@router.post("/api/embed", responses=OLLAMA_EMBED_RESPONSES)
async def embed(body: OllamaEmbedRequest, request: Request) -> dict:
    started = time.monotonic()
    await request.app.state.host.use(model_name(body.model), keep_alive_s(body.keep_alive))
    return await request.app.state.ollama.embed(body, started)


@router.post("/api/embeddings", responses=OLLAMA_EMBED_RESPONSES)
async def embeddings(body: OllamaEmbeddingsRequest, request: Request) -> dict:
    await request.app.state.host.use(model_name(body.model), keep_alive_s(body.keep_alive))
    return await request.app.state.ollama.embeddings_legacy(body)


@router.get("/api/tags", responses=OLLAMA_LIST_RESPONSES)
async def tags(request: Request) -> dict:
    return await asyncio.to_thread(models.tags, request.app.state.host)


@router.post("/api/show", responses=OLLAMA_MODEL_RESPONSES)
async def show(body: OllamaModelRequest, request: Request) -> dict:
    return await asyncio.to_thread(models.show, request.app.state.host, body.target())


@router.get("/api/ps", responses=OLLAMA_LIST_RESPONSES)
async def ps(request: Request) -> dict:
    return await asyncio.to_thread(models.ps, request.app.state.host)


@router.get("/api/version", responses=OLLAMA_LIST_RESPONSES)
async def version() -> dict:
    return {"version": __version__}


@router.delete("/api/delete", responses=OLLAMA_MODEL_RESPONSES)
async def delete(body: OllamaModelRequest, request: Request) -> JSONResponse:
    await asyncio.to_thread(models.delete, request.app.state.host, body.target())
    return JSONResponse({})


@router.post("/api/pull", responses=OLLAMA_MODEL_RESPONSES)
async def pull(body: OllamaPullRequest, request: Request):
    repo, selector = hub_name(body.target())  # 400 before any byte for another kind of name
    installed = request.app.state.host.installed
    if installed is None or installed.pull is None:
        raise errors.bad_request("this server does not download models; run `deskllm download "
                                 f"{repo}` or pull through `deskllm serve`", param="model")
    lines = pull_lines(installed.pull, repo, selector)
    if body.stream:
        return _ndjson(ndjson(line) async for line in lines)
    last: dict = {}
    async for line in lines:
        last = line
    return JSONResponse(last, status_code=500 if "error" in last else 200)
