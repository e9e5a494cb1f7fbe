"""BatchEngineQueue: EngineQueue's interface over the batched engine, running up to `slots`
jobs at once (`deskllm serve --parallel N`).

A running job holds one thread of a pool of `slots` threads (its slot) while the engine
interleaves the jobs' tokens. Up to `max_waiting` more jobs wait for a thread (a free slot);
one more is refused with QueueFull, as with the single-stream queue.

The thread only starts the reply and sleeps until it ends: the engine client's reader thread
hands each step's events straight to the job's event loop, one wake-up of the loop per step
instead of one of every stream's thread. Each wake-up takes a core from the engine's threads,
which wait on each other at every layer, when they use every core.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from deskllm.engine.batch_client import BatchEngineClient
from deskllm.engine.protocol import Done, Error, Exited, TextDelta
from deskllm.server.engine_queue import ChatRequest, EmbedRequest, Job, QueueFull, embed_event

log = logging.getLogger("deskllm.server")

# Live Metrics stay here: no route reads them (Done carries the final figures), and each one
# passed on would wake the event loop, N streams × 4 a second.
_PASSED_ON = (TextDelta, Done, Error, Exited)
_FINAL = (Done, Error, Exited)


class BatchEngineQueue:
    """Admits, queues and runs chat jobs on the batched engine. Thread-safe."""

    def __init__(self, client: BatchEngineClient, max_waiting: int, slots: int) -> None:
        self.client = client
        self.max_waiting = max_waiting
        self.slots = slots
        self._executor = ThreadPoolExecutor(slots, thread_name_prefix="deskllm-api-slot")
        self._lock = threading.Lock()
        self._pending = 0  # admitted and not finished: running and waiting
        self._running: set[Job] = set()
        self.on_done: Callable[[Done], None] | None = None

    @property
    def waiting(self) -> int:
        with self._lock:
            return self._pending - len(self._running)

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
            if self._pending >= self.max_waiting + self.slots:
                raise QueueFull(self._pending - len(self._running))
            self._pending += 1
        self._executor.submit(self._run, job)
        return job

    def cancel(self, job: Job) -> None:
        """A waiting job is skipped; a running one's reply is cancelled (by its request id)."""
        with self._lock:
            job.cancel_requested = True
            if job in self._running and job.request_id is not None:
                self.client.cancel_request(job.request_id)

    def _run(self, job: Job) -> None:
        ended = threading.Event()
        try:
            with self._lock:
                if job.cancel_requested:
                    return
                self._running.add(job)
                job.started_at = time.monotonic()
            r = job.request
            if isinstance(r, EmbedRequest):
                job.push(embed_event(self.client, r))
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
                self._pending -= 1
                self._running.discard(job)
            job.push(None)

    def _on_events(self, job: Job, ended: threading.Event, events: list) -> None:
        """A step's events of one job, on the engine client's reader thread."""
        if self.on_done is not None:
            for event in events:
                if isinstance(event, Done):
                    self.on_done(event)
        passed = [event for event in events if isinstance(event, _PASSED_ON)]
        if passed:
            job.push_many(passed)
        if isinstance(events[-1], _FINAL):
            ended.set()

    def cancel_running(self) -> None:
        """Stop every running reply (each ends as cancelled; its stream ends)."""
        with self._lock:
            for job in self._running:
                job.cancel_requested = True
                if job.request_id is not None:
                    self.client.cancel_request(job.request_id)

    def close(self) -> None:
        self.cancel_running()
        self._executor.shutdown(wait=True, cancel_futures=True)
