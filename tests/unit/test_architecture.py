"""The layer contracts (pyproject.toml [tool.importlinter], docs/architecture.md) hold, and a
wrong import breaks them: import-linter itself checks the real package and a copy of it with
one deliberately wrong import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(package_parent: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """import-linter on the `deskllm` package found first under `package_parent`."""
    env = os.environ | {"PYTHONPATH": str(package_parent)}
    return subprocess.run(
        # --config: import-linter before 2.2 takes no positional config file.
        [str(LINT_IMPORTS), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_package_keeps_every_layer_contract(tmp_path):
    result = _lint_imports(ROOT, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "wrong_import", "contract"),
    [
        ("engine/client.py", "from deskllm.store import open_database",
         "The engine knows nothing of the planner"),
        ("planner/fit.py", "import PySide6.QtCore", "The core never imports the GUI or Qt"),
        ("hardware/cpu.py", "from deskllm.planner import fit",
         "Packages import only the layers below them"),
        ("downloads/manager.py", "from deskllm import settings",
         "never reads the settings file"),
    ],
)  # fmt: skip
def test_a_wrong_import_breaks_a_contract(tmp_path, module, wrong_import, contract):
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "deskllm", copy / "deskllm",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    target = copy / "deskllm" / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{wrong_import}\n")
    result = _lint_imports(copy, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout
    assert str(module).replace("/", ".").removesuffix(".py") in broken
