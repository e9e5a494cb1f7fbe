"""The sources under a reply that used the user's documents, and the passage each one opens.

A reply stores the passages it was given (`metrics["sources"]`: number, file, page, heading,
offsets, text). Under the reply they are listed by number, as the reply cites them ([1]); one
opens a PassageDialog: where it is from, the passage highlighted in the text around it (read
from the file again, off the GUI thread), and a button that opens the file itself.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

from deskllm.documents.readers import Skip, read_document
from deskllm.gui.qt import (
    QDesktopServices,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPalette,
    QPushButton,
    Qt,
    QTextBrowser,
    QTextCharFormat,
    QTextCursor,
    QUrl,
    QVBoxLayout,
    QWidget,
)
from deskllm.gui.tasks import TaskRunner

CONTEXT_CHARS = 1500  # shown before and after the passage
LinkOpener = Callable[[QUrl], bool]  # QDesktopServices.openUrl, or a test's recorder


def source_label(source: dict) -> str:
    """"[2] manual.pdf, p. 3 — Install › Linux"."""
    where = Path(source["path"]).name
    if source.get("page") is not None:
        where += f", p. {source['page']}"
    if source.get("heading"):
        where += f" — {source['heading']}"
    return f"[{source['number']}] {where}"


class SourcesView(QLabel):
    """The numbered sources of one reply, each a link to its passage."""

    def __init__(self, parent: QWidget | None = None,
                 open_url: LinkOpener = QDesktopServices.openUrl) -> None:  # fmt: skip
        super().__init__(parent)
        self.sources: list[dict] = []
        self.open_url = open_url
        self.dialog: PassageDialog | None = None
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        flags = Qt.TextInteractionFlag
        self.setTextInteractionFlags(flags.LinksAccessibleByMouse | flags.LinksAccessibleByKeyboard)
        self.linkActivated.connect(self._open)
        self.hide()

    def set_sources(self, sources: list[dict]) -> None:
        self.sources = list(sources)
        rows = [f'<a href="source:{i}">{html.escape(source_label(s))}</a>'
                for i, s in enumerate(self.sources)]  # fmt: skip
        self.setText("<b>Sources</b><br>" + "<br>".join(rows) if rows else "")
        self.setToolTip("\n".join(s["path"] for s in self.sources))
        self.setVisible(bool(rows))

    def _open(self, link: str) -> None:
        index = int(link.removeprefix("source:"))
        self.open_source(index)

    def open_source(self, index: int) -> PassageDialog:
        self.dialog = PassageDialog(self.sources[index], self.window(), self.open_url)
        self.dialog.open()
        return self.dialog


def passage_context(source: dict) -> tuple[str, int, int] | None:
    """The file's text around the passage, and the passage's offsets in it; None when the file
    is gone or no longer holds the passage where it was (it changed since it was indexed)."""
    try:
        document = read_document(Path(source["path"]))
    except (Skip, OSError):
        return None
    page = source.get("page")
    section = next((s for s in document.sections if s.page == page), None)
    if section is None:
        return None
    start, end = source["start"], source["end"]
    if section.text[start:end] != source["text"]:
        return None
    lo, hi = max(0, start - CONTEXT_CHARS), min(len(section.text), end + CONTEXT_CHARS)
    return section.text[lo:hi], start - lo, end - lo


class PassageDialog(QDialog):
    def __init__(self, source: dict, parent: QWidget | None = None,
                 open_url: LinkOpener = QDesktopServices.openUrl) -> None:  # fmt: skip
        super().__init__(parent)
        self.source = source
        self.open_url = open_url
        self.setWindowTitle(source_label(source))
        self.resize(720, 520)
        where = QLabel(wordWrap=True)
        where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        parts = [source["path"]]
        if source.get("page") is not None:
            parts.append(f"page {source['page']}")
        if source.get("heading"):
            parts.append(source["heading"])
        where.setText(" · ".join(parts))
        self.note = QLabel(wordWrap=True)
        self.note.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.text = QTextBrowser(self)
        self.text.setOpenLinks(False)
        self.show_text(source["text"], 0, len(source["text"]))
        self.note.setText("Reading the file…")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        self.open_button = QPushButton("Open the file")
        self.open_button.clicked.connect(self.open_file)
        buttons.addButton(self.open_button, QDialogButtonBox.ButtonRole.ActionRole)
        layout = QVBoxLayout(self)
        layout.addWidget(where)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.note)
        layout.addWidget(buttons)
        self.tasks = TaskRunner("passage", self)
        self.tasks.run(lambda: passage_context(source), self._read)

    def _read(self, future) -> None:
        context = future.result()
        if context is None:
            self.note.setText("The file changed or is gone since it was indexed: this is the "
                              "passage as it was.")  # fmt: skip
            return
        self.show_text(*context)
        self.note.setText("The passage is highlighted in the text around it.")

    def show_text(self, text: str, start: int, end: int) -> None:
        self.text.setPlainText(text)
        cursor = QTextCursor(self.text.document())
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        mark = QTextCharFormat()
        mark.setBackground(self.palette().color(QPalette.ColorRole.Highlight))
        mark.setForeground(self.palette().color(QPalette.ColorRole.HighlightedText))
        cursor.mergeCharFormat(mark)
        self.text.setTextCursor(cursor)
        self.text.ensureCursorVisible()
        self.highlighted = text[start:end]

    def open_file(self) -> None:
        self.open_url(QUrl.fromLocalFile(self.source["path"]))

    def done(self, result: int) -> None:
        self.tasks.shutdown(wait=False)
        super().done(result)
