"""The Hardware panel shows the real probe of this machine, probed off the GUI thread."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from deskllm.gui.hardware_panel import HardwarePanel
from deskllm.gui.qt import QApplication, QProgressBar
from deskllm.hardware.cpu import probe_cpu
from deskllm.hardware.nvidia import api_probe_from_nvml

PROBE_TIMEOUT_MS = 120_000
NVML_RECORDING = Path(__file__).parent.parent / "data" / "nvml" / "rtx4070_laptop_566.36.json"


def _vulkan_device_names() -> list[str]:
    exe = shutil.which("vulkaninfo")
    if exe is None:
        pytest.skip("vulkaninfo is not installed (Debian: vulkan-tools)")
    run = subprocess.run([exe, "--summary"], capture_output=True, text=True, timeout=60)
    names = [line.split("=", 1)[1].strip() for line in run.stdout.splitlines()
             if line.strip().startswith("deviceName")]  # fmt: skip
    if not any(n.startswith("llvmpipe") for n in names):
        pytest.skip("Mesa lavapipe (mesa-vulkan-drivers) is not installed")
    return names


@pytest.fixture
def panel(qtbot):
    panel = HardwarePanel()
    qtbot.addWidget(panel)
    return panel


@pytest.mark.driver
def test_shows_the_cpu_memory_devices_and_diagnosis(qtbot, panel):
    vulkan = _vulkan_device_names()
    with qtbot.waitSignal(panel.report_ready, timeout=PROBE_TIMEOUT_MS) as probed:
        panel.show()  # the first look happens when the panel is first shown
        assert panel.probing and not panel.refresh_button.isEnabled()
    report = probed.args[0]
    text = panel.text()
    assert probe_cpu().name in text
    assert "AVX2" in text or "NEON" in text  # instruction sets
    for name in vulkan:
        assert name in text  # llvmpipe included
    assert "Vulkan" in text and "used of" in text  # RAM bar
    assert f"{report.bandwidth_gbps:.1f} GB/s" in text
    assert report.diagnosis and report.diagnosis[0][:40] in text
    assert "llama.cpp backends: CPU" in text
    bars = panel.scroll.widget().findChildren(QProgressBar)
    ram = bars[0]
    assert ram.maximum() == report.memory.total_bytes >> 20


def test_refresh_probes_again_without_blocking(qtbot, panel):
    with qtbot.waitSignal(panel.report_ready, timeout=PROBE_TIMEOUT_MS):
        panel.show()
    first = panel.report
    with qtbot.waitSignal(panel.report_ready, timeout=PROBE_TIMEOUT_MS):
        panel.refresh_button.click()
        QApplication.processEvents()  # the GUI thread keeps running while it probes
        assert panel.probing and "Looking" in panel.status.text()
    assert panel.report is not first and panel.refresh_button.isEnabled()
    assert panel.report.bandwidth.cached  # measured once, then reused


def test_a_gpu_with_known_free_memory_gets_a_memory_bar(qtbot, panel):
    # No NVIDIA GPU here: NVML readings recorded on a real one are replayed into this
    # machine's report.
    with qtbot.waitSignal(panel.report_ready, timeout=PROBE_TIMEOUT_MS):
        panel.show()
    readings = json.loads(NVML_RECORDING.read_text())["readings"]
    nvml = api_probe_from_nvml({"readings": readings, "errors": []})
    report = panel.report
    apis = tuple(nvml.status if a.api == "nvml" else a for a in report.apis)
    panel.show_report(dataclasses.replace(report, apis=apis, devices=nvml.devices + report.devices))
    text = panel.text()
    assert "NVIDIA GeForce RTX 4070 Laptop GPU [discrete, driver 566.36]" in text
    assert "0.2 GiB used of 8.0 GiB" in text  # 8188 MiB total, 7948 MiB free
    bars = panel.scroll.widget().findChildren(QProgressBar)
    assert len(bars) == 2  # RAM and the GPU
