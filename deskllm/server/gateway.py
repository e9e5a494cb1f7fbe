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
from typing import TypeVar

from sqlite_utils import Database

from deskllm.backends import Resolver
from deskllm.backends.names import AUTO, NameKind, parse_name
from deskllm.backends.routing import Calibration, calibrate, calibration_key, probe_all
from deskllm.engine.backend import ChatBackend
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import Sampling
from deskllm.engine.errors import EngineError
from deskllm.remote.keys import KeyStore
from deskllm.remote.remote_model import RemoteModel
from deskllm.remote.router import RoutePolicy, Router
from deskllm.server import errors

log = logging.getLogger("deskllm.server")

T = TypeVar("T")


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
        Raises ApiError 404 for a NAME no endpoint has, 502 when none serves MODEL. The
        database is opened only the first time a name is resolved."""
        if name == AUTO:
            with self._auto_setup:
                (target, unreachable), policy = self._target(), self._policy(local)
            return Router(local, target, policy, unreachable)
        with self._lock:
            remote = self._remotes.get(name)
        if remote is not None:
            return remote
        try:
            remote = self._resolve(lambda resolver: resolver.remote(name))
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
            kept = self._remotes.setdefault(name, remote)
        if kept is not remote:
            remote.close()  # another request resolved the name meanwhile
        return kept

    def _resolve(self, lookup: Callable[[Resolver], T]) -> T:
        """`lookup` on a Resolver of a database opened for it (on the calling thread)."""
        db = self.open_db()
        try:
            return lookup(Resolver(db))
        finally:
            db.close()

    def _target(self) -> tuple[RemoteModel | None, str | None]:
        """`auto`'s remote target, looked up once, or why its endpoint could not be asked (it
        is asked again next time; under _auto_setup)."""
        with self._lock:
            if AUTO in self._remotes:
                return self._remotes[AUTO], None
        try:
            target = self._resolve(lambda resolver: resolver.routing_target())
        except EngineError as exc:
            log.warning("auto: %s; replies stay local", exc.reason)
            return None, exc.reason
        with self._lock:
            self._remotes[AUTO] = target
        return target, None

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
        endpoints = self._resolve(lambda resolver: resolver.endpoints.all())
        probes = probe_all(endpoints, KeyStore())
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
