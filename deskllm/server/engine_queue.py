"""EngineQueue: admits API requests to the engine, up to `slots` running at once (`deskllm
serve --parallel N`; 1: one at a time) and `max_waiting` more waiting; one more is refused
with QueueFull. A job cancelled while it waits never reaches the engine; one cancelled while
it runs stops its reply (by its request id), so a waiting job takes its slot at once.

A running job holds one thread of a pool of `slots` threads (its slot) while the engine
interleaves the jobs' tokens. The thread only starts the reply and sleeps until it ends: the
engine client's reader thread hands each step's events straight to the job's event loop, one
wake-up of the loop per step instead of one of every stream's thread. Each wake-up takes a
core from the engine's threads, which wait on each other at every layer, when they use every
core.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from deskllm.engine.backend import ChatBackend
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import (
    ChatMessage,
    Done,
    Embeddings,
    Error,
    Event,
    Exited,
    Metrics,
    PromptProgress,
    Sampling,
    TextDelta,
)
from deskllm.engine.errors import EngineError
from deskllm.engine.reply import Reply

log = logging.getLogger("deskllm.server")

# Live Metrics stay here: no route reads them (Done carries the final figures), and each one
# passed on would wake the event loop, N streams × 4 a second. Prompt progress comes only
# while a long prompt is read, twice a second (`return_progress`).
_PASSED_ON = (TextDelta, PromptProgress, Done, Error, Exited)
_FINAL = (Done, Error, Exited)


class QueueFull(Exception):
    def __init__(self, waiting: int) -> None:
        super().__init__(f"{waiting} requests are waiting")
        self.waiting = waiting


@dataclass(frozen=True)
class ChatRequest:
    conversation_id: str
    messages: tuple[ChatMessage, ...]
    sampling: Sampling
    tools_json: str | None = None  # the tools given to the chat template
    raw_prompt: str | None = None  # /v1/completions: the text to continue, no template
    # What answers when it is not the served model itself: the router (`auto`) or a remote
    # model (NAME/MODEL, */MODEL). It holds a slot's place in the queue like any reply.
    backend: ChatBackend | None = None


@dataclass(frozen=True)
class EmbedRequest:
    """/v1/embeddings: texts to embed, in the same queue as the replies."""

    texts: tuple[str, ...]


def embed_event(client, request: EmbedRequest) -> Embeddings | Error:
    """The engine's answer to an EmbedRequest, failures as their Error."""
    try:
        return client.embed(request.texts)
    except EngineError as exc:
        return Error(None, exc.reason, exc.kind)


