"""Helpers for the GUI tests (tests/gui): sending through the real keys, waiting for replies."""

from __future__ import annotations

from deskllm.gui.main_window import MainWindow
from deskllm.gui.qt import Qt

REPLY_TIMEOUT_MS = 120_000  # a loaded 2-core machine can be slow; tests never assert timings


def type_and_send(qtbot, win: MainWindow, text: str) -> None:
    win.chat.input.setPlainText(text)
    qtbot.keyClick(win.chat.input, Qt.Key.Key_Return)


def send_and_wait(qtbot, win: MainWindow, text: str):
    """Send `text` with the Enter key and wait until the reply is stored; the Reply's final
    event (Done, Error or Exited)."""
    with qtbot.waitSignal(win.bridge.finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        type_and_send(qtbot, win, text)
    return blocker.args[1].final


def set_sampling(win: MainWindow, **sampling) -> None:
    win.store.update(win.chat.conversation_id, sampling=sampling)


def listed(qtbot, win: MainWindow) -> None:
    """Wait until the conversation list shows its latest read (it reads in the background)."""
    qtbot.waitUntil(lambda: not win.sidebar.refreshing, timeout=5000)
