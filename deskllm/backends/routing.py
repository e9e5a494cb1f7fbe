"""What the router needs besides a name: an endpoint's model list (Probe), the calibration of
its uncertainty threshold on the loaded local model, and the `router_escalate` setting read as
a share. Kept per local model by the caller (the window, the server)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from deskllm.engine.backend import ChatBackend
from deskllm.engine.domain import Sampling
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.remote.calibration import CALIBRATION_PROMPTS, local_scores
from deskllm.remote.client import RemoteClient
from deskllm.remote.endpoint import Endpoint
from deskllm.remote.keys import KeyStore
from deskllm.remote.router import DEFAULT_UNCERTAINTY_TOKENS, RoutePolicy, threshold_for_share

# Failures that say the endpoint cannot be used now (not that the request was wrong): the
# chat offers to go on with the local model.
ENDPOINT_DOWN = (ErrorKind.AUTH, ErrorKind.UNREACHABLE, ErrorKind.TIMEOUT, ErrorKind.DROPPED)


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


def probe_all(endpoints: Sequence[Endpoint], keys: KeyStore) -> list[Probe]:
    """Every endpoint's probe, in order, asked at once (at most 8 at a time)."""
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(endpoints)))) as workers:
        return list(workers.map(lambda e: probe(e, keys.get(e.name)), endpoints))


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


def calibrate(local: ChatBackend, share: float, sampling: Sampling) -> Calibration:
    """Score every calibration prompt on the loaded local model (its first K tokens each)
    and set the threshold for `share`."""
    scores: list[float | None] = []
    for prompt in CALIBRATION_PROMPTS:
        found = local_scores(local, [prompt], DEFAULT_UNCERTAINTY_TOKENS, sampling)
        scores.append(found[0] if found else None)
    local.forget("calibration-0")  # local_scores' conversation: its KV state is not kept
    measured = [s for s in scores if s is not None]
    threshold = threshold_for_share(measured, share) if measured else None
    return Calibration(local.label or "", share, tuple(scores), threshold)
