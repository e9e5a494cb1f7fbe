"""report_to_dict / report_from_dict, and the strict child-answer conversion."""

from __future__ import annotations

import json

import pytest

from deskllm.hardware import HardwareReport, report_from_dict, report_to_dict
from deskllm.hardware.report import (
    ApiProbe,
    BandwidthMeasurement,
    CpuInfo,
    Device,
    EngineDevice,
    EngineInfo,
    MemoryInfo,
    OffloadTarget,
    ProbeError,
)
from deskllm.hardware.serialize import from_plain

GIB = 1 << 30
REPORT = HardwareReport(
    cpu=CpuInfo("Apple M2 Pro", 12, 12, ("NEON", "FP16", "DOTPROD", "I8MM"), "arm64", "sysctl"),
    memory=MemoryInfo(32 * GIB, 20 * GIB, 0, 0),
    devices=(Device("metal", "Apple M2 Pro", "integrated", 21 * GIB, 21 * GIB, vendor="Apple"),),
    engine=EngineInfo(
        gpu_offload=True,
        devices=(EngineDevice("MTL0", "Apple M2 Pro", "gpu", 21 * GIB, 21 * GIB, "MTL"),),
        backends=("MTL", "CPU"),
    ),
    offload_targets=(
        OffloadTarget("Apple M2 Pro", "integrated", ("metal",), 21 * GIB, 21 * GIB, True, True),
    ),
    bandwidth_gbps=180.5,
    diagnosis=("Apple M2 Pro is an integrated GPU: ...",),
    errors=(ProbeError("opencl", "the opencl probe crashed"),),
    bandwidth=BandwidthMeasurement(180.5, 1 << 28, 0.0015, 8, "2026-01-01T00:00:00+00:00"),
    probe_ms=120.0,
)


def test_round_trip_through_json() -> None:
    text = json.dumps(report_to_dict(REPORT))
    assert report_from_dict(json.loads(text)) == REPORT


def test_json_has_the_documented_shape() -> None:
    d = report_to_dict(REPORT)
    assert set(d["cpu"]) >= {"name", "cores_physical", "cores_logical", "features"}
    assert set(d["memory"]) >= {"total_bytes", "available_bytes"}
    device_keys = {"api", "name", "type", "memory_total_bytes", "memory_free_bytes"}
    assert set(d["devices"][0]) >= device_keys
    assert set(d["engine"]) >= {"gpu_offload", "devices"}
    engine_device_keys = {"name", "description", "type", "memory_total_bytes"}
    assert set(d["engine"]["devices"][0]) >= engine_device_keys | {"memory_free_bytes"}
    assert isinstance(d["offload_targets"], list)
    assert d["bandwidth_gbps"] == 180.5
    assert d["diagnosis"] == ["Apple M2 Pro is an integrated GPU: ..."]


def test_a_minimal_profile_from_another_machine_loads() -> None:
    # Only the keys the issue promises; everything else takes its default.
    profile = {
        "cpu": {"name": "AMD Ryzen 7 7840U", "cores_physical": 8, "cores_logical": 16,
                "features": ["AVX2", "AVX512F"]},
        "memory": {"total_bytes": 32 * GIB, "available_bytes": 24 * GIB},
        "devices": [{"api": "vulkan", "name": "AMD Radeon 780M", "type": "integrated",
                     "memory_total_bytes": 4 * GIB, "memory_free_bytes": None}],
        "engine": {"gpu_offload": False, "devices": []},
        "offload_targets": [],
        "bandwidth_gbps": 61.0,
        "diagnosis": [],
        "some_future_key": {"ignored": True},
    }  # fmt: skip
    report = report_from_dict(profile)
    assert report.cpu.features == ("AVX2", "AVX512F")
    assert report.devices[0].memory_free_bytes is None
    assert report.bandwidth is None and report.bandwidth_gbps == 61.0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("cpu"), "missing required key 'cpu'"),
        (lambda d: d["memory"].update(total_bytes="lots"), "report.memory.total_bytes"),
        (lambda d: d["memory"].update(total_bytes=True), "expected int"),
        (lambda d: d.update(devices={}), "report.devices: expected a list"),
    ],
)
def test_bad_profiles_are_refused_with_the_place(mutate, message: str) -> None:
    d = report_to_dict(REPORT)
    mutate(d)
    with pytest.raises(ValueError, match=message):
        report_from_dict(d)


def test_child_answers_with_unknown_keys_are_a_bug() -> None:
    answer = {
        "status": {"api": "vulkan", "available": True, "reason": None, "library": None,
                   "version": None, "wall_ms": 1.0},
        "devices": [{"api": "vulkan", "name": "x", "type": "cpu", "memory_total_bytes": 1,
                     "memory_free_bytes": None, "vram": 1}],
        "errors": [],
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"unknown keys \['vram'\]"):
        from_plain(ApiProbe, answer)
    del answer["devices"][0]["vram"]
    assert from_plain(ApiProbe, answer).devices[0].name == "x"
