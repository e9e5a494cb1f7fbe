"""NVML: parsing readings recorded on a real NVIDIA machine, and the real no-driver path here."""

from __future__ import annotations

import ctypes.util
import json
from pathlib import Path

import pytest

from deskllm.hardware.nvidia import (
    api_probe_from_nvml,
    cuda_version_text,
    devices_from_readings,
    memory_bandwidth_gbps,
)
from deskllm.hardware.nvml_readings import read_nvml_plain

FIXTURE = Path(__file__).parent.parent / "data" / "nvml" / "rtx4070_laptop_566.36.json"
MIB = 1 << 20


@pytest.fixture
def recorded() -> dict:
    return json.loads(FIXTURE.read_text())["readings"]


def test_recorded_rtx4070_readings_parse_to_nvidia_smi_values(recorded: dict) -> None:
    (gpu,) = devices_from_readings(recorded)
    # Expected values are the nvidia-smi -q figures quoted in the fixture's "source".
    assert gpu.api == "nvml"
    assert gpu.name == "NVIDIA GeForce RTX 4070 Laptop GPU"
    assert gpu.type == "discrete"
    assert gpu.uuid == "1b724e78-eef5-4163-d43c-e4da15d41176"
    assert gpu.pci_bus_id == "0000:01:00.0"
    assert gpu.memory_total_bytes == 8188 * MIB
    assert gpu.memory_free_bytes == 7948 * MIB
    assert gpu.driver_version == "566.36"
    assert gpu.cuda_version == "12.7"
    assert gpu.temperature_c == 42
    assert gpu.power_draw_w == pytest.approx(1.97)
    assert gpu.power_limit_w == pytest.approx(61.24)
    assert gpu.utilization_percent == 0
    assert gpu.vendor_id == 0x10DE


def test_readings_a_gpu_does_not_offer_stay_unknown(recorded: dict) -> None:
    # Laptop GPUs often answer NVML_ERROR_NOT_SUPPORTED for power; the reading is then None.
    gpu = dict(recorded["gpus"][0], power_usage_mw=None, power_limit_mw=None, uuid=None)
    (device,) = devices_from_readings(dict(recorded, gpus=[gpu]))
    assert device.power_draw_w is None
    assert device.power_limit_w is None
    assert device.uuid is None
    assert device.memory_total_bytes == 8188 * MIB


def test_bytes_from_old_pynvml_versions_are_decoded(recorded: dict) -> None:
    gpu = dict(recorded["gpus"][0], name=b"NVIDIA GeForce RTX 4070 Laptop GPU\0\0")
    (device,) = devices_from_readings(dict(recorded, gpus=[gpu], driver_version=b"566.36"))
    assert device.name == "NVIDIA GeForce RTX 4070 Laptop GPU"
    assert device.driver_version == "566.36"


def test_api_probe_from_recorded_readings(recorded: dict) -> None:
    probe = api_probe_from_nvml(
        {"unavailable": None, "readings": recorded, "errors": ["GPU 0 clocks: x"], "wall_ms": 3.0}
    )
    assert probe.status.available
    assert probe.status.version == "566.36"
    assert len(probe.devices) == 1
    assert [e.message for e in probe.errors] == ["GPU 0 clocks: x"]


def test_driver_without_gpus_is_not_available_with_a_reason() -> None:
    readings = {"driver_version": "550.127.05", "cuda_driver_version": 12040, "gpus": []}
    probe = api_probe_from_nvml(
        {"unavailable": None, "readings": readings, "errors": [], "wall_ms": 1.0}
    )
    assert not probe.status.available
    assert "no GPU" in probe.status.reason
    assert probe.devices == ()


@pytest.mark.parametrize(("raw", "text"), [(12070, "12.7"), (12040, "12.4"), (11080, "11.8")])
def test_cuda_version_text(raw: int, text: str) -> None:
    assert cuda_version_text(raw) == text


def test_recorded_bus_width_and_memory_clock_give_the_bandwidth(recorded: dict) -> None:
    (gpu,) = devices_from_readings(recorded)
    # 128-bit GDDR6 at 8001 MHz (16 Gbps per pin): NVIDIA's 256 GB/s for this GPU.
    assert gpu.bandwidth_gbps == pytest.approx(256.0, abs=0.1)


@pytest.mark.parametrize(
    ("bits", "mhz", "gbps"),
    [
        (192, 10501, 504.0),  # RTX 4070, GDDR6X 21 Gbps: 504 GB/s published
        (384, 9751, 936.1),  # RTX 3090, GDDR6X 19.5 Gbps: 936 GB/s
        (5120, 2619, 3352.3),  # H100 SXM, HBM3: 3.35 TB/s
        (4096, 877, 898.0),  # V100, HBM2: 900 GB/s
    ],
)
def test_bandwidth_from_bus_width_and_memory_clock(bits: int, mhz: int, gbps: float) -> None:
    assert memory_bandwidth_gbps(bits, mhz) == pytest.approx(gbps, abs=0.1)


def test_a_gpu_without_bus_width_or_clock_has_no_bandwidth(recorded: dict) -> None:
    for missing in ("memory_bus_width_bits", "max_memory_clock_mhz"):
        gpu = dict(recorded["gpus"][0], **{missing: None})
        (device,) = devices_from_readings(dict(recorded, gpus=[gpu]))
        assert device.bandwidth_gbps is None


def test_real_nvml_path_on_this_machine() -> None:
    plain = read_nvml_plain()
    if ctypes.util.find_library("nvidia-ml") is None:
        # No NVIDIA driver here: an empty list and a reason, never an exception.
        assert "NVML library" in plain["unavailable"]
        probe = api_probe_from_nvml(plain)
        assert not probe.status.available and probe.devices == ()
    else:
        assert plain["unavailable"] is None or "driver" in plain["unavailable"]
