"""RemoteModel: a model on one endpoint or on a pool of them, with the chat interface the
store's ChatSession drives (`chat(conversation_id, messages, sampling)`, `cancel()`), so a
remote reply is persisted while it streams exactly as a local one."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator

from deskllm.engine.domain import ChatMessage, Error, Event, Sampling
from deskllm.engine.errors import ErrorKind
from deskllm.engine.reply import Reply
from deskllm.remote.client import RemoteClient
from deskllm.remote.pool import RemotePool


class RemoteModel:
    """`label` is what the conversation records as its model: NAME/MODEL, or */MODEL for a
    pool (each reply's Metrics.engine names the endpoint that answered)."""

    def __init__(self, model: str, backend: RemoteClient | RemotePool, label: str) -> None:
        self.model = model
        self.backend = backend
        self.label = label
        self._lock = threading.Lock()
        self._current: Reply | None = None

    def chat(
        self,
        conversation_id: str,
        messages: list[ChatMessage] | tuple[ChatMessage, ...],
        sampling: Sampling | None = None,
        *,
        continue_reply: bool = False,
        tools_json: str | None = None,
    ) -> Reply:
        if continue_reply:
            return Reply(_refused("continuing a reply is not supported on remote endpoints"))
        # The conversation as `user`, hashed: servers that keep a cache per user (deskllm
        # serve) reuse this conversation's prefix, and no id of ours leaves the machine.
        user = "deskllm-" + hashlib.sha256(conversation_id.encode()).hexdigest()[:16]
        if isinstance(self.backend, RemotePool):
            reply = self.backend.chat(messages, sampling, user=user, tools_json=tools_json)
        else:
            reply = self.backend.chat(self.model, messages, sampling, user=user,
                                      tools_json=tools_json)  # fmt: skip
        with self._lock:
            self._current = reply
        return reply

    def cancel(self) -> None:
        """Stop the reply being streamed (its Reply ends with finish_reason "cancelled")."""
        with self._lock:
            reply = self._current
        if reply is not None:
            reply.cancel()

    def forget(self, conversation_id: str) -> None:
        """Nothing to drop: an endpoint's prompt cache is the server's own."""

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> RemoteModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refused(reason: str) -> Iterator[Event]:
    yield Error(None, reason, ErrorKind.REMOTE)
