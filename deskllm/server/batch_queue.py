"""BatchEngineQueue: EngineQueue's interface over the batched engine, running up to `slots`
jobs at once (`deskllm serve --parallel N`).

Each running job reads its Reply on its own thread of a pool of `slots` threads; the engine
interleaves their tokens. Up to `max_waiting` more jobs wait for a thread (a free slot); one
more is refused with QueueFull, as with the single-stream queue.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from deskllm.engine.batch_client import BatchEngineClient
from deskllm.engine.protocol import Done, Error, Exited, TextDelta
from deskllm.server.engine_queue import ChatRequest, EmbedRequest, Job, QueueFull, embed_event

log = logging.getLogger("deskllm.server")

# Live Metrics stay here: no route reads them (Done carries the final figures), and each one
# passed on would wake the event loop, N streams × 4 a second.
_PASSED_ON = (TextDelta, Done, Error, Exited)


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
            if job in self._running and job.reply is not None:
                job.reply.cancel()

    def _run(self, job: Job) -> None:
        try:
            with self._lock:
                if job.cancel_requested:
                    return
                self._running.add(job)
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
                    self.on_done(event)
                # A cancel that came before the engine had the request is sent again now.
                if job.cancel_requested and not cancelled:
                    cancelled = True
                    job.reply.cancel()
        except Exception as exc:  # never leave a reader waiting, never kill a pool thread
            log.exception("API request failed in an engine thread")
            job.push(Error(None, f"internal error: {exc}"))
        finally:
            with self._lock:
                self._pending -= 1
                self._running.discard(job)
            job.push(None)

    def cancel_running(self) -> None:
        """Stop every running reply (each ends as cancelled; its stream ends)."""
        with self._lock:
            for job in self._running:
                job.cancel_requested = True
                if job.reply is not None:
                    job.reply.cancel()

    def close(self) -> None:
        self.cancel_running()
        self._executor.shutdown(wait=True, cancel_futures=True)
