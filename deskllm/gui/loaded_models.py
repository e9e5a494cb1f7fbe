"""What is loaded now, and what it holds (Engine → Loaded models…, and the Server panel): the
chat's model, the models the window's API server loaded beside it for requests that named
them (each with its memory, slots and the idle time left before it is unloaded, with Unload
and Pin), and the documents' embedding models.

Signals of LoadedModelsTable:
    unload_requested(str): unload this model (one the server loaded).
    pin_requested(str, bool): keep it loaded until unpinned, or give it back its keep-alive.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deskllm.downloads.units import human_bytes, human_seconds
from deskllm.gui.qt import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
)

COLUMNS = ("Model", "What for", "Memory", "Slots", "Unloaded after", "")
REFRESH_MS = 1000


@dataclass(frozen=True)
class Row:
    model_id: str
    role: str  # "Chat", "API server", "Documents"
    memory_bytes: int | None
    slots: int | None
    expires_in_s: float | None  # None: kept (pinned, or the chat's own)
    can_unload: bool = False
    pinned: bool = False


def rows_of(window) -> list[Row]:
    """What the window has loaded now (read on the GUI thread)."""
    rows: list[Row] = []
    server = window.bridge.server
    served = server.loaded_models() if server is not None else []
    engine = window.bridge.engine
    if engine.loaded is not None and engine.params is not None:
        own = served[0] if served else None
        memory = own.memory_bytes if own is not None and own.memory_bytes else None
        rows.append(Row(Path(engine.params.model_path).name,
                        "Chat" + (" and API server" if own else ""), memory,
                        engine.n_slots, None))  # fmt: skip
    for model in served[1:]:
        rows.append(Row(model.model_id, "API server (loaded for a request)", model.memory_bytes,
                        model.slots, model.expires_in_s, True, model.pinned))  # fmt: skip
    documents = getattr(window, "documents", None)
    if documents is not None:
        for path in documents.running_engines():
            rows.append(Row(Path(path).name, "Documents (embeddings)", None, None, None))
    return rows


class LoadedModelsTable(QTableWidget):
    unload_requested = Signal(str)
    pin_requested = Signal(str, bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setHorizontalHeaderLabels(COLUMNS)
        self.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.verticalHeader().hide()
        self.rows: list[Row] = []

    def show_rows(self, rows: list[Row]) -> None:
        if rows == self.rows:
            return
        self.rows = rows
        self.setRowCount(len(rows))
        for i, row in enumerate(rows):
            kept = "pinned" if row.pinned else "kept while in use"
            left = kept if row.expires_in_s is None else human_seconds(row.expires_in_s)
            cells = (row.model_id, row.role,
                     human_bytes(row.memory_bytes) if row.memory_bytes else "—",
                     str(row.slots) if row.slots else "—", left)  # fmt: skip
            for column, text in enumerate(cells):
                self.setItem(i, column, QTableWidgetItem(text))
            self.setCellWidget(i, len(COLUMNS) - 1, self._actions(row) if row.can_unload else None)
        self.resizeColumnsToContents()
        self.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)

    def _actions(self, row: Row) -> QWidget:
        box = QWidget(self)
        unload = QPushButton("Unload", box)
        unload.setToolTip(f"Unload {row.model_id} now (a request naming it loads it again)")
        unload.clicked.connect(lambda: self.unload_requested.emit(row.model_id))
        pin = QPushButton("Unpin" if row.pinned else "Pin", box)
        pin.setToolTip("Keep it loaded until unpinned" if not row.pinned else
                       "Unload it again after its keep-alive when idle")  # fmt: skip
        pin.clicked.connect(lambda: self.pin_requested.emit(row.model_id, not row.pinned))
        layout = QHBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(unload)
        layout.addWidget(pin)
        return box


def connect_actions(table: LoadedModelsTable, window, refresh) -> None:
    """Unload and Pin act on the window's API server, then the table is read again."""

    def unload(model_id: str) -> None:
        if window.bridge.server is not None:
            window.bridge.server.unload(model_id)
        refresh()

    def pin(model_id: str, pinned: bool) -> None:
        if window.bridge.server is not None:
            window.bridge.server.pin(model_id, pinned)
        refresh()

    table.unload_requested.connect(unload)
    table.pin_requested.connect(pin)


class LoadedModelsDialog(QDialog):
    def __init__(self, window, parent: QWidget | None = None) -> None:
        super().__init__(parent or window)
        self.setWindowTitle("Loaded models")
        self.window_ = window
        intro = QLabel("What this app holds in memory now. Models the local API server loaded "
                       "for requests that named them are unloaded after their keep-alive when "
                       "idle, or first when another model needs the memory (least recently "
                       "used first); a pinned one stays.")  # fmt: skip
        intro.setWordWrap(True)
        self.table = LoadedModelsTable(self)
        connect_actions(self.table, window, self.refresh)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        line = self.fontMetrics().height()
        self.resize(56 * line, 18 * line)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt name)
        self.refresh()
        self.timer.start()
        super().showEvent(event)

    def hideEvent(self, event) -> None:  # noqa: N802 (Qt name)
        self.timer.stop()
        super().hideEvent(event)

    def refresh(self) -> None:
        self.table.show_rows(rows_of(self.window_))
