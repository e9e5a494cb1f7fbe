"""A fenced code block in a message: monospace, highlighted by its fence's language (Pygments),
not wrapped (scrolls sideways), with a Copy button. Its height follows its line count, so the
chat's own scroll area does the scrolling."""

from __future__ import annotations

from deskllm.gui.chat_render import Block
from deskllm.gui.code_highlight import CodeHighlighter
from deskllm.gui.qt import (
    QApplication,
    QFontDatabase,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPalette,
    QPlainTextEdit,
    QSizePolicy,
    Qt,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from deskllm.gui.theme import is_dark


class _CodeText(QPlainTextEdit):
    """Read-only code that leaves vertical wheel scrolling to the chat around it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.viewport().setBackgroundRole(QPalette.ColorRole.AlternateBase)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def wheelEvent(self, event) -> None:  # noqa: N802 (Qt name)
        if event.angleDelta().x() == 0:
            event.ignore()  # let the chat scroll
        else:
            super().wheelEvent(event)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        self.fit_height()

    def fit_height(self) -> None:
        lines = max(1, self.document().blockCount())
        height = lines * self.fontMetrics().lineSpacing()
        height += int(2 * self.document().documentMargin()) + 2 * self.frameWidth()
        # The plain-text layout reports its width in pixels: wider than the view → a bar.
        if self.document().documentLayout().documentSize().width() > self.viewport().width():
            height += self.horizontalScrollBar().sizeHint().height()
        if height != self.height():
            self.setFixedHeight(height)


class CodeBlockView(QFrame):
    """One code block. `set_block` re-renders only when the block changed."""

    kind = "code"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.block: Block | None = None
        self.language = QLabel()
        self.language.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.copy_button = QToolButton(text="Copy code")
        self.copy_button.setToolTip("Copy this code block to the clipboard")
        self.copy_button.setAutoRaise(True)
        self.copy_button.clicked.connect(self.copy)
        self.text = _CodeText()
        self.highlighter = CodeHighlighter(self.text.document(), is_dark(QApplication.palette()))
        header = QHBoxLayout()
        header.setContentsMargins(6, 0, 0, 0)
        header.addWidget(self.language)
        header.addStretch(1)
        header.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(1, 1, 1, 1)
        layout.setSpacing(0)
        layout.addLayout(header)
        layout.addWidget(self.text)

    def set_block(self, block: Block) -> None:
        if block == self.block:
            return
        old = self.block.text if self.block else ""
        self.block = block
        self.language.setText(block.lang or "code")
        self.highlighter.set_language(block.lang or "")
        self.highlighter.set_text(block.text)
        if block.text.startswith(old) and old:
            # Streaming: append the new tail instead of re-laying-out the whole block.
            cursor = self.text.textCursor()
            cursor.movePosition(cursor.MoveOperation.End)
            cursor.insertText(block.text[len(old) :])
        else:
            self.text.setPlainText(block.text)
        self.highlighter.rehighlight()  # earlier lines too: a line may change what follows
        self.text.fit_height()

    def copy(self) -> None:
        QApplication.clipboard().setText(self.block.text if self.block else "")
