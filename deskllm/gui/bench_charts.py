"""The Benchmark dialog's two charts: decode tok/s per configuration (bars, with the cost per
million tokens beside where there is one) and the chosen configuration's decode tok/s against
context depth (a line).

Why no plotting library: the two charts are a few dozen lines of QPainter. pyqtgraph would
add a dependency to the frozen app for them alone, and QtCharts is only in PySide6-Addons,
which the app does not ship (it bundles PySide6-Essentials).
"""

from __future__ import annotations

from typing import Any

from deskllm.gui.qt import QColor, QPainter, QPalette, QPen, QPointF, QSize, Qt, QWidget


def cost_text(config: dict[str, Any]) -> str:
    """A cost such as "0.0123 (estimated)", or "–" where the energy or the tariff is unknown."""
    cost = config.get("cost_per_mtok")
    if cost is None:
        return "–"
    return f"{cost:.4f} ({config.get('cost_source') or 'estimated'})"


def bar_text(config: dict[str, Any]) -> str:
    """What a bar says beside it: its decode tok/s, and its cost per million tokens where
    there is one ("48.4 tok/s · 0.0181 / M tokens (estimated)")."""
    text = f"{config.get('tg_tps') or 0.0:.1f} tok/s"
    cost = config.get("cost_per_mtok")
    if cost is None:
        return text
    return f"{text} · {cost:.4f} / M tokens ({config.get('cost_source') or 'estimated'})"


def line_points(
    points: list[tuple[float, float]], width: float, height: float
) -> list[tuple[float, float]]:
    """(depth, tok/s) scaled into a `width` × `height` plot: depth 0 … the largest on x, 0 tok/s
    at the bottom and the fastest at the top (y grows downwards, as on screen)."""
    if not points:
        return []
    x_top = max(x for x, _ in points) or 1.0
    y_top = max(y for _, y in points) or 1.0
    return [(width * x / x_top, height * (1.0 - y / y_top)) for x, y in points]


class SpeedBars(QWidget):
    """Decode tok/s per configuration as horizontal bars, the chosen one in the highlight
    colour, abandoned ones muted; beside each its figures (bar_text)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # label, tok/s, "chosen" | "abandoned" | "", the text beside the bar
        self.rows: list[tuple[str, float, str, str]] = []

    def set_result(self, result: dict[str, Any]) -> None:
        chosen = (result.get("chosen") or {}).get("id")
        self.rows = [
            (c["id"], c["tg_tps"] or 0.0,
             "chosen" if c["id"] == chosen else ("abandoned" if c["status"] != "measured" else ""),
             bar_text(c))
            for c in result["configs"]
        ]  # fmt: skip
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        line = self.fontMetrics().height()
        texts = max((self.fontMetrics().horizontalAdvance(r[3]) for r in self.rows), default=0)
        return QSize(16 * line + texts, max(1, len(self.rows)) * int(line * 1.5))

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt name)
        if not self.rows:
            return
        painter = QPainter(self)
        metrics = self.fontMetrics()
        line = int(metrics.height() * 1.5)
        label_w = max(metrics.horizontalAdvance(r[0]) for r in self.rows) + 8
        value_w = max(metrics.horizontalAdvance(r[3]) for r in self.rows) + 8
        width = max(1, self.width() - label_w - value_w)
        top = max(r[1] for r in self.rows) or 1.0
        palette = self.palette()
        colours = {
            "chosen": palette.color(QPalette.ColorRole.Highlight),
            "abandoned": palette.color(QPalette.ColorRole.Mid),
            "": palette.color(QPalette.ColorRole.Dark),
        }
        text = palette.color(QPalette.ColorRole.WindowText)
        for i, (label, tps, kind, value) in enumerate(self.rows):
            y = i * line
            painter.setPen(text)
            painter.drawText(0, y, label_w, line, Qt.AlignmentFlag.AlignVCenter, label)
            bar = max(1, int(width * tps / top))
            painter.fillRect(label_w, y + line // 6, bar, line - line // 3, QColor(colours[kind]))
            painter.drawText(label_w + bar + 4, y, value_w, line, Qt.AlignmentFlag.AlignVCenter,
                             value)  # fmt: skip


class DepthChart(QWidget):
    """The chosen configuration's decode tok/s against the tokens already in context: a line
    in the highlight colour through a dot per measured depth, the axes' ends labelled."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.points: list[tuple[float, float]] = []  # (depth, tok/s)
        self.config = ""

    def set_result(self, result: dict[str, Any]) -> None:
        self.points = [
            (float(p["depth"]), float(p["tg_tps"]))
            for p in result.get("depth_tps") or []
            if p.get("tg_tps") is not None
        ]
        self.config = (result.get("chosen") or {}).get("id") or ""
        self.setToolTip(
            f"Decode tok/s of {self.config} against the tokens already in context" if self.points
            else ""
        )  # fmt: skip
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        line = self.fontMetrics().height()
        return QSize(20 * line, 8 * line)

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt name)
        if not self.points:
            return
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        metrics = self.fontMetrics()
        line = metrics.height()
        palette = self.palette()
        text = palette.color(QPalette.ColorRole.WindowText)
        top_tps = max(y for _, y in self.points)
        left = metrics.horizontalAdvance(f"{top_tps:.0f} tok/s") + 6
        top, bottom = line + 4, line + 4  # the title above, the depth labels below
        width = max(1, self.width() - left - 8)
        height = max(1, self.height() - top - bottom)
        painter.setPen(text)
        painter.drawText(left, 0, width, line, Qt.AlignmentFlag.AlignLeft,
                         "tok/s against context depth")  # fmt: skip
        painter.drawText(0, top, left - 6, line, Qt.AlignmentFlag.AlignRight,
                         f"{top_tps:.0f} tok/s")  # fmt: skip
        painter.drawLine(left, top, left, top + height)
        painter.drawLine(left, top + height, left + width, top + height)
        last = f"{max(x for x, _ in self.points):.0f} tokens"
        painter.drawText(left, top + height + 2, width, line, Qt.AlignmentFlag.AlignLeft, "0")
        painter.drawText(left, top + height + 2, width, line, Qt.AlignmentFlag.AlignRight, last)
        colour = QColor(palette.color(QPalette.ColorRole.Highlight))
        pen = QPen(colour)
        pen.setWidth(3)
        painter.setPen(pen)
        painter.setBrush(colour)
        scaled = [QPointF(left + x, top + y) for x, y in line_points(self.points, width, height)]
        for a, b in zip(scaled, scaled[1:], strict=False):
            painter.drawLine(a, b)
        for point in scaled:
            painter.drawEllipse(point, 3, 3)
