"""What a conversation's model names when it is not a local file, Qt-free: "auto" (the
router, local first) or NAME/MODEL (MODEL on the registered endpoint NAME), and the chat
clients they become. Built on the engine thread: reading a key may wait on the keyring."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from sqlite_utils import Database

from deskllm.engine.client import EngineClient
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.engine.protocol import Sampling
from deskllm.remote.calibration import CALIBRATION_PROMPTS, local_scores
from deskllm.remote.client import RemoteClient
from deskllm.remote.endpoint import Endpoint
from deskllm.remote.keys import KeyStore
from deskllm.remote.remote_model import RemoteModel
from deskllm.remote.router import (
    DEFAULT_UNCERTAINTY_TOKENS,
    RoutePolicy,
    Router,
    threshold_for_share,
)
from deskllm.store.remote_endpoints import EndpointRegistry

AUTO = "auto"
AUTO_TITLE = "Auto (local first)"
# Failures that say the endpoint cannot be used now (not that the request was wrong): the
# chat offers to go on with the local model.
ENDPOINT_DOWN = (ErrorKind.AUTH, ErrorKind.UNREACHABLE, ErrorKind.TIMEOUT, ErrorKind.DROPPED)


def is_remote(model: str | None) -> bool:
    """Whether a conversation's model is the router or NAME/MODEL (local models are stored as
    absolute paths; an existing file always means that file)."""
    if not model:
        return False
    if model == AUTO:
        return True
    return "/" in model and not Path(model).is_absolute() and not Path(model).exists()


def endpoint_of(model: str | None) -> str | None:
    """NAME of a NAME/MODEL choice; None for the router and local models."""
    if not is_remote(model) or model == AUTO:
        return None
    return model.split("/", 1)[0]


@dataclass(frozen=True)
class Probe:
    """An endpoint's answer to its model list: the models, or why it did not answer."""

    models: tuple[str, ...] = ()
    error: str | None = None

    @property
    def healthy(self) -> bool:
        return self.error is None


def probe(endpoint: Endpoint, key: str | None) -> Probe:
    """Ask `endpoint` for its models now (a network call: off the GUI thread)."""
    with RemoteClient(endpoint, key) as client:
        try:
            return Probe(tuple(client.list_models()))
        except EngineError as exc:
            return Probe(error=exc.reason)


def remote_model(db: Database, spec: str, keys: KeyStore | None = None) -> RemoteModel:
    """NAME/MODEL → a RemoteModel on that endpoint; EngineError naming it when it is gone."""
    name, model = spec.split("/", 1)
    endpoint = EndpointRegistry(db).find(name)
    if endpoint is None:
        raise EngineError(f"no remote endpoint named {name} any more: choose another model for "
                          "this chat", ErrorKind.UNREACHABLE)  # fmt: skip
    keys = keys or KeyStore()
    return RemoteModel(model, RemoteClient(endpoint, keys.get(name)), spec)


def escalate_share(setting: str) -> float | None:
    """The `router_escalate` setting as a share of replies (None: the check is off)."""
    try:
        share = float(setting)
    except ValueError:
        return None
    return share if 0 < share <= 1 else None


@dataclass(frozen=True)
class Calibration:
    """The local model's uncertainty score on each calibration prompt (None: it wrote no
    token) and the threshold that sends `share` of them to the remote model."""

    model: str
    share: float
    scores: tuple[float | None, ...]
    threshold: float | None  # None: no scores, the check stays off

    @property
    def policy(self) -> RoutePolicy:
        return RoutePolicy(self.threshold, DEFAULT_UNCERTAINTY_TOKENS)


def calibration_key(model: str, share: float, sampling: Sampling) -> str:
    """Calibrations are kept per local model, share and chat sampling (which tokens are
    sampled changes how sure they look)."""
    return repr((model, share, sorted(asdict(sampling).items())))


def calibrate(local: EngineClient, share: float, sampling: Sampling) -> Calibration:
    """Score every calibration prompt on the loaded local model (its first K tokens each; on
    the engine thread) and set the threshold for `share`."""
    scores: list[float | None] = []
    for prompt in CALIBRATION_PROMPTS:
        found = local_scores(local, [prompt], DEFAULT_UNCERTAINTY_TOKENS, sampling)
        scores.append(found[0] if found else None)
    local.forget("calibration-0")  # local_scores' conversation: its KV state is not kept
    measured = [s for s in scores if s is not None]
    threshold = threshold_for_share(measured, share) if measured else None
    model = local.params.model_path if local.params else ""
    return Calibration(model, share, tuple(scores), threshold)


def router(
    db: Database, local: EngineClient, target: str | None, policy: RoutePolicy | None = None
) -> Router:
    """The router on the loaded local model, escalating to `target` (NAME/MODEL) only while
    its endpoint allows routing; without one nothing leaves the machine."""
    name = target.split("/", 1)[0] if target else None
    endpoint = EndpointRegistry(db).find(name) if name else None
    remote = remote_model(db, target) if endpoint is not None and endpoint.allow_routing else None
    local_model = local.params.model_path if local.params else ""
    return Router(local, local_model, remote, policy)
