"""Help → Keyboard shortcuts: every shortcut of the menu bar's actions, read from the actions
themselves when the dialog opens (so the list cannot drift from what the keys do), plus the
keys that belong to widgets rather than menus (the message box's send key, Stop).
"""

from __future__ import annotations

from dataclasses import dataclass

from deskllm.gui.chat_panel import ChatPanel
from deskllm.gui.qt import (
    QAbstractItemView,
    QAction,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QKeySequence,
    QLabel,
    QMainWindow,
    QMenu,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)


@dataclass(frozen=True)
class ShortcutRow:
    """One line of the list: where the action lives, what it does, its keys (as shown)."""

    section: str
    action: str
    keys: str


def plain_text(text: str) -> str:
    """A menu text as read: mnemonic markers and the trailing ellipsis dropped."""
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").strip()


def key_text(sequence: QKeySequence) -> str:
    return sequence.toString(QKeySequence.SequenceFormat.NativeText)


def mnemonic(text: str) -> str | None:
    """The letter marked with "&" in a menu text (upper case), or None."""
    i = 0
    while (i := text.find("&", i)) != -1 and i + 1 < len(text):
        if text[i + 1] != "&":
            return text[i + 1].upper()
        i += 2
    return None


def menu_rows(menus: list[QMenu]) -> list[ShortcutRow]:
    """A row for every action in `menus` (submenus included): its shortcuts, or for an action
    without one the Alt+letter path through its menus."""
    rows: list[ShortcutRow] = []

    def walk(menu: QMenu, section: str, path: list[str]) -> None:
        for action in menu.actions():
            text = action.text()
            if action.menu() is not None:
                sub = f"{section} › {plain_text(text)}"
                walk(action.menu(), sub, [*path, mnemonic(text) or "?"])
            elif action.shortcuts():
                keys = ", ".join(key_text(s) for s in action.shortcuts())
                rows.append(ShortcutRow(section, plain_text(text), keys))
            elif not action.isSeparator():
                keys = "Alt+" + ", ".join([*path, mnemonic(text) or "?"])
                rows.append(ShortcutRow(section, plain_text(text), keys))

    for menu in menus:
        walk(menu, plain_text(menu.title()), [mnemonic(menu.title()) or "?"])
    return rows


def chat_rows(chat: ChatPanel) -> list[ShortcutRow]:
    """Keys that belong to the chat's widgets, read from them: the send key (a setting) and
    Stop's shortcut."""
    ctrl_sends = chat.input.send_key == "ctrl+enter"
    return [
        ShortcutRow("Message box", "Send", "Ctrl+Enter" if ctrl_sends else "Enter"),
        ShortcutRow("Message box", "New line", "Enter" if ctrl_sends else "Shift+Enter"),
        ShortcutRow("Message box", "Next field", "Tab"),
        ShortcutRow("Chat", "Stop the reply", key_text(chat.stop_button.shortcut())),
    ]


def menus_of(actions: list[QAction]) -> list[QMenu]:
    """The menus behind a menu bar's actions (QMenuBar.actions())."""
    return [a.menu() for a in actions if a.menu() is not None]


class ShortcutsDialog(QDialog):
    """Attributes:
    rows: what the table shows, in order.
    """

    def __init__(self, rows: list[ShortcutRow], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.rows = list(rows)
        self.table = QTableWidget(len(self.rows), 3)
        self.table.setHorizontalHeaderLabels(["Where", "Action", "Keys"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        for row, item in enumerate(self.rows):
            for column, text in enumerate((item.section, item.action, item.keys)):
                cell = QTableWidgetItem(text)
                cell.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
                self.table.setItem(row, column, cell)
        note = QLabel("Menus open with Alt and the underlined letter; Tab moves between fields.")
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(note)
        layout.addWidget(buttons)
        self.table.resizeRowsToContents()
        line = self.fontMetrics().height()
        rows_height = sum(self.table.rowHeight(r) for r in range(len(self.rows)))
        self.resize(36 * line, min(50 * line, rows_height + 8 * line))  # all rows, if they fit

    def keys_for(self, action: str) -> str | None:
        """The keys listed for `action` (its plain text), or None if it is not listed."""
        return next((r.keys for r in self.rows if r.action == plain_text(action)), None)


def show_shortcuts(window: QMainWindow) -> ShortcutsDialog:
    """Open the list for `window` (a MainWindow: its menu bar and its chat panel), built now
    so it shows the keys as they are (the send key is a setting)."""
    rows = menu_rows(menus_of(window.menuBar().actions())) + chat_rows(window.chat)
    dialog = ShortcutsDialog(rows, window)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()
    return dialog
