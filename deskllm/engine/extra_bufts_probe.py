"""Crash-safe probe: do llama.cpp's extra buffer types (weight repacking, AMX) work here?

On some machines the CPU advertises AMX but the hypervisor does not run it, and the first decode
with the AMX buffer type segfaults inside ggml. The probe loads a small model with extra buffers
on in a throwaway child process and decodes a few tokens; a crash there only means "off". The
answer is remembered per engine build and CPU, since both decide it.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from pathlib import Path

from deskllm import paths

log = logging.getLogger("deskllm.engine")

PROBE_TIMEOUT_S = 120.0


def _probe_child(model_path: str) -> None:
    from deskllm.engine.domain import LoadParams, Sampling
    from deskllm.engine.scheduler import Scheduler

    params = LoadParams(model_path=model_path, n_ctx=256, n_threads=1, n_batch=64,
                        kv_ram_budget_mb=0, kv_disk_budget_mb=0)  # fmt: skip
    runtime = Scheduler(params, 1, True)
    prompt = runtime.tokenize("The quick brown fox jumps over the lazy dog.")
    runtime.submit(1, prompt, Sampling(temperature=0.0, max_tokens=4))
    while not any(out.finish for out in runtime.step()):
        pass
    runtime.close()


def build_key() -> str:
    """The engine build on this CPU (hardware.keys.engine_key), read without loading
    llama.cpp in this process."""
    from deskllm.hardware.cpu import probe_cpu
    from deskllm.hardware.keys import engine_key

    return engine_key(probe_cpu())


def _cache_file() -> Path:
    return paths.probe_cache_dir() / f"extra-bufts-{build_key()}.json"


def extra_bufts_work(
    model_path: str | None, refresh: bool = False, probe: Callable[[str], None] = _probe_child
) -> bool:
    """True when extra buffer types are safe to use; probes once per build and CPU.
    `probe` runs in the child (an importable function; tests pass one that crashes)."""
    cache = _cache_file()
    if not refresh and cache.is_file():
        try:
            return bool(json.loads(cache.read_text())["works"])
        except (OSError, ValueError, KeyError):
            pass
    if model_path is None:
        return False  # nothing to probe with: the safe choice
    started = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=probe, args=(model_path,), name="deskllm-bufts-probe")
    child.start()
    child.join(PROBE_TIMEOUT_S)
    if child.is_alive():
        child.kill()
        child.join()
    works = child.exitcode == 0
    result = {
        "works": works,
        "exitcode": child.exitcode,
        "model": model_path,
        "seconds": round(time.perf_counter() - started, 2),
    }
    if not works:
        log.warning(
            "llama.cpp's extra buffer types crash on this machine (probe exit %s); "
            "using plain CPU buffers",
            child.exitcode,
        )
    if child.exitcode is not None and child.exitcode > 0:
        return False  # an ordinary error (unreadable model): not an answer worth remembering
    tmp = cache.with_suffix(".tmp")
    paths.write_private_text(tmp, json.dumps(result))
    os.replace(tmp, cache)
    return works
