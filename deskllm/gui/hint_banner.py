"""HintBanner: a one-line hint with a link and a close button; once closed it stays closed
(remembered under `key` in the window's QSettings).

Signals:
    link_activated(str): the hint's link was clicked (its href).
"""

from __future__ import annotations

from deskllm.gui.qt import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPalette,
    QSettings,
    Qt,
    QToolButton,
    QWidget,
    Signal,
)


class HintBanner(QFrame):
    link_activated = Signal(str)

    def __init__(self, html: str, key: str, state: QSettings, parent: QWidget | None = None):
        super().__init__(parent)
        self.key = key
        self.state = state
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        self.label = QLabel(html)
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.linkActivated.connect(self.link_activated)
        self.close_button = QToolButton(text="✕")
        self.close_button.setAutoRaise(True)
        self.close_button.setToolTip("Hide this hint")
        self.close_button.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        if self.dismissed():
            self.hide()  # (never show() here: a banner without a parent yet would be a window)

    def dismissed(self) -> bool:
        return self.state.value(self.key, False, type=bool)

    def dismiss(self) -> None:
        self.state.setValue(self.key, True)
        self.hide()
