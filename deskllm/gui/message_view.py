"""MessageWidget: one message of the chat, rendered on its own so a streaming reply re-renders
only itself. Prose is Qt's own Markdown (a QLabel); fenced code gets a CodeBlockView.

Signals:
    edit_requested(Message): the user wants to edit and resend this (user) message.
    continue_requested(): continue this interrupted reply.
    regenerate_requested(): regenerate this reply.
"""

from __future__ import annotations

from deskllm.gui.chat_render import (
    ROLE_TITLES,
    Block,
    dropped_note,
    metrics_details,
    metrics_line,
    split_blocks,
    status_note,
)
from deskllm.gui.code_block import CodeBlockView
from deskllm.gui.qt import (
    QApplication,
    QFont,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPalette,
    QSizePolicy,
    Qt,
    QToolButton,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.store.conversations import Message


class ProseView(QLabel):
    """A run of Markdown prose, selectable, links open in the browser."""

    kind = "prose"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.block: Block | None = None
        self.setTextFormat(Qt.TextFormat.MarkdownText)
        self.setWordWrap(True)
        self.setOpenExternalLinks(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        # Ignored width: a long word or URL wraps at the view's edge instead of widening it.
        policy = QSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def set_block(self, block: Block) -> None:
        if block != self.block:
            self.block = block
            self.setText(block.text)


def _tool_button(text: str, tip: str, parent: QWidget) -> QToolButton:
    # Parented at once: showing a parentless widget, even briefly, makes it a window.
    button = QToolButton(parent, text=text)
    button.setToolTip(tip)
    button.setAutoRaise(True)
    return button


class MessageWidget(QFrame):
    """Attributes:
    message: the stored message shown (a provisional one with id -1 until the store has it).
    revision: how many times the content was rendered; tests use it to check that streaming
        touches only the message being written.
    """

    edit_requested = Signal(object)
    continue_requested = Signal()
    regenerate_requested = Signal()

    def __init__(self, message: Message, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message = message
        self.revision = 0
        self._text: str | None = None
        self._views: list[ProseView | CodeBlockView] = []
        # Palette roles (not colours) so light and dark themes both work.
        self.setAutoFillBackground(True)
        user = message.role == "user"
        self.setBackgroundRole(QPalette.ColorRole.Window if user else QPalette.ColorRole.Base)
        self._build()
        self.set_message(message)

    def _build(self) -> None:
        self.title = QLabel(ROLE_TITLES.get(self.message.role, self.message.role))
        font = self.title.font()
        font.setWeight(QFont.Weight.Bold)
        self.title.setFont(font)
        self.edit_button = _tool_button("Edit", "Edit this message and send it again", self)
        self.edit_button.setVisible(self.message.role == "user")
        self.edit_button.clicked.connect(lambda: self.edit_requested.emit(self.message))
        self.copy_button = _tool_button("Copy", "Copy the whole message", self)
        self.copy_button.clicked.connect(self.copy)
        header = QHBoxLayout()
        header.addWidget(self.title)
        header.addStretch(1)
        header.addWidget(self.edit_button)
        header.addWidget(self.copy_button)

        self.body = QVBoxLayout()
        self.body.setSpacing(6)
        self.note = QLabel(wordWrap=True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.continue_button = _tool_button("Continue", "Ask the model to go on from here", self)
        self.continue_button.clicked.connect(self.continue_requested)
        self.regenerate_button = _tool_button("Regenerate", "Write this reply anew", self)
        self.regenerate_button.clicked.connect(self.regenerate_requested)
        notes = QHBoxLayout()
        notes.addWidget(self.note, 1)
        notes.addWidget(self.continue_button)
        notes.addWidget(self.regenerate_button)
        self.figures = QLabel(wordWrap=True)
        self.figures.setForegroundRole(QPalette.ColorRole.PlaceholderText)

        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addLayout(self.body)
        layout.addLayout(notes)
        layout.addWidget(self.figures)

    # Content ---------------------------------------------------------------------------------
    def set_message(self, message: Message) -> None:
        """Show a stored message (its final text, notes and figures)."""
        self.message = message
        streaming = message.status == "streaming"
        self.set_text(message.content if message.content or not streaming else "")
        notes = [status_note(message), dropped_note(message.metrics)]
        self.note.setText("\n".join(n for n in notes if n))
        self.note.setVisible(bool(self.note.text()))
        line = "" if streaming else metrics_line(message.metrics)
        self.figures.setText(line)
        self.figures.setToolTip(metrics_details(message.metrics) if line else "")
        self.figures.setVisible(bool(line))
        self.set_actions(False)

    def set_text(self, text: str) -> None:
        """Render `text`; only the blocks that changed are touched (while streaming, the last)."""
        if text == self._text:
            return
        self._text = text
        self.revision += 1
        blocks = split_blocks(text) or [Block("prose", "…")]
        for i, block in enumerate(blocks):
            if i < len(self._views) and self._views[i].kind == block.kind:
                self._views[i].set_block(block)
                continue
            self._drop_views(i)
            view = CodeBlockView(self) if block.kind == "code" else ProseView(self)
            view.set_block(block)
            self._views.append(view)
            self.body.addWidget(view)
        self._drop_views(len(blocks))

    def _drop_views(self, start: int) -> None:
        for view in self._views[start:]:
            view.hide()  # out of the layout at once; deleted when control returns
            view.deleteLater()
        del self._views[start:]

    def set_actions(self, enabled: bool) -> None:
        """Continue / Regenerate next to an interrupted reply: only on the last message, and
        only while nothing is being generated."""
        interrupted = self.message.status == "interrupted" and self.message.role == "assistant"
        self.continue_button.setVisible(enabled and interrupted)
        self.regenerate_button.setVisible(enabled and interrupted)

    def set_busy(self, busy: bool) -> None:
        self.edit_button.setEnabled(not busy)

    def plain_text(self) -> str:
        """What the widget shows, as text (titles, body, notes)."""
        parts = [self.title.text()] + [v.block.text for v in self._views if v.block]
        return "\n".join(parts + [self.note.text(), self.figures.text()]).strip()

    def code_blocks(self) -> list[CodeBlockView]:
        return [v for v in self._views if isinstance(v, CodeBlockView)]

    def copy(self) -> None:
        QApplication.clipboard().setText(self._text or "")
