"""How long the window took to appear, from the start of the process (a frozen app's launch)
to the first time the main window is exposed on screen. Logged once; bench/startup.py reads it."""

from __future__ import annotations

import logging
import os
import sys
import time

import psutil

from deskllm.gui.qt import QEvent, QObject, QWidget

log = logging.getLogger("deskllm.app")

VISIBLE_MESSAGE = "window visible %.2f s after launch"


def seconds_since_launch() -> float:
    if sys.platform.startswith("linux"):
        # Both counted from boot in clock ticks: psutil's create_time adds the boot time,
        # which /proc gives in whole seconds (up to 1 s off).
        try:
            with open("/proc/self/stat", encoding="ascii") as stat:
                start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22
            with open("/proc/uptime", encoding="ascii") as uptime:
                up_s = float(uptime.read().split()[0])
            return up_s - start_ticks / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass
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
