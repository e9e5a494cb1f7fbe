"""The Linux package, built, installed, used and removed for real (root and apt needed: CI
runs as root, and .ci/run turns the skip into a failure)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.driver,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("apt-get") or not shutil.which("dpkg-deb"),
        reason="needs root, apt-get and dpkg-deb to install a .deb",
    ),
]


def run(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)


def test_deb_installs_runs_and_uninstalls_cleanly(tmp_path):
    built = run(str(ROOT / "packaging" / "build_linux.sh"), cwd=ROOT)
    assert built.returncode == 0, built.stderr[-3000:]
    [deb] = sorted((ROOT / "dist").glob("deskllm_*.deb"))
    assert list((ROOT / "dist").glob("deskllm-*-linux-*.tar.gz"))
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    installed = run("apt-get", "install", "-y", "-q", str(deb), env=env)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    try:
        user = os.environ | {"DESKLLM_HOME": str(tmp_path / "home"),
                             "QT_QPA_PLATFORM": "offscreen"}  # fmt: skip
        test = run("/opt/deskllm/deskllm", "--self-test", env=user, cwd=tmp_path)
        assert test.returncode == 0, test.stdout + test.stderr
        assert json.loads(test.stdout.strip().splitlines()[-1])["ok"] is True
        on_path = run("deskllm", "models", "--json", env=user, cwd=tmp_path)
        assert on_path.returncode == 0, on_path.stderr
        assert json.loads(on_path.stdout)[0]["source"] == "starter"
        desktop = Path("/usr/share/applications/deskllm.desktop")
        assert "Exec=/opt/deskllm/deskllm" in desktop.read_text()
        if shutil.which("desktop-file-validate"):
            valid = run("desktop-file-validate", str(desktop))
            assert valid.returncode == 0, valid.stdout + valid.stderr
        assert Path("/usr/share/icons/hicolor/scalable/apps/deskllm.svg").is_file()
    finally:
        removed = run("apt-get", "remove", "-y", "-q", "deskllm", env=env)
    assert removed.returncode == 0, removed.stderr
    assert not Path("/opt/deskllm").exists()
    assert not Path("/usr/bin/deskllm").exists()
    assert not Path("/usr/share/applications/deskllm.desktop").exists()
