"""POST /v1/chat/completions."""

from __future__ import annotations

from fastapi import APIRouter, Request

from deskllm.server.chat_completion.protocol import ChatCompletion, ChatCompletionRequest
from deskllm.server.chat_completion.serving import ChatCompletionServing
from deskllm.server.model_host import keep_alive
from deskllm.server.openapi import CHAT_RESPONSES
from deskllm.server.replies import event_stream

router = APIRouter()


@router.post("/v1/chat/completions", response_model=ChatCompletion,
             response_model_exclude_none=True, responses=CHAT_RESPONSES)  # fmt: skip
async def chat_completions(body: ChatCompletionRequest, request: Request):
    serving: ChatCompletionServing = request.app.state.chat
    # An installed model is loaded first; `auto` and remote models answer through a backend.
    backend = await request.app.state.host.use(body.model, keep_alive(body.ttl))
    job, plan = serving.admit(body, backend)  # before any byte is sent: errors keep their status
    if body.stream:
        return event_stream(serving.stream(body, job, plan))
    return await serving.complete(body, job, plan, request.is_disconnected)
