"""The conversation list: newest activity first, search by title and content, new, rename (in
place: double click, F2 or the Rename button), delete (after asking), and from the context menu
export (Markdown or JSON) and import (a JSON export, as a new conversation).

Signals:
    selected(str): the user picked a conversation (its id), or one was imported.
    new_requested(): the user asked for a new conversation (the window creates it: it knows
        which model a new chat should use).
    deleted(str): a conversation was deleted (its id).
    renamed(str): a conversation got a new title (its id).
    refreshed(): the list shows the latest read (reads run on a background thread).
"""

from __future__ import annotations

import logging
import re
import time
from concurrent.futures import Future
from pathlib import Path

from deskllm.gui.qt import (
    QAbstractItemView,
    QFileDialog,
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
from deskllm.gui.tasks import TaskRunner
from deskllm.store import ConversationStore, open_database
from deskllm.store.conversations import MAX_SEARCH_CHARS, Conversation
from deskllm.store.export import ExportError, export_json, export_markdown, import_json

log = logging.getLogger("deskllm.gui")

SEARCH_DELAY_MS = 200  # search once the user pauses typing, not on every key
_ID = Qt.ItemDataRole.UserRole
EXPORTS = {
    "markdown": ("Markdown (*.md)", ".md"),
    "json": ("deskllm conversation (*.json)", ".json"),
}
# Characters no file system takes in a name, and control characters.
_UNSAFE = re.compile(r'[<>:"/\\|?*\x00-\x1f]+')
_RESERVED = {"CON", "PRN", "AUX", "NUL"} | {f"{d}{n}" for d in ("COM", "LPT") for n in range(1, 10)}


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def file_name(title: str, suffix: str) -> str:
    """A file name for an export of the conversation called `title`."""
    stem = _UNSAFE.sub("_", title).strip(" ._")[:80].rstrip(" .") or "conversation"
    if stem.upper() in _RESERVED:
        stem = f"{stem} chat"
    return stem + suffix


class ConversationSidebar(QWidget):
    selected = Signal(str)
    new_requested = Signal()
    deleted = Signal(str)
    renamed = Signal(str)
    refreshed = Signal()

    def __init__(self, store: ConversationStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        # The list and search read through a connection of their own on a background thread
        # (a search runs full-text over every message): typing never waits on the database.
        self._db_file = store.db.execute("PRAGMA database_list").fetchone()[2]
        self._reader: ConversationStore | None = None  # opened on the task thread
        self.tasks = TaskRunner("sidebar", self)
        self._requested = self._shown = 0  # refresh generations: only the newest is shown
        self._select: str | None = None  # the conversation the pending refresh selects
        self.busy_id: str | None = None  # the conversation being answered: not deletable
        self.error_box: QMessageBox | None = None  # the last export or import failure shown
        self.last_folder = Path.home()  # where the file dialogs open
        self.file_dialog: QFileDialog | None = None  # the last export or import dialog
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
        """Reload the list (search results while a search is typed) in the background, then
        select `select` (else keep the current conversation) without emitting `selected`."""
        query = self.search.text().strip()
        self._requested += 1
        generation = self._requested
        if select:  # kept if a newer refresh supersedes this one before it is shown
            self._select = select
        if not self._db_file:  # an in-memory database has no second connection
            self._show(generation, query, self._read_with(self.store, query))
            return
        self.tasks.run(
            lambda: self._read_with(self._reader_store(), query),
            lambda future: self._shown_or_logged(future, generation, query),
        )

    @property
    def refreshing(self) -> bool:
        """A refresh was asked for and its list is not shown yet."""
        return self._shown < self._requested

    def shutdown(self) -> None:
        self.tasks.shutdown(wait=True)

    def _reader_store(self) -> ConversationStore:
        if self._reader is None:  # an SQLite connection belongs to the thread that opened it
            self._reader = ConversationStore(open_database(self._db_file))
        return self._reader

    @staticmethod
    def _read_with(store: ConversationStore, query: str) -> list[Conversation]:
        return store.search(query) if query else store.list()

    def _shown_or_logged(self, future: Future, generation: int, query: str) -> None:
        try:
            conversations = future.result()
        except Exception:  # the list stays as it was; the next refresh tries again
            log.exception("reading the conversation list failed")
            self._shown = max(self._shown, generation)
            self.refreshed.emit()
            return
        self._show(generation, query, conversations)

    def _show(self, generation: int, query: str, conversations: list[Conversation]) -> None:
        if generation < self._requested:
            return  # a newer refresh is on its way: show only that one
        select, self._select = self._select or self.current_id(), None
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
        if self.list.currentItem() is not None:
            self.list.scrollToItem(self.list.currentItem())
        self.no_results.setVisible(bool(query) and not conversations)
        self._update_buttons()
        self._shown = generation
        self.refreshed.emit()

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
        if item is not None:
            self.list.setCurrentItem(item)
        self.context_menu(item is not None).popup(self.list.viewport().mapToGlobal(pos))

    def context_menu(self, on_item: bool) -> QMenu:
        """The list's context menu: the current conversation's actions when `on_item`, and
        import in any case."""
        menu = QMenu(self)
        if on_item:
            menu.addAction("Rename", self.rename_current)
            menu.addAction("Export as Markdown…", lambda: self.export_current("markdown"))
            menu.addAction("Export as JSON…", lambda: self.export_current("json"))
            menu.addSeparator()
            delete = menu.addAction("Delete…", self.delete_current)
            delete.setEnabled(self.current_id() != self.busy_id)
            menu.addSeparator()
        menu.addAction("Import conversation…", self.import_file)
        return menu

    # Export and import -----------------------------------------------------------------------
    def export_current(self, kind: str) -> None:
        """Ask where to save the current conversation as `kind` (markdown | json), then save."""
        conversation_id = self.current_id()
        if conversation_id is None:
            return
        pattern, suffix = EXPORTS[kind]
        dialog = self._file_dialog("Export conversation", pattern, save=True)
        dialog.setDefaultSuffix(suffix.lstrip("."))
        dialog.selectFile(file_name(self.store.get(conversation_id).title, suffix))
        dialog.fileSelected.connect(lambda path: self.export_to(Path(path), kind, conversation_id))
        dialog.open()

    def export_to(self, path: Path, kind: str, conversation_id: str | None = None) -> bool:
        """Save a conversation (the current one by default) to `path`; a failure is shown."""
        conversation_id = conversation_id or self.current_id()
        if conversation_id is None:
            return False
        write = export_markdown if kind == "markdown" else export_json
        try:
            write(self.store, conversation_id, path)
        except ExportError as error:
            self._show_error("Export failed", str(error))
            return False
        self.last_folder = path.parent
        return True

    def import_file(self) -> None:
        """Ask for a JSON export and import it."""
        dialog = self._file_dialog("Import conversation", EXPORTS["json"][0], save=False)
        dialog.fileSelected.connect(lambda path: self.import_from(Path(path)))
        dialog.open()

    def _file_dialog(self, title: str, pattern: str, save: bool) -> QFileDialog:
        # Opened with open(), not exec(): the window goes on (a reply keeps streaming).
        dialog = QFileDialog(self, title, str(self.last_folder), pattern)
        dialog.setAcceptMode(
            QFileDialog.AcceptMode.AcceptSave if save else QFileDialog.AcceptMode.AcceptOpen
        )
        dialog.setFileMode(
            QFileDialog.FileMode.AnyFile if save else QFileDialog.FileMode.ExistingFile
        )
        dialog.finished.connect(dialog.deleteLater)
        self.file_dialog = dialog
        return dialog

    def import_from(self, path: Path) -> str | None:
        """Import a JSON export as a new conversation, list and select it; its id, or None
        when the file was refused (the reason is shown)."""
        try:
            conversation = import_json(self.store, path)
        except ExportError as error:
            self._show_error("Import failed", str(error))
            return None
        self.last_folder = path.parent
        self.search.clear()  # an active search could hide it
        self.refresh(select=conversation.id)
        self.selected.emit(conversation.id)
        return conversation.id

    def _show_error(self, title: str, text: str) -> None:
        # Not modal-blocking: the message stays up while the user goes on.
        self.error_box = QMessageBox(QMessageBox.Icon.Warning, title, text, parent=self)
        self.error_box.open()
