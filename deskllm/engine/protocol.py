"""Typed messages between the engine client and its worker process (pickled over a pipe).

Requests go in: Load, Chat, Embed, Cancel, Forget, Unload, Status, Shutdown. Events come out
(the domain types of domain.py: LoadProgress, Loaded, TextDelta, Metrics, Done, Embeddings,
Error, StatusReport), with Heartbeat while the worker is busy; the client adds Exited when the
worker process dies or hangs. Many Chats are in flight at once (one per slot, more waiting), so
every event of a reply carries its request id; what one step of the engine gives all of them
comes as one StepEvents.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deskllm.engine.domain import ChatMessage, Event, LoadParams, Sampling


@dataclass(frozen=True)
class Load:
    """Load `params` with `n_slots` slots sharing one KV pool of n_slots × `params.n_ctx`
    cells (Loaded.n_ctx; Loaded.n_ctx_seq is the longest conversation)."""

    params: LoadParams
    n_slots: int = 1


@dataclass(frozen=True)
class Chat:
    request_id: int
    conversation_id: str
    messages: tuple[ChatMessage, ...]
    sampling: Sampling = field(default_factory=Sampling)
    # The last message is a partial assistant reply to go on with: the prompt is the turns
    # before it with the generation prompt, then its text, left open (no end-of-turn).
    continue_reply: bool = False
    # False: a conversation that does not fit the context fails with kind "context" after
    # tokenizing, before anything is evaluated, instead of leaving old turns out (the
    # router sends it to a larger model).
    drop_old_turns: bool = True
    # The tools the model may call (OpenAI's `tools` list as JSON text), given to the chat
    # template (see tool_prompt).
    tools_json: str | None = None
    # A text to continue as it is, without the chat template (the API's /v1/completions):
    # `messages` are then not used. A prompt that does not fit fails with kind "context".
    raw_prompt: str | None = None


@dataclass(frozen=True)
class Embed:
    """Pooled, unit-length embeddings of each text (the API's /v1/embeddings)."""

    request_id: int
    texts: tuple[str, ...]
    # Cut a text longer than the embedding window instead of failing (document chunks).
    truncate: bool = False


@dataclass(frozen=True)
class Cancel:
    """Stop one reply (waiting or running); it ends with Done(finish_reason="cancelled")."""

    request_id: int


@dataclass(frozen=True)
class Unload:
    pass


@dataclass(frozen=True)
class Status:
    pass


@dataclass(frozen=True)
class Shutdown:
    pass


@dataclass(frozen=True)
class Forget:
    """Drop a conversation's KV state from RAM and disk (the conversation was deleted)."""

    conversation_id: str


@dataclass(frozen=True)
class StepEvents:
    """Every reply's events from one step of the engine, in order, as one message: a message
    per event cost each side a wake-up and a pickle per stream per token, CPU time that two
    cores take from the decoding threads."""

    events: tuple[Event, ...]


@dataclass(frozen=True)
class Heartbeat:
    """Sent by a busy worker about once a second while it makes progress (prompt evaluation
    and loading can be silent for minutes); a silent worker is taken to hang."""


WorkerMessage = Event | StepEvents | Heartbeat
