"""packaging/screenshots.py renders the real app (offscreen: Qt's own rendering with real
fonts, no display needed) into PNGs of the window's size that show something, and the README
shows the committed ones."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from PySide6.QtGui import QImage

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "packaging" / "screenshots.py"
SHOTS = ("chat", "chat-progress", "chat-thinking", "models-recommended", "models-installed",
         "models-discover", "hardware", "usage", "server", "docs-indexing",
         "docs-sources", "chat-tool-consent", "chat-tools")  # fmt: skip
SIZE = (1280, 800)
MAX_BYTES = 400 * 1024  # small enough to commit


def colours(path: Path, step: int = 3) -> int:
    """Distinct colours on a grid of every `step`-th pixel: a blank or single-colour window has
    a handful, anti-aliased text and widgets hundreds."""
    image = QImage(str(path))
    return len({image.pixel(x, y) for x in range(0, image.width(), step)
                for y in range(0, image.height(), step)})  # fmt: skip


def busy_rows(path: Path) -> float:
    """Share of pixel rows that are not one colour all across (text, lines, widgets)."""
    image = QImage(str(path))
    varied = sum(
        len({image.pixel(x, y) for x in range(0, image.width(), 2)}) > 1
        for y in range(image.height())
    )
    return varied / image.height()


def check_image(path: Path) -> None:
    assert path.is_file(), f"{path.name} was not written"
    assert 0 < path.stat().st_size <= MAX_BYTES, (path.name, path.stat().st_size)
    image = QImage(str(path))
    assert not image.isNull() and (image.width(), image.height()) == SIZE, path.name
    assert colours(path) > 100, f"{path.name} looks blank"
    assert busy_rows(path) > 0.5, f"{path.name} is mostly empty"


def test_the_script_renders_every_screenshot_of_the_real_app(tmp_path):
    out = tmp_path / "shots"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert f"{len(SHOTS)} screenshot(s)" in run.stdout
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{s}.png" for s in SHOTS)
    for shot in SHOTS:
        check_image(out / f"{shot}.png")


def test_the_checks_tell_a_blank_image_and_the_script_refuses_unknown_names(tmp_path):
    blank = QImage(*SIZE, QImage.Format.Format_RGB32)
    blank.fill(0xEFEFEF)
    blank.save(str(tmp_path / "blank.png"))
    assert colours(tmp_path / "blank.png") == 1 and busy_rows(tmp_path / "blank.png") == 0
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--only", "chat,settings"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2 and "unknown screenshot(s): settings" in run.stderr


def test_the_readme_shows_the_committed_screenshots():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = re.findall(r"\]\((docs/screenshots/[\w-]+\.png)\)", readme)
    assert sorted(Path(link).stem for link in linked) == sorted(SHOTS)
    for link in linked:
        check_image(ROOT / link)
