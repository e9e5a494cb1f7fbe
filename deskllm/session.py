"""ChatSession: one conversation turn, end to end, shared by the CLI and the GUI.

Persist before acting: the user's message is committed before the engine is asked; the reply is
written while it streams and ends complete, interrupted (stopped, or the engine died) or error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict

from deskllm.engine.client import EngineClient
from deskllm.engine.protocol import (
    ChatMessage,
    Done,
    Error,
    Event,
    Exited,
    Metrics,
    Sampling,
    TextDelta,
)
from deskllm.store.conversations import ConversationStore, Message


def history_messages(system_prompt: str, messages: list[Message]) -> list[ChatMessage]:
    """What the model sees: the system prompt, then the finished turns (errors left out)."""
    out = [ChatMessage("system", system_prompt)] if system_prompt else []
    for m in messages:
        if m.role in ("user", "assistant") and m.status != "error" and m.content:
            out.append(ChatMessage(m.role, m.content))
    return out


class ChatSession:
    def __init__(self, client: EngineClient, store: ConversationStore) -> None:
        self.client = client
        self.store = store

    def send(
        self, conversation_id: str, text: str, sampling: Sampling | None = None
    ) -> Iterator[Event]:
        """Commit the user's message, then stream the reply (see `reply`)."""
        self.store.add_message(conversation_id, "user", text)
        yield from self.reply(conversation_id, sampling)

    def reply(self, conversation_id: str, sampling: Sampling | None = None) -> Iterator[Event]:
        """Generate the assistant's reply to the conversation as stored. Yields the engine's
        events; the final Done / Error / Exited comes after the reply is saved."""
        conversation = self.store.get(conversation_id)
        sampling = sampling or Sampling.from_dict(conversation.sampling)
        history = history_messages(conversation.system_prompt, self.store.messages(conversation_id))
        model = self.client.params.model_path if self.client.params else None
        writer = self.store.begin_reply(conversation_id, model, asdict(sampling))
        last_metrics: Metrics | None = None
        try:
            for event in self.client.chat(conversation_id, history, sampling):
                if isinstance(event, TextDelta):
                    writer.append(event.text)
                elif isinstance(event, Metrics):
                    last_metrics = event
                elif isinstance(event, Done):
                    status = "interrupted" if event.finish_reason == "cancelled" else "complete"
                    details = asdict(event.metrics) | {
                        "finish_reason": event.finish_reason,
                        "dropped_messages": event.dropped_messages,
                        "warnings": list(event.warnings),
                    }
                    writer.finish(status, details)
                elif isinstance(event, Error):
                    writer.finish(
                        "error" if not writer.text else "interrupted", {"error": event.message}
                    )
                elif isinstance(event, Exited):
                    details = asdict(last_metrics) if last_metrics else {}
                    writer.finish("interrupted", details | {"error": event.reason})
                yield event
        finally:
            if self.store.get_message(writer.message_id).status == "streaming":
                # The consumer stopped listening (window closed): keep what came, marked.
                self.client.cancel()
                writer.finish("interrupted", asdict(last_metrics) if last_metrics else {})
