"""Run a server with uvicorn until it is stopped (Ctrl+C, SIGTERM) or its model fails to load.

A signal stops it the way a server left running for weeks should stop (systemctl stop, Ctrl+C,
logging out): new requests get 503 with Retry-After, running replies may finish for
`shutdown_grace_s`, then every reply still open ends with the finish reason "shutdown" (its
stream with a final chunk and [DONE]), the engine saves its KV states and the process exits.
A second signal skips the rest of the grace."""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import FrameType

import uvicorn

from deskllm.server.app import create_app
from deskllm.server.config import ServerConfig
from deskllm.server.model_host import ModelHost

log = logging.getLogger("deskllm.server")

MAX_CONNECTIONS = 64  # more open connections get 503 from uvicorn: a bounded server
FLUSH_S = 1.0  # for the stopped replies' streams to write their final chunk
CLOSE_S = 1.0  # uvicorn's own wait for connections, once every reply has ended
_POLL_S = 0.05


def uvicorn_config(app, config: ServerConfig, graceful_s: float) -> uvicorn.Config:
    """uvicorn serving `app` at `config`'s address, bounded, waiting `graceful_s` for open
    connections when stopped (`deskllm serve` and the window's server alike)."""
    return uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level="warning",
        limit_concurrency=MAX_CONNECTIONS,
        timeout_graceful_shutdown=graceful_s,
    )


def uvicorn_server(app, config: ServerConfig, graceful_s: float) -> uvicorn.Server:
    return uvicorn.Server(uvicorn_config(app, config, graceful_s))


class GracefulServer(uvicorn.Server):
    """uvicorn whose signals drain `host` first (see the module's docstring). uvicorn's own
    handling would stop listening at once and cut open streams after its timeout."""

    def __init__(self, config: uvicorn.Config, host: ModelHost, grace_s: float) -> None:
        super().__init__(config)
        self.host = host
        self.grace_s = grace_s
        self._signalled = 0
        self._hurry = threading.Event()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs in the signal handler, on the event loop's thread: never block here.
        self._signalled += 1
        if self._signalled > 1:
            self._hurry.set()
            return
        self.host.stop_admitting()
        threading.Thread(target=self._drain, name="deskllm-api-drain", daemon=True).start()

    def _drain(self) -> None:
        queues = self.host.queues()  # the served model's and each model's loaded beside it

        def busy() -> int:
            return sum(q.running + q.waiting for q in queues)

        if n := busy():
            print(f"deskllm: stopping: {n} request{'s' if n > 1 else ''} may finish for "
                  f"up to {self.grace_s:g} s (a second signal stops them now)",
                  file=sys.stderr, flush=True)  # fmt: skip
        deadline = time.monotonic() + self.grace_s
        while busy() and time.monotonic() < deadline:
            if self._hurry.wait(_POLL_S):
                break
        for queue in queues:
            queue.stop_all("shutdown")
        flushed = time.monotonic() + FLUSH_S
        while busy() and time.monotonic() < flushed:
            time.sleep(_POLL_S)
        self.should_exit = True


def serve(host: ModelHost, config: ServerConfig) -> int:
    """Serve until stopped: 0, or 1 when the model could not be loaded."""
    app = create_app(host, config)
    server = GracefulServer(uvicorn_config(app, config, CLOSE_S), host, config.shutdown_grace_s)

    def loaded() -> None:
        host.loaded_event.wait()
        if host.failure is None:
            print(f"deskllm: {host.model_id} is loaded ({host.n_ctx}-token context); ready",
                  file=sys.stderr, flush=True)  # fmt: skip

    def failed(reason: str) -> None:
        print(f"deskllm: {reason}", file=sys.stderr, flush=True)
        server.should_exit = True

    host.on_failure = failed
    threading.Thread(target=loaded, name="deskllm-api-ready", daemon=True).start()
    server.run()
    return 1 if host.failure else 0
