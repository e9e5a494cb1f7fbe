"""POST /v1/completions."""

from __future__ import annotations

from fastapi import APIRouter, Request

from deskllm.server.completion.protocol import Completion, CompletionRequest
from deskllm.server.completion.serving import CompletionServing
from deskllm.server.model_host import keep_alive
from deskllm.server.models.serving import check_local_only
from deskllm.server.openapi import COMPLETION_RESPONSES
from deskllm.server.replies import event_stream

router = APIRouter()


@router.post("/v1/completions", response_model=Completion, response_model_exclude_none=True,
             responses=COMPLETION_RESPONSES)  # fmt: skip
async def completions(body: CompletionRequest, request: Request):
    serving: CompletionServing = request.app.state.completion
    # An installed model is loaded first (kept `ttl` seconds after, where the request says).
    backend = await request.app.state.host.use(body.model, keep_alive(body.ttl))
    check_local_only(body.model, backend)
    job = serving.admit(body)  # before any byte is sent: errors keep their status
    if body.stream:
        return event_stream(serving.stream(body, job))
    return await serving.complete(job, body, request.is_disconnected)
