"""Chat completions: an OpenAI request → one engine reply → an OpenAI response or a stream of
chunks. No HTTP here: the router hands in the request and a disconnect check."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from deskllm.engine.protocol import ChatMessage, Done, Error, Exited, Metrics, Sampling, TextDelta
from deskllm.server import errors
from deskllm.server.chat_completion.protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    Delta,
    Timings,
    Usage,
)
from deskllm.server.engine_queue import ChatRequest, Job, QueueFull
from deskllm.server.model_host import ModelHost
from deskllm.server.models.serving import check_model, check_ready

DISCONNECT_POLL_S = 0.5
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# Cancelled replies only happen when the client has gone; "stop" keeps the schema valid.
_FINISH = {"stop": "stop", "length": "length", "cancelled": "stop"}


def conversation_id(user: str | None) -> str:
    """The engine's KV state is kept per conversation: one for anonymous requests, one per
    `user`, so each user's next turn reuses its cached prefix. Hashed: it names files."""
    if not user:
        return "api"
    return "api-" + hashlib.sha256(user.encode()).hexdigest()[:16]


def to_sampling(req: ChatCompletionRequest, n_ctx: int) -> Sampling:
    """The engine's Sampling for a request; unset fields keep deskllm's defaults. max_tokens
    is capped by the context; unset, the reply may fill it."""
    d = Sampling()
    max_tokens = req.max_completion_tokens or req.max_tokens or n_ctx
    stops = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
    return Sampling(
        temperature=d.temperature if req.temperature is None else req.temperature,
        top_p=d.top_p if req.top_p is None else req.top_p,
        top_k=d.top_k if req.top_k is None else req.top_k,
        min_p=d.min_p if req.min_p is None else req.min_p,
        repeat_penalty=d.repeat_penalty if req.repeat_penalty is None else req.repeat_penalty,
        # 0xFFFFFFFF is llama.cpp's "random": keep explicit seeds below it.
        seed=-1 if req.seed is None or req.seed < 0 else req.seed % 0xFFFFFFFF,
        max_tokens=max(1, min(max_tokens, n_ctx)),
        stop=tuple(utf8(s, "stop") for s in stops if s),
        ignore_eos=req.ignore_eos,
    )


def to_messages(req: ChatCompletionRequest) -> tuple[ChatMessage, ...]:
    messages = []
    for i, m in enumerate(req.messages):
        role = _ROLES.get(m.role)
        if role is None:
            raise errors.bad_request(
                f"messages[{i}]: role {m.role!r} is not supported yet (tool calls are not).",
                param=f"messages[{i}].role",
            )
        messages.append(ChatMessage(role, utf8(m.text(), f"messages[{i}].content")))
    return tuple(messages)


