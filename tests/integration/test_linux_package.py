"""The Linux package, installed, used and removed for real (root and apt needed: CI
runs as root, and .ci/run turns the skip into a failure); and installed into a minimal Debian made
with debootstrap, which has no Python and no Vulkan driver, to show the frozen app needs neither.

Uses the package packaging/build_linux.sh made (dist/deskllm_<version>_<arch>.deb and the
.tar.gz beside it; .ci/run builds them before the tests, the tests never build): only one of
this checkout's version, so that a dist/ left from another version is never tested instead."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from deskllm import __version__

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
# The names build_linux.sh gives them, for the version it reads (deskllm.__version__).
DEBS = sorted(DIST.glob(f"deskllm_{__version__}_*.deb"))
OTHER_DEBS = sorted(p.name for p in DIST.glob("deskllm_*.deb") if p not in DEBS)

pytestmark = [
    pytest.mark.driver,
    pytest.mark.timeout(3600),  # apt-get and debootstrap download packages
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("apt-get") or not shutil.which("dpkg-deb"),
        reason="needs root, apt-get and dpkg-deb to install a .deb",
    ),
    pytest.mark.skipif(
        not DEBS,
        reason=f"the Linux package is not built: no dist/deskllm_{__version__}_<arch>.deb"
        + (f" (dist/ has only {', '.join(OTHER_DEBS)}: another version)" if OTHER_DEBS else "")
        + "; build it with packaging/build_linux.sh",
    ),
]


def run(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=3000, **kw)


@pytest.fixture(scope="module")
def deb() -> Path:
    """The .deb packaging/build_linux.sh made (this version, this machine's architecture), and
    the portable .tar.gz it made beside it."""
    [deb] = DEBS  # one architecture: dist/ is this machine's build
    arch = deb.name.removesuffix(".deb").rsplit("_", 1)[1]
    assert (DIST / f"deskllm-{__version__}-linux-{arch}.tar.gz").is_file(), sorted(DIST.iterdir())
    return deb


@pytest.fixture(scope="module")
def build_info(deb) -> dict:
    info = json.loads((ROOT / ".engines" / "release" / "BUILD_INFO").read_text())
    if os.environ.get("DESKLLM_REQUIRE_DRIVERS") == "1":
        # CI has apt and the Vulkan loader: a CPU-only engine there is a failed Vulkan build.
        assert "vulkan" in info["backends"], info
    return info


def self_test_result(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"] is True, result
    return result


def test_deb_installs_runs_and_uninstalls_cleanly(tmp_path, deb, build_info):
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    installed = run("apt-get", "install", "-y", "-q", str(deb), env=env)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    try:
        user = os.environ | {"DESKLLM_HOME": str(tmp_path / "home"),
                             "QT_QPA_PLATFORM": "offscreen"}  # fmt: skip
        test = run("/opt/deskllm/deskllm", "--self-test", env=user, cwd=tmp_path)
        result = self_test_result(test)
        # The packaged engine is the release build: a CPU variant chosen at run time, and the
        # Vulkan backend seeing this machine's device (lavapipe on CI) when it was built.
        hardware = result["checks"]["hardware"]
        assert hardware["cpu_variant"], hardware
        if "vulkan" in build_info["backends"]:
            assert "Vulkan" in hardware["engine_backends"], hardware
            if shutil.which("vulkaninfo"):
                assert any(d.startswith("Vulkan") for d in hardware["engine_devices"]), hardware
        on_path = run("deskllm", "models", "--json", env=user, cwd=tmp_path)
        assert on_path.returncode == 0, on_path.stderr
        assert json.loads(on_path.stdout)[0]["source"] == "starter"
        desktop = Path("/usr/share/applications/deskllm.desktop")
        assert "Exec=/opt/deskllm/deskllm" in desktop.read_text()
        if shutil.which("desktop-file-validate"):
            valid = run("desktop-file-validate", str(desktop))
            assert valid.returncode == 0, valid.stdout + valid.stderr
        assert Path("/usr/share/icons/hicolor/scalable/apps/deskllm.svg").is_file()
        # `deskllm quality`'s default text travels with the app
        assert Path("/opt/deskllm/_internal/resources/text/quality_sample.txt").stat().st_size
    finally:
        removed = run("apt-get", "remove", "-y", "-q", "deskllm", env=env)
    assert removed.returncode == 0, removed.stderr
    assert not Path("/opt/deskllm").exists()
    assert not Path("/usr/bin/deskllm").exists()
    assert not Path("/usr/share/applications/deskllm.desktop").exists()


def debian_mirror() -> str:
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.is_file():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    return "http://deb.debian.org/debian"


@pytest.mark.skipif(not shutil.which("debootstrap"), reason="needs debootstrap")
def test_the_package_needs_no_python_and_no_vulkan_driver(deb):
    """A minimal Debian 12 (debootstrap --variant=minbase: no Python, no Vulkan loader or
    driver); the .deb installed there with only its own dependencies passes its self-test."""
    # Not under pytest's tmp_path: pytest deletes old ones later, and a mount left inside by
    # accident must never be deleted through.
    root = Path(tempfile.mkdtemp(prefix="deskllm-debian-", dir="/var/tmp"))
    mounted: list[Path] = []
    try:
        made = run("debootstrap", "--variant=minbase", "bookworm", str(root), debian_mirror())
        assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
        shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
        shutil.copy(deb, root / "tmp" / deb.name)
        # /proc and /sys for the hardware probe, /dev/shm for multiprocessing's semaphores.
        (root / "dev" / "shm").mkdir(exist_ok=True)
        for kind, where in (("proc", "proc"), ("sysfs", "sys"), ("tmpfs", "dev/shm")):
            assert run("mount", "-t", kind, kind, str(root / where)).returncode == 0
            mounted.append(root / where)

        def inside(*cmd: str) -> subprocess.CompletedProcess:
            env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
                   "DEBIAN_FRONTEND": "noninteractive"}  # fmt: skip
            return run("chroot", str(root), *cmd, env=env)

        assert inside("apt-get", "update", "-q").returncode == 0
        installed = inside("apt-get", "install", "-y", "-q", "--no-install-recommends",
                           f"/tmp/{deb.name}")  # fmt: skip
        assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
        pythons = inside("sh", "-c", "ls /usr/bin/python* /usr/local/bin/python* 2>/dev/null")
        assert pythons.stdout.strip() == "", pythons.stdout
        assert not list(root.glob("usr/lib/*/libvulkan.so*"))
        test = inside("env", "DESKLLM_HOME=/tmp/home", "QT_QPA_PLATFORM=offscreen",
                      "/opt/deskllm/deskllm", "--self-test")  # fmt: skip
        result = self_test_result(test)
        hardware = result["checks"]["hardware"]
        # No Vulkan loader: that backend alone is missing; the CPU one (a variant) works.
        assert "Vulkan" not in hardware["engine_backends"], hardware
        assert hardware["cpu_variant"], hardware
        assert result["checks"]["engine"]["tokens"] > 0
    finally:
        for where in reversed(mounted):
            run("umount", "-l", str(where))
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            still = [line for line in mounts if f" {root}/" in line]
        if not still:
            shutil.rmtree(root, ignore_errors=True)
