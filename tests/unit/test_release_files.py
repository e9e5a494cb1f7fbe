"""The release files refer to each other by name: the workflow to the build scripts, the Inno
Setup script to the frozen folder, the icon and the windowed executable the spec makes. The
Windows and macOS builds cannot run here, so at least their references are checked."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_the_release_workflow_runs_scripts_that_exist():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    assert set(workflow["jobs"]) == {"linux", "windows", "macos"}
    runs = " ".join(
        step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]
    )
    scripts = set(re.findall(r"packaging[/\\][\w./\\-]+\.(?:sh|ps1)", runs))
    assert len(scripts) == 3, scripts
    for script in scripts:
        path = ROOT / script.replace("\\", "/")
        assert path.is_file(), script
        if path.suffix == ".sh":
            assert os.access(path, os.X_OK), f"{script} is not executable"
    uploads = [step["with"]["path"] for job in workflow["jobs"].values()
               for step in job["steps"] if "upload-artifact" in step.get("uses", "")]  # fmt: skip
    assert len(uploads) == 3


def test_the_windows_installer_script_matches_the_spec():
    iss = (ROOT / "packaging" / "windows" / "deskllm.iss").read_text()
    spec = (ROOT / "packaging" / "deskllm.spec").read_text()
    assert 'name="deskllm-gui"' in spec and "console=False" in spec
    assert "{app}\\deskllm-gui.exe" in iss
    assert "PrivilegesRequired=lowest" in iss  # per-user, no administrator rights
    assert "Tasks: desktopicon" in iss
    icon = re.search(r"^SetupIconFile=(.+)$", iss, re.M).group(1)
    assert (ROOT / icon.replace("\\", "/")).is_file()
    assert "Source: \"dist\\deskllm\\*\"" in iss
    built_by = (ROOT / "packaging" / "build_windows.ps1").read_text()
    assert "packaging\\windows\\deskllm.iss" in built_by


def test_the_icons_the_spec_and_scripts_name_exist():
    for name in ("deskllm.svg", "deskllm.png", "deskllm.ico", "deskllm.icns"):
        assert (ROOT / "resources" / "icons" / name).stat().st_size > 0
