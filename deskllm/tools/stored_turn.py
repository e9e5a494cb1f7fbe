"""A chat turn with tools, stored as it happens: the window's (and any stored
conversation's) way to run run_tool_turn. Each model reply is a stored assistant message
(written while it streams, its calls with it); each call's result a stored tool message with
the user's decision and its figures; the next turn's history is read back from them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from deskllm.engine.domain import Event, Sampling, TextDelta
from deskllm.engine.reply import Reply
from deskllm.store.chat_session import (
    ChatSession,
    history_messages,
    stored_outcome,
    with_sources,
)
from deskllm.store.conversations import Message, ReplyWriter
from deskllm.tools.mcp_hub import ToolOutcome
from deskllm.tools.tool_loop import MAX_STEPS, ToolCall, ToolTurn, run_tool_turn


def stored_tool_turn(
    session: ChatSession,
    conversation_id: str,
    hub: Any,
    consent: Callable[[ToolCall], str],
    *,
    allowed: set[str] | None = None,
    max_steps: int = MAX_STEPS,
    cancel: threading.Event | None = None,
    on_event: Callable[[Event], None] | None = None,
    on_stored: Callable[[Message], None] | None = None,
    on_call: Callable[[ToolCall, str], None] | None = None,
    failures: dict[str, str] | None = None,
) -> ToolTurn:
    """The assistant's turn to the conversation as stored, with `hub`'s tools (see
    run_tool_turn): each model reply is stored while it streams (its calls with it), each
    call's result as a tool message (with the user's decision and how long it took), in
    the order they happen. `on_stored(message)`: a reply or a result was stored.
    `failures`: {server: why} for servers that could not start, kept with the first reply."""
    store = session.store
    conversation = store.get(conversation_id)
    sampling = Sampling.from_dict(conversation.sampling)
    history = history_messages(conversation.system_prompt, store.messages(conversation_id))
    sources: list[dict] = []
    first: dict[str, Any] = {"tool_failures": failures} if failures else {}
    if session.retrieve is not None and history:
        history, sources = with_sources(
            history, lambda question: session.retrieve(conversation_id, question)
        )
    if sources:  # the passages the turn's first reply was given
        first["sources"] = sources
    model = session.client.label
    writer: ReplyWriter | None = None
    decisions: dict[str, str] = {}
    last_reply: list[int] = []  # the id of the last model reply stored

    def writing() -> ReplyWriter:
        nonlocal writer
        if writer is None:
            writer = store.begin_reply(conversation_id, model, asdict(sampling))
        return writer

    def event(e: Event) -> None:
        if isinstance(e, TextDelta):
            (writing().append_reasoning if e.reasoning else writing().append)(e.text)
        if on_event is not None:
            on_event(e)

    def replied(reply: Reply, content: str, calls: list[ToolCall]) -> None:
        nonlocal writer, first
        w = writing()
        w.set_text(content)
        status, metrics = stored_outcome(reply, w)
        metrics, first = metrics | first, {}
        w.finish(status, metrics, [
            {"id": c.id, "name": c.name, "arguments": c.arguments,
             "server": c.tool.server if c.tool else None} for c in calls])  # fmt: skip
        writer = None
        last_reply[:] = [w.message_id]
        if on_stored is not None:
            on_stored(store.get_message(w.message_id))

    def called(call: ToolCall, decision: str) -> None:
        decisions[call.id] = decision
        if on_call is not None:
            on_call(call, decision)

    def result(call: ToolCall, outcome: ToolOutcome) -> None:
        message = store.add_message(conversation_id, "tool", outcome.text,
                                    tool_call_id=call.id, metrics={
            "tool": call.name, "server": call.tool.server if call.tool else None,
            "decision": decisions.get(call.id), "is_error": outcome.is_error,
            "truncated": outcome.truncated, "seconds": round(outcome.seconds, 3)})  # fmt: skip
        if on_stored is not None:
            on_stored(message)

    choice = conversation.tools.get("choice", "auto")
    try:
        turn = run_tool_turn(
            session.client, conversation_id, history, sampling, hub, consent,
            tool_choice=choice if choice in ("auto", "required", "none") else "auto",
            allowed=allowed, max_steps=max_steps, cancel=cancel, on_event=event,
            on_reply=replied, on_call=called, on_result=result,
        )  # fmt: skip
        if turn.step_limit_reached and last_reply:  # said under the last reply
            message = store.get_message(last_reply[0])
            store.finish_message(message.id, message.content, message.status,
                                 message.metrics | {"tool_step_limit": max_steps})  # fmt: skip
        return turn
    finally:
        if writer is not None:  # the reader stopped listening mid-reply: keep it, marked
            session.client.cancel()
            writer.finish("interrupted", {})
