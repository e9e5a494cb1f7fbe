"""Memory read bandwidth, measured, cached per machine.

Decoding one token reads every active weight once, so tokens/s <= bandwidth / bytes read per
token. We time parallel reductions over a buffer much larger than any CPU cache: numpy's max()
is vectorised and releases the GIL, so one thread per physical core streams memory about as
llama.cpp's matrix-vector kernels do. The result is a ceiling's input, not a promise: real
decoding reaches some fraction of it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from deskllm import paths
from deskllm.hardware.keys import machine_key
from deskllm.hardware.report import BandwidthMeasurement, CpuInfo, MemoryInfo

CACHE_FILE = "memory-bandwidth.json"
_MIB = 1 << 20
# Larger than desktop CPUs' L3 caches. 256 MiB measured the same bandwidth here but took 0.9 s
# instead of 0.07 s to set up (page faults), and the test must stay well under a second.
BUFFER_BYTES = 128 * _MIB
MIN_BUFFER_BYTES = 32 * _MIB
TIME_BUDGET_S = 0.5  # timed passes stop once this much time has gone by


def decode_ceiling_tokens_per_s(bandwidth_gbps: float, bytes_per_token: int) -> float:
    """Upper bound on decode speed (tokens/s): bandwidth (GB/s) / bytes read per token."""
    if bytes_per_token <= 0:
        raise ValueError("bytes_per_token must be positive")
    return bandwidth_gbps * 1e9 / bytes_per_token


def measure_read_bandwidth(
    threads: int, buffer_bytes: int = BUFFER_BYTES, time_budget_s: float = TIME_BUDGET_S
) -> BandwidthMeasurement:
    """Best of several timed passes reading `buffer_bytes` with `threads` threads (GB/s)."""
    import numpy as np  # only here: ~0.1 s to import, and the probe itself must stay fast

    threads = max(1, threads)
    count = max(threads, buffer_bytes // 8)
    data = np.ones(count, dtype=np.float64)  # writing it faults the pages in before timing
    parts = np.array_split(data, threads)
    best = float("inf")
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(np.max, parts))  # warm-up: thread start-up, TLB
        started = time.perf_counter()
        passes = 0
        while passes < 3 or (passes < 10 and time.perf_counter() - started < time_budget_s):
            t0 = time.perf_counter()
            list(pool.map(np.max, parts))
            best = min(best, time.perf_counter() - t0)
            passes += 1
    bytes_read = int(data.nbytes)
    return BandwidthMeasurement(
        gbps=round(bytes_read / best / 1e9, 2),
        bytes_read=bytes_read,
        seconds=round(best, 6),
        threads=threads,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        cached=False,
    )


def cached_only(
    cpu: CpuInfo, memory: MemoryInfo, *, cache_dir: Path | None = None
) -> BandwidthMeasurement | None:
    """This machine's cached measurement, or None; never measures."""
    entry = _read_cache(_cache_path(cache_dir)).get(machine_key(cpu, memory))
    try:
        return dataclasses.replace(BandwidthMeasurement(**entry), cached=True) if entry else None
    except TypeError:
        return None  # written by another version


def cached_or_measured(
    cpu: CpuInfo, memory: MemoryInfo, *, refresh: bool = False, cache_dir: Path | None = None
) -> BandwidthMeasurement:
    """This machine's cached measurement, or a new one (always new when `refresh`)."""
    if not refresh:
        cached = cached_only(cpu, memory, cache_dir=cache_dir)
        if cached is not None:
            return cached
    threads = cpu.cores_physical or cpu.cores_logical or os.cpu_count() or 1
    buffer_bytes = max(MIN_BUFFER_BYTES, min(BUFFER_BYTES, memory.available_bytes // 8))
    result = measure_read_bandwidth(threads, buffer_bytes)
    path = _cache_path(cache_dir)
    entries = _read_cache(path)
    entries[machine_key(cpu, memory)] = {
        k: v for k, v in dataclasses.asdict(result).items() if k != "cached"
    }
    _write_cache(path, entries)
    return result


def _cache_path(cache_dir: Path | None) -> Path:
    return (cache_dir or paths.probe_cache_dir()) / CACHE_FILE


def _read_cache(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, entries: dict[str, dict]) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    paths.write_private_text(tmp, json.dumps(entries, indent=1, sort_keys=True))
    os.replace(tmp, path)  # atomic: a second instance never reads half a file
