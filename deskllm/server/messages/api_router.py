"""POST /v1/messages (Anthropic's Messages API)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from deskllm.server.messages.protocol import Message, MessagesRequest
from deskllm.server.messages.serving import MessagesServing
from deskllm.server.openapi import MESSAGES_RESPONSES
from deskllm.server.replies import event_stream

router = APIRouter()


@router.post("/v1/messages", response_model=Message, responses=MESSAGES_RESPONSES)
async def messages(body: MessagesRequest, request: Request):
    serving: MessagesServing = request.app.state.messages
    # An installed model is loaded first; `auto` and remote models answer through a backend.
    backend = await request.app.state.host.use(body.model)
    job, plan = serving.admit(body, backend)  # before any byte is sent: errors keep their status
    if body.stream:
        return event_stream(serving.stream(body, job, plan))
    return await serving.complete(body, job, plan, request.is_disconnected)
