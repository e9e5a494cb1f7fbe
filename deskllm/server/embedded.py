"""EmbeddedServer: the local API served from inside the app (the window's Server panel), on a
thread of its own, from an engine the app has already loaded and keeps.

    server = EmbeddedServer(engine, loaded, model_id, config, slots)
    server.start()          # raises ServerStartError (port taken, ...)
    server.snapshot()       # what the panel shows
    server.stop()

Same FastAPI app, guards and limits as `deskllm serve`; the app's own chat shares the engine
(see deskllm.engine.slot_client), so the engine's slots are shared between the two. Given the
library (`installed`), a request naming another installed model loads it beside, in an engine
of its own, kept and evicted as `deskllm serve` keeps them (deskllm.server.model_host).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import Loaded
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.server.app import create_app
from deskllm.server.config import ServerConfig
from deskllm.server.extra_model import ExtraModel
from deskllm.server.gateway import Gateway
from deskllm.server.installed import InstalledModels
from deskllm.server.metrics import ReplyRecord, ServerMetrics
from deskllm.server.model_host import ModelHost
from deskllm.server.runner import uvicorn_server

log = logging.getLogger("deskllm.server")

START_TIMEOUT_S = 15.0


class ServerStartError(RuntimeError):
    """The server could not start listening (the reason is in words for the user)."""


@dataclass(frozen=True)
class LoadedModel:
    """A model the server answers with now: the window's own (pinned: it is the chat's) or
    one a request loaded beside it."""

    model_id: str
    memory_bytes: int  # the RAM the planner counted for it
    slots: int
    expires_in_s: float | None  # idle time left before it is unloaded; None: never
    busy: bool
    served: bool  # the window's own model (unloaded only with the window's)

    @property
    def pinned(self) -> bool:
        return self.expires_in_s is None


@dataclass(frozen=True)
class ServerSnapshot:
    url: str  # http://host:port/v1
    model_id: str
    slots: int
    running: int  # API requests the engine is answering
    waiting: int  # API requests queued for a slot
    replies: list[ReplyRecord]

    def slots_in_use(self, window_streaming: bool) -> int:
        """API requests answering, and the window's own reply when one streams."""
        return min(self.running + int(window_streaming), self.slots)


class EmbeddedServer:
    def __init__(
        self,
        engine: EngineClient,
        loaded: Loaded,
        model_id: str,
        config: ServerConfig,
        slots: int,
        gateway: Gateway | None = None,
        installed: InstalledModels | None = None,
        footprint_bytes: int = 0,
    ) -> None:
        if engine.params is None:
            raise ValueError("the engine has no model loaded")
        self.config = config
        self.slots = slots
        self.host = ModelHost(engine.params, model_id, max_queue=config.max_queue,
                              client=engine, parallel=slots, owns_client=False,
                              gateway=gateway, installed=installed)  # fmt: skip
        self.host.footprint_bytes = footprint_bytes
        self.host.serve_loaded(loaded)
        app = create_app(self.host, config, load_on_start=False)
        self.metrics: ServerMetrics = app.state.metrics
        self._server = uvicorn_server(app, config, graceful_s=3)
        self._thread: threading.Thread | None = None
        self._failure: str | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.config.host in ("0.0.0.0", "::") else self.config.host
        return f"http://{host}:{self.config.port}/v1"

    def start(self) -> None:
        """Listen, or raise ServerStartError; returns once requests are answered."""
        self._thread = threading.Thread(target=self._run, name="deskllm-api", daemon=True)
        self._thread.start()
        self._thread.join(0)
        waited = 0.0
        while not self._server.started and self._thread.is_alive() and waited < START_TIMEOUT_S:
            self._thread.join(0.05)
            waited += 0.05
        if not self._server.started:
            self.stop()
            reason = self._failure or "it did not start in time"
            raise ServerStartError(
                f"the server could not listen on {self.config.host}:{self.config.port}: "
                f"{reason}. Choose another port, or stop the program using this one."
            )
        self.metrics.note(f"listening on {self.url} ({self.slots} slots)")
        log.info("serving %s at %s", self.host.model_id, self.url)

    def _run(self) -> None:
        try:
            self._server.run()
        except SystemExit:  # uvicorn exits when it cannot bind (it has logged why)
            self._failure = "the address is in use or not available"
        except Exception as exc:
            log.exception("the API server failed")
            self._failure = str(exc)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def model_changed(self, loaded: Loaded, model_id: str) -> None:
        """The app loaded another model into the engine: serve it under its own name."""
        self.host.params, self.host.model_id = self.host.client.params, model_id
        self.host.serve_loaded(loaded)
        self.metrics.note(f"now serving {model_id}")

    def snapshot(self) -> ServerSnapshot:
        queue = self.host.queue
        return ServerSnapshot(self.url, self.host.model_id, self.slots, queue.running,
                              queue.waiting, self.metrics.recent_replies())  # fmt: skip

    def loaded_models(self) -> list[LoadedModel]:
        """The window's model first, then those loaded beside it, least recently used first."""
        host = self.host
        rows = [LoadedModel(host.model_id, host.footprint_bytes, host.parallel, None,
                            host.queue.running + host.queue.waiting > 0, True)]  # fmt: skip
        rows += [LoadedModel(e.model_id, e.footprint_bytes, e.queue.slots, e.expires_in(),
                             e.busy, False) for e in host.loaded_extras()]  # fmt: skip
        return rows

    def hold_model(
        self, model_path: str, timeout_s: float = 600.0
    ) -> tuple[EngineClient, Callable[[], None]]:
        """The engine of an installed model file other than the window's, loaded beside it
        now if it is not (as a request naming it would: evicting idle models by memory), held
        (never unloaded) until the returned release is called: the window's chat on another
        model while the server runs, without reloading the window's. Blocking: call it from a
        worker thread. Raises EngineError with the reason it cannot be loaded."""
        from deskllm.server.errors import ApiError

        host = self.host
        if host.installed is None or host.loop is None:
            raise EngineError("the server does not load other models")
        name = Path(model_path).name
        try:
            asyncio.run_coroutine_threadsafe(host.use(name), host.loop).result(timeout_s)
        except ApiError as exc:  # (does not fit, not installed): in the chat's words
            kind = ErrorKind.TOO_BIG if exc.code == "model_does_not_fit" else ErrorKind.ERROR
            raise EngineError(exc.message, kind) from None
        target = host.target(name)
        if not isinstance(target, ExtraModel):
            raise EngineError(f"{name} is not in the library: add it in the Models tab")
        target.held += 1
        target.touch()

        def release() -> None:
            target.held -= 1
            target.touch()

        return target.client, release

    def unload(self, model_id: str) -> bool:
        """Unload a model loaded beside the window's (its running replies end first)."""
        return model_id != self.host.model_id and self.host.unload(model_id)

    def pin(self, model_id: str, pinned: bool) -> bool:
        return model_id != self.host.model_id and self.host.pin(model_id, pinned)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop listening; open streams end (their replies are cancelled first, so they
        close before uvicorn's graceful shutdown runs out)."""
        self._server.should_exit = True
        self.host.queue.stop_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self.host.close()  # the queue; the engine stays with its owner
