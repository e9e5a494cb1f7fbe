"""A reasoning model's thinking above its answer: folded by default behind a "Thinking" button
that says how long and how many tokens it took (and "Thinking…" while it goes on); unfolded,
the text itself, dimmed. Hidden for a reply without thinking."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QToolButton, QVBoxLayout, QWidget


def thinking_title(tokens: int | None, seconds: float | None, live: bool) -> str:
    if live:
        return "Thinking…"
    figures = []
    if seconds is not None:
        figures.append(f"{seconds:.1f} s")
    if tokens:
        figures.append(f"{tokens:,} tokens")
    return "Thought" + (f" for {', '.join(figures)}" if figures else "")


class ThinkingView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.toggle = QToolButton(self, checkable=True, autoRaise=True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setToolTip("Show or hide how the model thought about its answer")
        self.toggle.toggled.connect(self._unfold)
        self.text = QLabel(self, wordWrap=True)
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.text.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.text)
        self.hide()

    def set_thinking(self, text: str, tokens: int | None = None, seconds: float | None = None,
                     live: bool = False) -> None:  # fmt: skip
        """Show `text` (folded unless the user unfolded it); hidden when it is empty."""
        self.setVisible(bool(text))
        self.toggle.setText(thinking_title(tokens, seconds, live))
        if self.text.text() != text:
            self.text.setText(text)

    @property
    def unfolded(self) -> bool:
        return self.toggle.isChecked()

    def _unfold(self, unfolded: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if unfolded else Qt.ArrowType.RightArrow)
        self.text.setVisible(unfolded)
