"""Third-party OpenAI-compatible servers for the remote-engine tests: llama-cpp-python's own
(`python -m llama_cpp.server`), run as its users run it, on a free port of 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
from server_helpers import START_TIMEOUT_S, free_port


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


@contextmanager
def llama_cpp_server(model: Path, alias: str, key: str, log_dir: Path, extra_bufts: bool):
    """llama-cpp-python's server on `model` as `alias`, requiring `key`; killed at the end.
    `extra_bufts`: the crash-safe probe's answer for this machine."""
    port = free_port()
    log = log_dir / f"llama-cpp-server-{port}.log"
    start = ["-m", "llama_cpp.server"] if extra_bufts else ["-c", _NO_EXTRA_BUFTS]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, *start, "--model", str(model), "--model_alias",
             alias, "--n_threads", "2", "--n_ctx", "2048", "--port", str(port),
             "--api_key", key],
            stdout=out, stderr=subprocess.STDOUT, env=os.environ | {"HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
    server = LlamaCppServer(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise AssertionError(f"llama_cpp.server exited:\n{server.output()}")
            try:
                headers = {"Authorization": f"Bearer {key}"}
                if httpx2.get(server.v1 + "/models", headers=headers, timeout=5).is_success:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"llama_cpp.server did not start:\n{server.output()}")
            time.sleep(0.2)
        yield server
    finally:
        process.kill()
        process.wait()
