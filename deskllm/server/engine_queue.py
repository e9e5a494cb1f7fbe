"""EngineQueue: the engine answers one reply at a time, so API requests wait their turn here.

Each admitted request becomes a Job run on one worker thread (the Reply is read with blocking
calls); its events are handed to the request's asyncio loop as they come. At most
`max_waiting` jobs wait behind the running one: one more is refused with QueueFull. A job
cancelled while it waits never reaches the engine; one cancelled while it runs stops its
reply, so the next job starts at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from deskllm.engine.client import EngineClient
from deskllm.engine.errors import EngineError
from deskllm.engine.protocol import (
    ChatMessage,
    Done,
    Embeddings,
    Error,
    Event,
    Exited,
    Metrics,
    Sampling,
    TextDelta,
)
from deskllm.engine.reply import Reply

log = logging.getLogger("deskllm.server")

_PASSED_ON = (TextDelta, Metrics, Done, Error, Exited)


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
        self.reply: Reply | None = None  # the single-stream queue's
        self.request_id: int | None = None  # the batched queue's
        self.cancel_requested = False
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
                    if not isinstance(after, TextDelta):
                        held = after  # given next, in its place
                        break
                    parts.append(after)
                event = merge_deltas(parts)
            yield event


class _Nothing:
    """No event held back (None is the end of the job's events)."""


def merge_deltas(deltas: list[TextDelta]) -> TextDelta:
    """Consecutive deltas of one reply as one: their text and token logprobs, in order."""
    if len(deltas) == 1:
        return deltas[0]
    logprobs = tuple(entry for d in deltas for entry in d.logprobs)
    return TextDelta(deltas[0].request_id, "".join(d.text for d in deltas), logprobs)


class EngineQueue:
    """Admits, queues and runs chat jobs on one engine. Thread-safe."""

    def __init__(self, client: EngineClient, max_waiting: int) -> None:
        self.client = client
        self.max_waiting = max_waiting
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="deskllm-api-engine")
        self._lock = threading.Lock()
        self._pending = 0  # admitted and not finished: the running job and those waiting
        self._running: Job | None = None
        self.on_done: Callable[[Done], None] | None = None  # every reply's figures

    @property
    def waiting(self) -> int:
        with self._lock:
            return self._pending - (1 if self._running is not None else 0)

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._running is not None

    @property
    def running(self) -> int:
        """Jobs the engine is answering now (0 or 1 here)."""
        return int(self.busy)

    def submit(self, request: ChatRequest | EmbedRequest) -> Job:
        """Admit a request or raise QueueFull. Call from the event loop that reads the job."""
        job = Job(request, asyncio.get_running_loop())
        with self._lock:
            if self._pending > self.max_waiting:
                raise QueueFull(self._pending - (1 if self._running is not None else 0))
            self._pending += 1
        self._executor.submit(self._run, job)
        return job

    def cancel(self, job: Job) -> None:
        """Stop a job: a waiting one is skipped, a running one's reply is cancelled. Under the
        lock, so the engine's Cancel can only reach the reply it was meant for."""
        with self._lock:
            job.cancel_requested = True
            if self._running is job and job.reply is not None:
                job.reply.cancel()

    def _run(self, job: Job) -> None:
        try:
            with self._lock:
                if job.cancel_requested:
                    return
                self._running = job
                job.started_at = time.monotonic()
                r = job.request
                if not isinstance(r, EmbedRequest):
                    job.reply = self.client.chat(
                        r.conversation_id,
                        r.messages,
                        r.sampling,
                        tools_json=r.tools_json,
                        raw_prompt=r.raw_prompt,
                    )
            if isinstance(r, EmbedRequest):
                job.push(embed_event(self.client, r))
                return
            cancelled = False
            for event in job.reply.events():
                if isinstance(event, _PASSED_ON):
                    job.push(event)
                if isinstance(event, Done) and self.on_done is not None:
                    self.on_done(event)  # here: a reply whose client left counts too
                # A cancel that came before the engine had the request is sent again now.
                if job.cancel_requested and not cancelled:
                    cancelled = True
                    job.reply.cancel()
        except Exception as exc:  # never leave a reader waiting, never kill the worker thread
            log.exception("API request failed in the engine thread")
            job.push(Error(None, f"internal error: {exc}"))
        finally:
            with self._lock:
                self._pending -= 1
                if self._running is job:
                    self._running = None
            job.push(None)

    def close(self) -> None:
        with self._lock:
            running = self._running
            if running is not None and running.reply is not None:
                running.reply.cancel()
        self._executor.shutdown(wait=True, cancel_futures=True)
