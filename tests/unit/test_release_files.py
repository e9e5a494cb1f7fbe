"""The release files refer to each other by name: the workflow to the build scripts, the Inno
Setup script to the frozen folder, the icon and the windowed executable the spec makes. The
Windows and macOS builds cannot run here, so at least their references are checked. The check
that stops a release without its GPU backend runs for real, on fake engine folders."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "packaging" / "check_release_engine.sh"
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
CPU_LIBS = ("libggml-cpu-x64.so", "libggml-cpu-haswell.so")


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
    assert 'Source: "dist\\deskllm\\*"' in iss
    built_by = (ROOT / "packaging" / "build_windows.ps1").read_text()
    assert "packaging\\windows\\deskllm.iss" in built_by


def test_the_icons_the_spec_and_scripts_name_exist():
    for name in ("deskllm.svg", "deskllm.png", "deskllm.ico", "deskllm.icns"):
        assert (ROOT / "resources" / "icons" / name).stat().st_size > 0


def fake_engine(folder: Path, backends: str, libs: tuple[str, ...]) -> Path:
    """An engine folder as packaging/build_release_engine.sh leaves it, with empty libraries,
    its BUILD_INFO and the stamp that makes the build script keep it."""
    lib = folder / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    for name in ("libllama.so", "libggml.so", *libs):
        (lib / name).write_bytes(b"")
    info = {"llama_cpp_python": LLAMA_CPP_PYTHON, "backends": backends, "cmake_args": "-D..."}
    (folder / "BUILD_INFO").write_text(json.dumps(info) + "\n")
    (folder / ".built").write_text(f"{LLAMA_CPP_PYTHON} vulkan=auto\n")
    return folder


def check(engine: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CHECK), *args, str(engine)], capture_output=True, text=True, timeout=30,
        env=os.environ | {"CPU_ONLY": "0", "GPU_BACKEND": "vulkan"} | env,
    )  # fmt: skip


def test_the_release_check_fails_without_the_vulkan_backend(tmp_path):
    engine = fake_engine(tmp_path / "engine", "cpu(all variants)", CPU_LIBS)
    done = check(engine)
    assert done.returncode == 1, done.stderr
    assert "no Vulkan backend" in done.stderr and str(engine) in done.stderr
    assert "--cpu-only" in done.stderr  # says how to make a CPU-only package on purpose


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_cpu_only_release_passes_the_check_when_asked_for(tmp_path, how):
    engine = fake_engine(tmp_path / "engine", "cpu(all variants)", CPU_LIBS)
    done = check(engine, "--cpu-only") if how == "flag" else check(engine, CPU_ONLY="1")
    assert done.returncode == 0, done.stderr
    assert "CPU-only" in done.stderr


def test_the_release_check_passes_with_the_vulkan_backend(tmp_path):
    engine = fake_engine(
        tmp_path / "engine", "cpu(all variants) vulkan", (*CPU_LIBS, "libggml-vulkan.so")
    )
    done = check(engine)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("backends", "libs", "says"),
    [
        # BUILD_INFO claims Vulkan, but its library is not there.
        ("cpu(all variants) vulkan", CPU_LIBS, "no ggml-vulkan library"),
        # A word that only contains the backend's name is not the backend.
        ("cpu(all variants) vulkan-headers-missing", CPU_LIBS, "lists no Vulkan backend"),
        (None, CPU_LIBS, "BUILD_INFO is missing"),
    ],
)
def test_the_release_check_fails_on_a_doubtful_engine(tmp_path, backends, libs, says):
    engine = fake_engine(tmp_path / "engine", backends or "", libs)
    if backends is None:
        (engine / "BUILD_INFO").unlink()
    done = check(engine)
    assert done.returncode == 1, done.stderr
    assert says in done.stderr


def test_the_release_check_wants_metal_on_macos(tmp_path):
    vulkan = fake_engine(
        tmp_path / "vulkan", "cpu(all variants) vulkan", (*CPU_LIBS, "libggml-vulkan.so")
    )
    done = check(vulkan, GPU_BACKEND="metal")
    assert done.returncode == 1 and "no Metal backend" in done.stderr, done.stderr
    metal = fake_engine(tmp_path / "metal", "cpu(all variants) metal", ("libggml-metal.so",))
    assert check(metal, GPU_BACKEND="metal").returncode == 0


def test_build_linux_stops_before_freezing_an_engine_without_vulkan(tmp_path):
    """The real build script, on an engine already "built" without Vulkan: it stops right
    after the engine step, before PyInstaller, naming the problem."""
    engine = fake_engine(tmp_path / "engine", "cpu(all variants)", CPU_LIBS)
    env = os.environ | {"ENGINE_DIR": str(engine), "PYTHON": sys.executable, "CPU_ONLY": "0",
                        "LLAMA_CPP_PYTHON": LLAMA_CPP_PYTHON}  # fmt: skip
    env.pop("GPU_BACKEND", None)
    done = subprocess.run(
        [str(ROOT / "packaging" / "build_linux.sh")], capture_output=True, text=True,
        timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "no Vulkan backend" in done.stderr and "--cpu-only" in done.stderr, done.stderr
    assert "release engine already built" in done.stderr  # the fake was kept, not rebuilt


def test_every_release_build_runs_the_engine_check_and_can_be_cpu_only():
    for script, flag in (("build_linux.sh", "--cpu-only"), ("build_macos.sh", "--cpu-only"),
                         ("build_windows.ps1", "[switch]$CpuOnly")):  # fmt: skip
        text = (ROOT / "packaging" / script).read_text()
        assert "packaging/check_release_engine.sh" in text, script
        assert flag in text, script
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as true
    assert triggers["workflow_dispatch"]["inputs"]["cpu_only"]["default"] is False
    assert "inputs.cpu_only" in workflow["env"]["CPU_ONLY"]
