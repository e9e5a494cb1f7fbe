"""Throttle: coalesces a burst of requests into at most one call per interval."""

from __future__ import annotations

from collections.abc import Callable

from deskllm.gui.qt import QElapsedTimer, QObject, Qt, QTimer


class Throttle(QObject):
    """Calls `fn` at most once every `interval_ms` milliseconds.

    A request after a quiet spell calls at once (the first token shows without delay); requests
    inside the interval are merged into one call at its end. So the number of calls over a
    period is bounded by period / interval + 1, however many requests came.

    The interval also grows with what a call costs, up to `max_interval_ms`, so that calls take
    at most `max_busy` of the time: re-laying out a long reply must not take the CPU cores the
    engine decodes on (on a 2-core machine that halved the decode speed).
    """

    def __init__(
        self,
        fn: Callable[[], None],
        interval_ms: int,
        parent: QObject | None = None,
        *,
        max_interval_ms: int = 250,
        max_busy: float = 0.1,
    ):
        super().__init__(parent)
        self._fn = fn
        self.base_interval_ms = interval_ms
        self.interval_ms = interval_ms
        self.max_interval_ms = max_interval_ms
        self.max_busy = max_busy
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
        cost_ms = self._clock.elapsed()
        wanted = int(cost_ms / self.max_busy)
        self.interval_ms = max(self.base_interval_ms, min(self.max_interval_ms, wanted))
