"""How a server is started: address, key and limits."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_PORT = 8383
DEFAULT_MAX_QUEUE = 8
DEFAULT_MAX_BODY_BYTES = 4 * 2**20


@dataclass(frozen=True)
class ServerConfig:
    """`max_queue`: requests that may wait while one is answered (more get 429).
    `max_body_bytes`: larger request bodies get 413. `cors_origins`: exact origins
    (scheme://host[:port]) whose web pages may call the API."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None
    max_queue: int = DEFAULT_MAX_QUEUE
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call the API; none: CORS off

    def refusal(self) -> str | None:
        """Why this configuration must not start, or None."""
        if self.max_queue < 0:
            return "--max-queue must be 0 or more"
        for origin in self.cors_origins:
            if origin == "*" or "://" not in origin or origin.endswith("/"):
                return (f"--cors-origin {origin!r}: name one origin exactly, as "
                        "scheme://host[:port] (no '*', no path)")  # fmt: skip
        if not is_loopback(self.host) and not self.api_key:
            return (
                f"refusing to listen on {self.host} without an API key: anyone who can reach "
                "this machine could use the model. Pass --api-key KEY or --api-key stored "
                "(clients send it as 'Authorization: Bearer KEY'), or bind to 127.0.0.1."
            )
        return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface
