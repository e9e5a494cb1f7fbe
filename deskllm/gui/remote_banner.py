"""RemoteBanner: a remote endpoint could not answer (unreachable, refused the key, timed out,
dropped the reply). It names the endpoint and what failed, and offers to go on with the local
model; the chat panel shows it above the messages.

Signals:
    continue_locally(): the user wants this chat answered by the local model.
"""

from __future__ import annotations

from deskllm.gui.qt import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPalette,
    QPushButton,
    Qt,
    QToolButton,
    QWidget,
    Signal,
)


class RemoteBanner(QFrame):
    continue_locally = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.endpoint: str | None = None
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        self.label = QLabel(wordWrap=True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.continue_button = QPushButton("Continue on the local model")
        self.continue_button.setToolTip("Answer this chat on this computer from now on")
        self.continue_button.clicked.connect(self.continue_locally)
        close = QToolButton(text="✕")
        close.setAutoRaise(True)
        close.setToolTip("Hide; the chat stays on the remote model")
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.continue_button)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()  # (never show() here: a banner without a parent yet would be a window)

    def show_failure(self, endpoint: str, reason: str, local_model: str | None) -> None:
        """`reason`: the error, which names the endpoint; `local_model`: the loaded model's
        name (None: none is loaded, so there is nothing to continue on)."""
        self.endpoint = endpoint
        where = f"the local model ({local_model})" if local_model else "a local model"
        self.label.setText(f"Remote engine {endpoint} could not answer: {reason}. You can "
                           f"continue this chat on {where}.")  # fmt: skip
        self.continue_button.setEnabled(local_model is not None)
        self.show()
