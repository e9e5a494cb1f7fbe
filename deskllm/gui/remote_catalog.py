"""RemoteCatalog: the registered remote endpoints and, cached, the models each one lists and
whether it answered. The model menu reads the cache and never waits on the network; refresh()
asks every endpoint in the background (TaskRunner) and says when the answers are in.

Signals:
    changed(): the endpoints or their cached answers changed.
"""

from __future__ import annotations

import time
from concurrent.futures import Future

from sqlite_utils import Database

from deskllm.backends.routing import Probe, probe_all
from deskllm.gui.qt import QObject, Signal
from deskllm.gui.tasks import TaskRunner
from deskllm.remote.endpoint import Endpoint
from deskllm.store.remote_endpoints import EndpointRegistry

STALE_S = 300.0  # the menu asks again in the background when the lists are older than this


class RemoteCatalog(QObject):
    """Attributes:
    probes: endpoint name → its last answer (absent: not asked yet).
    checked_at: time.monotonic() of the last refresh that finished (None: none yet).
    """

    changed = Signal()

    def __init__(self, db: Database, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.registry = EndpointRegistry(db)
        self.probes: dict[str, Probe] = {}
        self.checked_at: float | None = None
        self._refreshing = False
        self._again = False
        self._tasks = TaskRunner("remote-catalog", self)

    def endpoints(self) -> list[Endpoint]:
        return self.registry.all()

    def models(self, name: str) -> tuple[str, ...]:
        found = self.probes.get(name)
        return found.models if found else ()

    def routing_target(self) -> str | None:
        """NAME/MODEL the router may escalate to and "Ask" sends to: the first endpoint that
        allows routing and listed a model (None: privacy mode, or none answered yet)."""
        for endpoint in self.registry.routing_targets():
            models = self.models(endpoint.name)
            if models:
                return f"{endpoint.name}/{models[0]}"
        return None

    def any_routing(self) -> bool:
        return bool(self.registry.routing_targets())

    def stale(self) -> bool:
        return self.checked_at is None or time.monotonic() - self.checked_at > STALE_S

    def refresh(self) -> None:
        """Ask every endpoint for its models in the background; `changed` when done."""
        self.changed.emit()  # the registry itself may have changed: show that at once
        if self._refreshing:
            self._again = True  # an endpoint added during a refresh is asked right after
            return
        endpoints = self.endpoints()
        if not endpoints:
            self.probes.clear()
            self.checked_at = time.monotonic()
            return
        self._refreshing = True
        self._tasks.run(lambda: _probe_all(endpoints), self._refreshed)

    def _refreshed(self, future: Future) -> None:
        self._refreshing = False
        try:
            answers = future.result()
        except Exception as exc:  # a probe must never break the menu: say it failed
            answers = {e.name: Probe(error=str(exc)) for e in self.endpoints()}
        known = {e.name for e in self.endpoints()}
        self.probes = {name: p for name, p in answers.items() if name in known}
        self.checked_at = time.monotonic()
        self.changed.emit()
        if self._again:
            self._again = False
            self.refresh()

    def shutdown(self) -> None:
        self._tasks.shutdown(wait=False)


def _probe_all(endpoints: list[Endpoint]) -> dict[str, Probe]:
    from deskllm.remote.keys import KeyStore

    answers = probe_all(endpoints, KeyStore())
    return {e.name: a for e, a in zip(endpoints, answers, strict=True)}
