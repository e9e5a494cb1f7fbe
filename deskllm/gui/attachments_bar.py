"""AttachmentsBar: files attached to the open chat (the Attach… button, or dropped on the chat).

Attached files are indexed as the chat's own collection, off the GUI thread. While they fit in
half the chat's context they go into the prompt whole; longer ones are searched like a
collection (see deskllm.documents.service). Either way the reply lists them as sources.

Signals:
    attached(str): the attachments of this conversation changed.
"""

from __future__ import annotations

from pathlib import Path

from deskllm.documents.indexer import IndexProgress
from deskllm.documents.service import Documents
from deskllm.gui.qt import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPalette,
    QPushButton,
    QWidget,
    Signal,
)
from deskllm.gui.tasks import TaskRunner


class AttachmentsBar(QWidget):
    attached = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.documents: Documents | None = None
        self.conversation_id: str | None = None
        self.paths: list[str] = []
        self.reading = False
        self.tasks = TaskRunner("attachments", self)
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setToolTip("Attach files to this chat (or drop them on it): text, "
                                      "Markdown, code, HTML, PDF, DOCX")  # fmt: skip
        self.attach_button.clicked.connect(self.choose_files)
        self.label = QLabel(wordWrap=True)
        self.label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.detach_button = QPushButton("Detach all")
        self.detach_button.setToolTip("Forget the files attached to this chat (not the files)")
        self.detach_button.clicked.connect(self.detach)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.attach_button)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.detach_button)
        self._show()

    def set_documents(self, documents: Documents) -> None:
        self.documents = documents
        self.set_conversation(self.conversation_id)

    def set_conversation(self, conversation_id: str | None) -> None:
        self.conversation_id = conversation_id
        self.paths = []
        if conversation_id and self.documents is not None:
            self.paths = self.documents.attached(conversation_id)
        self._show()

    def choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach files to this chat")
        if paths:
            self.attach_paths([Path(p) for p in paths])

    def attach_paths(self, paths: list[Path]) -> None:
        if self.documents is None or self.conversation_id is None or not paths:
            return
        documents, cid = self.documents, self.conversation_id
        self.reading = True
        self.label.setText(f"Reading {', '.join(p.name for p in paths)}…")
        self._show_buttons()

        def progress(p: IndexProgress) -> None:
            if p.current:
                self.tasks.post(self.label.setText, f"Reading {Path(p.current).name} "
                                f"({p.files_done + 1}/{p.files_total})…")  # fmt: skip

        def done(future) -> None:
            self.reading = False
            try:
                future.result()
                skipped = documents.store().skipped(documents.store().attachments(cid))
            except Exception as exc:  # noqa: BLE001 (said in the bar; the chat goes on)
                self.set_conversation(self.conversation_id)
                self.label.setText(f"The files could not be attached: {exc}")
                return
            self.attached.emit(cid)
            if cid == self.conversation_id:
                self.set_conversation(cid)
                if skipped:
                    self.label.setText(self.label.text() + " · not read: " + "; ".join(
                        f"{Path(path).name} ({reason})" for path, reason in skipped))  # fmt: skip

        self.tasks.run(lambda: documents.attach(cid, paths, progress), done)

    def detach(self) -> None:
        if self.documents is None or self.conversation_id is None:
            return
        documents, cid = self.documents, self.conversation_id
        self.tasks.run(lambda: documents.detach(cid), lambda f: self.set_conversation(cid))

    def _show(self) -> None:
        if self.paths:
            names = ", ".join(Path(p).name for p in self.paths)
            self.label.setText(f"Attached: {names}")
        else:
            self.label.setText("")
        self._show_buttons()

    def _show_buttons(self) -> None:
        ready = self.documents is not None and self.conversation_id is not None
        self.attach_button.setEnabled(ready and not self.reading)
        self.detach_button.setVisible(bool(self.paths) and not self.reading)

    def shutdown(self) -> None:
        self.tasks.shutdown(wait=True)
