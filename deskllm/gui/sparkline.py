"""Sparkline: a tiny line chart of the last values (decode speed while a reply streams)."""

from __future__ import annotations

from collections import deque

from deskllm.gui.qt import QPainter, QPalette, QPen, QPointF, QPolygonF, QSize, QWidget


class Sparkline(QWidget):
    """Draws the last `capacity` values across its width, scaled to the largest one. Sized in
    text lines, so it grows with the font at any display scaling; painted in palette colours."""

    def __init__(self, capacity: int = 40, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values: deque[float] = deque(maxlen=capacity)

    def add(self, value: float) -> None:
        self.values.append(value)
        self.update()

    def clear(self) -> None:
        self.values.clear()
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        line = self.fontMetrics().height()
        return QSize(5 * line, line)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        return self.sizeHint()

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt name)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = self.rect().adjusted(1, 1, -1, -1)
        baseline = QPen(self.palette().color(QPalette.ColorRole.Mid))
        painter.setPen(baseline)
        painter.drawLine(rect.bottomLeft(), rect.bottomRight())
        if len(self.values) < 2:
            return
        top = max(self.values) or 1.0
        step = rect.width() / (len(self.values) - 1)  # the points span the whole width
        points = QPolygonF(
            [
                QPointF(rect.left() + i * step, rect.bottom() - rect.height() * v / top)
                for i, v in enumerate(self.values)
            ]
        )
        pen = QPen(self.palette().color(QPalette.ColorRole.Highlight))
        pen.setWidthF(1.5)
        painter.setPen(pen)
        painter.drawPolyline(points)
