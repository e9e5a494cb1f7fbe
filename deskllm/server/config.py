"""How a server is started: address, key and limits."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_PORT = 8383
DEFAULT_MAX_QUEUE = 8
DEFAULT_MAX_BODY_BYTES = 4 * 2**20
DEFAULT_SHUTDOWN_GRACE_S = 10.0
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


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
    # Host names besides localhost, 127.0.0.1 and [::1] a loopback server answers (see
    # host_allowed: the DNS rebinding guard).
    allowed_hosts: tuple[str, ...] = ()
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S  # running replies may finish this long

    def host_allowed(self, name: str) -> bool:
        """Whether a request's Host (or Origin's host) name may reach this server. On a
        loopback bind only loopback names and --allowed-hosts: a web page whose own name was
        rebound to 127.0.0.1 sends its name, not these. Other binds require the API key."""
        if not is_loopback(self.host):
            return True
        name = name.lower().rstrip(".")
        if name in LOOPBACK_NAMES or name in (h.lower() for h in self.allowed_hosts):
            return True
        try:
            return ipaddress.ip_address(name).is_loopback  # an address: no name to rebind
        except ValueError:
            return False

    def refusal(self) -> str | None:
        """Why this configuration must not start, or None."""
        if self.max_queue < 0:
            return "--max-queue must be 0 or more"
        if self.shutdown_grace_s < 0:
            return "--shutdown-grace must be 0 or more seconds"
        for name in self.allowed_hosts:
            if not name or any(c in name for c in "/:@ ") or name == "*":
                return (f"--allowed-hosts {name!r}: name one host exactly, without scheme, "
                        "port or wildcard")  # fmt: skip
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
