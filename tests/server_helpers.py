"""Run `deskllm serve` as users run it: a real process on a free port of 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2

API_KEY = "test-key-7c1f"
START_TIMEOUT_S = 240  # a loaded CI machine; the model itself loads in seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_env(home: Path, session_home: Path) -> dict[str, str]:
    """The environment of a server in `home`, with the crash-safe probe's cached answer."""
    if (session_home / "probes").is_dir():
        shutil.copytree(session_home / "probes", home / "probes", dirs_exist_ok=True)
    return os.environ | {"DESKLLM_HOME": str(home), "HF_HUB_OFFLINE": "1"}


@dataclass
class Server:
    url: str  # http://127.0.0.1:PORT
    process: subprocess.Popen
    log: Path

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def running_server(home: Path, session_home: Path, *args: str, env: dict[str, str] | None = None):
    """`deskllm serve --ctx 2048 ARGS` until /health says ok; stopped (SIGTERM) at the end.
    `env`: variables added to the server's environment."""
    port = free_port()
    log = home / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "deskllm", "serve", "--port", str(port), "--ctx", "2048",
             *args],
            env=serve_env(home, session_home) | (env or {}), stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_healthy(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"the server exited ({server.process.returncode}):\n"
                                 f"{server.stderr()}")  # fmt: skip
        try:
            if httpx2.get(server.url + "/health", timeout=5).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the server was not healthy in time:\n{server.stderr()}")
