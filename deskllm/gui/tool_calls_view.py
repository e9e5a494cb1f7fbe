"""A reply's tool calls as cards, and a tool's result folded under them.

A card says which tool of which server the model wants to run and with what arguments; while
the call waits for the user it offers Allow once, Always allow this tool and Deny (nothing
runs before one is chosen). A result (a tool message) is folded behind a line with the tool,
the decision, how long it took and whether it failed or was cut; unfolded, the text the model
was given.

Signals:
    answered(str, str): call id, the user's decision ("once", "always" or "deny").
"""

from __future__ import annotations

import json

from deskllm.gui.chat_render import tool_result_title
from deskllm.gui.qt import (
    QFontDatabase,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.gui.thinking_view import ThinkingView
from deskllm.store.export import DECISION_WORDS

ARGUMENTS_SHOWN = 2_000  # characters of a call's arguments on its card (all in the tooltip)


def arguments_text(arguments: dict) -> str:
    text = json.dumps(arguments, indent=2, ensure_ascii=False)
    return text if len(text) <= ARGUMENTS_SHOWN else text[:ARGUMENTS_SHOWN] + "\n…"


class ToolCallCard(QFrame):
    answered = Signal(str, str)

    def __init__(self, call: dict, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.call = call
        self.setFrameShape(QFrame.Shape.StyledPanel)
        server = f" on <b>{call['server']}</b>" if call.get("server") else ""
        self.title = QLabel(f"Tool call: <b>{call['name']}</b>{server}", self)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.arguments = QLabel(arguments_text(call.get("arguments", {})), self)
        self.arguments.setTextFormat(Qt.TextFormat.PlainText)
        self.arguments.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.arguments.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.arguments.setWordWrap(True)
        self.state = QLabel(self, wordWrap=True)
        self.allow_once = QPushButton("Allow once", self)
        self.allow_always = QPushButton("Always allow this tool", self)
        self.deny = QPushButton("Deny", self)
        self.allow_once.setToolTip("Run this call now; ask again next time")
        self.allow_always.setToolTip(f"Run {call['name']} without asking, in every chat, "
                                     "from now on (Settings → Tools lists it)")  # fmt: skip
        self.deny.setToolTip("Do not run it; the model is told you declined")
        for button, decision in ((self.allow_once, "once"), (self.allow_always, "always"),
                                 (self.deny, "deny")):  # fmt: skip
            button.clicked.connect(lambda _=False, d=decision: self._answer(d))
        buttons = QHBoxLayout()
        buttons.addWidget(self.state, 1)
        for button in (self.allow_once, self.allow_always, self.deny):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.title)
        layout.addWidget(self.arguments)
        layout.addLayout(buttons)
        self.set_pending(False)

    def set_pending(self, pending: bool) -> None:
        self.pending = pending
        for button in (self.allow_once, self.allow_always, self.deny):
            button.setVisible(pending)
        self.state.setText("Run this tool?" if pending else "")
        self.state.setVisible(pending)
        if pending:
            self.allow_once.setFocus()

    def set_result(self, metrics: dict | None, running: bool = False) -> None:
        """The call's outcome once its result is stored (None: none yet; `running`: its
        turn goes on, else it never ran: the turn was stopped first)."""
        if self.pending:
            return
        if metrics is None:
            if not running:
                self.state.setText("Not run: the turn was stopped before it.")
            self.state.setVisible(bool(self.state.text()))
            return
        decision = metrics.get("decision")
        if decision == "deny":
            text = "Denied: the model was told you declined."
        else:
            how = DECISION_WORDS.get(decision or "", "run")
            text = f"{how[0].upper()}{how[1:]}; its result is below."
        self.state.setText(text)
        self.state.show()

    def _answer(self, decision: str) -> None:
        self.set_pending(False)
        self.state.setText("Denied." if decision == "deny" else "Running…")
        self.state.show()
        self.answered.emit(self.call["id"], decision)


class ToolCallsView(QWidget):
    answered = Signal(str, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.cards: list[ToolCallCard] = []
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self.hide()

    def set_calls(self, calls: list[dict]) -> None:
        if [c.call for c in self.cards] == calls:
            return
        for card in self.cards:
            card.hide()
            card.deleteLater()
        self.cards = []
        for call in calls:
            card = ToolCallCard(call, self)
            card.answered.connect(self.answered)
            self._layout.addWidget(card)
            self.cards.append(card)
        self.setVisible(bool(calls))

    def card(self, call_id: str) -> ToolCallCard | None:
        return next((c for c in self.cards if c.call["id"] == call_id), None)


class ToolResultView(ThinkingView):
    """A tool's result, folded (ThinkingView's fold with the result's own title)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.toggle.setToolTip("Show or hide what the tool answered (the model was given it)")

    def set_result(self, text: str, metrics: dict) -> None:
        self.show()
        self.toggle.setText(tool_result_title(metrics))
        if self.text.text() != text:
            self.text.setText(text or "(no output)")
