"""Chat completions: an OpenAI request → one engine reply → an OpenAI response or a stream of
chunks. No HTTP here: the router hands in the request and a disconnect check."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from deskllm.engine.backend import ChatBackend
from deskllm.engine.domain import (
    ChatMessage,
    Done,
    Error,
    Exited,
    Metrics,
    PromptProgress,
    Sampling,
    TextDelta,
)
from deskllm.engine.tool_calls import ParsedReply, ToolCallStream
from deskllm.server import errors
from deskllm.server.chat_completion.protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    DeltaToolCall,
    FunctionCall,
    PromptProgressBody,
    Timings,
    ToolCall,
    Usage,
)
from deskllm.server.chat_completion.tool_choice import ToolPlan, plan_tools
from deskllm.server.engine_queue import ChatRequest, Job
from deskllm.server.logprobs import chat_logprobs
from deskllm.server.model_host import ModelHost
from deskllm.server.models.serving import check_gateway_request, check_target
from deskllm.server.replies import (
    answering_model,
    cancel,
    conversation_id,
    engine_error,
    final_reply,
    sse,
    submit,
    utf8,
)

_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
# Cancelled replies only happen when the client has gone; "stop" keeps the schema valid.
# "shutdown": the server stopped while it wrote (SIGTERM past --shutdown-grace).
# The engine's finish reasons as the APIs say them (text completions and Ollama's done_reason
# too): a reply cut by a full context is a length; a cancelled one only happens when the
# client has gone.
FINISH = {"stop": "stop", "length": "length", "context_full": "length", "cancelled": "stop",
          "shutdown": "shutdown"}  # fmt: skip


def to_sampling(req: ChatCompletionRequest, n_ctx: int, plan: ToolPlan | None = None) -> Sampling:
    """The engine's Sampling for a request; unset fields keep deskllm's defaults. max_tokens
    is capped by the context; unset, the reply may fill it. A forced tool call's schema
    takes the place of response_format's."""
    think, budget = reasoning_of(req)
    return dataclasses.replace(
        common_sampling(req, req.max_completion_tokens or req.max_tokens, n_ctx),
        json_schema=plan.forced_schema if plan and plan.forced else json_schema(req),
        token_logprobs=bool(req.logprobs),
        top_logprobs=(req.top_logprobs or 0) if req.logprobs else 0,
        think=think,
        reasoning_budget=budget,
        split_reasoning=req.reasoning_format != "none",
    )


def reasoning_of(req: ChatCompletionRequest) -> tuple[str | None, int]:
    """Sampling.think and reasoning_budget from the request: reasoning_budget 0 or
    reasoning_effort none/minimal turn thinking off, an effort is given to the template,
    chat_template_kwargs' enable_thinking says on or off."""
    think: str | None = None
    kwargs = req.chat_template_kwargs or {}
    if isinstance(kwargs.get("enable_thinking"), bool):
        think = "on" if kwargs["enable_thinking"] else "off"
    if req.reasoning_effort is not None:
        think = "off" if req.reasoning_effort in ("none", "minimal") else req.reasoning_effort
    budget = req.reasoning_budget
    if budget == 0:
        think = "off"
    return think, budget if budget and budget > 0 else 0


def common_sampling(req: Any, max_tokens: int | None, n_ctx: int) -> Sampling:
    """The sampling fields chat and text completions share (same names in both requests)."""
    d = Sampling()
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
        max_tokens=max(1, min(max_tokens or n_ctx, n_ctx)),
        stop=tuple(utf8(s, "stop") for s in stops if s),
        ignore_eos=req.ignore_eos,
        speculation=req.speculation,
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
                f"messages[{i}]: role {m.role!r} is not supported (use tool messages).",
                param=f"messages[{i}].role",
            )
        calls = None
        if m.tool_calls and role == "assistant":
            calls = json.dumps([c.model_dump(exclude_none=True) for c in m.tool_calls])
        if role == "tool" and not m.tool_call_id:
            raise errors.bad_request(f"messages[{i}]: a tool message needs tool_call_id.",
                                     param=f"messages[{i}].tool_call_id")  # fmt: skip
        content = utf8(m.text(), f"messages[{i}].content")
        messages.append(ChatMessage(role, content, calls, m.tool_call_id, m.name))
    return tuple(messages)


def check_supported(req: ChatCompletionRequest) -> None:
    """Refuse what this server cannot do rather than silently doing something else."""
    if req.n not in (None, 1):
        raise errors.bad_request("Only n=1 is supported.", param="n")
    if req.top_logprobs and not req.logprobs:
        raise errors.bad_request("top_logprobs needs logprobs: true.", param="top_logprobs")


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
        draft_n=m.draft_n,
        draft_n_accepted=m.draft_n_accepted,
    )


