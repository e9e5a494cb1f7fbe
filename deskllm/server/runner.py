"""Run a server with uvicorn until it is stopped (Ctrl+C, SIGTERM) or its model fails to load."""

from __future__ import annotations

import sys
import threading

import uvicorn

from deskllm.server.app import create_app
from deskllm.server.config import ServerConfig
from deskllm.server.model_host import ModelHost

MAX_CONNECTIONS = 64  # more open connections get 503 from uvicorn: a bounded server


def uvicorn_server(app, config: ServerConfig, graceful_s: float) -> uvicorn.Server:
    """uvicorn serving `app` at `config`'s address, bounded, waiting `graceful_s` for open
    connections when stopped (`deskllm serve` and the window's server alike)."""
    return uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level="warning",
            limit_concurrency=MAX_CONNECTIONS,
            timeout_graceful_shutdown=graceful_s,
        )
    )


def serve(host: ModelHost, config: ServerConfig) -> int:
    """Serve until stopped: 0, or 1 when the model could not be loaded."""
    app = create_app(host, config)
    server = uvicorn_server(app, config, graceful_s=5)

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
