"""A chat turn with tools: the model's calls (read from its own format, the ones the API reads;
a grammar holds it to a call where one is required), each asked of the user first, run on its
MCP server, its result given back, until the model answers without a call or the step limit.
Nothing runs without consent: `consent` is asked for every call not already allowed."""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from deskllm.engine.domain import ChatMessage, Sampling, TextDelta
from deskllm.engine.tool_calls import ToolCallStream, call_schema
from deskllm.tools.mcp_hub import McpHub, McpTool, ToolOutcome

MAX_STEPS = 8  # model replies in one turn; a loop of calls ends here
Decision = Literal["once", "always", "deny"]
ToolChoice = Literal["auto", "required", "none"]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    tool: McpTool | None  # None: the model named a tool that does not exist


@dataclass
class ToolTurn:
    """What a turn added to the conversation: the assistant's calls, the tools' results and
    the answer, in order; `error` when the model failed; `stopped` when cancelled."""

    messages: list[ChatMessage] = field(default_factory=list)
    calls: list[tuple[ToolCall, ToolOutcome]] = field(default_factory=list)
    answer: str = ""
    error: str | None = None
    stopped: bool = False
    step_limit_reached: bool = False


def run_tool_turn(
    backend: Any,
    conversation_id: str,
    messages: list[ChatMessage],
    sampling: Sampling,
    hub: McpHub,
    consent: Callable[[ToolCall], Decision],
    *,
    tool_choice: ToolChoice = "auto",
    allowed: set[str] | None = None,
    max_steps: int = MAX_STEPS,
    on_text: Callable[[str], None] | None = None,
    on_call: Callable[[ToolCall, Decision], None] | None = None,
    on_result: Callable[[ToolCall, ToolOutcome], None] | None = None,
    cancel: threading.Event | None = None,
) -> ToolTurn:
    """One turn of `messages` on `backend` (an EngineClient: chat with tools_json) with the
    hub's tools. `allowed`: tool names run without asking (grows with "always")."""
    tools = hub.tools() if tool_choice != "none" else []
    by_name = {t.name: t for t in tools}
    tools_json = json.dumps([t.openai() for t in tools]) if tools else None
    allowed = allowed if allowed is not None else set()
    history, turn = list(messages), ToolTurn()
    for step in range(max_steps):
        forced = tool_choice == "required" and step == 0 and bool(tools)
        schema = _any_call_schema(tools) if forced else sampling.json_schema
        reply = backend.chat(conversation_id, history, dataclasses.replace(
            sampling, json_schema=schema), tools_json=tools_json)  # fmt: skip
        calls_stream = ToolCallStream(set(by_name), forced) if tools else None
        for event in reply.events():
            if cancel is not None and cancel.is_set():
                reply.cancel()
            if isinstance(event, TextDelta) and not event.reasoning:
                text = calls_stream.feed(event.text) if calls_stream else event.text
                if text and on_text is not None:
                    on_text(text)
        if reply.error is not None:
            turn.error = str(reply.error)
            return turn
        if reply.finish_reason == "cancelled":
            turn.stopped = True
            return turn
        parsed = calls_stream.finish() if calls_stream else None
        if parsed is not None and parsed.content and on_text is not None:
            on_text(parsed.content)
        if parsed is None or not parsed.calls:
            turn.answer = reply.text  # (what streamed, and what the call parser held back)
            turn.messages.append(ChatMessage("assistant", turn.answer))
            return turn
        calls = [ToolCall(f"call_{uuid.uuid4().hex[:12]}", c.name, c.arguments_object(),
                          by_name.get(c.name)) for c in parsed.calls]  # fmt: skip
        said = ChatMessage("assistant", parsed.content or "", json.dumps([
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in calls]))  # fmt: skip
        history.append(said)
        turn.messages.append(said)
        for call in calls:
            outcome = _run(call, hub, consent, allowed, on_call, cancel)
            if cancel is not None and cancel.is_set():
                turn.stopped = True  # the call's result is discarded
                return turn
            turn.calls.append((call, outcome))
            if on_result is not None:
                on_result(call, outcome)
            result = ChatMessage("tool", outcome.text, tool_call_id=call.id, name=call.name)
            history.append(result)
            turn.messages.append(result)
    turn.step_limit_reached = True
    return turn


def _run(call: ToolCall, hub: McpHub, consent: Callable[[ToolCall], Decision],
         allowed: set[str], on_call, cancel) -> ToolOutcome:  # fmt: skip
    if call.tool is None:
        known = ", ".join(t.name for t in hub.tools()) or "none"
        return ToolOutcome(f"There is no tool named {call.name!r} (the tools: {known}).", True)
    decision: Decision = "once" if call.name in allowed else consent(call)
    if on_call is not None:
        on_call(call, decision)
    if decision == "deny":
        return ToolOutcome("The user denied this tool call; do not call it again for this "
                           "request. Answer without it.", True)  # fmt: skip
    if decision == "always":
        allowed.add(call.name)
    return hub.call(call.tool, call.arguments, cancel)


def _any_call_schema(tools: list[McpTool]) -> str:
    """A call to any of `tools`, as a grammar holds the reply to it."""
    schemas = [call_schema(t.name, t.parameters) for t in tools]
    return json.dumps(schemas[0] if len(schemas) == 1 else {"anyOf": schemas})
