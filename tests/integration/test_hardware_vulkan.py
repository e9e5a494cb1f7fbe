"""The Vulkan probe against `vulkaninfo` on the same machine (Mesa lavapipe where no GPU is).

Driver tests: they skip only where the Vulkan driver or vulkan-tools is absent, and CI turns
those skips into failures.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskllm.hardware import HardwareReport, probe_hardware
from deskllm.hardware.report import ApiProbe
from deskllm.hardware.serialize import from_plain
from deskllm.hardware.vulkan import read_vulkan

pytestmark = pytest.mark.driver

TYPES = {"CPU": "cpu", "DISCRETE_GPU": "discrete", "INTEGRATED_GPU": "integrated",
         "VIRTUAL_GPU": "virtual", "OTHER": "other"}  # fmt: skip


def vulkaninfo_devices(tmp: Path) -> list[dict]:
    """name, type, UUID and largest device-local heap of each GPU section of `vulkaninfo`."""
    exe = shutil.which("vulkaninfo")
    if exe is None:
        pytest.skip("vulkaninfo is not installed (Debian: vulkan-tools)")
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp)}
    run = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=60)
    if run.returncode != 0:
        pytest.skip(f"no Vulkan driver: vulkaninfo failed ({run.stderr.strip()[:200]})")
    devices = []
    for chunk in re.split(r"^GPU\d+:\s*$", run.stdout, flags=re.M)[1:]:
        heaps = re.findall(
            r"memoryHeaps\[\d+\]:\s*\n\s*size\s*=\s*(\d+).*?flags:(.*?)(?=memoryHeaps\[|memoryTypes)",
            chunk,
            flags=re.S,
        )
        local = [int(size) for size, flags in heaps if "MEMORY_HEAP_DEVICE_LOCAL_BIT" in flags]
        devices.append(
            {
                "name": re.search(r"deviceName\s*=\s*(.+)", chunk).group(1).strip(),
                "type": TYPES[re.search(r"deviceType\s*=\s*PHYSICAL_DEVICE_TYPE_(\w+)", chunk)[1]],
                "uuid": re.search(r"deviceUUID\s*=\s*([0-9a-f-]+)", chunk).group(1),
                "heap": max(local) if local else None,
            }
        )
    return devices


@pytest.fixture(scope="module")
def vulkaninfo(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    devices = vulkaninfo_devices(tmp_path_factory.mktemp("xdg"))
    if not any(d["name"].startswith("llvmpipe") for d in devices):
        pytest.skip("Mesa lavapipe (mesa-vulkan-drivers) is not installed")
    return devices


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HardwareReport]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DESKLLM_HOME", str(tmp_path_factory.mktemp("home")))
        yield probe_hardware(bandwidth=False)


def test_every_vulkaninfo_device_is_in_the_report(vulkaninfo, report) -> None:
    ours = [d for d in report.devices if d.api == "vulkan"]
    assert [(d.name, d.type, d.uuid, d.memory_total_bytes) for d in ours] == [
        (d["name"], d["type"], d["uuid"], d["heap"]) for d in vulkaninfo
    ]


def test_llvmpipe_is_cpu_type_and_never_an_automatic_target(vulkaninfo, report) -> None:
    expected = next(d for d in vulkaninfo if d["name"].startswith("llvmpipe"))
    (target,) = [t for t in report.offload_targets if t.name == expected["name"]]
    assert target.type == "cpu"
    assert target.memory_total_bytes == expected["heap"]
    assert not target.automatic
    assert target.shares_system_memory
    assert any(line.startswith(f"{target.name} is a CPU-type Vulkan device")
               for line in report.diagnosis)  # fmt: skip


def test_without_an_icd_vulkan_is_unavailable_with_the_reason(
    vulkaninfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loader is there but finds no driver manifest: the child inherits this environment.
    monkeypatch.setenv("VK_ICD_FILENAMES", str(tmp_path / "no-such-icd.json"))
    monkeypatch.setenv("VK_DRIVER_FILES", str(tmp_path / "no-such-icd.json"))
    report = probe_hardware(bandwidth=False)
    (status,) = [s for s in report.apis if s.api == "vulkan"]
    assert not status.available
    assert "no Vulkan driver (ICD)" in status.reason
    assert not [d for d in report.devices if d.api == "vulkan"]
    assert not [e for e in report.errors if e.api == "vulkan"]


def test_without_the_loader_vulkan_is_unavailable_with_the_reason() -> None:
    probe = from_plain(ApiProbe, read_vulkan(library_names=("libvulkan-not-here.so.1",)))
    assert not probe.status.available
    assert probe.status.reason.startswith("no Vulkan loader (libvulkan-not-here.so.1 not found)")
    assert probe.devices == ()
