"""Usage chart: tokens per day as bars, local and remote stacked (the Usage view).

Drawn with QPainter like the sparkline: the PySide6-Essentials wheel the app ships has no
QtCharts (that module is in PySide6-Addons), and bars need no plotting library."""

from __future__ import annotations

from deskllm.gui.qt import QColor, QPainter, QPalette, QSize, QWidget
from deskllm.store.usage import DayTokens


def local_colour(palette: QPalette) -> QColor:
    return palette.color(QPalette.ColorRole.Highlight)


def remote_colour(palette: QPalette) -> QColor:
    """The highlight's opposite hue, so the two stay apart in light and dark themes."""
    base = local_colour(palette)
    hue = base.hsvHue() if base.hsvHue() >= 0 else 210
    return QColor.fromHsv((hue + 150) % 360, max(base.hsvSaturation(), 140), base.value())


class UsageChart(QWidget):
    """Bars of the days given, one per day across the width, scaled to the busiest day; the
    local tokens at the bottom of each bar, the remote ones on top. Sized in text lines."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.days: list[DayTokens] = []
        self.setMouseTracking(True)  # each bar's figures in the tooltip

    def set_days(self, days: list[DayTokens]) -> None:
        self.days = list(days)
        self.setToolTip(self._summary())
        self.update()

    def _summary(self) -> str:
        if not self.days:
            return "No replies in this period"
        local = sum(d.local for d in self.days)
        remote = sum(d.remote for d in self.days)
        return f"Tokens per day: {local:,} local, {remote:,} remote in {len(self.days)} days"

    def day_at(self, x: float) -> DayTokens | None:
        """The day whose bar's slot holds `x` (None outside the bars)."""
        if not self.days or not 1 <= x < self.width() - 1:
            return None
        slot = (self.width() - 2) / len(self.days)
        return self.days[min(int((x - 1) / slot), len(self.days) - 1)]

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt name)
        day = self.day_at(event.position().x())
        if day is None:
            self.setToolTip(self._summary())
        else:
            self.setToolTip(f"{day.day}: {day.local:,} tokens local, {day.remote:,} remote")
        super().mouseMoveEvent(event)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        line = self.fontMetrics().height()
        return QSize(30 * line, 9 * line)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        line = self.fontMetrics().height()
        return QSize(12 * line, 5 * line)

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt name)
        painter = QPainter(self)
        palette = self.palette()
        metrics = self.fontMetrics()
        line = metrics.height()
        text = palette.color(QPalette.ColorRole.WindowText)
        # The legend on the first line, the first and last day under the bars.
        local, remote = local_colour(palette), remote_colour(palette)
        x = 0
        for colour, label in ((local, "local"), (remote, "remote")):
            painter.fillRect(x, line // 4, line // 2, line // 2, colour)
            x += line // 2 + line // 4
            painter.setPen(text)
            painter.drawText(x, metrics.ascent(), label)
            x += metrics.horizontalAdvance(label) + line
        top = max((d.local + d.remote for d in self.days), default=0)
        if top:
            painter.drawText(x, metrics.ascent(), f"busiest day: {top:,} tokens")
        left, right = 1, self.width() - 1
        chart_top, chart_bottom = line + line // 2, self.height() - line - 2
        painter.setPen(palette.color(QPalette.ColorRole.Mid))
        painter.drawLine(left, chart_bottom, right, chart_bottom)
        if not self.days or not top or chart_bottom <= chart_top:
            return
        height = chart_bottom - chart_top
        slot = (right - left) / len(self.days)
        width = max(1, int(slot * 0.8))
        for i, day in enumerate(self.days):
            x0 = int(left + i * slot + (slot - width) / 2)
            local_h = round(height * day.local / top)
            remote_h = round(height * (day.local + day.remote) / top) - local_h
            if local_h:
                painter.fillRect(x0, chart_bottom - local_h, width, local_h, local)
            if remote_h:
                painter.fillRect(x0, chart_bottom - local_h - remote_h, width, remote_h, remote)
        painter.setPen(text)
        baseline = self.height() - metrics.descent() - 1
        painter.drawText(left, baseline, self.days[0].day)
        if len(self.days) > 1:
            last = self.days[-1].day
            painter.drawText(right - metrics.horizontalAdvance(last), baseline, last)
