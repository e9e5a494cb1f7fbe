"""DocumentsButton: which collections the open chat may search, from its header.

A menu of the collections, each checkable; what is checked is stored for the conversation, and
every message of that chat then searches them (the reply cites the passages it was given). The
button says how many the chat searches.
"""

from __future__ import annotations

from collections.abc import Callable

from deskllm.documents.service import Documents
from deskllm.documents.store import Collection
from deskllm.gui.qt import QMenu, QToolButton, QWidget


class DocumentsButton(QToolButton):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.documents: Documents | None = None
        self.collections: Callable[[], list[Collection]] = list
        self.open_panel: Callable[[], None] = lambda: None
        self.conversation_id: str | None = None
        self.chosen: list[str] = []
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.menu_.aboutToShow.connect(self._fill)
        self.setMenu(self.menu_)
        self.setToolTip("The document collections this chat searches; replies cite them")
        self._show()

    def attach(
        self,
        documents: Documents,
        collections: Callable[[], list[Collection]],
        open_panel: Callable[[], None],
    ) -> None:
        self.documents, self.collections, self.open_panel = documents, collections, open_panel
        self.set_conversation(self.conversation_id)

    def set_conversation(self, conversation_id: str | None) -> None:
        self.conversation_id = conversation_id
        self.chosen = []
        if conversation_id and self.documents is not None:
            found = self.documents.store().conversation_collections(conversation_id)
            self.chosen = [c.name for c in found]
        self._show()

    def refresh(self) -> None:
        """The collections changed (one removed: the chat no longer searches it)."""
        self.set_conversation(self.conversation_id)

    def choose(self, names: list[str]) -> None:
        if self.conversation_id is None or self.documents is None:
            return
        self.documents.store().set_conversation_collections(self.conversation_id, names)
        self.chosen = list(names)
        self._show()

    def _show(self) -> None:
        self.setEnabled(self.conversation_id is not None and self.documents is not None)
        if not self.chosen:
            self.setText("Documents")
        elif len(self.chosen) == 1:
            self.setText(f"Documents: {self.chosen[0]}")
        else:
            self.setText(f"Documents: {len(self.chosen)}")

    def _fill(self) -> None:
        self.menu_.clear()
        collections = self.collections()
        if not collections:
            empty = self.menu_.addAction("No collections yet")
            empty.setEnabled(False)
        for collection in collections:
            action = self.menu_.addAction(
                f"{collection.name} ({collection.files} files, {collection.chunks} passages)"
            )
            action.setCheckable(True)
            action.setChecked(collection.name in self.chosen)
            name = collection.name
            action.toggled.connect(lambda on, n=name: self._toggle(n, on))
        self.menu_.addSeparator()
        self.menu_.addAction("Manage collections…", self.open_panel)

    def _toggle(self, name: str, on: bool) -> None:
        names = [n for n in self.chosen if n != name] + ([name] if on else [])
        self.choose(sorted(names))
