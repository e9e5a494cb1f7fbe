"""What a model name means, before anything is looked up: the router (`auto`), MODEL on the
registered endpoint NAME (`NAME/MODEL`), MODEL on every endpoint serving it (`*/MODEL`), or a
local model (an installed model's name, any part of it, or a path; an existing file always
means that file)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

AUTO = "auto"
AUTO_TITLE = "Auto (local first)"
POOL = "*"  # */MODEL: every registered endpoint that serves MODEL


class NameKind(StrEnum):
    AUTO = "auto"
    ENDPOINT = "endpoint"
    POOL = "pool"
    LOCAL = "local"


@dataclass(frozen=True)
class ModelName:
    kind: NameKind
    text: str  # the name as given
    endpoint: str | None = None  # NAME of NAME/MODEL
    model: str | None = None  # MODEL of NAME/MODEL and */MODEL


def parse_name(name: str) -> ModelName:
    if name == AUTO:
        return ModelName(NameKind.AUTO, name)
    path = Path(name).expanduser()
    if "/" in name and not path.is_absolute() and not path.exists():
        endpoint, model = name.split("/", 1)
        if endpoint == POOL:
            return ModelName(NameKind.POOL, name, model=model)
        return ModelName(NameKind.ENDPOINT, name, endpoint, model)
    return ModelName(NameKind.LOCAL, name)


def is_remote(model: str | None) -> bool:
    """Whether a conversation's model is the router or a remote model (local models are
    stored as absolute paths)."""
    return bool(model) and parse_name(model).kind != NameKind.LOCAL


def endpoint_of(model: str | None) -> str | None:
    """NAME of a NAME/MODEL choice; None for the router, pools and local models."""
    return parse_name(model).endpoint if model else None
