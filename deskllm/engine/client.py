"""EngineClient: the one Qt-free API to the engine process, used by the CLI and the GUI.

The worker is a separate OS process (multiprocessing "spawn", which also works in a frozen app):
a segfault, an abort inside ggml or the out-of-memory killer ends the worker, never the app.
The client turns the death into an `Exited` event with the reason, and the next request starts
a fresh worker and loads the last model again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from pathlib import Path

from deskllm import paths
from deskllm.engine.device_env import device_env
from deskllm.engine.errors import EngineBusy, EngineError, ErrorKind
from deskllm.engine.kv_cache import delete_conversation_states
from deskllm.engine.protocol import (
    Cancel,
    Chat,
    ChatMessage,
    Done,
    Embed,
    Embeddings,
    Error,
    Event,
    Exited,
    Forget,
    Heartbeat,
    Load,
    Loaded,
    LoadParams,
    LoadProgress,
    Sampling,
    Shutdown,
    Status,
    StatusReport,
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


class EngineClient:
    """Talks to one engine process: a pure process client (it knows nothing of the planner,
    the store or the settings; `deskllm.loader.ModelLoader` decides what to load). Thread-safe:
    one request at a time; cancel() from any thread.

    Faults it handles: a worker that dies is reported as Exited with the reason, and the next
    chat starts a fresh worker with the same model, unless that model ended the engine
    CRASH_LIMIT times in a row; a worker that stops answering for `hang_timeout_s` while it
    owes an answer is ended and reported the same way."""

    def __init__(
        self, log_level: int = logging.WARNING, hang_timeout_s: float | None = None
    ) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._process = None
        self._conn = None
        self._env: dict[str, str] = {}
        self._send_lock = threading.Lock()
        self._request_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._log_level = log_level
        self.hang_timeout_s = HANG_TIMEOUT_S if hang_timeout_s is None else hang_timeout_s
        self.params: LoadParams | None = None  # what to reload after a crash
        self.loaded: Loaded | None = None
        self.crashes = 0  # engine deaths in a row with self.params (a finished reply resets it)

    # Process ----------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process and self._process.is_alive() else None

    def _ensure_process(self, env: dict[str, str] | None = None) -> None:
        """A live worker whose environment is `env` (settings ggml reads once per process,
        such as the visible Vulkan devices: a change needs a fresh worker)."""
        env = env or {}
        if self._process is not None and self._process.is_alive():
            if env == self._env:
                return
            self.close()
        from deskllm.engine.worker import worker_main

        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=worker_main,
            args=(child, self._log_level, env),
            name="deskllm-engine",
            daemon=True,
        )
        self._env = env
        process.start()
        child.close()
        self._process, self._conn = process, parent
        self.loaded = None

    def _send(self, request: object) -> None:
        with self._send_lock:
            self._conn.send(request)

    def _events(self, request_id: int | None = None) -> Iterator[Event]:
        """Events from the worker until the caller stops; ends with Exited if it dies or
        hangs. Heartbeats only keep the deadline away; they are not passed on."""
        process, conn = self._process, self._conn
        hung = False
        while True:
            ready = wait([conn, process.sentinel], timeout=self.hang_timeout_s)
            if not ready:
                hung = True
                log.warning("the engine sent nothing for %.0f s; ending it", self.hang_timeout_s)
                process.kill()
                break
            # When only the process ended, the pipe may still hold what it sent before.
            if conn not in ready and not conn.poll(0):
                break
            try:
                event = conn.recv()
            except (EOFError, OSError):
                break  # the worker's end of the pipe is closed: it has ended
            if not isinstance(event, Heartbeat):
                yield event
        process.join(5)
        if process.is_alive():  # the pipe broke but the process hangs on: end it
            process.kill()
            process.join(5)
        self.loaded = None
        if hung:
            reason = (f"the engine stopped answering for {self.hang_timeout_s:.0f} s and was "
                      "ended")  # fmt: skip
            yield Exited(reason, process.exitcode, request_id, ErrorKind.HUNG)
        else:
            yield Exited(exit_reason(process.exitcode), process.exitcode, request_id)

    # API --------------------------------------------------------------------------------------
    def load(
        self, params: LoadParams, on_progress: Callable[[float], None] | None = None
    ) -> Loaded:
        """Load a model as `params` say (replacing the current one): no checks, no defaults
        chosen here (the worker fills n_ctx 0 and n_threads 0). Raises EngineError."""
        with self._request_lock:
            self.crashes = 0
            return self._load_locked(params, on_progress)

    def _load_locked(
        self, params: LoadParams, on_progress: Callable[[float], None] | None = None
    ) -> Loaded:
        self._ensure_process(device_env(params))
        self._send(Load(params))
        for event in self._events():
            if isinstance(event, LoadProgress):
                if on_progress:
                    on_progress(event.fraction)
            elif isinstance(event, Loaded):
                self.params, self.loaded = params, event
                return event
            elif isinstance(event, Error):
                raise EngineError(event.reason, event.kind)
            elif isinstance(event, Exited):
                name = Path(params.model_path).name
                raise EngineError(f"{event.reason} while loading {name}", event.kind)
        raise EngineError("the engine ended without answering")

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
        """One reply, streaming as it is read (see Reply). Nothing is sent until the reply
        is read; a reply read while another streams waits for it (or raises EngineBusy with
        wait_if_busy=False). `continue_reply`: the last message is a partial assistant reply
        and the Reply is its continuation (the new text only). `drop_old_turns` False: a
        conversation that does not fit fails (kind CONTEXT) before it is evaluated.
        `tools_json`: the tools the model may call (OpenAI's list as JSON text), given to the
        chat template. `raw_prompt`: a text to continue as it is, without the template."""
        request = Chat(0, conversation_id, tuple(messages), sampling or Sampling(),
                       continue_reply, drop_old_turns, tools_json, raw_prompt)  # fmt: skip
        events = self._chat_events(request, wait_if_busy)
        return Reply(events, self.cancel)

    def _chat_events(self, request: Chat, wait_if_busy: bool) -> Iterator[Event]:
        """The events of one reply, holding the request lock until it ends or its reader
        drops it (the lock is taken on the first read, so an unread reply holds nothing)."""
        if not self._request_lock.acquire(blocking=wait_if_busy):
            raise EngineBusy()
        try:
            restarted = self._restart_if_needed()
            if restarted is not None:
                yield restarted
                return
            request_id = next(self._ids)
            self._send(dataclasses.replace(request, request_id=request_id))
            for event in self._events(request_id):
                if getattr(event, "request_id", request_id) not in (request_id, None):
                    continue  # late events of an earlier, abandoned request
                if isinstance(event, Exited):
                    self.crashes += 1
                elif isinstance(event, Done):
                    self.crashes = 0
                yield event
                if isinstance(event, Done | Error | Exited):
                    return
        finally:
            self._request_lock.release()

    def embed(self, texts: list[str] | tuple[str, ...]) -> Embeddings:
        """Pooled, unit-length embeddings of `texts` (waits while a reply streams). Raises
        EngineError."""
        with self._request_lock:
            failed = self._restart_if_needed()
            if failed is not None:
                raise EngineError(failed.reason, failed.kind)
            request_id = next(self._ids)
            self._send(Embed(request_id, tuple(texts)))
            for event in self._events(request_id):
                if getattr(event, "request_id", request_id) not in (request_id, None):
                    continue  # late events of an earlier, abandoned request
                if isinstance(event, Embeddings):
                    return event
                if isinstance(event, Error | Exited):
                    raise EngineError(event.reason, event.kind)
        raise EngineError("the engine ended without answering")

    def _restart_if_needed(self) -> Error | None:
        """Start a fresh engine with the last model after a crash; an Error when it cannot."""
        if self.loaded is not None and self._process is not None and self._process.is_alive():
            return None
        if self.params is None:
            return Error(None, "no model is loaded", ErrorKind.NO_MODEL)
        name = Path(self.params.model_path).name
        if self.crashes >= CRASH_LIMIT:
            return Error(
                None,
                f"{name} ended the engine {self.crashes} times in a row, so it is not loaded "
                "again by itself. Load it again to retry, or try it with fewer GPU layers or "
                "a smaller context.",
                ErrorKind.CRASH_LOOP,
            )
        try:
            self._load_locked(self.params)
        except EngineError as exc:
            return Error(None, f"could not restart the engine: {exc}", exc.kind)
        return None

    def restart(self, on_progress: Callable[[float], None] | None = None) -> Loaded | None:
        """End the engine process (whatever it is doing) and load the same model again in a
        fresh one; None when no model was loaded."""
        params = self.params
        self.close(timeout=2.0)
        return self.load(params, on_progress) if params is not None else None

    def cancel(self) -> None:
        """Stop the reply being generated (or the prompt being read). Safe from any thread."""
        if self._process is not None and self._process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self._send(Cancel())

    def kill(self) -> None:
        """End the engine process now, from any thread (a stuck reply's reader gets Exited)."""
        process = self._process
        if process is not None and process.is_alive():
            process.kill()

    def forget(self, conversation_id: str) -> None:
        """Drop a conversation's KV state (RAM and disk), e.g. after it was deleted. A running
        worker does it (between steps, even while a reply streams); without one, the files
        are deleted here."""
        if self._process is not None and self._process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self._send(Forget(conversation_id))
                return
        delete_saved_states(self.params, conversation_id)

    def status(self) -> StatusReport | None:
        if self._process is None or not self._process.is_alive():
            return None
        if self._request_lock.locked():
            # The chat stream owns the pipe's events; report what the client knows.
            return StatusReport(
                loaded=self.loaded is not None,
                model_path=self.params.model_path if self.params else None,
                n_ctx=self.loaded.n_ctx if self.loaded else 0,
                busy=True,
                cached_conversations=(),
                rss_bytes=0,
            )
        with self._request_lock:
            self._send(Status())
            for event in self._events():
                if isinstance(event, StatusReport):
                    return event
                if isinstance(event, Exited):
                    return None
        return None

    def unload(self) -> None:
        """Free the model. The KV states are written to disk first."""
        self.params = None
        if self._process is None or not self._process.is_alive():
            return
        with self._request_lock:
            self._send(Unload())
            for event in self._events():
                if isinstance(event, StatusReport | Exited):
                    break
        self.loaded = None

    def close(self, timeout: float = 10.0) -> None:
        """End the worker (saving KV states), killing it if it does not end in time."""
        process = self._process
        if process is None:
            return
        if process.is_alive():
            self.cancel()
            with contextlib.suppress(OSError, ValueError):
                self._send(Shutdown())
            process.join(timeout)
            if process.is_alive():
                process.kill()
                process.join()
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None
        self.loaded = None

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
