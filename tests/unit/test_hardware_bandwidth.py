"""Memory bandwidth: a short real measurement, cached per machine, refreshable."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from deskllm.hardware import bandwidth, keys
from deskllm.hardware.cpu import probe_cpu
from deskllm.hardware.memory import probe_memory
from deskllm.hardware.report import CpuInfo


def test_measurement_is_short_and_plausible() -> None:
    started = time.perf_counter()
    result = bandwidth.measure_read_bandwidth(threads=2, buffer_bytes=64 << 20)
    assert time.perf_counter() - started < 5.0  # a hang guard; the speed target is benched
    assert result.bytes_read == 64 << 20
    # DDR3 single channel gives a few GB/s, HBM a few TB/s; anything outside is a broken timer.
    assert 0.5 < result.gbps < 5000
    assert result.gbps == pytest.approx(result.bytes_read / result.seconds / 1e9, rel=0.01)


def test_default_measurement_stays_well_under_a_second(tmp_path: Path) -> None:
    started = time.perf_counter()
    result = bandwidth.cached_or_measured(probe_cpu(), probe_memory(), cache_dir=tmp_path)
    assert time.perf_counter() - started < 5.0  # a hang guard; the speed target is benched
    assert not result.cached


def test_cached_per_machine_and_refreshable(tmp_path: Path) -> None:
    cpu, memory = probe_cpu(), probe_memory()
    first = bandwidth.cached_or_measured(cpu, memory, cache_dir=tmp_path)
    again = bandwidth.cached_or_measured(cpu, memory, cache_dir=tmp_path)
    assert again.cached and again.gbps == first.gbps
    assert bandwidth.cached_only(cpu, memory, cache_dir=tmp_path) == again

    fresh = bandwidth.cached_or_measured(cpu, memory, refresh=True, cache_dir=tmp_path)
    assert not fresh.cached
    assert bandwidth.cached_only(cpu, memory, cache_dir=tmp_path).gbps == fresh.gbps

    other_machine = CpuInfo("Some Other CPU", 64, 128, ())
    assert bandwidth.cached_only(other_machine, memory, cache_dir=tmp_path) is None
    saved = json.loads((tmp_path / bandwidth.CACHE_FILE).read_text())
    assert list(saved) == [keys.machine_key(cpu, memory)]


def test_a_corrupt_cache_is_measured_again(tmp_path: Path) -> None:
    (tmp_path / bandwidth.CACHE_FILE).write_text("{not json")
    result = bandwidth.cached_or_measured(probe_cpu(), probe_memory(), cache_dir=tmp_path)
    assert not result.cached


def test_default_cache_lives_in_the_probe_cache_dir(deskllm_home: Path) -> None:
    cpu, memory = probe_cpu(), probe_memory()
    bandwidth.cached_or_measured(cpu, memory)
    assert (deskllm_home / "probes" / bandwidth.CACHE_FILE).is_file()


def test_decode_ceiling() -> None:
    # 100 GB/s over a 4 GB model read once per token: at most 25 tokens/s.
    assert bandwidth.decode_ceiling_tokens_per_s(100.0, 4_000_000_000) == pytest.approx(25.0)
    with pytest.raises(ValueError):
        bandwidth.decode_ceiling_tokens_per_s(100.0, 0)