class ChatCompletionServing:
    def __init__(self, host: ModelHost) -> None:
        self.host = host

    def admit(
        self, req: ChatCompletionRequest, backend: ChatBackend | None = None
    ) -> tuple[Job, ToolPlan]:
        """Check the request and queue it: raises ApiError (400, 404, 429, 503). Returns the
        job and what its tools ask, for complete() or stream(). `backend`: what answers a
        gateway name (ModelHost.use), None for the served model."""
        target = self.host.target(req.model) if backend is None else self.host
        n_ctx = check_target(target, req.model, backend)
        check_supported(req)
        plan = plan_tools(req)
        if backend is not None:
            fmt = req.response_format
            check_gateway_request(req.model, tools=bool(req.tools),
                                  response_format=fmt is not None and fmt.type != "text",
                                  logprobs=bool(req.logprobs))  # fmt: skip
        request = ChatRequest(
            conversation_id(req.user),
            to_messages(req),
            to_sampling(req, n_ctx, plan),
            tools_json=plan.tools_json,
            backend=backend,
        )
        return submit(target, request), plan

    async def complete(
        self,
        req: ChatCompletionRequest,
        job: Job,
        plan: ToolPlan,
        disconnected: Callable[[], Awaitable[bool]],
    ) -> ChatCompletion:
        """The whole reply; a client that goes away while it waits cancels it."""
        entries: list = []
        final = await final_reply(
            self.host, job, disconnected, lambda delta: entries.extend(delta.logprobs)
        )
        finish = FINISH.get(final.finish_reason, "stop")
        parsed = plan.read(final.text)
        if parsed.calls:
            finish = "tool_calls"
        message = AssistantMessage(content=parsed.content, tool_calls=_calls(parsed) or None,
                                   reasoning_content=final.reasoning or None)  # fmt: skip
        return ChatCompletion(
            id=f"chatcmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=answering_model(self.host, job),
            choices=[
                Choice(
                    message=message,
                    finish_reason=finish,
                    logprobs=chat_logprobs(entries) if req.logprobs else None,
                )
            ],
            usage=usage(final.metrics),
            timings=timings(final.metrics),
        )

    async def stream(
        self, req: ChatCompletionRequest, job: Job, plan: ToolPlan
    ) -> AsyncIterator[str]:
        """Server-sent events: a role chunk, text chunks, the finish chunk, a usage chunk if
        asked, then `data: [DONE]`. With `return_progress`, while a long prompt is read,
        chunks with an empty delta and `prompt_progress` (llama-server's). Closing the
        generator (client gone) cancels the reply.
        With tools, text from where a call may begin is held back; calls come whole, in one
        chunk, before the finish chunk."""
        chunk_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        calls = ToolCallStream(plan.names, plan.forced) if plan.parse_calls else None
        model = answering_model(self.host, job)

        def chunk(
            delta: Delta, finish: str | None = None, logprobs: ChoiceLogprobs | None = None
        ) -> str:
            body = ChatCompletionChunk(
                id=chunk_id, created=created, model=model,
                choices=[ChunkChoice(delta=delta, finish_reason=finish, logprobs=logprobs)],
            )  # fmt: skip
            return sse(body.model_dump(exclude_none=True))

        finished = False
        try:
            yield chunk(Delta(role="assistant", content=""))
            async for event in job.stream():
                if isinstance(event, TextDelta) and event.reasoning:
                    if event.text:
                        yield chunk(Delta(reasoning_content=event.text))
                elif isinstance(event, TextDelta):
                    text = calls.feed(event.text) if calls is not None else event.text
                    logprobs = chat_logprobs(event.logprobs) if req.logprobs else None
                    if text or logprobs is not None:
                        yield chunk(Delta(content=text or None), logprobs=logprobs)
                elif isinstance(event, PromptProgress):
                    if req.return_progress:
                        yield progress_chunk(chunk_id, created, model, event)
                elif isinstance(event, Done):
                    finished = True
                    finish = FINISH.get(event.finish_reason, "stop")
                    if calls is not None:
                        parsed = plan.limit(calls.finish())
                        if parsed.content:
                            yield chunk(Delta(content=parsed.content))
                        if parsed.calls:
                            finish = "tool_calls"
                            deltas = [
                                DeltaToolCall(index=i, **c.model_dump())
                                for i, c in enumerate(_calls(parsed))
                            ]
                            yield chunk(Delta(tool_calls=deltas))
                    yield chunk(Delta(), finish)
                    include = req.stream_options is not None and req.stream_options.include_usage
                    if include:
                        body = ChatCompletionChunk(
                            id=chunk_id, created=created, model=model, choices=[],
                            usage=usage(event.metrics), timings=timings(event.metrics),
                        )  # fmt: skip
                        yield sse(body.model_dump(exclude_none=True))
                elif isinstance(event, Error | Exited):
                    finished = True
                    yield sse(engine_error(event).body())
            if not finished:
                finished = True
                yield sse(engine_error(None).body())
            yield "data: [DONE]\n\n"
        finally:
            if not finished:
                with contextlib.suppress(Exception):
                    cancel(job)


def progress_chunk(chunk_id: str, created: int, model: str, event: PromptProgress) -> str:
    body = ChatCompletionChunk(
        id=chunk_id, created=created, model=model,
        choices=[ChunkChoice(delta=Delta(role="assistant"))],
        prompt_progress=PromptProgressBody(
            total=event.total, cache=event.cache, processed=event.processed,
            time_ms=round(event.seconds * 1000, 1),
        ),
    )  # fmt: skip
    return sse(body.model_dump(exclude_none=True))


def _calls(parsed: ParsedReply) -> list[ToolCall]:
    return [
        ToolCall(
            id=f"call_{uuid.uuid4().hex[:24]}",
            function=FunctionCall(name=c.name, arguments=c.arguments),
        )  # fmt: skip
        for c in parsed.calls
    ]

