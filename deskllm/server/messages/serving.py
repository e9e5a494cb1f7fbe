"""Anthropic's Messages API on the same engine queue as the OpenAI routes: a request → one
engine reply → a Message, or its stream of named server-sent events (message_start,
content_block_start / _delta / _stop, message_delta, message_stop). No HTTP here."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from deskllm.engine.protocol import ChatMessage, Done, Error, Exited, Metrics, Sampling, TextDelta
from deskllm.server import errors
from deskllm.server.engine_queue import ChatRequest, Job
from deskllm.server.messages.protocol import (
    Message,
    MessagesRequest,
    MessagesUsage,
    StopReason,
    TextBlock,
)
from deskllm.server.model_host import ModelHost
from deskllm.server.models.serving import check_model, check_ready
from deskllm.server.replies import conversation_id, engine_error, final_reply, submit, utf8


def to_sampling(req: MessagesRequest, n_ctx: int) -> Sampling:
    d = Sampling()
    return Sampling(
        temperature=d.temperature if req.temperature is None else req.temperature,
        top_p=d.top_p if req.top_p is None else req.top_p,
        top_k=d.top_k if req.top_k is None else req.top_k,
        max_tokens=max(1, min(req.max_tokens, n_ctx)),
        stop=tuple(utf8(s, "stop_sequences") for s in req.stop_sequences or () if s),
    )


def to_messages(req: MessagesRequest) -> tuple[ChatMessage, ...]:
    """Anthropic keeps the system prompt out of the turns; the engine takes it as the first."""
    system = req.system_text()
    turns = [ChatMessage("system", utf8(system, "system"))] if system else []
    turns += [
        ChatMessage(m.role, utf8(m.text(), f"messages.{i}.content"))
        for i, m in enumerate(req.messages)
    ]
    return tuple(turns)


def check_supported(req: MessagesRequest) -> None:
    if req.tools:
        raise errors.bad_request("Tools are not supported yet.", param="tools")


def stop_reason(done: Done) -> StopReason:
    if done.stop_string is not None:
        return "stop_sequence"
    return "max_tokens" if done.finish_reason in ("length", "context_full") else "end_turn"


def usage(m: Metrics) -> MessagesUsage:
    """Anthropic counts cached prompt tokens apart from input_tokens."""
    return MessagesUsage(
        input_tokens=m.prompt_tokens - m.cached_tokens,
        output_tokens=m.generated_tokens,
        cache_read_input_tokens=m.cached_tokens,
        cache_creation_input_tokens=0,
    )


class MessagesServing:
    def __init__(self, host: ModelHost) -> None:
        self.host = host

    def admit(self, req: MessagesRequest) -> Job:
        """Check the request and queue it: raises ApiError (400, 404, 429, 503)."""
        check_ready(self.host)
        check_model(self.host, req.model)
        check_supported(req)
        user = req.metadata.user_id if req.metadata else None
        request = ChatRequest(
            conversation_id(user), to_messages(req), to_sampling(req, self.host.n_ctx)
        )
        return submit(self.host, request)

    async def complete(self, job: Job, disconnected: Callable[[], Awaitable[bool]]) -> Message:
        done = await final_reply(self.host, job, disconnected)
        return Message(
            id=f"msg_{uuid.uuid4().hex}",
            content=[TextBlock(text=done.text)],
            model=self.host.model_id,
            stop_reason=stop_reason(done),
            stop_sequence=done.stop_string,
            usage=usage(done.metrics),
        )

    async def stream(self, req: MessagesRequest, job: Job) -> AsyncIterator[str]:
        """The event sequence of Anthropic's streaming API; an engine failure mid-stream is an
        `error` event. Closing the generator (client gone) cancels the reply."""
        start = Message(
            id=f"msg_{uuid.uuid4().hex}", content=[], model=self.host.model_id,
            stop_reason=None, usage=MessagesUsage(input_tokens=0, output_tokens=0),
        )  # fmt: skip
        finished = False
        try:
            yield _event("message_start", {"message": start.model_dump()})
            yield _event("content_block_start",
                         {"index": 0, "content_block": {"type": "text", "text": ""}})  # fmt: skip
            async for event in job.stream():
                if isinstance(event, TextDelta):
                    delta = {"type": "text_delta", "text": event.text}
                    yield _event("content_block_delta", {"index": 0, "delta": delta})
                elif isinstance(event, Done):
                    finished = True
                    yield _event("content_block_stop", {"index": 0})
                    end = {"stop_reason": stop_reason(event), "stop_sequence": event.stop_string}
                    counts = usage(event.metrics).model_dump()
                    yield _event("message_delta", {"delta": end, "usage": counts})
                    yield _event("message_stop", {})
                elif isinstance(event, Error | Exited):
                    finished = True
                    yield _error_event(engine_error(event))
            if not finished:
                finished = True
                yield _error_event(engine_error(None))
        finally:
            if not finished:
                with contextlib.suppress(Exception):
                    self.host.queue.cancel(job)


def _event(name: str, data: dict) -> str:
    body = json.dumps({"type": name, **data}, ensure_ascii=False)
    return f"event: {name}\ndata: {body}\n\n"


def _error_event(error: errors.ApiError) -> str:
    return f"event: error\ndata: {json.dumps(error.anthropic_body(), ensure_ascii=False)}\n\n"
