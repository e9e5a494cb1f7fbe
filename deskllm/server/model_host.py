"""ModelHost: the one model a server serves, loaded through the loader in the background (so
/health can answer 503 while it loads), and the queue in front of its engine, which answers
`parallel` requests at once (its slots).

With `installed` a request may name another installed model: `use()` checks it fits (the
planner's refusal, before the served model is touched), lets the running requests finish,
loads it in its place and answers; while it loads every other request gets 503. With a
`gateway` it also answers `auto` (the router on the served model) and remote models
(NAME/MODEL, */MODEL) through the same queue."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from deskllm.engine.backend import ChatBackend
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import Loaded, LoadParams
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.loader import ModelLoader
from deskllm.server import errors
from deskllm.server.engine_queue import EngineQueue
from deskllm.server.gateway import Gateway
from deskllm.server.installed import InstalledModels, api_id

log = logging.getLogger("deskllm.server")

_DRAIN_POLL_S = 0.05
_WATCH_S = 0.2  # how often a dead engine is looked for


class HostState(StrEnum):
    """What /health says (READY is "ok"): every state but READY answers 503."""

    LOADING = "loading"
    READY = "ready"
    RESTARTING = "restarting"  # the engine died (crash, kill, hang): a fresh one is loading
    STOPPING = "stopping"  # shutting down: running replies finish, new requests get 503
    FAILED = "error"


class ModelHost:
    """Serves `params`' model as `model_id`. `open_db` opens the app's database in the loading
    thread (the loader records calibration there); None loads without calibration.
    `installed`: the models a request may switch to; None serves `model_id` only."""

    def __init__(
        self,
        params: LoadParams,
        model_id: str,
        *,
        max_queue: int,
        open_db: Callable[[], object] | None = None,
        client: EngineClient | None = None,
        parallel: int = 1,
        installed: InstalledModels | None = None,
        owns_client: bool = True,
        gateway: Gateway | None = None,
    ) -> None:
        self.params = params
        self.owns_client = owns_client  # False: the caller loaded `client` and closes it
        self.model_id = model_id
        self.parallel = parallel
        self.installed = installed
        self.gateway = gateway  # `auto`, NAME/MODEL, */MODEL; None: local models only
        self._aliases: set[str] = set()  # short names found to mean the served model
        self.client = client or EngineClient(parallel)
        self.queue = EngineQueue(self.client, max_queue, parallel)
        self.state = HostState.LOADING
        self.loading_id: str | None = model_id  # the model being loaded, while LOADING
        self.failure: str | None = None
        self.n_ctx = 0
        self.created = int(time.time())
        self._open_db = open_db
        self._switching = asyncio.Lock()  # one switch at a time; requests for it wait here
        self.loaded_event = threading.Event()
        self.on_failure: Callable[[str], None] | None = None
        self.restart_cause: str | None = None  # why the engine is restarting, while RESTARTING
        self._state_lock = threading.Lock()  # STOPPING is never undone by a load or restart
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None

    def start_loading(self) -> None:
        threading.Thread(target=self._load, name="deskllm-api-load", daemon=True).start()
        if self.owns_client:  # the window restarts its own engine when it needs it
            self._watcher = threading.Thread(target=self._watch, name="deskllm-api-watch",
                                             daemon=True)  # fmt: skip
            self._watcher.start()

    def _watch(self) -> None:
        """Bring a dead engine back at once (its model, its slots), so /health goes from
        `restarting` to `ok` without a request having to come first and wait for it."""
        while not self._closed.wait(_WATCH_S):
            with self._state_lock:
                if (self.state != HostState.READY or self.client.params is None
                        or self.client.alive):  # fmt: skip
                    continue
                self.state = HostState.RESTARTING
                self.restart_cause = self.client.death_cause
            log.warning("%s; restarting it", self.restart_cause)
            error = self.client.revive()
            with self._state_lock:
                if self.state != HostState.RESTARTING:  # stopping meanwhile
                    continue
                if error is not None:  # a crash loop: /health says why; the server stays up
                    self.failure, self.state = error.reason, HostState.FAILED
                else:
                    self.state, self.restart_cause = HostState.READY, None

    def stop_admitting(self) -> None:
        """Shutting down: new requests get 503, running ones go on."""
        with self._state_lock:
            self.state = HostState.STOPPING

    def _loader(self) -> ModelLoader:
        db = self._open_db() if self._open_db else None
        return ModelLoader(self.client, db=db)  # the engine's slots (the window's may be more)

    def serve_loaded(self, loaded: Loaded) -> None:
        """Serve what the caller already loaded into the client (no load of its own)."""
        self._loaded(loaded)
        self.loaded_event.set()

    def _loaded(self, loaded: Loaded) -> None:
        self.n_ctx = loaded.conversation_ctx  # the longest conversation
        self.failure = None
        self.loading_id = None
        with self._state_lock:
            if self.state != HostState.STOPPING:
                self.state = HostState.READY
        log.info("serving %s (%d-token context)", self.model_id, self.n_ctx)

    def _load(self) -> None:
        try:
            loaded = self._loader().load(self.params)
        except EngineError as exc:
            self._fail(str(exc))
        except Exception as exc:  # a bug: say so rather than serve 503 forever
            log.exception("loading the model failed")
            self._fail(f"loading failed: {exc}")
        else:
            self._loaded(loaded)
        finally:
            self.loaded_event.set()

    def _fail(self, reason: str) -> None:
        self.failure = reason
        self.state = HostState.FAILED
        if self.on_failure is not None:
            self.on_failure(reason)

    def serves(self, name: str) -> bool:
        """Whether `name` is the served model: its id, its library name, file name or file
        stem."""
        path = Path(self.params.model_path)
        return (name in (self.model_id, path.name, path.stem) or api_id(name) == self.model_id
                or name in self._aliases)  # fmt: skip

    async def use(self, name: str) -> ChatBackend | None:
        """What answers `name`, before a request is admitted: a gateway name's backend (the
        router, a remote model), or None for the served model, after loading an installed
        model `name` means in its place. Raises ApiError: 503 while a model loads, 404 for a
        model that is not installed, 400 model_does_not_fit with the planner's numbers for
        one this machine cannot hold."""
        if self.gateway is not None and self.gateway.handles(name):
            if self.gateway.needs_local(name) and self.state != HostState.READY:
                return None  # admit() answers 503
            return await asyncio.to_thread(self.gateway.backend, name, self.client)
        if self.installed is None or self.serves(name) or self.state == HostState.LOADING:
            return None  # admit() answers: served, 404 or 503
        async with self._switching:
            if self.serves(name) or self.state == HostState.LOADING:
                return None
            found = await asyncio.to_thread(self.installed.find, name)
            if found is None:
                return None  # admit() answers 404 with the list
            model_id, model = found
            if Path(model.path).resolve() == Path(self.params.model_path).resolve():
                self._aliases.add(name)  # a short name of the served model: nothing to load
                return None
            params = self.installed.params_for(model.path)
            try:
                await asyncio.to_thread(self._check, params)
            except EngineError as exc:
                raise _load_error(model_id, exc) from None
            # From here (in the event loop, so no request is between its check and its
            # submit) every new request gets 503 until the switch ends.
            self.state, self.loading_id = HostState.LOADING, model_id
            log.info("switching from %s to %s", self.model_id, model_id)
            await asyncio.to_thread(self._switch, params, model_id)
            return None

    def _check(self, params: LoadParams) -> None:
        self._loader().check(params)

    def _switch(self, params: LoadParams, model_id: str) -> None:
        """In a worker thread: wait for the admitted requests, then load; a failed load
        brings the previous model back. Raises ApiError for the request that asked."""
        while self.queue.waiting + self.queue.running:
            time.sleep(_DRAIN_POLL_S)
        previous = (self.params, self.model_id)
        try:
            loaded = self._loader().load(params)
        except Exception as exc:
            if not isinstance(exc, EngineError):
                log.exception("loading %s failed", model_id)
                exc = EngineError(f"loading failed: {exc}", ErrorKind.ERROR)
            self._restore(*previous)
            raise _load_error(model_id, exc) from None
        self.params, self.model_id = params, model_id
        self._aliases.clear()
        self._loaded(loaded)

    def _restore(self, params: LoadParams, model_id: str) -> None:
        self.loading_id = model_id
        try:
            loaded = self._loader().load(params)
        except Exception as exc:  # nothing is served now; a later request may load another
            log.exception("reloading %s failed", model_id)
            self.failure = f"{model_id} could not be loaded again: {exc}"
            self.state = HostState.FAILED
            return
        self._loaded(loaded)

    def close(self) -> None:
        self._closed.set()
        if self._watcher is not None:
            self._watcher.join()  # a restart under way ends before the engine is closed
        self.queue.close()
        if self.gateway is not None:
            self.gateway.close()
        if self.owns_client:
            self.client.close()


def _load_error(model_id: str, exc: EngineError) -> errors.ApiError:
    if exc.kind == ErrorKind.TOO_BIG:
        return errors.does_not_fit(model_id, exc.reason)
    if exc.kind == ErrorKind.BAD_MODEL:
        return errors.bad_request(f"{model_id} cannot be loaded: {exc.reason}", param="model",
                                  code="bad_model")  # fmt: skip
    return errors.ApiError(500, f"{model_id} could not be loaded: {exc.reason}",
                           type="server_error", param="model",
                           code="model_load_failed")  # fmt: skip
