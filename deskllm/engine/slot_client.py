"""SlotClient: one user's view of an engine that others use at the same time.

The window's chat goes through it while the local API server answers other clients from the
same engine (the same scheduler, the same slots). It has EngineClient's surface, but its
`cancel` stops only the replies asked through it (an API stream goes on), and
`restart`/`kill` act on the whole engine, as they say.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Loaded, LoadParams, Sampling, StatusReport
from deskllm.engine.reply import Reply


class SlotClient:
    def __init__(self, engine: EngineClient) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._replies: weakref.WeakSet[Reply] = weakref.WeakSet()

    @property
    def params(self) -> LoadParams | None:
        return self.engine.params

    @property
    def label(self) -> str | None:
        return self.engine.label

    @property
    def loaded(self) -> Loaded | None:
        return self.engine.loaded

    @property
    def crashes(self) -> int:
        return self.engine.crashes

    @property
    def pid(self) -> int | None:
        return self.engine.pid

    @property
    def n_slots(self) -> int:
        return self.engine.n_slots

    def load(
        self,
        params: LoadParams,
        on_progress: Callable[[float], None] | None = None,
        n_slots: int | None = None,
    ) -> Loaded:
        return self.engine.load(params, on_progress, n_slots)

    def status(self) -> StatusReport | None:
        return self.engine.status()

    def unload(self) -> None:
        self.engine.unload()

    def chat(
        self,
        conversation_id: str,
        messages: list[ChatMessage] | tuple[ChatMessage, ...],
        sampling: Sampling | None = None,
        **options,
    ) -> Reply:
        reply = self.engine.chat(conversation_id, messages, sampling, **options)
        with self._lock:
            self._replies.add(reply)
        return reply

    def embed(self, texts: list[str] | tuple[str, ...]):
        return self.engine.embed(texts)

    def cancel(self) -> None:
        """Stop this client's replies; the engine's other streams go on."""
        with self._lock:
            replies = list(self._replies)
        for reply in replies:
            reply.cancel()

    def forget(self, conversation_id: str) -> None:
        self.engine.forget(conversation_id)

    def kill(self) -> None:
        self.engine.kill()

    def restart(self, on_progress: Callable[[float], None] | None = None) -> Loaded | None:
        """A fresh engine with the same model and slots (every open stream ends)."""
        return self.engine.restart(on_progress)

    def close(self, timeout: float = 10.0) -> None:
        self.engine.close(timeout)
