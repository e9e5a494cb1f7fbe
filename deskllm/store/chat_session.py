"""ChatSession: one conversation turn, end to end, shared by the CLI and the GUI.

Persist before acting: the user's message is committed before the engine is asked; the reply is
written while it streams and ends complete, interrupted (stopped, or the engine died) or error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from typing import Any

from deskllm.documents.search import Hit, sources_prompt
from deskllm.engine.backend import ChatBackend
from deskllm.engine.domain import ChatMessage, Event, Sampling, TextDelta
from deskllm.engine.errors import ErrorKind
from deskllm.engine.reply import Reply
from deskllm.engine.tool_calls import openai_calls
from deskllm.store.conversations import ConversationStore, Message, ReplyWriter


def history_messages(system_prompt: str, messages: list[Message]) -> list[ChatMessage]:
    """What the model sees: the system prompt, then the finished turns (errors left out),
    tool calls with their results (a call whose result was discarded, by a Stop, is left out:
    templates want an answer to every call)."""
    out = [ChatMessage("system", system_prompt)] if system_prompt else []
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    for m in messages:
        if m.role == "tool":
            out.append(ChatMessage("tool", m.content, tool_call_id=m.tool_call_id,
                                   name=m.metrics.get("tool")))  # fmt: skip
            continue
        calls = [c for c in m.tool_calls if c.get("id") in answered]
        if m.role in ("user", "assistant") and m.status != "error" and (m.content or calls):
            said = openai_calls([(c["id"], c["name"], c.get("arguments", {})) for c in calls])
            out.append(ChatMessage(m.role, m.content, said if calls else None))
    return out


def stored_outcome(reply: Reply, writer: ReplyWriter) -> tuple[str, dict[str, Any]]:
    """The status and figures a finished Reply is stored with."""
    metrics = asdict(reply.metrics) if reply.metrics else {}
    if reply.done is not None:
        done = reply.done
        status = "interrupted" if done.finish_reason == "cancelled" else "complete"
        thinking = ({"reasoning_tokens": done.reasoning_tokens, "reasoning_s": done.reasoning_s}
                    if done.reasoning_tokens else {})  # fmt: skip
        return status, metrics | thinking | {
            "finish_reason": done.finish_reason,
            "dropped_messages": done.dropped_messages,
            "warnings": list(done.warnings),
        }
    error = reply.error
    reason = error.reason if error else "the reply ended without a result"
    kind = error.kind if error else ErrorKind.ERROR
    details = {"error": reason, "error_kind": str(kind)}
    if kind in (ErrorKind.EXITED, ErrorKind.HUNG, ErrorKind.DROPPED, ErrorKind.TIMEOUT):
        return "interrupted", metrics | details  # what came before the engine died is kept
    return ("interrupted" if writer.text else "error"), details


def continued_metrics(before: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    """The figures of a reply continued in place. Speeds, time to first token, the prompt and
    the context are the last part's: they describe what the user just waited for, and a
    speed averaged over parts run at different times would describe nothing. The token count
    is the whole reply's (every part added up), `continued` counts the continuations, and an
    error of an earlier part is dropped (this part's outcome is the message's)."""
    merged = {k: v for k, v in before.items() if k not in ("error", "error_kind")} | part
    tokens = before.get("generated_tokens", 0) + part.get("generated_tokens", 0)
    merged["generated_tokens"] = tokens
    merged["continued"] = before.get("continued", 0) + 1
    return merged


def with_sources(
    history: list[ChatMessage], retrieve: Callable[[str], Sequence[Hit]]
) -> tuple[list[ChatMessage], list[dict]]:
    """The history with the passages found for its last user message put in that message
    (not in the system prompt: the cached prompt of earlier turns stays valid), and the
    passages as stored with the reply."""
    last = history[-1]
    if last.role != "user":
        return history, []
    hits = list(retrieve(last.content))
    if not hits:
        return history, []
    content = f"{sources_prompt(hits)}\n\nQuestion: {last.content}"
    return history[:-1] + [replace(last, content=content)], [h.as_json() for h in hits]


class ContinueError(ValueError):
    """The conversation has no reply to continue (its last message is not an assistant reply
    with text)."""


class ChatSession:
    """`client`: any ChatBackend (the local engine, a remote model, the router): its replies
    are stored alike, each under the backend's label as its model."""

    def __init__(
        self,
        client: ChatBackend,
        store: ConversationStore,
        retrieve: Callable[[str, str], Sequence[Hit]] | None = None,
    ) -> None:
        self.client = client
        self.store = store
        # retrieve(conversation id, question): the passages of the user's documents for a
        # question; they go into that turn's prompt as numbered sources, stored with the reply.
        self.retrieve = retrieve

    def send(self, conversation_id: str, text: str, sampling: Sampling | None = None) -> Reply:
        """Commit the user's message now, then the reply (see `reply`)."""
        self.store.add_message(conversation_id, "user", text)
        return self.reply(conversation_id, sampling)

    def reply(self, conversation_id: str, sampling: Sampling | None = None) -> Reply:
        """The assistant's reply to the conversation as stored, saved while it streams; its
        final event comes after the reply is saved."""
        return Reply(self._stored_events(conversation_id, sampling), self.client.cancel)

    def continue_reply(self, conversation_id: str, sampling: Sampling | None = None) -> Reply:
        """Go on with the conversation's last reply (an interrupted one) in place: the model
        gets the turns before it and its text as the open start of its turn, and what it
        writes is appended to the same stored message, saved while it streams. The Reply's
        text is the new part only. Raises ContinueError when there is no reply to continue."""
        messages = self.store.messages(conversation_id)
        last = messages[-1] if messages else None
        if last is None or last.role != "assistant" or not last.content:
            raise ContinueError("the conversation's last message is not a reply to continue")
        if last.status in ("streaming", "error"):
            raise ContinueError(f"the last reply is {last.status}; it cannot be continued")
        events = self._stored_events(conversation_id, sampling, continued=last)
        return Reply(events, self.client.cancel)

    def _stored_events(
        self, conversation_id: str, sampling: Sampling | None, continued: Message | None = None
    ) -> Iterator[Event]:
        conversation = self.store.get(conversation_id)
        sampling = sampling or Sampling.from_dict(conversation.sampling)
        history = history_messages(conversation.system_prompt, self.store.messages(conversation_id))
        model = self.client.label
        sources: list[dict] = []
        if self.retrieve is not None and continued is None and history:
            history, sources = with_sources(
                history, lambda question: self.retrieve(conversation_id, question)
            )
        if continued is None:
            writer = self.store.begin_reply(conversation_id, model, asdict(sampling))
        else:
            writer = self.store.resume_reply(continued.id)

        def finish(status: str, metrics: dict[str, Any]) -> None:
            if continued is not None:
                metrics = continued_metrics(continued.metrics, metrics)
            if sources:
                metrics = metrics | {"sources": sources}
            writer.finish(status, metrics)

        engine_reply = self.client.chat(
            conversation_id, history, sampling, continue_reply=continued is not None
        )
        try:
            for event in engine_reply.events():
                if isinstance(event, TextDelta) and event.reasoning:
                    writer.append_reasoning(event.text)
                elif isinstance(event, TextDelta):
                    writer.append(event.text)
                elif engine_reply.final is not None:
                    finish(*stored_outcome(engine_reply, writer))
                yield event
        finally:
            if self.store.get_message(writer.message_id).status == "streaming":
                # The reader stopped listening (window closed, Ctrl+C): keep what came, marked.
                self.client.cancel()
                metrics = asdict(engine_reply.metrics) if engine_reply.metrics else {}
                finish("interrupted", metrics)
