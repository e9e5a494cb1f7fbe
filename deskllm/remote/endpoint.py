"""An endpoint: a named remote OpenAI-compatible server, as the registry stores it (its API
key is kept apart, see deskllm.remote.keys)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from deskllm.remote.presets import DEFAULT_PRESET, PRESETS

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 120.0  # a long prompt on a slow remote may take this before a token
# `deskllm chat --model NAME/MODEL` splits at the first "/", so a name cannot hold one.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class EndpointInvalid(ValueError):
    """A name, URL or preset that cannot be registered; the message says why."""


@dataclass(frozen=True)
class ModelPrice:
    """What a model costs on an endpoint, in the user's currency per million tokens."""

    input_per_mtok: float
    output_per_mtok: float


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str  # up to and including /v1: https://host:port/v1
    preset: str = DEFAULT_PRESET
    allow_routing: bool = False  # the router may send requests here only when the user says so
    prices: dict[str, ModelPrice] = field(default_factory=dict)
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S  # the longest wait for the next bytes

    @property
    def sampling_extensions(self) -> bool:
        preset = PRESETS.get(self.preset)
        return preset.sampling_extensions if preset else False


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise EndpointInvalid(
            f"{name!r} is not a usable endpoint name: use letters, digits, '.', '_' or '-' "
            "(no '/', which separates the endpoint from the model in NAME/MODEL)"
        )
    return name


def normalize_url(url: str) -> str:
    """The base URL as OpenAI's SDKs take it: http(s)://host[:port]/path without a trailing
    '/'. A bare host (no path) gets '/v1', where every preset's server has its routes."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointInvalid(f"{url!r} is not an http:// or https:// URL")
    if parts.username or parts.password:
        raise EndpointInvalid("put the API key in the keyring (--key-stdin), not in the URL")
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def resolve_url(url: str | None, preset: str) -> str:
    """The URL given, or the preset's default."""
    if preset not in PRESETS:
        raise EndpointInvalid(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    if url:
        return normalize_url(url)
    if not PRESETS[preset].default_url:
        raise EndpointInvalid(f"the {preset} preset has no default address: give a URL")
    return PRESETS[preset].default_url
