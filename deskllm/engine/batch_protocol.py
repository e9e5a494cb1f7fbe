"""Requests of the batched engine (batch_worker) that the single-stream protocol lacks.

Everything else is engine/protocol.py's: requests Chat, Status, Shutdown; events LoadProgress,
Loaded, TextDelta, Metrics, Done, Error, StatusReport, Heartbeat. Many Chats are in flight at
once, so every event of a reply carries its request id; what one step gives all of them comes
as one StepEvents.
"""

from __future__ import annotations

from dataclasses import dataclass

from deskllm.engine.protocol import Event, LoadParams


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


@dataclass(frozen=True)
class StepEvents:
    """Every reply's events from one step of the engine, in order, as one message: a message
    per event cost each side a wake-up and a pickle per stream per token, CPU time that two
    cores take from the decoding threads."""

    events: tuple[Event, ...]
