"""The OpenCL probe against `clinfo --raw` on the same machine (PoCL where no GPU is).

Driver tests: they skip only where the OpenCL driver or clinfo is absent, and CI turns those
skips into failures.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskllm.hardware import HardwareReport, probe_hardware
from deskllm.hardware.opencl import read_opencl
from deskllm.hardware.report import ApiProbe
from deskllm.hardware.serialize import from_plain

pytestmark = pytest.mark.driver


@pytest.fixture(scope="module")
def clinfo() -> list[dict]:
    """name, type, global memory and compute units of each device `clinfo --raw` lists."""
    exe = shutil.which("clinfo")
    if exe is None:
        pytest.skip("clinfo is not installed")
    run = subprocess.run([exe, "--raw"], capture_output=True, text=True, timeout=60)
    devices: dict[str, dict] = {}
    for key, param, value in re.findall(r"^\[(\S+/\d+)\]\s+(CL_DEVICE_\w+)\s+(.*)$", run.stdout,
                                        flags=re.M):  # fmt: skip
        devices.setdefault(key, {})[param] = value.strip()
    if not any("CL_DEVICE_TYPE_CPU" in d.get("CL_DEVICE_TYPE", "") for d in devices.values()):
        pytest.skip("no OpenCL CPU driver (Debian: pocl-opencl-icd)")
    return [
        {
            "name": d["CL_DEVICE_NAME"],
            "type": "cpu" if "CPU" in d["CL_DEVICE_TYPE"] else "gpu-or-other",
            "memory": int(d["CL_DEVICE_GLOBAL_MEM_SIZE"]),
            "units": int(d["CL_DEVICE_MAX_COMPUTE_UNITS"]),
        }
        for d in devices.values()
    ]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HardwareReport]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DESKLLM_HOME", str(tmp_path_factory.mktemp("home")))
        yield probe_hardware(bandwidth=False)


def test_every_clinfo_device_is_in_the_report(clinfo, report) -> None:
    ours = {d.name: d for d in report.devices if d.api == "opencl"}
    assert sorted(ours) == sorted(d["name"] for d in clinfo)
    for expected in clinfo:
        device = ours[expected["name"]]
        assert device.memory_total_bytes == expected["memory"]
        assert device.compute_units == expected["units"]
        if expected["type"] == "cpu":
            assert device.type == "cpu"


def test_the_cpu_device_is_not_an_automatic_target(clinfo, report) -> None:
    cpu_names = {d["name"] for d in clinfo if d["type"] == "cpu"}
    targets = [t for t in report.offload_targets if t.name in cpu_names]
    assert targets and all(not t.automatic and t.type == "cpu" for t in targets)


def test_without_an_icd_opencl_is_unavailable_with_the_reason(
    clinfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path))  # an empty vendors dir
    report = probe_hardware(bandwidth=False)
    (status,) = [s for s in report.apis if s.api == "opencl"]
    assert not status.available
    assert "no OpenCL driver (ICD)" in status.reason
    assert not [d for d in report.devices if d.api == "opencl"]


def test_without_the_loader_opencl_is_unavailable_with_the_reason() -> None:
    probe = from_plain(ApiProbe, read_opencl(library_names=("libOpenCL-not-here.so.1",)))
    assert not probe.status.available
    assert probe.status.reason == "no OpenCL loader (libOpenCL-not-here.so.1 not found)"
