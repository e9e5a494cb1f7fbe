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

from deskllm.engine.domain import ChatMessage, Event, Sampling, TextDelta
from deskllm.engine.reply import Reply
from deskllm.engine.tool_calls import ToolCallStream, call_schema, openai_calls
from deskllm.tools.mcp_hub import McpHub, McpTool, ToolOutcome

MAX_STEPS = 8  # model replies in one turn; a loop of calls ends here
Decision = Literal["once", "always", "deny", "allowed"]  # allowed: without asking
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
    last_reply: Reply | None = None  # the model's last reply (its figures, its outcome)


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
    on_event: Callable[[Event], None] | None = None,
    on_reply: Callable[[Reply, str, list[ToolCall]], None] | None = None,
) -> ToolTurn:
    """One turn of `messages` on `backend` (an EngineClient: chat with tools_json) with the
    hub's tools (`hub`: anything with McpHub's tools() and call()). `allowed`: tool names run
    without asking (grows with "always"). `on_event`: every event of each model reply as it
    comes, a call's text held back; `on_reply(reply, content, calls)`: a model reply ended
    (finished, stopped or failed), with its text outside the calls, before any call runs."""
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
        turn.last_reply = reply
        calls_stream = ToolCallStream(set(by_name), forced) if tools else None
        shown: list[str] = []  # the reply's text outside its calls
        for event in reply.events():
            if cancel is not None and cancel.is_set():
                reply.cancel()
            if isinstance(event, TextDelta) and not event.reasoning:
                text = calls_stream.feed(event.text) if calls_stream else event.text
                if not text:
                    continue
                shown.append(text)
                if on_text is not None:
                    on_text(text)
                event = dataclasses.replace(event, text=text)
            if on_event is not None:
                on_event(event)
        parsed = calls_stream.finish() if calls_stream else None
        if reply.error is not None or reply.finish_reason == "cancelled":
            if on_reply is not None:
                on_reply(reply, "".join(shown), [])
            turn.error = str(reply.error) if reply.error is not None else None
            turn.stopped = reply.error is None
            return turn
        if parsed is not None and parsed.content:
            shown.append(parsed.content)
            if on_text is not None:
                on_text(parsed.content)
            if on_event is not None:
                on_event(TextDelta(reply.done.request_id, parsed.content))
        if parsed is None or not parsed.calls:
            turn.answer = reply.text  # (what streamed, and what the call parser held back)
            turn.messages.append(ChatMessage("assistant", turn.answer))
            if on_reply is not None:
                on_reply(reply, turn.answer, [])
            return turn
        calls = [ToolCall(f"call_{uuid.uuid4().hex[:12]}", c.name, c.arguments_object(),
                          by_name.get(c.name)) for c in parsed.calls]  # fmt: skip
        content = "".join(shown).strip()
        if on_reply is not None:
            on_reply(reply, content, calls)
        said = ChatMessage("assistant", content,
                           openai_calls([(c.id, c.name, c.arguments) for c in calls]))
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
    decision: Decision = "allowed" if call.name in allowed else consent(call)
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