class Job:
    """One admitted request. Read its events with `stream()`; `cancel()` from the loop."""

    def __init__(
        self, request: ChatRequest | EmbedRequest, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.request = request
        self.loop = loop
        self.queued_at = time.monotonic()
        self.started_at: float | None = None
        self.request_id: int | None = None  # the engine's, once the reply started
        self.reply: Reply | None = None  # a backend's reply, once it started
        self.cancel_requested = False
        # Why the server stopped it ("shutdown"): its reply ends with this finish reason
        # rather than as cancelled (which only a client that left causes).
        self.stop_reason: str | None = None
        # The model that admitted it (replies.submit): ModelHost, or an ExtraModel beside it.
        self.owner = None
        self._events: asyncio.Queue[Event | None] = asyncio.Queue()

    def push(self, event: Event | None) -> None:
        """From the worker thread; a loop that has closed (server shutdown) drops it."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._events.put_nowait, event)

    def push_many(self, events: list[Event]) -> None:
        """push() for several events: the loop wakes once for them."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._put_all, events)

    def _put_all(self, events: list[Event]) -> None:
        for event in events:
            self._events.put_nowait(event)

    async def get(self) -> Event | None:
        """The next event; None once the job has ended. Safe to cancel (a timeout)."""
        return await self._events.get()

    async def stream(self) -> AsyncIterator[Event]:
        """TextDelta, Metrics and the final Done / Error / Exited, as the engine sends them.
        Text deltas already waiting behind the one taken (the reader fell behind the engine)
        come merged into it: one chunk to write for them instead of one each."""
        held: Event | None | type[_Nothing] = _Nothing
        while True:
            event = await self._events.get() if held is _Nothing else held
            held = _Nothing
            if event is None:
                return
            if isinstance(event, TextDelta) and not self._events.empty():
                parts = [event]
                while not self._events.empty():
                    after = self._events.get_nowait()
                    if not isinstance(after, TextDelta) or after.reasoning != event.reasoning:
                        held = after  # given next, in its place (thinking and answer apart)
                        break
                    parts.append(after)
                event = merge_deltas(parts)
            yield event


class _Nothing:
    """No event held back (None is the end of the job's events)."""


def _stopped(event: Event, reason: str) -> Event:
    """A reply the server stopped: its Done says why instead of `cancelled`."""
    if isinstance(event, Done) and event.finish_reason == "cancelled":
        return dataclasses.replace(event, finish_reason=reason)
    return event


def merge_deltas(deltas: list[TextDelta]) -> TextDelta:
    """Consecutive deltas of one reply as one: their text and token logprobs, in order."""
    if len(deltas) == 1:
        return deltas[0]
    logprobs = tuple(entry for d in deltas for entry in d.logprobs)
    return TextDelta(deltas[0].request_id, "".join(d.text for d in deltas), logprobs,
                     deltas[0].reasoning)  # fmt: skip


class EngineQueue:
    """Admits, queues and runs chat jobs on the engine. Thread-safe."""

    def __init__(self, client: EngineClient, max_waiting: int, slots: int = 1) -> None:
        self.client = client
        self.max_waiting = max_waiting
        self.slots = slots
        self._executor = ThreadPoolExecutor(slots, thread_name_prefix="deskllm-api-slot")
        self._lock = threading.Lock()
        self._admitted: set[Job] = set()  # admitted and not finished: running and waiting
        self._running: set[Job] = set()
        self.on_done: Callable[[Done], None] | None = None

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._admitted) - len(self._running)

    @property
    def running(self) -> int:
        with self._lock:
            return len(self._running)

    @property
    def busy(self) -> bool:
        return self.running > 0

    def submit(self, request: ChatRequest | EmbedRequest) -> Job:
        """Admit a request or raise QueueFull. Call from the event loop that reads the job."""
        job = Job(request, asyncio.get_running_loop())
        with self._lock:
            if len(self._admitted) >= self.max_waiting + self.slots:
                raise QueueFull(len(self._admitted) - len(self._running))
            self._admitted.add(job)
        self._executor.submit(self._run, job)
        return job

    def cancel(self, job: Job) -> None:
        """A waiting job is skipped; a running one's reply is cancelled (by its request id)."""
        with self._lock:
            job.cancel_requested = True
            if job in self._running:
                self._stop(job)

    def _run(self, job: Job) -> None:
        ended = threading.Event()
        try:
            with self._lock:
                if job.cancel_requested:
                    if job.stop_reason is not None:  # stopped before it ran: say why
                        job.push(Done(0, job.stop_reason, "", Metrics(0)))
                    return
                self._running.add(job)
                job.started_at = time.monotonic()
            r = job.request
            if isinstance(r, EmbedRequest):
                job.push(embed_event(self.client, r))
                return
            if r.backend is not None:
                self._run_backend(job, r.backend)
                return
            rid = self.client.start(
                r.conversation_id,
                r.messages,
                r.sampling,
                partial(self._on_events, job, ended),
                tools_json=r.tools_json,
                raw_prompt=r.raw_prompt,
            )
            with self._lock:
                job.request_id = rid
                if job.cancel_requested:  # it came before the request id was known
                    self.client.cancel_request(rid)
            ended.wait()
        except Exception as exc:  # never leave a reader waiting, never kill a pool thread
            log.exception("API request failed in an engine thread")
            job.push(Error(None, f"internal error: {exc}"))
        finally:
            with self._lock:
                self._running.discard(job)
                self._admitted.discard(job)
            job.push(None)

    def _run_backend(self, job: Job, backend: ChatBackend) -> None:
        """A gateway backend's reply, read on this slot thread until it ends."""
        r = job.request
        assert isinstance(r, ChatRequest)
        reply = backend.chat(r.conversation_id, r.messages, r.sampling)
        with self._lock:
            job.reply = reply
            if job.cancel_requested:
                reply.cancel()
        ended = threading.Event()
        for event in reply.events():
            self._on_events(job, ended, [event])

    def _stop(self, job: Job) -> None:
        """Cancel a running job's reply (under the lock)."""
        if job.reply is not None:
            job.reply.cancel()
        elif job.request_id is not None:
            self.client.cancel_request(job.request_id)

    def _on_events(self, job: Job, ended: threading.Event, events: list) -> None:
        """A step's events of one job, on the engine client's reader thread (or one
        backend event, on the slot thread)."""
        if job.stop_reason is not None:
            events = [_stopped(event, job.stop_reason) for event in events]
        if self.on_done is not None:
            for event in events:
                if isinstance(event, Done):
                    self.on_done(event)
        passed = [event for event in events if isinstance(event, _PASSED_ON)]
        if passed:
            job.push_many(passed)
        if isinstance(events[-1], _FINAL):
            ended.set()

    def stop_all(self, reason: str = "shutdown") -> None:
        """Stop every admitted request, running or waiting: each ends with a Done whose
        finish reason is `reason`, so its stream ends with a final chunk saying why."""
        with self._lock:
            for job in self._admitted:
                job.cancel_requested = True
                job.stop_reason = reason
                if job in self._running:
                    self._stop(job)

    def close(self) -> None:
        self.stop_all()
        self._executor.shutdown(wait=True, cancel_futures=True)
