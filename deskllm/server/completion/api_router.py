"""POST /v1/completions."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from deskllm.server.completion.protocol import Completion, CompletionRequest
from deskllm.server.completion.serving import CompletionServing

router = APIRouter()


@router.post("/v1/completions", response_model=Completion, response_model_exclude_none=True)
async def completions(body: CompletionRequest, request: Request):
    serving: CompletionServing = request.app.state.completion
    await request.app.state.host.use(body.model)  # an installed model: loaded first
    job = serving.admit(body)  # before any byte is sent: errors keep their status
    if body.stream:
        return StreamingResponse(
            serving.stream(body, job),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return await serving.complete(job, body, request.is_disconnected)
