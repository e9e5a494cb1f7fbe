"""The Models panel, first version: the installed models with Load / Unload and load
progress. Finding and downloading models gets its own panel work later (issue 5, item 4).

Signals:
    load_requested(str): load this model file (path).
    unload_requested(): free the loaded model.
"""

from __future__ import annotations

from pathlib import Path

from deskllm.gui.qt import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPalette,
    QProgressBar,
    QPushButton,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.store import ModelLibrary

_PATH = Qt.ItemDataRole.UserRole


class ModelsPanel(QWidget):
    load_requested = Signal(str)
    unload_requested = Signal()

    def __init__(self, library: ModelLibrary, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.library = library
        self.loaded_path: str | None = None
        self.loading = False
        self.streaming = False  # a reply is being written: the engine is taken
        self.list = QListWidget()
        self.load_button = QPushButton("Load")
        self.unload_button = QPushButton("Unload")
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.hide()
        self.status = QLabel()
        self.status.setWordWrap(True)
        note = QLabel("Searching Hugging Face and downloading models comes in a later version.")
        note.setWordWrap(True)
        note.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        buttons = QHBoxLayout()
        buttons.addWidget(self.status, 1)
        buttons.addWidget(self.progress)
        buttons.addWidget(self.unload_button)
        buttons.addWidget(self.load_button)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Installed models"))
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        layout.addWidget(note)
        self.load_button.clicked.connect(self._load_clicked)
        self.unload_button.clicked.connect(self.unload_requested)
        self.list.currentItemChanged.connect(lambda *_: self._update_buttons())
        self.list.itemDoubleClicked.connect(lambda _item: self._load_clicked())
        self.refresh()

    def refresh(self) -> None:
        selected = self.selected_path()
        self.list.clear()
        for model in self.library.list():
            size = f"{model.size_bytes / 2**20:,.0f} MiB"
            mark = "  — loaded" if model.path == self.loaded_path else ""
            missing = "  — file missing" if not model.exists else ""
            item = QListWidgetItem(f"{model.name} · {model.quant} · {size}{mark}{missing}")
            item.setData(_PATH, model.path)
            item.setToolTip(model.path)
            self.list.addItem(item)
            if model.path in (selected, self.loaded_path) and self.list.currentItem() is None:
                self.list.setCurrentItem(item)
        self._update_buttons()

    def selected_path(self) -> str | None:
        item = self.list.currentItem()
        return item.data(_PATH) if item is not None else None

    @property
    def busy(self) -> bool:
        return self.loading or self.streaming

    def set_loading(self, path: str) -> None:
        self.loading = True
        self.progress.setValue(0)
        self.progress.show()
        self.status.setText(f"Loading {Path(path).name}…")
        self._update_buttons()

    def set_progress(self, fraction: float) -> None:
        self.progress.setValue(int(fraction * 100))

    def set_loaded(self, path: str | None, message: str = "") -> None:
        """After a load (path), a failed load or an unload (None, with the reason)."""
        self.loading = False
        self.loaded_path = str(Path(path).resolve()) if path else None  # library paths are
        self.progress.hide()
        self.status.setText(message or (f"Loaded {Path(path).name}" if path else "No model"))
        self.refresh()

    def set_streaming(self, streaming: bool) -> None:
        self.streaming = streaming
        self._update_buttons()

    def _load_clicked(self) -> None:
        path = self.selected_path()
        if path and not self.busy and path != self.loaded_path:
            self.load_requested.emit(path)

    def _update_buttons(self) -> None:
        path = self.selected_path()
        self.load_button.setEnabled(bool(path) and not self.busy and path != self.loaded_path)
        self.unload_button.setEnabled(self.loaded_path is not None and not self.busy)
