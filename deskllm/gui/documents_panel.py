"""DocumentsPanel: the collections of folders a chat may search, and their indexing.

Indexing runs on the panel's own task thread, one collection at a time, with its progress
(files, chunks, speed, ETA) shown as it goes; it can be paused and cancelled. While the app
runs the folders are watched (watchdog): a change is indexed a few seconds after the last one,
and only what changed is read. At start every collection is compared with its folders (sizes
and mtimes), so what changed while the app was closed is indexed too.

Signals:
    collections_changed(): a collection was made, changed or removed (the chat's menu lists them).
    indexed(str, object): a pass over a collection ended (its name, its IndexProgress).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from deskllm.documents.indexer import IndexControl, IndexProgress
from deskllm.documents.service import Documents
from deskllm.documents.store import Collection, CollectionError
from deskllm.gui.qt import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.gui.tasks import TaskRunner

log = logging.getLogger("deskllm.gui")

WATCH_DELAY_MS = 3000  # a burst of changes (a checkout, a save-all) is indexed once
COUNTS_EVERY_S = 1.0  # the table's files and chunks while a pass runs
BUNDLED_MODEL = "all-MiniLM-L6-v2 (comes with deskllm; English)"
COLUMNS = ("Collection", "Files", "Chunks", "Skipped", "Folders")


def progress_text(progress: IndexProgress) -> str:
    """"notes: 120/1000 files · 840 chunks · 25.1 chunks/s · about 4 min left"."""
    parts = [f"{progress.collection}: {progress.files_done}/{progress.files_total} files",
             f"{progress.chunks} chunks"]  # fmt: skip
    if progress.chunks_per_s:
        parts.append(f"{progress.chunks_per_s:.1f} chunks/s")
    eta = progress.eta_s
    if progress.paused:
        parts.append("paused")
    elif eta is not None and not progress.finished:
        parts.append(f"about {eta / 60:.0f} min left" if eta >= 90 else f"about {eta:.0f} s left")
    if progress.files_skipped:
        parts.append(f"{progress.files_skipped} skipped")
    if progress.cancelled:
        parts.append("cancelled")
    elif progress.finished:
        parts.append(f"done in {progress.elapsed_s:.1f} s")
    return " · ".join(parts)


class _Watcher:
    """watchdog's observer over the collections' folders; `changed(name)` is called on
    watchdog's thread for a change under a collection's folder. `watch` runs on the panel's
    task thread, `close` on the GUI thread: the observer is swapped under a lock."""

    def __init__(self, changed) -> None:
        self.changed = changed
        self.observer = None
        self.folders: dict[str, set[str]] = {}
        self.lock = threading.Lock()
        self.closed = False

    def watch(self, collections: list[Collection]) -> None:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        with self.lock:
            old, self.observer = self.observer, None
            self.folders = {c.name: set(c.folders) for c in collections}
        _halt(old)
        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return  # reads, not changes
                path = str(getattr(event, "dest_path", "") or event.src_path)
                if any(part.startswith(".") for part in Path(path).parts):
                    return  # .git and editors' swap files
                for name, folders in watcher.folders.items():
                    if any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders):
                        watcher.changed(name)

        observer = Observer()
        observer.daemon = True
        observer.start()
        try:
            for folders in self.folders.values():
                for folder in folders:
                    if Path(folder).is_dir():
                        observer.schedule(Handler(), folder, recursive=True)
        except OSError:
            _halt(observer)
            raise
        with self.lock:
            if not self.closed:
                self.observer, observer = observer, None
        _halt(observer)  # closed meanwhile

    def close(self) -> None:
        with self.lock:
            self.closed = True
            old, self.observer = self.observer, None
        _halt(old)


def _halt(observer) -> None:
    if observer is not None:
        observer.stop()
        observer.join(5)


class DocumentsPanel(QWidget):
    collections_changed = Signal()
    indexed = Signal(str, object)
    _changed_on_disk = Signal(str)  # from watchdog's thread

    def __init__(self, documents: Documents, parent: QWidget | None = None,
                 watch: bool = True) -> None:  # fmt: skip
        super().__init__(parent)
        self.documents = documents
        # (name, path) of the installed embedding models a new collection may use (the window
        # lists them from the library; the bundled model is always offered first).
        self.embedding_models: Callable[[], list[tuple[str, Path]]] = list
        self.tasks = TaskRunner("documents", self)
        self.control: IndexControl | None = None  # the pass running now
        self.running: str | None = None
        self.queue: list[str] = []
        self.collections: list[Collection] = []
        self.dirty: set[str] = set()
        self._counted = 0.0  # when the table's counts were last read during a pass
        self.watcher = _Watcher(self._changed_on_disk.emit) if watch else None
        self._changed_on_disk.connect(self._on_changed)
        self.debounce = QTimer(self, singleShot=True, interval=WATCH_DELAY_MS)
        self.debounce.timeout.connect(self._index_dirty)
        self._build()
        self.refresh(index_all=True)

    def _build(self) -> None:
        intro = QLabel(
            "Collections are folders a chat may search. Everything stays on this computer: "
            "the files are read, cut into passages and indexed in deskllm's own database. "
            "In a chat, choose its collections with the Documents button; replies cite the "
            "passages they used.", wordWrap=True)  # fmt: skip
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().hide()
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.new_button = QPushButton("New collection…", clicked=self.new_collection)
        self.add_button = QPushButton("Add folder…", clicked=self.add_folder)
        self.index_button = QPushButton("Index again", clicked=lambda: self.index(self.selected()))
        self.skipped_button = QPushButton("Skipped files…", clicked=self.show_skipped)
        self.remove_button = QPushButton("Remove…", clicked=self.remove_selected)
        # Two rows: one would make the window's narrowest width wider.
        buttons, more = QHBoxLayout(), QHBoxLayout()
        for button in (self.new_button, self.add_button, self.remove_button):
            buttons.addWidget(button)
        for button in (self.index_button, self.skipped_button):
            more.addWidget(button)
        buttons.addStretch(1)
        more.addStretch(1)
        self.progress = QProgressBar(self, maximum=1000, textVisible=False)
        self.status = QLabel(wordWrap=True)
        self.pause_button = QPushButton("Pause", clicked=self.toggle_pause)
        self.cancel_button = QPushButton("Cancel", clicked=self.cancel)
        running = QHBoxLayout()
        running.addWidget(self.progress, 1)
        running.addWidget(self.pause_button)
        running.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        layout.addLayout(more)
        layout.addLayout(running)
        layout.addWidget(self.status)
        self._show_running(False)

    # Collections ------------------------------------------------------------------------------
    def refresh(self, index_all: bool = False) -> None:
        """Read the collections (on the task thread) and show them; `index_all`: compare each
        with its folders too (at start)."""

        def load() -> list[Collection]:
            collections = self.documents.store().collections()
            if self.watcher is not None:  # adding the watches walks the folders: not on the GUI
                try:
                    self.watcher.watch(collections)
                except OSError as exc:  # the system's limit of watches (inotify), say
                    log.warning("folders not watched: %s", exc)
                    self.tasks.post(self.status.setText, f"The folders are not watched ({exc}): "
                                    "changes are found at the next start, or with Index again.")
            return collections

        def shown(future) -> None:
            try:
                self.collections = future.result()
            except Exception as exc:  # noqa: BLE001 (shown, not raised into Qt)
                self.status.setText(f"The collections could not be read: {exc}")
                return
            self._fill()
            if index_all:
                for collection in self.collections:
                    self.index(collection.name)
            self.collections_changed.emit()

        self.tasks.run(load, shown)

    def _fill(self) -> None:
        selected = self.selected()
        self.table.setRowCount(len(self.collections))
        for row, c in enumerate(self.collections):
            cells = (c.name, str(c.files), str(c.chunks), str(c.skipped), ", ".join(c.folders))
            for column, text in enumerate(cells):
                self.table.setItem(row, column, QTableWidgetItem(text))
            if c.name == selected:
                self.table.selectRow(row)
        self._update_buttons()

    def selected(self) -> str | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows:
            return None
        item = self.table.item(rows[0].row(), 0)
        return item.text() if item is not None else None

    def _update_buttons(self) -> None:
        chosen = self.selected() is not None
        for button in (self.add_button, self.index_button, self.skipped_button,
                       self.remove_button):  # fmt: skip
            button.setEnabled(chosen)

    def new_collection(self) -> None:
        name, ok = QInputDialog.getText(self, "New collection", "Name of the collection:")
        if not ok or not name.strip():
            return
        model = None
        installed = self.embedding_models()
        if installed:  # downloaded in Discover (Embedding models for Documents…)
            labels = [BUNDLED_MODEL, *(label for label, _ in installed)]
            choice, ok = QInputDialog.getItem(self, "New collection", "Embedding model:",
                                              labels, 0, False)  # fmt: skip
            if not ok:
                return
            model = dict(installed).get(choice)
        folder = QFileDialog.getExistingDirectory(self, f"A folder for {name.strip()}")
        if folder:
            self.create(name.strip(), [Path(folder)], model)

    def create(self, name: str, folders: list[Path], model: Path | None = None) -> None:
        """Make the collection (on the task thread: the embedding model tells its vectors'
        size) and index it. `model`: an embedding GGUF (default: the bundled one)."""

        def made(future) -> None:
            try:
                future.result()
            except (CollectionError, FileNotFoundError) as exc:
                QMessageBox.warning(self, "New collection", str(exc))
                return
            self.refresh()
            self.index(name)

        self.tasks.run(lambda: self.documents.create(name, folders, model), made)

    def add_folder(self) -> None:
        name = self.selected()
        if name is None:
            return
        folder = QFileDialog.getExistingDirectory(self, f"Add a folder to {name}")
        if folder:
            self.add_folders(name, [Path(folder)])

    def add_folders(self, name: str, folders: list[Path]) -> None:
        def added(future) -> None:
            future.result()
            self.refresh()
            self.index(name)

        self.tasks.run(lambda: self.documents.store().add_folders(name, folders), added)

    def remove_selected(self) -> None:
        name = self.selected()
        if name is None:
            return
        answer = QMessageBox.question(
            self, "Remove the collection",
            f"Remove the collection “{name}” and its index? Your files are not touched; "
            "chats that searched it will no longer cite it.")  # fmt: skip
        if answer == QMessageBox.StandardButton.Yes:
            self.remove(name)

    def remove(self, name: str) -> None:
        self.queue = [q for q in self.queue if q != name]
        if self.running == name and self.control is not None:
            self.control.cancel()
        self.tasks.run(lambda: self.documents.store().remove(name), lambda f: self.refresh())

    def show_skipped(self) -> None:
        name = self.selected()
        if name is None:
            return

        def listed(future) -> None:
            skipped = future.result()
            text = "\n".join(f"{path}: {reason}" for path, reason in skipped)
            box = QMessageBox(QMessageBox.Icon.Information, f"Skipped in {name}",
                              f"{len(skipped)} files were not indexed." if skipped
                              else "Every file was indexed.", parent=self)  # fmt: skip
            if text:
                box.setDetailedText(text)
            box.open()

        store = self.documents.store
        self.tasks.run(lambda: store().skipped(store().get(name)), listed)

    # Indexing ---------------------------------------------------------------------------------
    def index(self, name: str | None) -> None:
        """Queue a pass over the collection (one runs at a time; a queued one runs once)."""
        if name is None:
            return
        if name not in self.queue:
            self.queue.append(name)
        if self.running is None:
            self._next()

    def _next(self) -> None:
        if not self.queue:
            self._show_running(False)
            return
        name = self.queue.pop(0)
        self.running, self.control = name, IndexControl()
        control = self.control
        self._show_running(True)

        def progress(p: IndexProgress) -> None:
            self.tasks.post(self._on_progress, _copy(p))

        def run() -> IndexProgress:
            return self.documents.index(name, progress, control)

        self.tasks.run(run, lambda future: self._done(name, future))

    def _on_progress(self, progress: IndexProgress) -> None:
        self.status.setText(progress_text(progress))
        now = time.monotonic()
        if now - self._counted >= COUNTS_EVERY_S:
            # The table's counts as the pass goes (the task thread is busy with the pass: this
            # thread's own connection reads them; a few aggregate rows, cheap).
            self._counted = now
            self.collections = self.documents.store().collections()
            self._fill()
        if progress.bytes_total:
            self.progress.setValue(int(1000 * progress.bytes_done / progress.bytes_total))
        self.pause_button.setText("Resume" if progress.paused else "Pause")

    def _done(self, name: str, future) -> None:
        self.running, self.control = None, None
        try:
            progress = future.result()
        except CollectionError:
            progress = None  # removed while it was queued
        except Exception as exc:  # noqa: BLE001 (a failed pass is said, the app goes on)
            log.exception("indexing failed")
            self.status.setText(f"{name}: indexing failed: {exc}")
            progress = None
        if progress is not None:
            self._on_progress(progress)
            self.indexed.emit(name, progress)
        self.refresh()
        self._next()

    def toggle_pause(self) -> None:
        if self.control is None:
            return
        if self.control.paused:
            self.control.resume()
            self.pause_button.setText("Pause")
        else:
            self.control.pause()
            self.pause_button.setText("Resume")

    def cancel(self) -> None:
        self.queue.clear()
        if self.control is not None:
            self.control.cancel()

    def _show_running(self, running: bool) -> None:
        self.progress.setVisible(running)
        self.pause_button.setVisible(running)
        self.cancel_button.setVisible(running)
        if running:
            self.progress.setValue(0)
            self.pause_button.setText("Pause")

    # Watching ---------------------------------------------------------------------------------
    def _on_changed(self, name: str) -> None:
        self.dirty.add(name)
        self.debounce.start()

    def _index_dirty(self) -> None:
        dirty, self.dirty = self.dirty, set()
        for name in sorted(dirty):
            self.index(name)

    def shutdown(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
        self.cancel()
        self.tasks.shutdown(wait=True)


def _copy(progress: IndexProgress) -> IndexProgress:
    """A snapshot: the indexer goes on changing its own while the GUI shows this one."""
    from dataclasses import replace

    return replace(progress)
