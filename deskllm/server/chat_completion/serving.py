"""Chat completions: an OpenAI request → one engine reply → an OpenAI response or a stream of
chunks. No HTTP here: the router hands in the request and a disconnect check."""

from __future__ import annotations

import contextlib
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
from deskllm.server.engine_queue import ChatRequest, Job
from deskllm.server.model_host import ModelHost
from deskllm.server.models.serving import check_model, check_ready
from deskllm.server.replies import conversation_id, engine_error, final_reply, submit, utf8

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# Cancelled replies only happen when the client has gone; "stop" keeps the schema valid.
_FINISH = {"stop": "stop", "length": "length", "cancelled": "stop"}


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
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        # 0xFFFFFFFF is llama.cpp's "random": keep explicit seeds below it.
        seed=-1 if req.seed is None or req.seed < 0 else req.seed % 0xFFFFFFFF,
        max_tokens=max(1, min(max_tokens, n_ctx)),
        stop=tuple(utf8(s, "stop") for s in stops if s),
        ignore_eos=req.ignore_eos,
        json_schema=json_schema(req),
    )


def json_schema(req: ChatCompletionRequest) -> str | None:
    """The schema a reply must follow, as JSON text for the engine's grammar: json_object is
    any object; json_schema without a schema, any JSON value."""
    fmt = req.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return json.dumps({"type": "object"})
    if fmt.json_schema is None:
        raise errors.bad_request("response_format.json_schema is required for type json_schema.",
                                 param="response_format.json_schema")  # fmt: skip
    return json.dumps(fmt.json_schema.schema_ or {})


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


def check_supported(req: ChatCompletionRequest) -> None:
    """Refuse what this server cannot do rather than silently doing something else."""
    if req.n not in (None, 1):
        raise errors.bad_request("Only n=1 is supported.", param="n")
    if req.logprobs:
        raise errors.bad_request("logprobs are not supported yet.", param="logprobs")
    if req.tools:
        raise errors.bad_request("Tools are not supported yet.", param="tools")


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
        return submit(self.host, request)

    async def complete(
        self, req: ChatCompletionRequest, job: Job, disconnected: Callable[[], Awaitable[bool]]
    ) -> ChatCompletion:
        """The whole reply; a client that goes away while it waits cancels it."""
        final = await final_reply(self.host, job, disconnected)
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
                    yield _sse(engine_error(event).body())
            if not finished:
                finished = True
                yield _sse(engine_error(None).body())
            yield "data: [DONE]\n\n"
        finally:
            if not finished:
                with contextlib.suppress(Exception):
                    self.host.queue.cancel(job)


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
