"""ModelHost: the one model a server serves, loaded through the loader in the background (so
/health can answer 503 while it loads), and the queue in front of its engine, which answers
`parallel` requests at once (its slots).

With `installed` a request may name another installed model: `use()` loads it beside the
served one (an ExtraModel: its own engine process, slots and queue) while the loaded models
keep answering, after checking with the planner that it fits in what the loaded models leave
(`memory_budget`, or the memory free now); if it does not, idle extra models are unloaded
least recently used first until it does, and if even that is not enough it is refused with
the planner's numbers. The served model is pinned: never unloaded. An extra model is kept for
`keep_alive_s` after its last request (a request may say otherwise: Ollama's keep_alive).
With a `gateway` it also answers `auto` (the router on the served model) and remote models
(NAME/MODEL, */MODEL) through the same queue."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

import psutil

from deskllm.engine.backend import ChatBackend
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import Loaded, LoadParams
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.loader import ModelLoader
from deskllm.server import errors
from deskllm.server.engine_queue import EngineQueue
from deskllm.server.extra_model import ExtraModel
from deskllm.server.gateway import Gateway
from deskllm.server.installed import InstalledModels, names_model

log = logging.getLogger("deskllm.server")

_WATCH_S = 0.2  # how often a dead engine is looked for
_REAP_S = 0.25  # how often expired extra models are looked for
KEEP_ALIVE_S = 600.0  # an extra model's keep-alive after its last request (10 min)


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
        keep_alive_s: float = KEEP_ALIVE_S,
        memory_budget: int | None = None,
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
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once it runs
        self.on_failure: Callable[[str], None] | None = None
        self.restart_cause: str | None = None  # why the engine is restarting, while RESTARTING
        self._state_lock = threading.Lock()  # STOPPING is never undone by a load or restart
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None
        # Models loaded on demand beside the served one, by id; changed in the event loop
        # (use) and by the reaper thread, under _extras_lock.
        self.extras: dict[str, ExtraModel] = {}
        # Evicted engines shutting down, with the memory they are about to give back.
        self._unloading: list[tuple[threading.Thread, int]] = []
        self._extras_lock = threading.Lock()
        self.keep_alive_s = keep_alive_s
        self.memory_budget = memory_budget  # bytes every loaded model shares; None: free RAM
        self.footprint_bytes = 0  # the served model's RAM, as the planner counted it
        self.evictions: list[str] = []  # extra models unloaded for memory, oldest first
        self._reaper: threading.Thread | None = None

    def start_loading(self) -> None:
        threading.Thread(target=self._load, name="deskllm-api-load", daemon=True).start()
        if self.installed is not None:
            self._reaper = threading.Thread(target=self._reap, name="deskllm-api-keep-alive",
                                            daemon=True)  # fmt: skip
            self._reaper.start()
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

    def _loader(self, client: EngineClient | None = None,
                exclude: frozenset[str] = frozenset()) -> ModelLoader:  # fmt: skip
        """A loader into `client` (the served model's by default) that plans against the
        memory the loaded models leave (counting those in `exclude` as unloaded)."""
        db = self._open_db() if self._open_db else None
        # The engine's slots (the window's may be more); the memory the loaded models leave.
        return ModelLoader(client or self.client, db=db,
                           hardware=lambda: self._hardware_left(exclude))  # fmt: skip

    def _hardware_left(self, exclude: frozenset[str] = frozenset()):
        """This machine's report with the memory a new model may take: the budget less what
        the loaded models need, or the free memory less their weights (mapped file pages,
        which the system counts as available though the models read them)."""
        from deskllm.planner.machine import current_hardware

        report = current_hardware()
        if report is None:
            return None
        with self._extras_lock:
            extras = [e for k, e in self.extras.items() if k not in exclude]
        primary = self.client.loaded is not None
        if self.memory_budget is not None:
            held = (self.footprint_bytes if primary else 0) + sum(e.footprint_bytes
                                                                  for e in extras)  # fmt: skip
            left = self.memory_budget - held
        else:
            mapped = [Path(e.params.model_path) for e in extras]
            if primary:
                mapped.append(Path(self.params.model_path))
            left = report.memory.available_bytes - sum(_size(p) for p in mapped)
            # An evicted engine still exiting holds memory that is as good as free.
            left += sum(memory for closing, memory in self._unloading if closing.is_alive())
        memory = dataclasses.replace(report.memory, available_bytes=max(1, left))
        return dataclasses.replace(report, memory=memory)

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
            loader = self._loader()
            loaded = loader.load(self.params)
            self.footprint_bytes = planned_ram(loader, self.params)
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
        return names_model(name, self.model_id, Path(self.params.model_path), self._aliases)

    def target(self, name: str) -> ModelHost | ExtraModel:
        """What answers a local model's `name` (after use()): an extra model that serves it,
        else the served model (which says 404 for a name it does not serve)."""
        with self._extras_lock:
            extra = next((e for e in self.extras.values() if e.serves(name)), None)
        return extra if extra is not None else self

    async def use(self, name: str, keep_alive_s: float | None = None) -> ChatBackend | None:
        """What answers `name`, before a request is admitted: a gateway name's backend (the
        router, a remote model), or None for a local model, which target(name) then gives:
        the served one, or an installed model loaded beside it (now, if it was not; requests
        for it wait for the load, the other models keep answering). `keep_alive_s`: how long
        an extra model stays after this request (Ollama's keep_alive; negative: always).
        Raises ApiError: 503 while the served model loads, 404 for a model that is not
        installed (admit() says it), 400 model_does_not_fit with the planner's numbers for
        one that does not fit even with every idle extra model unloaded."""
        if self.gateway is not None and self.gateway.handles(name):
            if self.gateway.needs_local(name) and self.state != HostState.READY:
                return None  # admit() answers 503
            return await asyncio.to_thread(self.gateway.backend, name, self.client)
        if self.installed is None or self.serves(name) or self.state == HostState.LOADING:
            return None  # admit() answers: served, 404 or 503
        if self._touch(name, keep_alive_s):
            return None
        async with self._switching:  # one load at a time; requests for it wait here
            if self._touch(name, keep_alive_s) or self.state == HostState.LOADING:
                return None
            found = await asyncio.to_thread(self.installed.find, name)
            if found is None:
                return None  # admit() answers 404 with the list
            model_id, model = found
            if Path(model.path).resolve() == Path(self.params.model_path).resolve():
                self._aliases.add(name)  # a short name of the served model: nothing to load
                return None
            with self._extras_lock:
                same = next((e for e in self.extras.values()
                             if Path(e.params.model_path).resolve() == Path(model.path).resolve()),
                            None)  # fmt: skip
            if same is not None:
                same.aliases.add(name)
                same.touch(keep_alive_s)
                return None
            params = self.installed.params_for(model.path)
            await self._make_room(params, model_id)
            self.loading_id = model_id
            log.info("loading %s beside %s", model_id, self.model_id)
            try:
                extra = await asyncio.to_thread(self._load_extra, params, model_id)
            finally:
                self.loading_id = None if self.state != HostState.LOADING else self.loading_id
            extra.touch(keep_alive_s)
            with self._extras_lock:
                self.extras[model_id] = extra
            return None

    def loaded_extras(self) -> list[ExtraModel]:
        """The models loaded beside the served one, least recently used first."""
        with self._extras_lock:
            return sorted(self.extras.values(), key=lambda e: e.last_used)

    def queues(self) -> list[EngineQueue]:
        """Every loaded model's queue: the served one's first."""
        return [self.queue] + [e.queue for e in self.loaded_extras()]

    def _touch(self, name: str, keep_alive_s: float | None) -> bool:
        """An extra model already loaded for `name`: mark it used."""
        with self._extras_lock:
            extra = next((e for e in self.extras.values() if e.serves(name)), None)
        if extra is not None:
            extra.touch(keep_alive_s)
        return extra is not None

    async def _make_room(self, params: LoadParams, model_id: str) -> None:
        """Unload idle extra models, least recently used first, until the planner says
        `params` fits; raises ApiError (400 model_does_not_fit) with its numbers when even
        all of them unloaded would not be enough (then none is unloaded)."""
        try:
            await asyncio.to_thread(self._check, params)
            return
        except EngineError as exc:
            if exc.kind != ErrorKind.TOO_BIG:
                raise _load_error(model_id, exc) from None
            refusal = exc
        with self._extras_lock:
            idle = sorted((e for e in self.extras.values() if not e.busy),
                          key=lambda e: e.last_used)  # fmt: skip
        # The fewest least recently used idle models whose memory makes room (the planner
        # counting them as unloaded); none is unloaded when even all of them would not do.
        victims: list[ExtraModel] = []
        for victim in idle:
            victims.append(victim)
            try:
                await asyncio.to_thread(self._check, params,
                                        frozenset(v.model_id for v in victims))  # fmt: skip
                break
            except EngineError as exc:
                refusal = exc
        else:
            raise _load_error(model_id, self._budget_note(refusal))
        with self._extras_lock:
            if any(v.busy or self.extras.get(v.model_id) is not v for v in victims):
                taken = True  # one was asked for meanwhile: it stays; plan again
            else:
                taken = False
                for victim in victims:
                    del self.extras[victim.model_id]
        if taken:
            return await self._make_room(params, model_id)
        for victim in victims:
            log.info("unloading %s (least recently used) to make room for %s",
                     victim.model_id, model_id)  # fmt: skip
            self.evictions.append(victim.model_id)
            # Its engine saves its KV states and exits while the new model loads (a new
            # engine takes half a second to start before it holds much memory): the swap
            # does not wait for the shutdown too.
            closing = threading.Thread(target=_unload, args=(victim,),
                                       name=f"unload-{victim.model_id}")  # fmt: skip
            closing.start()
            self._unloading = [u for u in self._unloading if u[0].is_alive()]
            self._unloading.append((closing, victim.footprint_bytes))

    def _budget_note(self, exc: EngineError) -> EngineError:
        if self.memory_budget is None:
            return exc
        gib = 1 << 30
        with self._extras_lock:
            held = self.footprint_bytes + sum(e.footprint_bytes for e in self.extras.values())
        return EngineError(f"{exc.reason} (the server's memory budget is "
                           f"{self.memory_budget / gib:.2f} GiB, {held / gib:.2f} GiB of it held "
                           "by the loaded models that are answering or pinned)",
                           exc.kind)  # fmt: skip

    def _check(self, params: LoadParams, exclude: frozenset[str] = frozenset()) -> None:
        self._loader(exclude=exclude).check(params)

    def _load_extra(self, params: LoadParams, model_id: str) -> ExtraModel:
        """In a worker thread: a fresh engine with `params`' model. Raises ApiError."""
        client = EngineClient(self.parallel)
        loader = self._loader(client)
        try:
            loaded = loader.load(params)
        except Exception as exc:
            client.close()
            if not isinstance(exc, EngineError):
                log.exception("loading %s failed", model_id)
                exc = EngineError(f"loading failed: {exc}", ErrorKind.ERROR)
            raise _load_error(model_id, exc) from None
        queue = EngineQueue(client, self.queue.max_waiting, self.parallel)
        queue.on_done = self.queue.on_done  # the same metrics
        log.info("serving %s beside %s (%d-token context)", model_id, self.model_id,
                 loaded.conversation_ctx)  # fmt: skip
        return ExtraModel(model_id, loader.last_check.params if loader.last_check else params,
                          client, queue, loaded.conversation_ctx,
                          planned_ram(loader, params), self.keep_alive_s,
                          installed=self.installed)  # fmt: skip

    def unload(self, name: str) -> bool:
        """Unload the extra model `name` means now (Ollama's keep_alive 0 with no prompt);
        False when none is loaded. Its running replies end first."""
        with self._extras_lock:
            extra = next((e for e in self.extras.values() if e.serves(name)), None)
            if extra is not None:
                del self.extras[extra.model_id]
        if extra is not None:
            extra.close()
        return extra is not None

    def pin(self, name: str, pinned: bool) -> bool:
        """Keep the extra model `name` means loaded until unpinned (Ollama's keep_alive -1),
        or give it back the server's keep-alive; False when none is loaded."""
        return self._touch(name, -1.0 if pinned else self.keep_alive_s)

    def _reap(self) -> None:
        """Unload extra models whose keep-alive ran out while idle."""
        while not self._closed.wait(_REAP_S):
            now = time.monotonic()
            with self._extras_lock:
                expired = [e for e in self.extras.values() if e.expired(now)]
                for extra in expired:
                    del self.extras[extra.model_id]
            for extra in expired:
                log.info("unloading %s: idle for its keep-alive (%.0f s)", extra.model_id,
                         extra.keep_alive_s)  # fmt: skip
                extra.close()

    def close(self) -> None:
        self._closed.set()
        if self._watcher is not None:
            self._watcher.join()  # a restart under way ends before the engine is closed
        if self._reaper is not None:
            self._reaper.join()
        with self._extras_lock:
            extras, self.extras = list(self.extras.values()), {}
        for extra in extras:
            extra.close()
        for closing, _memory in self._unloading:
            closing.join()  # evicted engines finish saving their KV states and exit
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


def keep_alive(ttl: int | None) -> float | None:
    """LM Studio's `ttl` (seconds; -1: keep) as use()'s keep_alive_s."""
    return None if ttl is None else float(ttl)


def _unload(extra: ExtraModel) -> None:
    """An evicted model's engine closed at the lowest CPU priority: its KV states saved and
    its process ended without slowing the load that took its place."""
    with contextlib.suppress(Exception):  # (a process already gone has no priority)
        if extra.client.pid is not None:
            psutil.Process(extra.client.pid).nice(19)
    extra.close()


def planned_ram(loader: ModelLoader, params: LoadParams) -> int:
    """The RAM the planner counted for the load `loader` just made (its file size without a
    plan)."""
    check = loader.last_check
    if check is not None and check.plan is not None:
        return check.plan.estimate.ram_bytes
    return _size(Path(params.model_path))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
