"""Anthropic's Messages API on the same engine queue as the OpenAI routes: a request → one
engine reply → a Message, or its stream of named server-sent events (message_start,
content_block_start / _delta / _stop, message_delta, message_stop). No HTTP here.

Tools go the chat completions' way (tool_choice.py, tool_calls.py): the tools are given to the
chat template as OpenAI functions, calls are read from the model's own format, `any` or a
named `tool` choice makes the reply a call by grammar. Calls come back as tool_use blocks; a
user turn's tool_result blocks go to the model as tool messages."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from deskllm.engine.backend import ChatBackend
from deskllm.engine.domain import ChatMessage, Done, Error, Exited, Metrics, Sampling, TextDelta
from deskllm.engine.tool_calls import (
    ParsedReply,
    ToolCallStream,
)
from deskllm.server import errors
from deskllm.server.chat_completion.tool_choice import NO_TOOLS, ToolPlan, tool_plan
from deskllm.server.engine_queue import ChatRequest, Job
from deskllm.server.messages.protocol import (
    Message,
    MessagesRequest,
    MessagesUsage,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from deskllm.server.model_host import ModelHost
from deskllm.server.models.serving import check_gateway_request, check_target
from deskllm.server.replies import (
    answering_model,
    cancel,
    conversation_id,
    engine_error,
    final_reply,
    submit,
    utf8,
)


def to_sampling(req: MessagesRequest, n_ctx: int, plan: ToolPlan = NO_TOOLS) -> Sampling:
    d = Sampling()
    return Sampling(
        temperature=d.temperature if req.temperature is None else req.temperature,
        top_p=d.top_p if req.top_p is None else req.top_p,
        top_k=d.top_k if req.top_k is None else req.top_k,
        max_tokens=max(1, min(req.max_tokens, n_ctx)),
        stop=tuple(utf8(s, "stop_sequences") for s in req.stop_sequences or () if s),
        json_schema=plan.forced_schema,
        ignore_eos=req.ignore_eos,
        think=None if req.thinking is None else ("off" if req.thinking.type == "disabled"
                                                 else "on"),
        reasoning_budget=req.thinking.budget_tokens or 0 if req.thinking else 0,
    )


def to_messages(req: MessagesRequest) -> tuple[ChatMessage, ...]:
    """Anthropic keeps the system prompt out of the turns; the engine takes it as the first.
    A user turn's tool results become tool messages before its text; an assistant turn's
    tool_use blocks, its calls."""
    system = req.system_text()
    turns = [ChatMessage("system", utf8(system, "system"))] if system else []
    for i, m in enumerate(req.messages):
        where = f"messages.{i}.content"
        text = utf8(m.text(), where)
        results, uses = m.blocks(ToolResultBlock), m.blocks(ToolUseBlock)
        if m.role == "user":
            if uses:
                raise errors.bad_request("A user turn cannot hold tool_use blocks.", param=where)
            turns += [ChatMessage("tool", utf8(r.text(), where), tool_call_id=r.tool_use_id)
                      for r in results]  # fmt: skip
            if text or not results:
                turns.append(ChatMessage("user", text))
            continue
        if results:
            raise errors.bad_request("An assistant turn cannot hold tool_result blocks.",
                                     param=where)  # fmt: skip
        calls = [
            {
                "id": u.id,
                "type": "function",
                "function": {"name": u.name, "arguments": json.dumps(u.input)},
            }
            for u in uses
        ]
        turns.append(ChatMessage("assistant", text, json.dumps(calls) if calls else None))
    return tuple(turns)


def plan_tools(req: MessagesRequest) -> ToolPlan:
    """Raises ApiError (400) for a tool_choice that cannot be met."""
    choice = req.tool_choice.type if req.tool_choice else "auto"
    if not req.tools:
        if choice not in ("auto", "none"):
            raise errors.bad_request("tool_choice needs tools.", param="tool_choice")
        return NO_TOOLS
    parameters = {t.name: t.input_schema for t in req.tools}
    if len(parameters) < len(req.tools):
        raise errors.bad_request("Two tools have the same name.", param="tools")
    if choice == "none":
        return NO_TOOLS
    functions = [{"type": "function", "function": {
        "name": t.name, "description": t.description or "", "parameters": t.input_schema}}
        for t in req.tools]  # fmt: skip
    tools_json = json.dumps(functions)
    if choice == "auto":
        plan = tool_plan(tools_json, parameters)
    elif choice == "any":
        plan = tool_plan(tools_json, parameters, required=True)
    else:
        plan = tool_plan(tools_json, parameters, name=req.tool_choice.name or "")
    one = bool(req.tool_choice and req.tool_choice.disable_parallel_tool_use)
    return dataclasses.replace(plan, one_call=one)


def tool_uses(parsed: ParsedReply) -> list[ToolUseBlock]:
    """The calls as tool_use blocks; arguments that are not a JSON object are given whole."""
    return [ToolUseBlock(id=f"toolu_{uuid.uuid4().hex[:24]}", name=call.name,
                         input=call.arguments_object()) for call in parsed.calls]  # fmt: skip


def stop_reason(done: Done, calls: bool = False) -> StopReason:
    if done.finish_reason == "shutdown":
        return "shutdown"
    if calls:
        return "tool_use"
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

    def admit(
        self, req: MessagesRequest, backend: ChatBackend | None = None
    ) -> tuple[Job, ToolPlan]:
        """Check the request and queue it: raises ApiError (400, 404, 429, 503). Returns the
        job and what its tools ask, for complete() or stream(). `backend`: what answers a
        gateway name (ModelHost.use), None for the served model."""
        target = self.host.target(req.model) if backend is None else self.host
        n_ctx = check_target(target, req.model, backend)
        plan = plan_tools(req)
        if backend is not None:
            check_gateway_request(req.model, tools=bool(req.tools), response_format=False,
                                  logprobs=False)  # fmt: skip
        user = req.metadata.user_id if req.metadata else None
        request = ChatRequest(
            conversation_id(user),
            to_messages(req),
            to_sampling(req, n_ctx, plan),
            tools_json=plan.tools_json,
            backend=backend,
        )
        return submit(target, request), plan

    async def complete(
        self,
        req: MessagesRequest,
        job: Job,
        plan: ToolPlan,
        disconnected: Callable[[], Awaitable[bool]],
    ) -> Message:
        done = await final_reply(self.host, job, disconnected)
        parsed = plan.read(done.text)
        uses = tool_uses(parsed)
        content: list = [TextBlock(text=parsed.content or "")] if parsed.content or not uses else []
        if done.reasoning:
            content.insert(0, ThinkingBlock(thinking=done.reasoning))
        return Message(
            id=f"msg_{uuid.uuid4().hex}",
            content=content + uses,
            model=answering_model(self.host, job),
            stop_reason=stop_reason(done, bool(uses)),
            stop_sequence=None if uses else done.stop_string,
            usage=usage(done.metrics),
        )

    async def stream(self, req: MessagesRequest, job: Job, plan: ToolPlan) -> AsyncIterator[str]:
        """The event sequence of Anthropic's streaming API; an engine failure mid-stream is an
        `error` event. Closing the generator (client gone) cancels the reply. With tools,
        text from where a call may begin is held back; each call is a tool_use block after
        the text, its input in one input_json_delta."""
        start = Message(
            id=f"msg_{uuid.uuid4().hex}", content=[], model=answering_model(self.host, job),
            stop_reason=None, usage=MessagesUsage(input_tokens=0, output_tokens=0),
        )  # fmt: skip
        calls = ToolCallStream(plan.names, plan.forced) if plan.parse_calls else None
        # Blocks in order: a reasoning model's thinking, the text, then each call.
        text_open, thinking_open, index = False, False, 0

        def text_delta(text: str) -> str:
            return _event("content_block_delta",
                          {"index": index, "delta": {"type": "text_delta", "text": text}})

        def end_thinking() -> str:
            nonlocal thinking_open, index
            thinking_open, index = False, index + 1
            return _event("content_block_stop", {"index": index - 1})

        finished = False
        try:
            yield _event("message_start", {"message": start.model_dump()})
            async for event in job.stream():
                if isinstance(event, TextDelta) and event.reasoning:
                    if event.text and not thinking_open and not text_open:
                        thinking_open = True
                        block = {"type": "thinking", "thinking": "", "signature": ""}
                        yield _event("content_block_start",
                                     {"index": index, "content_block": block})  # fmt: skip
                    if event.text and thinking_open:
                        yield _event("content_block_delta", {"index": index, "delta": {
                            "type": "thinking_delta", "thinking": event.text}})  # fmt: skip
                elif isinstance(event, TextDelta):
                    text = calls.feed(event.text) if calls is not None else event.text
                    if text and thinking_open:
                        yield end_thinking()
                    if text and not text_open:
                        text_open = True
                        yield _text_block_start(index)
                    if text:
                        yield text_delta(text)
                elif isinstance(event, Done):
                    finished = True
                    parsed = (
                        plan.limit(calls.finish()) if calls is not None else ParsedReply(None, ())
                    )
                    uses = tool_uses(parsed)
                    if thinking_open:
                        yield end_thinking()
                    if (parsed.content or not uses) and not text_open:
                        text_open = True
                        yield _text_block_start(index)
                    if parsed.content:
                        yield text_delta(parsed.content)
                    if text_open:
                        yield _event("content_block_stop", {"index": index})
                        index += 1
                    for i, use in enumerate(uses, start=index):
                        block = use.model_dump() | {"input": {}}
                        yield _event("content_block_start", {"index": i, "content_block": block})
                        delta = {"type": "input_json_delta", "partial_json": json.dumps(use.input)}
                        yield _event("content_block_delta", {"index": i, "delta": delta})
                        yield _event("content_block_stop", {"index": i})
                    end = {"stop_reason": stop_reason(event, bool(uses)),
                           "stop_sequence": None if uses else event.stop_string}  # fmt: skip
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
                    cancel(job)


def _text_block_start(index: int) -> str:
    return _event(
        "content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}
    )


def _event(name: str, data: dict) -> str:
    body = json.dumps({"type": name, **data}, ensure_ascii=False)
    return f"event: {name}\ndata: {body}\n\n"


def _error_event(error: errors.ApiError) -> str:
    return f"event: error\ndata: {json.dumps(error.anthropic_body(), ensure_ascii=False)}\n\n"
