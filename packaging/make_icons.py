"""Render resources/icons/deskllm.svg into the icon files the installers need: deskllm.png
(256 px, Linux menus that skip SVG), deskllm.ico (Windows executable and shortcuts) and
deskllm.icns (macOS bundle). Qt's own image plugins write all three, so no other tool is needed.

    .venv/bin/python packaging/make_icons.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parents[1] / "resources" / "icons"
OUTPUTS = {"deskllm.png": 256, "deskllm.ico": 256, "deskllm.icns": 512}


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication([])  # image plugins need one
    renderer = QSvgRenderer(str(ICONS / "deskllm.svg"))
    if not renderer.isValid():
        print(f"cannot read {ICONS / 'deskllm.svg'}", file=sys.stderr)
        return 1
    for name, size in OUTPUTS.items():
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        renderer.render(painter)
        painter.end()
        if not image.save(str(ICONS / name)):
            print(f"Qt could not write {ICONS / name}", file=sys.stderr)
            return 1
        print(ICONS / name)
    del app
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
