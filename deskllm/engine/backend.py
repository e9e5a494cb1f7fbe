"""ChatBackend: the one way every face talks to a model. The local engine's client
(`EngineClient`, and `SlotClient` for the window's share of it), a remote model on one
endpoint or a pool of them (`RemoteModel`) and the router (`Router`) all answer to it, so
`ChatSession`, the CLI and the server hold a ChatBackend and never ask which one it is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from deskllm.engine.domain import ChatMessage, Sampling
from deskllm.engine.reply import Reply


class ChatBackend(Protocol):
    @property
    def label(self) -> str | None:
        """What a conversation records as its model: a local file's path, NAME/MODEL,
        */MODEL or "auto" (None: nothing is loaded)."""
        ...

    def chat(
        self,
        conversation_id: str,
        messages: Sequence[ChatMessage],
        sampling: Sampling | None = None,
        *,
        continue_reply: bool = False,
    ) -> Reply:
        """One reply, streaming as it is read; failures end it with an Error event."""
        ...

    def cancel(self) -> None:
        """Stop the replies this backend is streaming (each ends as "cancelled")."""
        ...

    def forget(self, conversation_id: str) -> None:
        """Drop what is kept for a conversation (its KV state; nothing for a remote)."""
        ...

    def close(self) -> None: ...
