"""ElidedLabel: one line of text that shortens itself with "…" to the width it gets, instead
of widening the layout (long chat titles, model file names). The full text is the tooltip."""

from __future__ import annotations

from deskllm.gui.qt import QLabel, QSize, QSizePolicy, Qt, QWidget


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        # Preferred down to the small minimum: the full text when there is room, "…" otherwise.
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt name)
        self._full = text
        self.setToolTip(text)
        self.updateGeometry()
        self._elide()

    def full_text(self) -> str:
        return self._full

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        return QSize(self.fontMetrics().horizontalAdvance(self._full), super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        return QSize(self.fontMetrics().horizontalAdvance("…" * 3), super().sizeHint().height())

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, self.width())
        super().setText(shown)
