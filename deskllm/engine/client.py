"""EngineClient: the one Qt-free API to the engine process, used by the CLI and the GUI.

The worker is a separate OS process (multiprocessing "spawn", which also works in a frozen app):
a segfault, an abort inside ggml or the out-of-memory killer ends the worker, never the app.
The client turns the death into an `Exited` event with the reason, and the next request starts
a fresh worker and loads the last model again.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING

from deskllm import paths
from deskllm.catalog.gguf_header import GgufError, read_header
from deskllm.engine.protocol import (
    Cancel,
    Chat,
    ChatMessage,
    Done,
    Error,
    Event,
    Exited,
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

if TYPE_CHECKING:
    from deskllm.hardware.report import HardwareReport

log = logging.getLogger("deskllm.engine")

DEFAULT_CTX_CAP = 4096
_SIGNAL_WORDS = {
    signal.SIGKILL: "was killed (SIGKILL) — by the user, or by the system when memory ran out",
    signal.SIGSEGV: "crashed (segmentation fault inside llama.cpp)",
    signal.SIGABRT: "aborted (a llama.cpp assertion failed)",
    signal.SIGBUS: "crashed (bus error: the model file may have changed on disk)",
    signal.SIGTERM: "was terminated (SIGTERM)",
}


class EngineError(RuntimeError):
    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


class EngineBusy(EngineError):
    def __init__(self) -> None:
        super().__init__("the engine is answering another request; wait or stop it", "busy")


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


def resolve_params(params: LoadParams, n_ctx_train: int | None) -> LoadParams:
    """Fill the defaults that depend on the model and the machine."""
    changes: dict = {}
    if params.n_ctx <= 0:
        changes["n_ctx"] = min(n_ctx_train or DEFAULT_CTX_CAP, DEFAULT_CTX_CAP)
    elif n_ctx_train and params.n_ctx > n_ctx_train:
        changes["n_ctx"] = n_ctx_train
    if params.n_threads <= 0:
        import psutil

        changes["n_threads"] = psutil.cpu_count(logical=False) or 1
    if not params.kv_disk_dir:
        changes["kv_disk_dir"] = str(paths.kv_cache_dir())
    return replace(params, **changes) if changes else params


class EngineClient:
    """Talks to one engine process. Thread-safe: one request at a time; cancel() from any
    thread."""

    def __init__(self, log_level: int = logging.WARNING) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._process = None
        self._conn = None
        self._env: dict[str, str] = {}
        self._send_lock = threading.Lock()
        self._request_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._log_level = log_level
        self.params: LoadParams | None = None  # what to reload after a crash
        self.loaded: Loaded | None = None

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
        """Events from the worker until the caller stops; ends with Exited if it dies."""
        process, conn = self._process, self._conn
        while True:
            ready = wait([conn, process.sentinel])
            # When only the process ended, the pipe may still hold what it sent before.
            if conn not in ready and not conn.poll(0):
                break
            try:
                event = conn.recv()
            except (EOFError, OSError):
                break  # the worker's end of the pipe is closed: it has ended
            yield event
        process.join(5)
        if process.is_alive():  # the pipe broke but the process hangs on: end it
            process.kill()
            process.join(5)
        self.loaded = None
        yield Exited(exit_reason(process.exitcode), process.exitcode, request_id)

    # API --------------------------------------------------------------------------------------
    def load(
        self,
        params: LoadParams,
        on_progress: Callable[[float], None] | None = None,
        *,
        hardware: HardwareReport | None = None,
    ) -> Loaded:
        """Load a model (replacing the current one). Raises EngineError with a clear message;
        kind "too_big" when the planner finds it cannot fit `hardware` (by default this
        machine's report, probed once per process)."""
        from deskllm.planner.guard import auto_gpu_layers, load_refusal

        path = Path(params.model_path)
        try:
            header = read_header(path)
        except GgufError as exc:
            raise EngineError(str(exc), kind="bad_model") from None
        params = resolve_params(replace(params, model_path=str(path)), header.context_length)
        if params.gpu_auto:
            layers = auto_gpu_layers(header, params, hardware)
            params = replace(params, n_gpu_layers=layers, gpu_auto=False)
        refusal = load_refusal(header, params, hardware)
        if refusal:
            raise EngineError(refusal, kind="too_big")
        if params.use_extra_bufts is None:
            from deskllm.engine.extra_bufts_probe import extra_bufts_work
            from deskllm.starter import starter_model_path

            starter = starter_model_path()
            probe_model = str(starter) if starter else params.model_path
            params = replace(params, use_extra_bufts=extra_bufts_work(probe_model))
        with self._request_lock:
            return self._load_locked(params, on_progress)

    def _load_locked(
        self, params: LoadParams, on_progress: Callable[[float], None] | None = None
    ) -> Loaded:
        env = {"GGML_VK_VISIBLE_DEVICES": params.vulkan_devices} if params.vulkan_devices else {}
        self._ensure_process(env)
        self._send(Load(params))
        for event in self._events():
            if isinstance(event, LoadProgress):
                if on_progress:
                    on_progress(event.fraction)
            elif isinstance(event, Loaded):
                self.params, self.loaded = params, event
                return event
            elif isinstance(event, Error):
                raise EngineError(event.message, event.kind)
            elif isinstance(event, Exited):
                name = Path(params.model_path).name
                raise EngineError(f"{event.reason} while loading {name}", "exited")
        raise EngineError("the engine ended without answering")

    def chat(
        self,
        conversation_id: str,
        messages: list[ChatMessage] | tuple[ChatMessage, ...],
        sampling: Sampling | None = None,
        *,
        wait_if_busy: bool = True,
    ) -> Iterator[Event]:
        """Stream events for one reply: TextDelta and Metrics, then Done, Error or Exited.

        A second call while a reply streams waits (or raises EngineBusy with wait_if_busy=False).
        """
        if not self._request_lock.acquire(blocking=wait_if_busy):
            raise EngineBusy()
        try:
            if self.loaded is None or self._process is None or not self._process.is_alive():
                if self.params is None:
                    yield Error(None, "no model is loaded", kind="error")
                    return
                try:
                    self._load_locked(self.params)  # a fresh engine after a crash
                except EngineError as exc:
                    yield Error(None, f"could not restart the engine: {exc}", kind=exc.kind)
                    return
            request_id = next(self._ids)
            self._send(Chat(request_id, conversation_id, tuple(messages), sampling or Sampling()))
            for event in self._events(request_id):
                if getattr(event, "request_id", request_id) not in (request_id, None):
                    continue  # late events of an earlier, abandoned request
                yield event
                if isinstance(event, Done | Error | Exited):
                    return
        finally:
            self._request_lock.release()

    def cancel(self) -> None:
        """Stop the reply being generated (or the prompt being read). Safe from any thread."""
        if self._process is not None and self._process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self._send(Cancel())

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