def utf8(text: str, param: str) -> str:
    """Text the engine can encode (JSON may carry lone surrogates, which UTF-8 cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise errors.bad_request("The text is not valid Unicode (a lone surrogate).",
                                 param=param) from None  # fmt: skip
    return text


def check_supported(req: ChatCompletionRequest) -> None:
    """Refuse what this server cannot do rather than silently doing something else."""
    if req.n not in (None, 1):
        raise errors.bad_request("Only n=1 is supported.", param="n")
    if req.logprobs:
        raise errors.bad_request("logprobs are not supported yet.", param="logprobs")
    if req.tools:
        raise errors.bad_request("Tools are not supported yet.", param="tools")
    if req.response_format is not None and req.response_format.type != "text":
        raise errors.bad_request(
            f"response_format {req.response_format.type!r} is not supported yet.",
            param="response_format",
        )


def usage(m: Metrics) -> Usage:
    return Usage(
        prompt_tokens=m.prompt_tokens,
        completion_tokens=m.generated_tokens,
        total_tokens=m.prompt_tokens + m.generated_tokens,
        prompt_tokens_details={"cached_tokens": m.cached_tokens},
    )


def timings(m: Metrics) -> Timings:
    """Prompt time from the evaluated tokens and their speed; decode time from its speed."""
    prompt_ms = m.evaluated_tokens / m.pp_tps * 1000 if m.pp_tps else 0.0
    predicted_ms = m.generated_tokens / m.tg_tps * 1000 if m.tg_tps else 0.0
    return Timings(
        cache_n=m.cached_tokens,
        prompt_n=m.evaluated_tokens,
        prompt_ms=prompt_ms,
        prompt_per_second=m.pp_tps,
        predicted_n=m.generated_tokens,
        predicted_ms=predicted_ms,
        predicted_per_second=m.tg_tps,
    )


class ChatCompletionServing:
    def __init__(self, host: ModelHost) -> None:
        self.host = host

    def admit(self, req: ChatCompletionRequest) -> Job:
        """Check the request and queue it: raises ApiError (400, 404, 429, 503)."""
        check_ready(self.host)
        check_model(self.host, req.model)
        check_supported(req)
        request = ChatRequest(
            conversation_id(req.user), to_messages(req), to_sampling(req, self.host.n_ctx)
        )
        try:
            return self.host.queue.submit(request)
        except QueueFull as exc:
            raise errors.queue_full(exc.waiting, retry_after_s=1 + exc.waiting) from None

    async def complete(
        self, req: ChatCompletionRequest, job: Job, disconnected: Callable[[], Awaitable[bool]]
    ) -> ChatCompletion:
        """The whole reply; a client that goes away while it waits cancels it."""
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
                if isinstance(event, Done | Error | Exited):
                    final = event
        finally:
            if final is None:
                self.host.queue.cancel(job)
        if gone:
            raise errors.ApiError(499, "the client closed the request", type="client_closed")
        if not isinstance(final, Done):
            raise _engine_error(final)
        return ChatCompletion(
            id=f"chatcmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=self.host.model_id,
            choices=[
                Choice(
                    message=AssistantMessage(content=final.text),
                    finish_reason=_FINISH.get(final.finish_reason, "stop"),
                )
            ],
            usage=usage(final.metrics),
            timings=timings(final.metrics),
        )

    async def stream(self, req: ChatCompletionRequest, job: Job) -> AsyncIterator[str]:
        """Server-sent events: a role chunk, text chunks, the finish chunk, a usage chunk if
        asked, then `data: [DONE]`. Closing the generator (client gone) cancels the reply."""
        chunk_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def chunk(delta: Delta, finish: str | None = None) -> str:
            body = ChatCompletionChunk(
                id=chunk_id, created=created, model=self.host.model_id,
                choices=[ChunkChoice(delta=delta, finish_reason=finish)],
            )  # fmt: skip
            return _sse(body.model_dump(exclude_none=True))

        finished = False
        try:
            yield chunk(Delta(role="assistant", content=""))
            async for event in job.stream():
                if isinstance(event, TextDelta):
                    yield chunk(Delta(content=event.text))
                elif isinstance(event, Done):
                    finished = True
                    yield chunk(Delta(), _FINISH.get(event.finish_reason, "stop"))
                    include = req.stream_options is not None and req.stream_options.include_usage
                    if include:
                        body = ChatCompletionChunk(
                            id=chunk_id, created=created, model=self.host.model_id, choices=[],
                            usage=usage(event.metrics), timings=timings(event.metrics),
                        )  # fmt: skip
                        yield _sse(body.model_dump(exclude_none=True))
                elif isinstance(event, Error | Exited):
                    finished = True
                    yield _sse(_engine_error(event).body())
            if not finished:
                finished = True
                yield _sse(_engine_error(None).body())
            yield "data: [DONE]\n\n"
        finally:
            if not finished:
                with contextlib.suppress(Exception):
                    self.host.queue.cancel(job)


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _engine_error(event: Error | Exited | None) -> errors.ApiError:
    if event is None:
        return errors.ApiError(500, "the reply ended without a result", type="server_error")
    return errors.from_engine(event.kind, event.reason)
