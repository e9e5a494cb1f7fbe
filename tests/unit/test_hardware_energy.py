"""Energy counters: a fake powercap tree (RAPL) with two packages and their subzones, a
counter that wraps, one that only root may read; recorded NVML energy readings; no sensor."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from deskllm.hardware.energy import (
    MACOS_REASON,
    NO_SENSOR,
    RAPL_PERMISSION_HINT,
    EnergyMeter,
    EnergyReading,
    EnergySensor,
    energy_report,
    nvml_gpu_status,
    nvml_joules,
    rapl_delta_uj,
    reply_energy,
    scan_nvml,
    scan_rapl,
)
from deskllm.hardware.energy_cost import cost_per_million_tokens

RECORDED = json.loads(
    (Path(__file__).parents[1] / "data" / "nvml" / "energy_readings.json").read_text()
)
MAX_RANGE = 262_143_328_850  # a real package's max_energy_range_uj
NO_NVML = lambda: ([], [], "no NVIDIA driver")  # noqa: E731


def zone(root: Path, folder: str, name: str, energy_uj: int) -> Path:
    path = root / folder
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{MAX_RANGE}\n")
    return path


def set_energy(path: Path, energy_uj: int) -> None:
    (path / "energy_uj").write_text(f"{energy_uj}\n")


def fake_powercap(root: Path) -> dict[str, Path]:
    """Two packages with core/uncore/dram subzones, psys, and the MMIO copy of package 0
    that some Intel laptops also expose (not a second package)."""
    return {
        "pkg0": zone(root, "intel-rapl:0", "package-0", 1_000_000),
        "core0": zone(root, "intel-rapl:0:0", "core", 500_000),
        "uncore0": zone(root, "intel-rapl:0:1", "uncore", 10_000),
        "pkg1": zone(root, "intel-rapl:1", "package-1", 2_000_000),
        "dram1": zone(root, "intel-rapl:1:0", "dram", 300_000),
        "psys": zone(root, "intel-rapl:2", "psys", 9_000_000),
        "mmio": zone(root, "intel-rapl-mmio:0", "package-0", 1_000_000),
    }


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_package_counts_once_and_subzones_are_listed_not_added(tmp_path):
    zones = fake_powercap(tmp_path)
    sensors, statuses = scan_rapl(tmp_path)
    assert [s.name for s in sensors] == ["package-0", "package-1"]
    counted = {s.name: (s.readable, s.counted) for s in statuses}
    assert counted == {"package-0": (True, True), "package-1": (True, True),
                       "psys": (True, False), "core": (True, False),
                       "uncore": (True, False), "dram": (True, False)}  # fmt: skip
    assert "contains the packages" in next(s.reason for s in statuses if s.name == "psys")

    clock = Clock()
    meter = EnergyMeter(sensors, clock=clock)
    span = meter.start()
    set_energy(zones["pkg0"], 1_000_000 + 5_000_000)  # +5 J
    set_energy(zones["pkg1"], 2_000_000 + 3_000_000)  # +3 J
    set_energy(zones["core0"], 500_000 + 4_000_000)  # inside package-0's 5 J
    set_energy(zones["psys"], 9_000_000 + 20_000_000)  # the whole platform: not added
    clock.now += 2.0
    reading = meter.stop(span)
    assert reading == EnergyReading(8.0, 2.0, "rapl", "measured: package-0, package-1")
    assert reading.watts == 4.0


def test_a_counter_that_wraps_is_followed(tmp_path):
    assert rapl_delta_uj(MAX_RANGE - 1_000_000, 2_000_000, MAX_RANGE) == 3_000_000
    pkg = zone(tmp_path, "intel-rapl:0", "package-0", MAX_RANGE - 1_000_000)
    clock = Clock()
    meter = EnergyMeter(scan_rapl(tmp_path)[0], clock=clock)
    span = meter.start()
    set_energy(pkg, 500_000)  # wrapped: +1.5 J
    clock.now += 1
    meter.sample()
    set_energy(pkg, MAX_RANGE - 500_000)  # most of a range later, still before the wrap
    clock.now += 1
    meter.sample()
    set_energy(pkg, 250_000)  # wrapped a second time
    clock.now += 1
    reading = meter.stop(span)
    assert reading.joules == pytest.approx((1_500_000 + MAX_RANGE - 1_000_000 + 750_000) / 1e6)
    assert reading.seconds == 3


def scan_as(root: Path, as_nobody: bool) -> dict:
    """scan_rapl and energy_report of `root` in a forked child, as "nobody" if asked."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_end)
            if as_nobody:
                import pwd

                nobody = pwd.getpwnam("nobody")
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
            sensors, statuses = scan_rapl(root)
            meter = EnergyMeter.for_this_machine(gpu=False, powercap_root=str(root))
            found = {
                "sensors": [s.name for s in sensors],
                "statuses": [[s.name, s.readable, s.reason] for s in statuses],
                "report": energy_report(root, platform="linux", nvml=NO_NVML),
                "stop": list(meter.stop(meter.start()).__dict__.values()),
            }
            os.write(write_end, json.dumps(found).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        out = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return json.loads(out)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_a_counter_only_root_may_read_says_how_to_allow_it():
    # root reads a chmod 000 file anyway: as root the scan runs in a child that became
    # "nobody". Outside pytest's private tmp dir so that "nobody" can reach it.
    base = Path(tempfile.mkdtemp(prefix="deskllm-powercap-"))
    try:
        base.chmod(0o755)
        zones = fake_powercap(base)
        for path in base.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        (zones["pkg0"] / "energy_uj").chmod(0)
        found = scan_as(base, as_nobody=os.geteuid() == 0)
        assert found["sensors"] == ["package-1"]  # the readable package is still measured
        closed = [s for s in found["statuses"] if s[0] == "package-0"]
        assert closed == [["package-0", False, RAPL_PERMISSION_HINT]]
        assert "sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj" in RAPL_PERMISSION_HINT
        assert "next boot" in RAPL_PERMISSION_HINT and "udev" in RAPL_PERMISSION_HINT
        assert found["report"]["source"] == "rapl"

        # Every package closed (the default since the CVE-2020-8694 fix): nothing measured,
        # and the reason is the way to allow it, not a failure.
        (zones["pkg1"] / "energy_uj").chmod(0)
        found = scan_as(base, as_nobody=os.geteuid() == 0)
        assert found["sensors"] == [] and found["report"]["source"] is None
        assert found["report"]["reason"] == RAPL_PERMISSION_HINT
        joules, _seconds, source, detail = found["stop"]
        assert (joules, source, detail) == (None, None, RAPL_PERMISSION_HINT)
    finally:
        shutil.rmtree(base)


def test_recorded_nvml_energy_counter_readings():
    gpu = RECORDED["titan_rtx"]
    idle, load = gpu["windows"]
    assert nvml_gpu_status(idle["after"] | {"name": gpu["name"]}).counted
    assert nvml_joules(idle["before"], idle["after"], 60) == pytest.approx(952.494)
    # What pyJoules' user expected from the card's published draw (16 W idle, 280 W load).
    assert nvml_joules(idle["before"], idle["after"], 60) / 60 == pytest.approx(15.9, abs=0.1)
    assert nvml_joules(load["before"], load["after"], 60) / 60 == pytest.approx(275.4, abs=0.1)


def test_a_gpu_without_the_energy_counter_integrates_its_power_readings():
    gpu = RECORDED["power_only"]
    status = nvml_gpu_status(gpu)
    assert status.readable and status.counted and "power samples" in status.reason
    assert "Volta" in status.reason
    assert nvml_joules(gpu, gpu, 10.0) == pytest.approx(19.7)  # 1.97 W for 10 s
    higher = gpu | {"power_usage_mw": 3970}
    assert nvml_joules(gpu, higher, 10.0) == pytest.approx(29.7)  # the mean of the two


def test_a_gpu_with_neither_reading_is_listed_unreadable():
    status = nvml_gpu_status(RECORDED["jetson_orin"])
    assert not status.readable and not status.counted
    assert "not supported by this GPU" in status.reason


class RecordedGpu(EnergySensor):
    """Replays one GPU's recorded readings through the NVML arithmetic."""

    kind = "nvml"

    def __init__(self, readings: list[dict]) -> None:
        self.readings, self.name = iter(readings), "NVIDIA TITAN RTX"

    def read(self) -> dict:
        return next(self.readings)

    def joules(self, before: dict, after: dict, seconds: float) -> float:
        return nvml_joules(before, after, seconds)


def test_cpu_packages_and_gpu_add_up(tmp_path):
    pkg = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    window = RECORDED["titan_rtx"]["windows"][0]
    clock = Clock()
    gpu = RecordedGpu([window["before"], window["after"]])
    meter = EnergyMeter([*scan_rapl(tmp_path)[0], gpu], clock=clock)
    span = meter.start()
    set_energy(pkg, 600_000_000)  # 600 J over the minute
    clock.now += 60
    reading = meter.stop(span)
    assert reading.source == "rapl+nvml"
    assert reading.joules == pytest.approx(600 + 952.494)


def test_no_sensor_at_all(tmp_path):
    report = energy_report(tmp_path / "none", platform="linux", nvml=NO_NVML)
    assert report == {"source": None, "sensors": [], "reason": NO_SENSOR,
                      "nvml": "no NVIDIA driver"}  # fmt: skip
    reading = EnergyMeter().stop(EnergyMeter().start())
    assert (reading.joules, reading.source, reading.detail) == (None, None, NO_SENSOR)
    assert reading.watts is None


def test_nvml_on_this_machine_says_why_it_is_unusable_or_lists_gpus():
    gpus, statuses, reason = scan_nvml()
    if reason is None:  # a driver: every GPU is listed, the usable ones are sensors
        assert [g.name for g in gpus] == [s.name for s in statuses if s.counted]
    else:  # in words, e.g. "no NVIDIA driver: ..."
        assert not gpus and not statuses and ("NVIDIA" in reason or "NVML" in reason)


def test_macos_reports_no_counter_without_administrator_rights(tmp_path):
    report = energy_report(tmp_path, platform="darwin", nvml=NO_NVML)
    assert report["source"] is None and report["reason"] == MACOS_REASON
    assert "administrator" in MACOS_REASON and report["sensors"][0]["readable"] is False


def test_the_users_watts_figure_is_labelled_estimated():
    clock = Clock()
    meter = EnergyMeter(estimated_watts=45.0, clock=clock)
    span = meter.start()
    clock.now += 3.0
    reading = meter.stop(span)
    assert (reading.joules, reading.source) == (135.0, "estimated")
    assert "45 W" in reading.detail


def test_reply_energy_splits_prompt_and_decode():
    prompt = EnergyReading(6.0, 0.5, "rapl", "")
    decode = EnergyReading(40.0, 2.0, "rapl", "")
    assert reply_energy(prompt, decode, 80) == {
        "joules": 46.0, "joules_per_token": 0.5, "watts_prompt": 12.0, "watts_decode": 20.0,
        "energy_source": "rapl"}  # fmt: skip
    assert reply_energy(prompt, EnergyReading(None, 2.0, None, "no sensor"), 80) == {}
    assert reply_energy(prompt, decode, 0)["joules_per_token"] is None  # nothing generated


def test_cost_per_million_tokens_is_never_made_up():
    # 0.36 J/token: a million tokens are 0.1 kWh; at 0.30 per kWh, 0.03.
    assert cost_per_million_tokens(0.36, 0.30) == pytest.approx(0.03)
    assert cost_per_million_tokens(None, 0.30) is None  # energy unknown
    assert cost_per_million_tokens(0.36, 0.0) is None  # tariff unknown
    # A 1,800 machine over 10,000 hours is 0.18 an hour; a million tokens at 50 tok/s take
    # 5.56 hours: 1.0 more.
    assert cost_per_million_tokens(0.36, 0.30, 1800, 10_000, 50) == pytest.approx(1.03)
    assert cost_per_million_tokens(0.36, 0.30, 1800, 10_000) == pytest.approx(0.03)
