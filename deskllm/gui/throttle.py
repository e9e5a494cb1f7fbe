"""Throttle: coalesces a burst of requests into at most one call per interval."""

from __future__ import annotations

from collections.abc import Callable

from deskllm.gui.qt import QElapsedTimer, QObject, Qt, QTimer


class Throttle(QObject):
    """Calls `fn` at most once every `interval_ms` milliseconds.

    A request after a quiet spell calls at once (the first token shows without delay); requests
    inside the interval are merged into one call at its end. So the number of calls over a
    period is bounded by period / interval + 1, however many requests came.
    """

    def __init__(self, fn: Callable[[], None], interval_ms: int, parent: QObject | None = None):
        super().__init__(parent)
        self._fn = fn
        self.interval_ms = interval_ms
        self._clock = QElapsedTimer()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        # A coarse timer may fire up to 5% early, which would break the bound.
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self._call)

    def request(self) -> None:
        if self._timer.isActive():
            return  # a call is already due
        since = self._clock.elapsed() if self._clock.isValid() else self.interval_ms
        if since >= self.interval_ms:
            self._call()
        else:
            self._timer.start(self.interval_ms - since)

    def cancel(self) -> None:
        self._timer.stop()

    def _call(self) -> None:
        self._clock.start()
        self._fn()
