"""What every generation endpoint does with the engine queue, whatever API it speaks: admit a
request (429 when the queue is full), wait for a whole reply while watching for the client to
leave, and turn an engine failure into an ApiError."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from fastapi.responses import StreamingResponse

from deskllm.engine.domain import Done, Error, Exited, TextDelta
from deskllm.server import errors
from deskllm.server.engine_queue import ChatRequest, EmbedRequest, Job, QueueFull
from deskllm.server.extra_model import ExtraModel
from deskllm.server.model_host import ModelHost

DISCONNECT_POLL_S = 0.5


def event_stream(chunks: Iterator[str] | AsyncIterator[str]) -> StreamingResponse:
    """Server-sent events as every streaming route sends them: never cached, never buffered by
    a proxy in between (nginx's X-Accel-Buffering)."""
    return StreamingResponse(
        chunks,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def sse(data: dict) -> str:
    """One server-sent event of OpenAI's streams: `data: JSON` and a blank line."""
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def conversation_id(user: str | None) -> str:
    """The engine's KV state is kept per conversation: one for anonymous requests, one per
    `user`, so each user's next turn reuses its cached prefix. Hashed: it names files."""
    if not user:
        return "api"
    return "api-" + hashlib.sha256(user.encode()).hexdigest()[:16]


def utf8(text: str, param: str) -> str:
    """Text the engine can encode (JSON may carry lone surrogates, which UTF-8 cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise errors.bad_request("The text is not valid Unicode (a lone surrogate).",
                                 param=param) from None  # fmt: skip
    return text


def submit(target: ModelHost | ExtraModel, request: ChatRequest | EmbedRequest) -> Job:
    """Queue `request` on `target`'s engine (the served model or one beside it)."""
    try:
        job = target.queue.submit(request)
    except QueueFull as exc:
        raise errors.queue_full(exc.waiting, retry_after_s=1 + exc.waiting) from None
    job.owner = target
    return job


def cancel(job: Job) -> None:
    """Stop a job on the engine that runs it."""
    job.owner.queue.cancel(job)


async def final_reply(
    host: ModelHost,
    job: Job,
    disconnected: Callable[[], Awaitable[bool]],
    on_text: Callable[[TextDelta], None] | None = None,
) -> Done:
    """The job's Done; a client that goes away while it waits cancels it (499), an engine
    failure raises its ApiError. `on_text` sees each TextDelta (its token logprobs)."""
    final = None
    gone = False
    try:
        while final is None:
            try:
                event = await asyncio.wait_for(job.get(), DISCONNECT_POLL_S)
            except TimeoutError:
                gone = await disconnected()
                if gone:
                    break
                continue
            if event is None:
                break
            if isinstance(event, TextDelta) and on_text is not None:
                on_text(event)
            if isinstance(event, Done | Error | Exited):
                final = event
    finally:
        if final is None:
            (job.owner or host).queue.cancel(job)
    if gone:
        raise errors.ApiError(499, "the client closed the request", type="client_closed")
    if not isinstance(final, Done):
        raise engine_error(final)
    return final


def answering_model(host: ModelHost, job: Job) -> str:
    """The model a response names: the id of the model that answers (the served one or one
    loaded beside it), or the gateway name asked for."""
    model_id = (job.owner or host).model_id
    backend = getattr(job.request, "backend", None)  # EmbedRequest has none
    return (backend.label or model_id) if backend is not None else model_id


def engine_error(event: Error | Exited | None) -> errors.ApiError:
    if event is None:
        return errors.ApiError(500, "the reply ended without a result", type="server_error")
    return errors.from_engine(event.kind, event.reason)
