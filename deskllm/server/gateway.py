"""Gateway: the names a server answers besides the models it can load, so one key and one
address reach local and remote models side by side:

- `auto`: the router on the served model, as the window's Auto does: local first, escalating
  (context, failure, uncertainty) only to an endpoint that allows routing. The uncertainty
  threshold is calibrated once per served model for the `router_escalate` share;
- `NAME/MODEL`: MODEL on the registered remote endpoint NAME;
- `*/MODEL`: every registered endpoint that serves MODEL, as a pool.

Names resolve through deskllm.backends.Resolver, like every other face's. Each request gets
its own router (they hold per-reply state); remote clients are kept per name and closed with
the server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sqlite_utils import Database

from deskllm.backends import Resolver
from deskllm.backends.names import AUTO, NameKind, parse_name
from deskllm.backends.routing import Calibration, calibrate, calibration_key, probe
from deskllm.engine.backend import ChatBackend
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import Sampling
from deskllm.engine.errors import EngineError
from deskllm.remote.remote_model import RemoteModel
from deskllm.remote.router import RoutePolicy
from deskllm.server import errors

log = logging.getLogger("deskllm.server")


class Gateway:
    """`open_db` opens the app's database (endpoints, keys' names) on the calling thread;
    `escalate_share`: the share of replies `auto` sends remote for uncertainty (None: only
    for context and failures)."""

    def __init__(
        self, open_db: Callable[[], Database], escalate_share: float | None = None
    ) -> None:
        self.open_db = open_db
        self.escalate_share = escalate_share
        self._lock = threading.Lock()
        # `auto`'s target and calibration are found once: requests that come meanwhile wait.
        self._auto_setup = threading.Lock()
        self._remotes: dict[str, RemoteModel | None] = {}  # None: no endpoint allows routing
        self._calibrations: dict[str, Calibration] = {}

    @staticmethod
    def handles(name: str) -> bool:
        return parse_name(name).kind != NameKind.LOCAL

    @staticmethod
    def needs_local(name: str) -> bool:
        return name == AUTO

    def backend(self, name: str, local: EngineClient) -> ChatBackend:
        """What answers `name` (blocking: a pool and `auto` ask endpoints for their models).
        Raises ApiError 404 for a NAME no endpoint has, 502 when none serves MODEL."""
        db = self.open_db()
        try:
            resolver = Resolver(db)
            if name == AUTO:
                with self._auto_setup:
                    target, policy = self._target(resolver), self._policy(local)
                return resolver.router(local, target, policy)
            with self._lock:
                remote = self._remotes.get(name)
            if remote is None:
                try:
                    remote = resolver.remote(name)
                except EngineError as exc:
                    raise errors.ApiError(502, exc.reason, type="server_error", param="model",
                                          code="no_endpoint") from None  # fmt: skip
                if remote is None:
                    raise errors.ApiError(
                        404, f"The model {name!r}: no remote endpoint is named "
                        f"{parse_name(name).endpoint!r} (deskllm remote list).",
                        param="model", code="model_not_found",
                    )  # fmt: skip
                with self._lock:
                    remote = self._remotes.setdefault(name, remote)
            return remote
        finally:
            db.close()

    def _target(self, resolver: Resolver) -> RemoteModel | None:
        """`auto`'s remote target, looked up once (an endpoint that did not answer then is
        asked again next time)."""
        with self._lock:
            if AUTO in self._remotes:
                return self._remotes[AUTO]
        try:
            target = resolver.routing_target()
        except EngineError as exc:
            log.warning("auto: %s; replies stay local", exc.reason)
            return None
        with self._lock:
            self._remotes[AUTO] = target
        return target

    def _policy(self, local: EngineClient) -> RoutePolicy:
        """`auto`'s uncertainty threshold, calibrated on the served model the first time
        (24 short greedy replies; under _auto_setup)."""
        if self.escalate_share is None:
            return RoutePolicy()
        sampling = Sampling(temperature=0)  # the score of the model's own likeliest tokens
        key = calibration_key(local.label or "", self.escalate_share, sampling)
        found = self._calibrations.get(key)
        if found is None:
            found = calibrate(local, self.escalate_share, sampling)
            log.info("auto: threshold %s escalates %.0f%% of the calibration prompts",
                     found.threshold, self.escalate_share * 100)  # fmt: skip
            self._calibrations[key] = found
        return found.policy

    def model_ids(self) -> list[str]:
        """`auto`, then NAME/MODEL of every model the registered endpoints serve now (each
        endpoint asked at once; one that does not answer lists nothing)."""
        db = self.open_db()
        try:
            resolver = Resolver(db)
            endpoints = resolver.endpoints.all()
            keys = resolver.keys
            with ThreadPoolExecutor(max_workers=max(1, min(8, len(endpoints)))) as workers:
                probes = list(workers.map(lambda e: probe(e, keys.get(e.name)), endpoints))
        finally:
            db.close()
        ids = [AUTO]
        for endpoint, answer in zip(endpoints, probes, strict=True):
            ids += [f"{endpoint.name}/{model}" for model in answer.models]
        return ids

    def close(self) -> None:
        with self._lock:
            remotes = [r for r in self._remotes.values() if r is not None]
            self._remotes.clear()
        for remote in remotes:
            remote.close()
