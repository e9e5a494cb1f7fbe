"""EngineClient: the one Qt-free API to the engine process, for one reply or many at once;
the CLI, the window, the API server and the benchmarks all use it. Thread-safe: any thread may
read its own Reply while others do.

    client = EngineClient(n_slots=4)     # 1 (the default): one reply at a time, others wait
    client.load(params)                  # a KV pool of n_slots × params.n_ctx cells, shared
    replies = [client.chat("api", messages_i, sampling) for ...]   # each read in its thread

The worker is a separate OS process (multiprocessing "spawn", which also works in a frozen
app): a segfault, an abort inside ggml or the out-of-memory killer ends the worker, never the
app. A reader thread takes every event off the pipe (one step's events come as one message)
and hands it to the Reply whose request id it carries. `start()` instead hands a reply's
events to a callback on that reader thread (the API server's many streams): no thread wakes
per reply and step, which on a machine with as many cores as engine threads slows every stream.

When the worker dies (crash, kill, out of memory) or stops answering for `hang_timeout_s`
while it owes events, every open reply ends with Exited and the reason, and the next chat
starts a fresh worker with the same model (unless it died CRASH_LIMIT times in a row).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from pathlib import Path

from deskllm import paths
from deskllm.engine.device_env import device_env
from deskllm.engine.domain import (
    ChatMessage,
    Done,
    Embeddings,
    Error,
    Event,
    Exited,
    Loaded,
    LoadParams,
    LoadProgress,
    Sampling,
    StatusReport,
)
from deskllm.engine.errors import EngineBusy, EngineError, ErrorKind
from deskllm.engine.kv_cache import delete_conversation_states
from deskllm.engine.protocol import (
    Cancel,
    Chat,
    Embed,
    Forget,
    Heartbeat,
    Load,
    Shutdown,
    Status,
    StepEvents,
    Unload,
)
from deskllm.engine.reply import Reply

log = logging.getLogger("deskllm.engine")

# A worker that sends nothing (not even a heartbeat: it beats only while it makes progress)
# for this long while it owes an answer is taken to hang, and is ended.
HANG_TIMEOUT_S = float(os.environ.get("DESKLLM_ENGINE_HANG_S", "120"))
CRASH_LIMIT = 3  # a model that ends the engine this often in a row is not reloaded by itself
_SIGNAL_WORDS = {
    signal.SIGKILL: "was killed (SIGKILL) — by the user, or by the system when memory ran out",
    signal.SIGSEGV: "crashed (segmentation fault inside llama.cpp)",
    signal.SIGABRT: "aborted (a llama.cpp assertion failed)",
    signal.SIGBUS: "crashed (bus error: the model file may have changed on disk)",
    signal.SIGTERM: "was terminated (SIGTERM)",
}
_CONTROL = -1  # the mailbox of events that belong to no reply (load progress, load errors)
_STATUS = -2  # the mailbox of StatusReports (status(), unload())
_FINAL = (Done, Error, Exited)


def delete_saved_states(params: LoadParams | None, conversation_id: str) -> None:
    """Delete a conversation's KV state files where `params` keeps them (the default folder
    without params): what forget does when no engine runs to do it."""
    kv_dir = params.kv_disk_dir if params and params.kv_disk_dir else None
    delete_conversation_states(Path(kv_dir) if kv_dir else paths.kv_cache_dir(), conversation_id)


def exit_reason(exitcode: int | None) -> str:
    if exitcode is None:
        return "the engine stopped answering"
    if exitcode < 0:
        try:
            sig = signal.Signals(-exitcode)
        except ValueError:
            return f"the engine was ended by signal {-exitcode}"
        return "the engine " + _SIGNAL_WORDS.get(sig, f"was ended by {sig.name}")
    return f"the engine exited with status {exitcode}"


def _hold_pidfd(process: multiprocessing.process.BaseProcess) -> None:
    """Keep a pidfd of a started engine (Linux): killing through it can never reach another
    process that was given the same PID after the engine was reaped elsewhere."""
    try:
        process._deskllm_pidfd = os.pidfd_open(process.pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3: kill by PID
        process._deskllm_pidfd = None  # type: ignore[attr-defined]


def _kill(process: multiprocessing.process.BaseProcess) -> None:
    """SIGKILL the engine, through its pidfd where there is one (False: its reader thread
    has seen it end)."""
    pidfd = getattr(process, "_deskllm_pidfd", None)
    if pidfd is False:
        return
    if pidfd is None:
        process.kill()
        return
    with contextlib.suppress(ProcessLookupError, OSError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)


def _release_pidfd(process: multiprocessing.process.BaseProcess) -> None:
    pidfd = getattr(process, "_deskllm_pidfd", None)
    process._deskllm_pidfd = False  # type: ignore[attr-defined]
    if pidfd:
        with contextlib.suppress(OSError):
            os.close(pidfd)


class _Sink:
    """The mailbox of a reply started with start(): events go to its callback, and its last
    one closes it (Exited from a dead engine included)."""

    def __init__(
        self,
        rid: int,
        on_events: Callable[[list[Event]], None],
        close: Callable[[int], None],
    ) -> None:
        self.rid = rid
        self.on_events = on_events
        self.close = close
        self.closed = False

    def put(self, event: Event) -> None:
        self.put_many([event])

    def put_many(self, events: list[Event]) -> None:
        if self.closed:
            return
        if isinstance(events[-1], _FINAL):
            self.closed = True
            self.close(self.rid)
        try:
            self.on_events(events)
        except Exception:  # a failing callback must not end the reader of every reply
            log.exception("a reply's event callback failed")


class EngineClient:
    """Talks to one engine process with `n_slots` slots: a pure process client (it knows
    nothing of the planner, the store or the settings; `deskllm.loader.ModelLoader` decides
    what to load)."""

    def __init__(
        self,
        n_slots: int = 1,
        log_level: int = logging.WARNING,
        hang_timeout_s: float | None = None,
    ) -> None:
        if n_slots < 1:
            raise ValueError("n_slots must be 1 or more")
        self.n_slots = n_slots
        self._ctx = multiprocessing.get_context("spawn")
        self._process = None
        self._conn = None
        self._log_level = log_level
        self.hang_timeout_s = HANG_TIMEOUT_S if hang_timeout_s is None else hang_timeout_s
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()  # the mailboxes, and starting or loading a worker
        self._load_lock = threading.Lock()
        # Each open reply's (and a load's) queue of events, with the process that owes them.
        self._mailboxes: dict[int, tuple[queue.Queue, object]] = {}
        self._ids = itertools.count(1)
        self._cancelled: set[int] = set()  # cancelled replies, perhaps before they were sent
        self._chats: set[int] = set()  # replies read through chat(), until they end
        self._status_lock = threading.Lock()  # one StatusReport asked for at a time
        self.params: LoadParams | None = None
        self.loaded: Loaded | None = None
        self.crashes = 0  # engine deaths in a row with self.params (a finished reply resets it)
        self.loads = 0  # models loaded (a reload after a crash too)
        self.restarts = 0  # fresh engines after a death (revive, or a chat that found it dead)
        self.last_exit: str | None = None  # why the last engine died, in words
        self._env: dict[str, str] = {}  # the worker's environment (device_env)

    # Process ----------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process and self._process.is_alive() else None

    @property
    def alive(self) -> bool:
        """Whether an engine runs with the model loaded."""
        process = self._process
        return self.loaded is not None and process is not None and process.is_alive()

    @property
    def death_cause(self) -> str:
        """Why the engine is dead, in words: from its exit status at once, since the reader
        thread that records last_exit may not have seen the pipe close yet."""
        process = self._process
        if process is not None and not process.is_alive():
            return exit_reason(process.exitcode)
        return self.last_exit or "the engine stopped"

    @property
    def conversation_ctx(self) -> int:
        """The longest conversation, in tokens (0 before a load): the slots share one pool."""
        return self.loaded.conversation_ctx if self.loaded else 0

    def _start_process(self, env: dict[str, str]) -> None:
        from deskllm.engine.worker import worker_main

        self._stop_process()
        self._env = env
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=worker_main,
            args=(child, self._log_level, env),
            name="deskllm-engine",
            daemon=True,
        )
        process.start()
        _hold_pidfd(process)
        child.close()
        self._process, self._conn = process, parent
        self.loaded = None
        threading.Thread(target=self._read_events, args=(process, parent),
                         name="deskllm-engine-events", daemon=True).start()  # fmt: skip

    def _send(self, request: object) -> None:
        with self._send_lock:
            self._conn.send(request)

    def _deliver(self, key: int, event: Event) -> None:
        if isinstance(event, Done):
            self.crashes = 0  # a reply finished: the engine works
        with self._lock:
            entry = self._mailboxes.get(key)
        if entry is not None:
            entry[0].put(event)

    def _deliver_step(self, events: tuple[Event, ...]) -> None:
        """One step's events, each to its reply, the mailboxes looked up under one lock; a
        sink gets its reply's events of the step in one call."""
        with self._lock:
            boxes = [self._mailboxes.get(event.request_id) for event in events]
        sinks: dict[int, tuple[_Sink, list[Event]]] = {}
        for entry, event in zip(boxes, events, strict=True):
            if isinstance(event, Done):
                self.crashes = 0  # a reply finished: the engine works
            if entry is None:
                continue
            box = entry[0]
            if isinstance(box, _Sink):
                sinks.setdefault(event.request_id, (box, []))[1].append(event)
            else:
                box.put(event)
        for box, its_events in sinks.values():
            box.put_many(its_events)

    def _read_events(self, process, conn) -> None:
        """Hand each event to its reply; on the worker's death, Exited to every open one."""
        hung = False
        last_seen = time.monotonic()
        while True:
            try:
                ready = wait([conn, process.sentinel], timeout=1.0)
            except (OSError, ValueError, TypeError):  # the client closed the pipe (close, load)
                break
            now = time.monotonic()
            if not ready:
                with self._lock:
                    owed = any(owner is process for _box, owner in self._mailboxes.values())
                if owed and now - last_seen > self.hang_timeout_s:
                    hung = True
                    log.warning("the engine sent nothing for %.0f s; ending it",
                                self.hang_timeout_s)  # fmt: skip
                    _kill(process)
                    break
                if not owed:
                    last_seen = now
                continue
            try:
                if conn not in ready and not conn.poll(0):
                    break
                event = conn.recv()
            # TypeError: the pipe was closed (its handle set to None) while recv() read it.
            except (EOFError, OSError, ValueError, TypeError):
                break
            last_seen = now
            if isinstance(event, StepEvents):
                self._deliver_step(event.events)
                continue
            if isinstance(event, Heartbeat):
                continue
            if isinstance(event, StatusReport):
                self._deliver(_STATUS, event)
                continue
            rid = getattr(event, "request_id", None)
            self._deliver(_CONTROL if rid is None else rid, event)
        process.join(5)
        if process.is_alive():
            _kill(process)
            process.join(5)
        _release_pidfd(process)
        if self._process is process:
            self.loaded = None
        if hung:
            reason, kind = (f"the engine stopped answering for {self.hang_timeout_s:.0f} s and "
                            "was ended"), ErrorKind.HUNG  # fmt: skip
        else:
            reason, kind = exit_reason(process.exitcode), ErrorKind.EXITED
        if self._process is process:
            self.last_exit = reason
        with self._lock:
            boxes = [(k, box) for k, (box, owner) in self._mailboxes.items() if owner is process]
        if boxes:
            self.crashes += 1  # one death, however many replies it ended
        for key, box in boxes:
            box.put(Exited(reason, process.exitcode, None if key == _CONTROL else key, kind))

    def _stop_process(self, timeout: float = 10.0) -> None:
        process = self._process
        if process is None:
            return
        if process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self._send(Shutdown())
            process.join(timeout)
            if process.is_alive():
                _kill(process)
                process.join()
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None
        self.loaded = None

    # API --------------------------------------------------------------------------------------
    def load(
        self,
        params: LoadParams,
        on_progress: Callable[[float], None] | None = None,
        n_slots: int | None = None,
    ) -> Loaded:
        """Load `params`' model with n_slots slots of params.n_ctx tokens (a fresh worker),
        replacing the current one: no checks, no defaults chosen here (the worker fills n_ctx
        0 and n_threads 0). `n_slots`: a new slot count (else the client's). Raises
        EngineError. Loaded.n_ctx is the pool: n_slots × params.n_ctx cells, shared."""
        if n_slots is not None:
            if n_slots < 1:
                raise ValueError("n_slots must be 1 or more")
            self.n_slots = n_slots
        with self._load_lock:
            self.crashes = 0
            return self._load_locked(params, on_progress)

    def _load_locked(
        self, params: LoadParams, on_progress: Callable[[float], None] | None = None
    ) -> Loaded:
        box: queue.Queue = queue.Queue()
        env = device_env(params)
        # A live worker loads in place (it frees the model it had first); settings ggml reads
        # once per process, such as the visible devices, need a fresh one.
        if self._process is None or not self._process.is_alive() or env != self._env:
            self._start_process(env)
        with self._lock:
            self._mailboxes[_CONTROL] = (box, self._process)
        try:
            self._send(Load(params, self.n_slots))
            while True:
                event = box.get()
                if isinstance(event, LoadProgress):
                    if on_progress:
                        on_progress(event.fraction)
                elif isinstance(event, Loaded):
                    self.params, self.loaded = params, event
                    self.loads += 1
                    return event
                elif isinstance(event, Error):
                    raise EngineError(event.reason, event.kind)
                elif isinstance(event, Exited):
                    name = Path(params.model_path).name
                    raise EngineError(f"{event.reason} while loading {name}", event.kind)
        finally:
            with self._lock:
                self._mailboxes.pop(_CONTROL, None)

    @property
    def label(self) -> str | None:
        """The loaded model's file (ChatBackend.label)."""
        return self.params.model_path if self.params is not None else None

    def chat(
        self,
        conversation_id: str,
        messages: list[ChatMessage] | tuple[ChatMessage, ...],
        sampling: Sampling | None = None,
        *,
        wait_if_busy: bool = True,
        continue_reply: bool = False,
        drop_old_turns: bool = True,
        tools_json: str | None = None,
        raw_prompt: str | None = None,
    ) -> Reply:
        """One reply, streaming as it is read; nothing is sent until it is read. Replies read
        at once share the engine's slots (more than n_slots wait inside the engine, or raise
        EngineBusy on their first read with wait_if_busy=False).
        `conversation_id` is not used to find a cache: the slot whose tokens share the longest
        prefix with the prompt is taken, whichever conversation left them; before another
        conversation overwrites a slot, its cells are saved under `conversation_id`, and its
        next turn restores them if no slot matches as far. `continue_reply`: the last message
        is a partial assistant reply and the Reply is its continuation (the new text only).
        `drop_old_turns` False: a conversation that does not fit fails (kind CONTEXT) before
        it is evaluated. `tools_json`: the tools the model may call (OpenAI's list as JSON
        text), given to the chat template. `raw_prompt`: a text to continue as it is, without
        the template."""
        request_id = next(self._ids)
        request = Chat(request_id, conversation_id, tuple(messages), sampling or Sampling(),
                       continue_reply, drop_old_turns, tools_json, raw_prompt)  # fmt: skip
        events = self._chat_events(request, wait_if_busy)
        return Reply(events, lambda: self.cancel_request(request_id))

    def start(
        self,
        conversation_id: str,
        messages: list[ChatMessage] | tuple[ChatMessage, ...],
        sampling: Sampling | None,
        on_events: Callable[[list[Event]], None],
        *,
        tools_json: str | None = None,
        raw_prompt: str | None = None,
    ) -> int:
        """chat(), with the reply's events given to `on_events` as they arrive (each step's
        in one call, the last one ending with Done, Error or Exited) instead of a Reply to
        read on a thread of its own. `on_events` runs on the reader thread: it must be quick
        and never block. May restart a dead engine first (blocking). Returns the request id,
        for cancel_request()."""
        rid = next(self._ids)
        request = Chat(rid, conversation_id, tuple(messages), sampling or Sampling(),
                       tools_json=tools_json, raw_prompt=raw_prompt)  # fmt: skip
        restarted = self._open(request, _Sink(rid, on_events, self._drop_mailbox))
        if restarted is not None:
            on_events([restarted])
        return rid

    def _drop_mailbox(self, rid: int) -> None:
        with self._lock:
            self._mailboxes.pop(rid, None)
            self._chats.discard(rid)
        self._cancelled.discard(rid)

    def embed(self, texts: list[str] | tuple[str, ...], truncate: bool = False) -> Embeddings:
        """Pooled, unit-length embeddings of `texts`, made between two steps of the running
        replies (`truncate`: cut a text longer than the window). Raises EngineError."""
        for event in self._chat_events(Embed(next(self._ids), tuple(texts), truncate)):
            if isinstance(event, Embeddings):
                return event
            if isinstance(event, Error | Exited):
                raise EngineError(event.reason, event.kind)
        raise EngineError("the engine ended without answering")

    def _chat_events(self, request: Chat | Embed, wait_if_busy: bool = True) -> Iterator[Event]:
        rid = request.request_id
        box: queue.Queue = queue.Queue()
        finished = False
        with self._lock:
            if not wait_if_busy and len(self._chats) >= self.n_slots:
                raise EngineBusy()
            if isinstance(request, Chat):
                self._chats.add(rid)
        try:
            restarted = self._open(request, box)
            if restarted is not None:
                finished = True
                yield restarted
                return
            while True:
                event = box.get()
                if isinstance(event, Done | Embeddings | Error | Exited):
                    finished = True
                yield event
                if finished:
                    return
        finally:
            self._drop_mailbox(rid)
            if not finished:
                self.cancel_request(rid)  # its reader left: free the slot

    def _open(self, request: Chat | Embed, box: queue.Queue | _Sink) -> Error | None:
        """Make `box` the request's mailbox and send the request, after restarting a dead
        engine; the Error (nothing sent, no mailbox) when it could not be restarted."""
        rid = request.request_id
        restarted = self._restart_if_needed(rid)
        if restarted is not None:
            return restarted
        with self._lock:
            self._mailboxes[rid] = (box, self._process)
        if not self._process.is_alive():  # died since: its reader may have passed us by
            box.put(Exited(exit_reason(self._process.exitcode), self._process.exitcode, rid))
            return None
        with contextlib.suppress(OSError, ValueError):  # a broken pipe: Exited follows
            self._send(request)
            if rid in self._cancelled:  # stopped before it was sent: stop it now
                self._send(Cancel(rid))
        return None

    def _restart_if_needed(self, rid: int) -> Error | None:
        """A fresh engine with the last model after a crash; an Error when it cannot."""
        with self._load_lock:
            if self.loaded is not None and self._process is not None and self._process.is_alive():
                return None
            if self.params is None:
                return Error(rid, "no model is loaded", ErrorKind.NO_MODEL)
            name = Path(self.params.model_path).name
            if self.crashes >= CRASH_LIMIT:
                return Error(
                    rid,
                    f"{name} ended the engine {self.crashes} times in a row, so it is not "
                    "loaded again by itself. Load it again to retry, or try it with fewer GPU "
                    "layers or a smaller context.",
                    ErrorKind.CRASH_LOOP,
                )
            try:
                self._load_locked(self.params)
            except EngineError as exc:
                return Error(rid, f"could not restart the engine: {exc}", exc.kind)
            self.restarts += 1
            return None

    def revive(self) -> Error | None:
        """Restart a dead engine with its model now, rather than at the next chat (a server
        that says it is well should be); the Error when it cannot. Nothing when it runs."""
        return self._restart_if_needed(0)

    def restart(self, on_progress: Callable[[float], None] | None = None) -> Loaded | None:
        """End the engine process (whatever it is doing; every open reply ends) and load the
        same model with the same slots in a fresh one; None when no model was loaded."""
        params = self.params
        self._stop_process(timeout=2.0)
        return self.load(params, on_progress) if params is not None else None

    def cancel_request(self, request_id: int) -> None:
        """Stop one reply, waiting or running, or before it is read. Safe from any thread."""
        self._cancelled.add(request_id)
        if self._process is not None and self._process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self._send(Cancel(request_id))

    def cancel(self) -> None:
        """Stop every reply read through chat() (the prompt being read too). Safe from any
        thread; replies started with start() are stopped by their request id."""
        with self._lock:
            replies = list(self._chats)
        for rid in replies:
            self.cancel_request(rid)

    def forget(self, conversation_id: str) -> None:
        """Drop a conversation's KV states (RAM, slots and disk), e.g. after it was deleted.
        The running engine does it between steps; without one, the files are deleted here."""
        if self._process is not None and self._process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self._send(Forget(conversation_id))
                return
        delete_saved_states(self.params, conversation_id)

    def kill(self) -> None:
        """End the engine process now (every open reply gets Exited)."""
        process = self._process
        if process is not None and process.is_alive():
            _kill(process)

    def status(self) -> StatusReport | None:
        """What the engine holds and does now (None: no engine runs). Answered by the
        worker's reader thread, so it comes while replies stream."""
        return self._ask_status(Status())

    def unload(self) -> None:
        """Free the model (every open reply ends); the KV states are written to disk first."""
        self.params = None
        self._ask_status(Unload())
        self.loaded = None

    def _ask_status(self, request: Status | Unload) -> StatusReport | None:
        process = self._process
        if process is None or not process.is_alive():
            return None
        with self._status_lock:
            box: queue.Queue = queue.Queue()
            with self._lock:
                self._mailboxes[_STATUS] = (box, process)
            try:
                with contextlib.suppress(OSError, ValueError):
                    self._send(request)
                try:
                    event = box.get(timeout=self.hang_timeout_s)
                except queue.Empty:  # it died before its mailbox was registered
                    return None
                return event if isinstance(event, StatusReport) else None
            finally:
                with self._lock:
                    self._mailboxes.pop(_STATUS, None)

    def close(self, timeout: float = 10.0) -> None:
        """End the worker (its KV states are saved), killing it if it does not end in time.
        The model is kept as `params`: a later chat starts the engine with it again."""
        self.cancel()
        self._stop_process(timeout)

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
