"""The Models panel: Installed (each model's details, the installed models that pair with it
for speculative decoding, Load / Unload with progress, Delete, Reveal, Check quality
(quality_check.py), Import) and Discover (Hugging Face search, quantizations planned for this
machine, downloads; see model_discover.py).

Imports and draft pairs read GGUF headers, so they run on a worker thread (imports with their
own SQLite connection).

Signals:
    load_requested(str): load this model file (path).
    unload_requested(): free the loaded model.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

from deskllm.gui.download_bridge import DownloadBridge
from deskllm.gui.live_settings import LiveSettings
from deskllm.gui.model_discover import DiscoverView
from deskllm.gui.plan_text import quality_text
from deskllm.gui.qt import (
    QDesktopServices,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    Qt,
    QTabWidget,
    QUrl,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.gui.quality_check import QualityCheckDialog
from deskllm.gui.tasks import TaskRunner
from deskllm.settings import Settings
from deskllm.store import InstalledModel, ModelLibrary, open_database
from deskllm.store.library import DraftPairs, installed_draft_pairs
from deskllm.store.library_import import ImportResult, import_known_folders, import_path
from deskllm.store.quality_results import QualityResults

_PATH = Qt.ItemDataRole.UserRole
_ID = Qt.ItemDataRole.UserRole + 1


def parameters_text(n: int) -> str:
    if not n:
        return "? params"
    return f"{n / 1e9:.1f}B params" if n >= 1e9 else f"{n / 1e6:.0f}M params"


def model_text(model: InstalledModel) -> str:
    size = mib_text(model.size_bytes)
    ctx = f"ctx {model.context_length:,}" if model.context_length else "ctx ?"
    parts = (model.name, model.architecture, parameters_text(model.parameters), model.quant)
    return " · ".join((*parts, size, ctx))


def import_summary(result: ImportResult) -> str:
    added = ", ".join(Path(m.path).name for m in result.added) or "nothing new"
    text = f"Added {len(result.added)}: {added}."
    if result.skipped:
        skipped = "; ".join(f"{Path(path).name} ({why})" for path, why in result.skipped[:5])
        more = f" and {len(result.skipped) - 5} more" if len(result.skipped) > 5 else ""
        text += f" Skipped {len(result.skipped)}: {skipped}{more}."
    return text


def mib_text(size_bytes: int) -> str:
    return f"{size_bytes / 2**20:,.0f} MiB"


def draft_text(pairs: DraftPairs) -> str:
    """What the details say of speculative decoding: the installed draft for this model (the
    largest that fits, as `--draft-model auto` takes), and the models this one can draft for."""
    lines: list[str] = []
    if pairs.drafts:
        best, *others = pairs.drafts
        also = f"; also {', '.join(Path(m.path).name for m in others)}" if others else ""
        lines.append(f"Draft model for speculative decoding: {Path(best.path).name} "
                     f"(same vocabulary, {mib_text(best.size_bytes)}){also}")  # fmt: skip
    if pairs.drafts_for:
        names = ", ".join(Path(m.path).name for m in pairs.drafts_for)
        lines.append(f"Can draft for: {names}")
    if not lines:
        lines.append("No installed model can draft for it (a draft needs the same vocabulary "
                     "and a smaller file)")  # fmt: skip
    return "\n".join(lines)


def _database_path(library: ModelLibrary) -> Path | None:
    for _seq, name, file in library.db.execute("PRAGMA database_list").fetchall():
        if name == "main" and file:
            return Path(file)
    return None


class ModelsPanel(QWidget):
    load_requested = Signal(str)
    unload_requested = Signal()

    def __init__(
        self, library: ModelLibrary, settings: LiveSettings, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.library = library
        self.db_path = _database_path(library)
        self.loaded_path: str | None = None
        self.loading = False
        self.streaming = False  # a reply is being written: the engine is taken
        self.qualities: dict[str, dict] = {}  # quality checks run here, by file name
        self.drafts: dict[str, str] = {}  # draft_text by model path, once worked out
        self._drafts_token = 0
        self._calls = TaskRunner("library", self)
        self.list = QListWidget()
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.load_button = QPushButton("Load")
        self.unload_button = QPushButton("Unload")
        self.delete_button = QPushButton("Delete…")
        self.reveal_button = QPushButton("Show in folder")
        self.quality_button = QPushButton("Check quality…")
        self.quality_dialog: QualityCheckDialog | None = None
        self._settings = settings
        self.import_file_button = QPushButton("Import file…")
        self.import_folder_button = QPushButton("Import folder…")
        self.find_button = QPushButton("Find in other apps…")
        self.find_button.setToolTip("Add the models other apps keep on this computer "
                                    "(the Hugging Face cache, LM Studio)")  # fmt: skip
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.hide()
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.downloads = DownloadBridge(self.db_path, self, settings.value.models_path())
        self.discover = DiscoverView(
            self.downloads,
            settings.value.n_ctx,
            usable_tps=settings.value.usable_tps,
            installed=lambda: {Path(m.path).name for m in self.library.list()},
            installed_models=self.library.list,
        )
        settings.changed.connect(self._settings_changed)
        self.tabs = QTabWidget()
        self.tabs.addTab(self._installed_tab(), "Installed")
        self.tabs.addTab(self.discover, "Discover")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.tabs)
        self.load_button.clicked.connect(self._load_clicked)
        self.unload_button.clicked.connect(self.unload_requested)
        self.delete_button.clicked.connect(self.delete_selected)
        self.reveal_button.clicked.connect(self.reveal_selected)
        self.quality_button.clicked.connect(self.check_quality_selected)
        self.import_file_button.clicked.connect(self._import_file_clicked)
        self.import_folder_button.clicked.connect(self._import_folder_clicked)
        self.find_button.clicked.connect(self.find_other_apps)
        self.list.currentItemChanged.connect(lambda *_: self._update_buttons())
        self.list.itemDoubleClicked.connect(lambda _item: self._load_clicked())
        self.discover.download_finished.connect(lambda _path: self.refresh())
        self.refresh()
        self.downloads.start()  # unfinished downloads of the last run continue

    def _settings_changed(self, new: Settings, changes: dict[str, str]) -> None:
        if "models_dir" in changes:
            self.downloads.set_models_dir(new.models_path())
        if "usable_tps" in changes:
            self.discover.set_usable_tps(new.usable_tps)

    def _installed_tab(self) -> QWidget:
        buttons = QHBoxLayout()
        buttons.addWidget(self.status, 1)
        buttons.addWidget(self.progress)
        buttons.addWidget(self.quality_button)
        for button in (self.delete_button, self.unload_button):
            buttons.addWidget(button)
        buttons.addWidget(self.load_button)
        # Two rows of about equal width, so the panel never sets a wide window minimum.
        imports = QHBoxLayout()
        imports.addWidget(self.import_file_button)
        imports.addWidget(self.import_folder_button)
        imports.addWidget(self.find_button)
        imports.addStretch(1)
        imports.addWidget(self.reveal_button)
        tab = QWidget()
        layout = QVBoxLayout(tab)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.details)
        layout.addLayout(buttons)
        layout.addLayout(imports)
        return tab

    def refresh(self) -> None:
        selected = self.selected_path()
        self.list.clear()
        self.qualities = QualityResults(self.library.db).latest_by_file()
        for model in self.library.list():
            mark = "  — loaded" if model.path == self.loaded_path else ""
            missing = "  — file missing" if not model.exists else ""
            measured = self.qualities.get(Path(model.path).name)
            checked = f" · measured KL {measured['mean_kld']:.4f}" if measured else ""
            item = QListWidgetItem(f"{model_text(model)}{checked}{mark}{missing}")
            item.setData(_PATH, model.path)
            item.setData(_ID, model.id)
            item.setToolTip(model.path)
            self.list.addItem(item)
            if model.path in (selected, self.loaded_path) and self.list.currentItem() is None:
                self.list.setCurrentItem(item)
        self._update_buttons()
        self._find_drafts()

    def _find_drafts(self) -> None:
        """Work out which installed models can draft for which (speculative decoding) on the
        worker thread: it reads every model's header (once per file, then kept)."""
        self._drafts_token += 1
        token, models = self._drafts_token, self.library.list()
        self._calls.run(
            lambda: {
                m.path: draft_text(installed_draft_pairs(m, models)) for m in models if m.exists
            },
            lambda future: self._on_drafts(token, future),
        )

    def _on_drafts(self, token: int, future: Future) -> None:
        if token != self._drafts_token:
            return  # the library changed since: a newer answer is on its way
        self.drafts = future.result()
        self._update_buttons()

    def selected_path(self) -> str | None:
        item = self.list.currentItem()
        return item.data(_PATH) if item is not None else None

    def selected_model(self) -> InstalledModel | None:
        item = self.list.currentItem()
        return self.library.get(item.data(_ID)) if item is not None else None

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

    # Delete, reveal, import ----------------------------------------------------------------
    def delete_selected(self) -> None:
        model = self.selected_model()
        if model is None or model.path == self.loaded_path or self.busy:
            return
        starter = model.source == "starter"
        what = (
            "It is removed from the list; the starter model's file ships with the app and stays."
            if starter
            else f"This deletes the file {model.path} from the disk."
        )
        answer = QMessageBox.question(
            self, "Delete model", f"Delete {model.name}?\n\n{what}",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No,
        )  # fmt: skip
        if answer != QMessageBox.StandardButton.Yes:
            return
        try:
            self.library.remove(model.id, delete_file=True)  # refuses the starter file itself
        except OSError as exc:
            self.status.setText(f"Could not delete {Path(model.path).name}: {exc}")
            return
        self.status.setText(f"Deleted {model.name}")
        self.refresh()

    def reveal_selected(self) -> None:
        path = self.selected_path()
        if path:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(path).parent)))

    def check_quality_selected(self) -> None:
        """Open the quality check of the selected model (its own processes: the loaded model
        and chats are not touched)."""
        model = self.selected_model()
        if model is None or not model.exists:
            return
        if self.quality_dialog is not None:
            self.quality_dialog.close()
        self.quality_dialog = QualityCheckDialog(
            model, self.library.list(), self._settings.value, self.db_path, self
        )
        self.quality_dialog.stored.connect(self.refresh)
        self.quality_dialog.show()

    def _import_file_clicked(self) -> None:
        path, _filter = QFileDialog.getOpenFileName(
            self, "Import a model file", str(Path.home()), "GGUF models (*.gguf)"
        )
        if path:
            self.import_from(path)

    def _import_folder_clicked(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Import the models in a folder")
        if path:
            self.import_from(path)

    def import_from(self, path: str) -> None:
        """Add a .gguf file, or every model in a folder, where it is (no copy)."""
        self._import(lambda library: import_path(library, path), f"Importing {path}…")

    def find_other_apps(self) -> None:
        """Add the models other tools keep (the Hugging Face cache, LM Studio)."""
        self._import(import_known_folders, "Looking for models from other apps…")

    def _import(self, run, message: str) -> None:
        self.status.setText(message)
        for button in (self.import_file_button, self.import_folder_button, self.find_button):
            button.setEnabled(False)
        db_path = self.db_path

        def work() -> ImportResult:
            db = open_database(db_path)  # this thread's own connection
            try:
                return run(ModelLibrary(db))
            finally:
                db.close()

        self._calls.run(work, self._on_imported)

    def _on_imported(self, future: Future) -> None:
        for button in (self.import_file_button, self.import_folder_button, self.find_button):
            button.setEnabled(True)
        try:
            self.status.setText(import_summary(future.result()))
        except Exception as exc:  # an unreadable folder and such: say it, keep going
            self.status.setText(f"The import failed: {exc}")
        self.refresh()

    def shutdown(self) -> None:
        """Pause downloads (they continue on the next start) and stop the worker threads."""
        self.discover.shutdown()
        if self.quality_dialog is not None:
            self.quality_dialog.close()  # cancels a running check
        self._calls.shutdown(wait=True)
        self.downloads.shutdown()

    # Buttons -------------------------------------------------------------------------------
    def _load_clicked(self) -> None:
        path = self.selected_path()
        if path and not self.busy and path != self.loaded_path and Path(path).is_file():
            self.load_requested.emit(path)

    def _update_buttons(self) -> None:
        path = self.selected_path()
        exists = bool(path) and Path(path).is_file()
        can_load = exists and not self.busy and path != self.loaded_path
        self.load_button.setEnabled(can_load)
        self.unload_button.setEnabled(self.loaded_path is not None and not self.busy)
        self.delete_button.setEnabled(bool(path) and path != self.loaded_path and not self.busy)
        self.reveal_button.setEnabled(exists)
        self.quality_button.setEnabled(exists)
        item = self.list.currentItem()
        model = self.selected_model() if item is not None else None
        if model is None:
            self.details.setText("")
            return
        measured = self.qualities.get(Path(model.path).name)
        quality = quality_text(model.quant, measured) if model.quant else "unknown quant"
        drafts = self.drafts.get(model.path)
        draft_line = f"\n{drafts}" if drafts else ""  # absent until the worker has answered
        self.details.setText(f"Where: {path}\nQuality: {quality}{draft_line}")
