"""The served model: listing it, and checking a request names it and it is ready."""

from __future__ import annotations

from pathlib import Path

from deskllm.server import errors
from deskllm.server.model_host import HostState, ModelHost
from deskllm.server.models.protocol import ModelCard, ModelList


def model_list(host: ModelHost) -> ModelList:
    card = ModelCard(id=host.model_id, created=host.created, context_length=host.n_ctx)
    return ModelList(data=[card])


def check_ready(host: ModelHost) -> None:
    if host.state == HostState.LOADING:
        raise errors.loading()
    if host.state == HostState.FAILED:
        raise errors.loading(f"The model could not be loaded: {host.failure}")


def check_model(host: ModelHost, name: str) -> None:
    """The served model's id, its file name or its file stem; anything else is 404."""
    path = Path(host.params.model_path)
    if name not in (host.model_id, path.name, path.stem):
        raise errors.model_not_found(name, host.model_id)
