"""Cyclic garbage collection on the GUI thread only.

Python's collector runs in whichever thread happens to allocate past the threshold. In the app
that is often a TaskRunner thread (parsing a GGUF header, streaming a reply), and a collection
there destroys any Qt widget that was only kept alive by a reference cycle (a closed dialog and
the lambdas connected to it): Qt objects must be deleted on the thread that owns them, and a
widget deleted on another thread crashes the process. So automatic collection is turned off
and a timer on the GUI thread does the same work, generation by generation, at the same
thresholds — the approach calibre and pyqtgraph take. Reference counting still frees every
object that is not in a cycle at once, on any thread.
"""

from __future__ import annotations

import gc

from deskllm.gui.qt import QObject, QTimer

INTERVAL_MS = 500


class MainThreadGc(QObject):
    """Install once, on the GUI thread, after the QApplication exists; `uninstall` gives the
    collection back to Python (tests)."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS) -> None:
        super().__init__(parent)
        self._was_enabled = gc.isenabled()
        self._thresholds = gc.get_threshold()
        gc.disable()
        self._timer = QTimer(self)
        self._timer.timeout.connect(self.check)
        self._timer.start(interval_ms)

    def check(self) -> int:
        """Collect the oldest generation whose count passed its threshold; returns the number
        of unreachable objects found (0 when nothing was due)."""
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self._thresholds[generation]:
                return gc.collect(generation)
        return 0

    def uninstall(self) -> None:
        self._timer.stop()
        gc.collect()  # what accumulated since the last tick, still on this thread
        if self._was_enabled:
            gc.enable()
