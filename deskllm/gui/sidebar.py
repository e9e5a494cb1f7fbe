"""The conversation list: newest activity first, search by title and content, new, rename (in
place: double click, F2 or the Rename button) and delete (after asking).

Signals:
    selected(str): the user picked a conversation (its id).
    new_requested(): the user asked for a new conversation (the window creates it: it knows
        which model a new chat should use).
    deleted(str): a conversation was deleted (its id).
    renamed(str): a conversation got a new title (its id).
"""

from __future__ import annotations

import time

from deskllm.gui.qt import (
    QAbstractItemView,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    Qt,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.store import ConversationStore
from deskllm.store.conversations import MAX_SEARCH_CHARS

SEARCH_DELAY_MS = 200  # search once the user pauses typing, not on every key
_ID = Qt.ItemDataRole.UserRole


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


class ConversationSidebar(QWidget):
    selected = Signal(str)
    new_requested = Signal()
    deleted = Signal(str)
    renamed = Signal(str)

    def __init__(self, store: ConversationStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.busy_id: str | None = None  # the conversation being answered: not deletable
        self._refreshing = False
        self.new_button = QPushButton("New chat")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.rename_button = QPushButton("Rename")
        self.delete_button = QPushButton("Delete")
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats")
        self.search.setClearButtonEnabled(True)
        self.search.setMaxLength(MAX_SEARCH_CHARS)  # the store refuses longer searches
        self.list = QListWidget()
        self.list.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked
            | QAbstractItemView.EditTrigger.EditKeyPressed
        )
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        # Long titles end in "…" instead of scrolling the list sideways.
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.no_results = QPushButton("No chat matches; clear the search")
        self.no_results.setFlat(True)
        self.no_results.hide()
        self._search_timer = QTimer(self, singleShot=True, interval=SEARCH_DELAY_MS)

        buttons = QHBoxLayout()
        for button in (self.new_button, self.rename_button, self.delete_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 0, 0)
        layout.addLayout(buttons)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.no_results)

        self.new_button.clicked.connect(self.new_requested)
        self.rename_button.clicked.connect(self.rename_current)
        self.delete_button.clicked.connect(self.delete_current)
        self.search.textChanged.connect(lambda _text: self._search_timer.start())
        self._search_timer.timeout.connect(self.refresh)
        self.no_results.clicked.connect(self.search.clear)
        self.list.currentItemChanged.connect(self._on_current_changed)
        self.list.itemChanged.connect(self._on_item_changed)
        self.list.customContextMenuRequested.connect(self._context_menu)

    # Listing ---------------------------------------------------------------------------------
    def current_id(self) -> str | None:
        item = self.list.currentItem()
        return item.data(_ID) if item is not None else None

    def refresh(self, select: str | None = None) -> None:
        """Reload the list (search results while a search is typed) and keep or set the
        current conversation without emitting `selected`."""
        select = select or self.current_id()
        query = self.search.text().strip()
        conversations = self.store.search(query) if query else self.store.list()
        self._refreshing = True
        self.list.clear()
        for conversation in conversations:
            item = QListWidgetItem(conversation.title)
            item.setData(_ID, conversation.id)
            item.setToolTip(f"{conversation.title}\nLast activity {_when(conversation.updated_at)}")
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if conversation.id == select:
                self.list.setCurrentItem(item)
        self._refreshing = False
        self.no_results.setVisible(bool(query) and not conversations)
        self._update_buttons()

    def ids(self) -> list[str]:
        return [self.list.item(i).data(_ID) for i in range(self.list.count())]

    def set_busy(self, conversation_id: str | None) -> None:
        self.busy_id = conversation_id
        self._update_buttons()

    def _on_current_changed(self, current, _previous) -> None:
        self._update_buttons()
        if current is not None and not self._refreshing:
            self.selected.emit(current.data(_ID))

    def _update_buttons(self) -> None:
        current = self.current_id()
        self.rename_button.setEnabled(current is not None)
        self.delete_button.setEnabled(current is not None and current != self.busy_id)

    # Rename and delete -----------------------------------------------------------------------
    def rename_current(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.list.editItem(item)

    def _on_item_changed(self, item: QListWidgetItem) -> None:
        if self._refreshing:
            return
        conversation = self.store.get(item.data(_ID))
        title = item.text().strip()
        if not title or title == conversation.title:
            self._refreshing = True
            item.setText(conversation.title)  # an empty name keeps the old one
            self._refreshing = False
            return
        self.store.update(conversation.id, title=title)
        self.renamed.emit(conversation.id)
        # Not inside the editor's commit: the list is rebuilt once control returns.
        QTimer.singleShot(0, self.refresh)

    def delete_current(self) -> None:
        conversation_id = self.current_id()
        if conversation_id is None or conversation_id == self.busy_id:
            return
        title = self.store.get(conversation_id).title
        answer = QMessageBox.question(
            self, "Delete conversation", f"Delete “{title}” and all its messages?"
        )
        if answer != QMessageBox.StandardButton.Yes:
            return
        self.store.delete(conversation_id)
        self.refresh(select=None)
        self.deleted.emit(conversation_id)

    def _context_menu(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        self.list.setCurrentItem(item)
        menu = QMenu(self)
        menu.addAction("Rename", self.rename_current)
        delete = menu.addAction("Delete…", self.delete_current)
        delete.setEnabled(item.data(_ID) != self.busy_id)
        menu.popup(self.list.viewport().mapToGlobal(pos))
