"""How long the window took to appear, from the start of the process (a frozen app's launch)
to the first time the main window is exposed on screen. Logged once; bench/startup.py reads it."""

from __future__ import annotations

import logging
import time

import psutil

from deskllm.gui.qt import QEvent, QObject, QWidget

log = logging.getLogger("deskllm.app")

VISIBLE_MESSAGE = "window visible %.2f s after launch"


def seconds_since_launch() -> float:
    return time.time() - psutil.Process().create_time()


class FirstExpose(QObject):
    """Logs VISIBLE_MESSAGE when the top-level `window` is first exposed. Install it before
    show(): some platforms (offscreen) expose the window within show() itself."""

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.seconds: float | None = None
        window.winId()  # creates the platform window, whose expose events are watched
        window.windowHandle().installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Expose and watched.isExposed():
            watched.removeEventFilter(self)
            self.seconds = seconds_since_launch()
            log.info(VISIBLE_MESSAGE, self.seconds)
        return False
