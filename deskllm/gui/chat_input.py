"""The message box: Enter sends and Shift+Enter starts a new line, or (Settings.send_key
"ctrl+enter") Ctrl+Enter sends and Enter starts a new line.

Signals:
    submitted(): the send key was pressed.
    files_dropped(list): files were dropped or pasted on it (their paths), to attach.
"""

from __future__ import annotations

from pathlib import Path

from deskllm import settings as settings_mod
from deskllm.gui.qt import QPlainTextEdit, QSize, QSizePolicy, Qt, QWidget, Signal

MIN_LINES, MAX_LINES = 3, 10  # the box grows with its text between these


def local_files(mime) -> list[Path]:
    """The local files a drop or paste carries ([] for text, or a web link)."""
    if not mime.hasUrls():
        return []
    urls = mime.urls()
    return [Path(u.toLocalFile()) for u in urls] if all(u.isLocalFile() for u in urls) else []


class ChatInput(QPlainTextEdit):
    submitted = Signal()
    files_dropped = Signal(list)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.send_key = "enter"
        self.setTabChangesFocus(True)
        self.set_send_key("enter")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        self.textChanged.connect(self.updateGeometry)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        lines = min(MAX_LINES, max(MIN_LINES, self.document().lineCount()))
        margins = self.contentsMargins().top() + self.contentsMargins().bottom()
        height = lines * self.fontMetrics().lineSpacing() + margins
        return QSize(super().sizeHint().width(), height + 2 * int(self.document().documentMargin()))

    def set_send_key(self, send_key: str) -> None:
        labels = settings_mod.specs()["send_key"].choices
        self.send_key = send_key if send_key in labels else "enter"
        self.setPlaceholderText(f"Message ({labels[self.send_key]})")

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt name)
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = event.modifiers()
            ctrl = bool(mods & Qt.KeyboardModifier.ControlModifier)
            shift = bool(mods & Qt.KeyboardModifier.ShiftModifier)
            sends = ctrl if self.send_key == "ctrl+enter" else not shift
            if sends:
                self.submitted.emit()
                return
        super().keyPressEvent(event)

    def canInsertFromMimeData(self, source) -> bool:  # noqa: N802 (Qt name)
        return bool(local_files(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source) -> None:  # noqa: N802 (Qt name)
        files = local_files(source)
        if files:
            self.files_dropped.emit(files)  # attached, not pasted as their paths
            return
        super().insertFromMimeData(source)
