"""Resolver: the one place a model name becomes what answers it. Used by `deskllm chat`,
`bench` and `quality`, the window's chats and `deskllm serve`:

- `auto` → the router on the loaded local model, escalating only to an endpoint that allows
  routing (privacy mode without one: nothing leaves the machine);
- `NAME/MODEL` → MODEL on the registered endpoint NAME;
- `*/MODEL` → a pool of every registered endpoint that serves MODEL (probed now);
- anything else → a local model file (`local_path`): the caller loads it through the loader
  and talks to it through its engine client.
"""

from __future__ import annotations

from sqlite_utils import Database

from deskllm.backends.names import NameKind, parse_name
from deskllm.backends.routing import probe_all
from deskllm.engine.client import EngineClient
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.engine.slot_client import SlotClient
from deskllm.remote.client import RemoteClient
from deskllm.remote.endpoint import Endpoint
from deskllm.remote.keys import KeyStore
from deskllm.remote.pool import RemotePool
from deskllm.remote.remote_model import RemoteModel
from deskllm.remote.router import RoutePolicy, Router
from deskllm.store.library import ModelLibrary
from deskllm.store.remote_endpoints import EndpointRegistry

LocalEngine = EngineClient | SlotClient


def client_for(endpoint: Endpoint, keys: KeyStore) -> RemoteClient:
    """A client of `endpoint` with its key (reading the keyring may wait: not on a GUI
    thread)."""
    return RemoteClient(endpoint, keys.get(endpoint.name))


class Resolver:
    """`db` holds the library and the registered endpoints; `keys` their API keys."""

    def __init__(self, db: Database, keys: KeyStore | None = None) -> None:
        self.db = db
        self.keys = keys or KeyStore()
        self.endpoints = EndpointRegistry(db)

    def local_path(self, name: str | None) -> str:
        """A local model name (a .gguf path, any part of an installed model's name; None:
        the starter model) → its file. Raises ModelNotFound with words for the user."""
        return ModelLibrary(self.db).resolve(name)

    def remote(self, name: str) -> RemoteModel | None:
        """NAME/MODEL or */MODEL → a RemoteModel; None for a name that is neither (or a
        NAME no endpoint has: it may be a local model's). Raises EngineError (UNREACHABLE)
        when no registered endpoint that answers serves a pool's MODEL."""
        parsed = parse_name(name)
        if parsed.kind == NameKind.ENDPOINT:
            endpoint = self.endpoints.find(parsed.endpoint or "")
            if endpoint is None:
                return None
            return RemoteModel(parsed.model or "", client_for(endpoint, self.keys), name)
        if parsed.kind != NameKind.POOL:
            return None
        model = parsed.model or ""
        endpoints = self.endpoints.all()
        probes = probe_all(endpoints, self.keys)
        serving = [e for e, p in zip(endpoints, probes, strict=True) if model in p.models]
        if not serving:
            raise EngineError(f"no registered endpoint that answers serves {model!r}",
                              ErrorKind.UNREACHABLE)  # fmt: skip
        pool = RemotePool(model, [client_for(e, self.keys) for e in serving])
        return RemoteModel(model, pool, name)

    def stored_remote(self, name: str) -> RemoteModel:
        """A conversation's NAME/MODEL or */MODEL → its RemoteModel; EngineError naming the
        endpoint when it is gone (the chat asks for another model)."""
        remote = self.remote(name)
        if remote is None:
            endpoint = parse_name(name).endpoint
            raise EngineError(f"no remote endpoint named {endpoint} any more: choose another "
                              "model for this chat", ErrorKind.UNREACHABLE)  # fmt: skip
        return remote

    def routing_target(self, spec: str | None = None) -> RemoteModel | None:
        """The remote model `auto` may escalate to: NAME/MODEL when given (its endpoint must
        allow routing: EngineError otherwise), else the first model of the first endpoint
        that allows routing. None when none does (privacy mode: nothing is contacted)."""
        if spec:
            name, _, model = spec.partition("/")
            endpoint = self.endpoints.find(name)
            if endpoint is None or not model:
                raise EngineError(f"{spec!r} is not NAME/MODEL of a registered endpoint",
                                  ErrorKind.BAD_REQUEST)  # fmt: skip
            if not endpoint.allow_routing:
                raise EngineError(f"endpoint {name} does not allow routing; allow it with "
                                  f"`deskllm remote routing {name} on`",
                                  ErrorKind.BAD_REQUEST)  # fmt: skip
            return RemoteModel(model, client_for(endpoint, self.keys), spec)
        targets = self.endpoints.routing_targets()
        if not targets:
            return None
        client = client_for(targets[0], self.keys)
        try:
            models = client.list_models()
        except EngineError:
            client.close()
            raise
        if not models:
            client.close()
            return None
        return RemoteModel(models[0], client, f"{targets[0].name}/{models[0]}")

    def stored_router(
        self, local: LocalEngine, target: str | None, policy: RoutePolicy | None = None
    ) -> Router:
        """The window's Auto: escalating to `target` (NAME/MODEL) only while its endpoint
        allows routing; without one nothing leaves the machine."""
        name = target.split("/", 1)[0] if target else None
        endpoint = self.endpoints.find(name) if name else None
        remote = None
        if target and endpoint is not None and endpoint.allow_routing:
            remote = self.stored_remote(target)
        return Router(local, remote, policy)
