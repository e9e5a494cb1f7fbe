"""The models: listing the served one and the installed ones a request may load, and checking
a request names the served model and it is ready."""

from __future__ import annotations

from pathlib import Path

from deskllm.server import errors
from deskllm.server.model_host import HostState, ModelHost
from deskllm.server.models.protocol import ModelCard, ModelList


def model_list(host: ModelHost) -> ModelList:
    """The served model first (its context as served), then every other installed model
    (the context it was trained for). Reads the library: call from a worker thread."""
    cards = [ModelCard(id=host.model_id, created=host.created, context_length=host.n_ctx,
                       loaded=host.state == HostState.READY)]  # fmt: skip
    if host.installed is not None:
        served = Path(host.params.model_path).resolve()
        for model_id, model in host.installed.by_id().items():
            if model_id == host.model_id or Path(model.path).resolve() == served:
                continue
            cards.append(ModelCard(id=model_id, created=int(model.added_at),
                                   context_length=model.context_length, loaded=False))  # fmt: skip
    return ModelList(data=cards)


def check_ready(host: ModelHost) -> None:
    if host.state == HostState.LOADING:
        raise errors.loading(_loading_message(host))
    if host.state == HostState.FAILED:
        raise errors.loading(f"The model could not be loaded: {host.failure}")


def _loading_message(host: ModelHost) -> str | None:
    if host.loading_id is None or (host.loading_id == host.model_id and host.n_ctx == 0):
        return None  # the first load: the default message
    return f"The model {host.loading_id!r} is loading; retry in a few seconds."


def check_model(host: ModelHost, name: str) -> None:
    """The served model's id, its file name or its file stem; anything else is 404 (after
    ModelHost.use has loaded an installed model a request named)."""
    if not host.serves(name):
        installed = tuple(host.installed.by_id()) if host.installed is not None else ()
        raise errors.model_not_found(name, host.model_id, installed)
