"""Requests of the batched engine (batch_worker) that the single-stream protocol lacks.

Everything else is engine/protocol.py's: requests Chat, Status, Shutdown; events LoadProgress,
Loaded, TextDelta, Metrics, Done, Error, StatusReport, Heartbeat. Many Chats are in flight at
once, so every event of a reply carries its request id.
"""

from __future__ import annotations

from dataclasses import dataclass

from deskllm.engine.protocol import LoadParams


@dataclass(frozen=True)
class BatchLoad:
    """Load `params` with `n_slots` slots of `params.n_ctx` tokens each (one context holds
    them all: Loaded.n_ctx is n_slots × the per-slot context)."""

    params: LoadParams
    n_slots: int


@dataclass(frozen=True)
class CancelRequest:
    """Stop one reply (waiting or running); it ends with Done(finish_reason="cancelled")."""

    request_id: int
