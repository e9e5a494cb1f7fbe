"""POST /v1/messages (Anthropic's Messages API)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from deskllm.server.messages.protocol import Message, MessagesRequest
from deskllm.server.messages.serving import MessagesServing

router = APIRouter()


@router.post("/v1/messages", response_model=Message)
async def messages(body: MessagesRequest, request: Request):
    serving: MessagesServing = request.app.state.messages
    await request.app.state.host.use(body.model)  # an installed model: loaded first
    job = serving.admit(body)  # before any byte is sent: errors keep their status
    if body.stream:
        return StreamingResponse(
            serving.stream(body, job),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return await serving.complete(job, request.is_disconnected)
