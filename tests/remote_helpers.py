"""Third-party OpenAI-compatible servers for the remote-engine tests, run as their users run
them, on a free port of 127.0.0.1: llama-cpp-python's own (`python -m llama_cpp.server`) and
llama.cpp's `llama-server`, built from the same vendored sources as the engine
(packaging/build_llama_server.sh; .ci/run builds it, and the tests that need it skip, so fail
in CI, where it was not built)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from server_helpers import START_TIMEOUT_S, free_port

LLAMA_SERVER = Path(__file__).parents[1] / "build" / "llama-server" / "llama-server"
needs_llama_server = pytest.mark.skipif(
    not LLAMA_SERVER.is_file(),
    reason=f"{LLAMA_SERVER} is absent: run packaging/build_llama_server.sh",
)


@dataclass
class LlamaCppServer:
    url: str  # http://127.0.0.1:PORT
    process: subprocess.Popen
    log: Path

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


# Where llama.cpp's extra buffer types crash (a CPU that advertises AMX without running it,
# see deskllm.engine.extra_bufts_probe), the server is started with them off, as deskllm's own
# engine does; it has no option for that, so its model parameters' default is changed first.
_NO_EXTRA_BUFTS = """
import runpy
import llama_cpp.llama_cpp as c
_default = c.llama_model_default_params
def _params():
    params = _default()
    params.use_extra_bufts = False
    return params
c.llama_model_default_params = _params
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def _wait_ready(server: LlamaCppServer, name: str, key: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if server.process.poll() is not None:
            raise AssertionError(f"{name} exited:\n{server.output()}")
        try:
            headers = {"Authorization": f"Bearer {key}"}
            if httpx2.get(server.v1 + "/models", headers=headers, timeout=5).is_success:
                return
        except httpx2.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} did not start:\n{server.output()}")
        time.sleep(0.2)


@contextmanager
def _serving(command: list[str], name: str, key: str, log: Path):
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   env=os.environ | {"HF_HUB_OFFLINE": "1"})  # fmt: skip
    server = LlamaCppServer(f"http://127.0.0.1:{command[command.index('--port') + 1]}",
                            process, log)  # fmt: skip
    try:
        _wait_ready(server, name, key)
        yield server
    finally:
        process.kill()
        process.wait()


def llama_server_command(model: Path, alias: str, port: int, extra_bufts: bool, slots: int = 1,
                         ctx: int = 2048, threads: int = 2) -> list[str]:  # fmt: skip
    """llama-server as a user starts it: `slots` slots sharing one KV pool of slots × `ctx`
    cells (as deskllm's engine), `threads` threads, its chat templates (Jinja) and defaults
    otherwise. `--no-repack` where the extra buffer types crash, as deskllm's engine."""
    return [str(LLAMA_SERVER), "--model", str(model), "--alias", alias, "--host", "127.0.0.1",
            "--port", str(port), "--threads", str(threads), "--threads-batch", str(threads),
            "--ctx-size", str(ctx * slots), "--parallel", str(slots), "--kv-unified", "--jinja",
            *([] if extra_bufts else ["--no-repack"])]  # fmt: skip


@contextmanager
def llama_server(model: Path, alias: str, key: str, log_dir: Path, extra_bufts: bool,
                 slots: int = 1, extra_args: tuple[str, ...] = ()):  # fmt: skip
    """llama.cpp's llama-server on `model` as `alias`, requiring `key`; killed at the end.
    `extra_args`: more of its options (`--spec-type ngram-mod`)."""
    port = free_port()
    command = llama_server_command(model, alias, port, extra_bufts, slots) + ["--api-key", key,
                                                                             *extra_args]
    with _serving(command, "llama-server", key, log_dir / f"llama-server-{port}.log") as server:
        yield server


@contextmanager
def llama_cpp_server(model: Path, alias: str, key: str, log_dir: Path, extra_bufts: bool):
    """llama-cpp-python's server on `model` as `alias`, requiring `key`; killed at the end.
    `extra_bufts`: the crash-safe probe's answer for this machine."""
    port = free_port()
    start = ["-m", "llama_cpp.server"] if extra_bufts else ["-c", _NO_EXTRA_BUFTS]
    command = [sys.executable, *start, "--model", str(model), "--model_alias", alias,
               "--n_threads", "2", "--n_ctx", "2048", "--port", str(port), "--api_key", key]
    log = log_dir / f"llama-cpp-server-{port}.log"
    with _serving(command, "llama_cpp.server", key, log) as server:
        yield server
