"""Discover: search Hugging Face for GGUF models, see each quantization of a repo planned for
this machine (memory at the chosen context, fit, quality, expected speed), and download one.
Without a search (and offline) it shows the curated catalog planned for this machine
(CuratedList); a curated repo's quantizations are planned from the catalog, offline too.

Hub calls and planning run on a worker thread (TaskRunner); downloads run in the
DownloadBridge's queue. Answers that arrive after the user moved on are dropped.

Signals:
    download_finished(str): a download is done and in the library (its path).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from pathlib import PurePath

from deskllm.catalog.embedding_repos import EMBEDDING_REPOS
from deskllm.catalog.hub import CatalogError, HubCatalog, hub_offline
from deskllm.catalog.hub_types import SORTS, SearchResult
from deskllm.catalog.quants import quality_rank
from deskllm.downloads import DownloadState, Progress
from deskllm.downloads.units import human_bytes
from deskllm.gui.curated_list import CuratedList
from deskllm.gui.discover_planning import (
    CuratedAnswer,
    QuantPairs,
    plan_curated,
    plan_repo,
    repo_draft_pairs,
)
from deskllm.gui.download_bridge import DownloadBridge
from deskllm.gui.download_row import DownloadRow
from deskllm.gui.plan_text import fit_badge, memory_text, quality_text, speed_text
from deskllm.gui.qt import (
    QAbstractItemView,
    QComboBox,
    QEvent,
    QFont,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPalette,
    QPushButton,
    QSplitter,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.gui.tasks import TaskRunner
from deskllm.planner.fit import QuantPlan
from deskllm.planner.plan_model import ModelPlan
from deskllm.store.library import DRAFT_SIZE_SHARE, InstalledModel

CONTEXTS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
QUANT_COLUMNS = ("Quant", "File size", "Quality", "Memory", "Fit", "Expected speed", "")
_REPO = Qt.ItemDataRole.UserRole


def _item(text: str, align_right: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def pairs_text(found: tuple[QuantPairs, ...]) -> str:
    """What the Discover view says of the repo's files and the installed models, e.g. "Pairs
    with installed models for speculative decoding: A.gguf can draft for this repo's Q8_0,
    Q6_K; this repo's Q2_K can draft for A.gguf (…)"; "" where none pairs."""
    drafts: dict[str, list[str]] = {}  # installed file -> the repo's quants it drafts for
    drafted: dict[str, list[str]] = {}  # installed file -> the repo's quants that draft for it
    for quant in found:
        for model in quant.pairs.drafts:
            drafts.setdefault(PurePath(model.path).name, []).append(quant.quant)
        for model in quant.pairs.drafts_for:
            drafted.setdefault(PurePath(model.path).name, []).append(quant.quant)
    parts = [f"{name} can draft for this repo's {', '.join(q)}" for name, q in drafts.items()]
    parts += [f"this repo's {', '.join(q)} can draft for {name}" for name, q in drafted.items()]
    if not parts:
        return ""
    return (f"Pairs with installed models for speculative decoding: {'; '.join(parts)} (the "
            f"same vocabulary, and a draft at most {DRAFT_SIZE_SHARE:.0%} of its model's "
            "size)")  # fmt: skip


def _table(columns: tuple[str, ...]) -> QTableWidget:
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(list(columns))
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.verticalHeader().hide()
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.horizontalHeader().setStretchLastSection(True)
    return table


class DiscoverView(QWidget):
    download_finished = Signal(str)

    def __init__(
        self,
        downloads: DownloadBridge,
        n_ctx: int = 4096,
        parent: QWidget | None = None,
        *,
        usable_tps: float = 5.0,
        installed: Callable[[], set[str]] = set,
        installed_models: Callable[[], list[InstalledModel]] = list,
    ) -> None:
        super().__init__(parent)
        self.downloads = downloads
        self.usable_tps = usable_tps
        self.installed = installed  # file names of the models in the library
        self.installed_models = installed_models  # the library's models, for draft pairs
        self.speeds: dict[str, float] = {}  # decode speeds measured here, by file name
        self.qualities: dict[str, dict] = {}  # quality checks run here, by file name
        self.curated_repo = False  # the repo shown comes from the curated catalog
        self._curated_token = 0
        self._curated_planned = False
        self._curated_answer: CuratedAnswer | None = None
        self.plan: ModelPlan | None = None
        self.repo_id: str | None = None
        self.rows: dict[int, DownloadRow] = {}
        self._search_token = 0
        self._plan_token = 0
        self._calls = TaskRunner("catalog", self)
        self._hub_catalog: HubCatalog | None = None
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search Hugging Face for GGUF models")
        self.sort = QComboBox()
        self.sort.addItems(SORTS)
        self.search_button = QPushButton("Search")
        # Embedding models for the Documents tab's collections: a repo shown like any other.
        self.embedding = QComboBox()
        self.embedding.addItem("Embedding models for Documents…", None)
        for repo in EMBEDDING_REPOS:
            self.embedding.addItem(f"{repo.name} — {repo.dims} dimensions, {repo.about}",
                                   repo.repo_id)  # fmt: skip
        policy = QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        self.embedding.setSizeAdjustPolicy(policy)
        self.embedding.setMinimumContentsLength(24)
        self.embedding.setToolTip("Models that turn passages into vectors, for collections "
                                  "in the Documents tab (all-MiniLM-L6-v2 comes with the app)")
        self.embedding.activated.connect(self._embedding_chosen)
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setFrameShape(QLabel.Shape.StyledPanel)
        self.banner.hide()
        self.results = _table(("Name", "Downloads", "Likes", "Updated"))
        self.curated = CuratedList()
        self.lists = QWidget()  # the curated catalog or the search results, one at a time
        lists_layout = QVBoxLayout(self.lists)
        lists_layout.setContentsMargins(0, 0, 0, 0)
        lists_layout.addWidget(self.curated)
        lists_layout.addWidget(self.results)
        self.results.hide()
        self.context = QComboBox()
        for n in CONTEXTS:
            self.context.addItem(f"{n:,} tokens", n)
        self.context.setCurrentIndex(max(0, self.context.findData(n_ctx)))
        self.plan_status = QLabel("Select a model to see its quantizations")
        self.plan_status.setWordWrap(True)
        self.quants = _table(QUANT_COLUMNS)
        self.recommended = QLabel()
        self.recommended.setWordWrap(True)
        self.pairs = QLabel()  # which installed models pair with the repo's files as drafts
        self.pairs.setWordWrap(True)
        self.pairs.hide()
        self.download_status = QLabel()
        self.download_status.setWordWrap(True)
        self.downloads_box = QGroupBox("Downloads")
        self.downloads_layout = QVBoxLayout(self.downloads_box)
        self.downloads_layout.addWidget(self.download_status)
        self.downloads_box.hide()
        self._layout()
        self.search_edit.returnPressed.connect(self.search)
        self.search_button.clicked.connect(self.search)
        self.sort.currentIndexChanged.connect(lambda _i: self.search())
        self.results.currentCellChanged.connect(lambda row, *_: self._select_result(row))
        self.curated.repo_selected.connect(lambda repo_id: self.show_repo(repo_id, curated=True))
        self.curated.download_requested.connect(self.download)
        self.curated.refresh_requested.connect(self.refresh_curated)
        self.context.currentIndexChanged.connect(lambda _i: self._context_changed())
        downloads.progress.connect(self._on_progress)
        downloads.restored.connect(self._on_restored)
        downloads.failed.connect(self._on_download_failed)

    def _layout(self) -> None:
        bar = QHBoxLayout()
        bar.addWidget(self.search_edit, 1)
        bar.addWidget(QLabel("Sort by"))
        bar.addWidget(self.sort)
        bar.addWidget(self.search_button)
        embedding = QHBoxLayout()
        embedding.addWidget(self.embedding)
        embedding.addStretch(1)
        detail = QWidget()
        detail_layout = QVBoxLayout(detail)
        detail_layout.setContentsMargins(0, 0, 0, 0)
        ctx = QHBoxLayout()
        ctx.addWidget(self.plan_status, 1)
        ctx.addWidget(QLabel("Context"))
        ctx.addWidget(self.context)
        detail_layout.addLayout(ctx)
        detail_layout.addWidget(self.quants, 1)
        detail_layout.addWidget(self.recommended)
        detail_layout.addWidget(self.pairs)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.lists)
        splitter.addWidget(detail)
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addLayout(embedding)
        layout.addWidget(self.banner)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.downloads_box)

    def _context_changed(self) -> None:
        self.replan()
        if self._curated_planned and not self.curated.isHidden():
            self.show_curated()

    @property
    def n_ctx(self) -> int:
        return int(self.context.currentData())

    def set_usable_tps(self, usable_tps: float) -> None:
        """The recommendation rule's speed floor changed (tokens/s): plan the repo again."""
        self.usable_tps = usable_tps
        self.replan()
        if self._curated_planned:
            self.show_curated()

    def showEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if not self._curated_planned:  # planned when first seen, not at every app start
            self.show_curated()

    # Curated catalog -----------------------------------------------------------------------
    def show_curated(self) -> None:
        """Show the curated catalog planned for this machine at the chosen context."""
        self._curated_planned = True
        self._curated_token += 1
        token, n_ctx, usable = self._curated_token, self.n_ctx, self.usable_tps
        self.results.hide()
        self.curated.show()
        self._calls.run(
            lambda: plan_curated(n_ctx, usable, self._catalog().cache),
            lambda future: self._on_curated(token, future),
        )

    def refresh_curated(self) -> None:
        """Read the curated repos' real files from the Hub (kept in the catalog cache), then
        plan the catalog again."""
        self._curated_token += 1
        token, n_ctx, usable = self._curated_token, self.n_ctx, self.usable_tps
        self._calls.run(
            lambda: plan_curated(n_ctx, usable, self._catalog().cache, refresh=self._catalog()),
            lambda future: self._on_curated(token, future),
        )

    def _on_curated(self, token: int, future: Future) -> None:
        if token != self._curated_token:
            return
        try:
            answer: CuratedAnswer = future.result()
        except Exception as exc:  # a damaged catalog or a failed probe: say so, in words
            self.curated.show_error(str(exc))
            return
        self.speeds = answer.speeds
        self.qualities = answer.qualities
        self._curated_answer = answer
        self._show_curated_answer()

    def _show_curated_answer(self) -> None:
        answer = self._curated_answer
        if answer is not None:
            self.curated.show_plan(answer.plan, answer.catalog_date, answer.refreshed_at,
                                   self.installed(), hub_offline())  # fmt: skip

    # Search --------------------------------------------------------------------------------
    def search(self) -> None:
        if not self.search_edit.text().strip():
            self.banner.hide()
            self.show_curated()
            return
        self.curated.hide()
        self.results.show()
        self._search_token += 1
        token, text, sort = self._search_token, self.search_edit.text(), self.sort.currentText()
        self.search_button.setEnabled(False)
        self._calls.run(
            lambda: self._catalog().search(text, sort=sort, limit=50),
            lambda future: self._on_searched(token, future),
        )

    def _catalog(self) -> HubCatalog:
        # Worker thread only: the catalog holds that thread's SQLite connection.
        if self._hub_catalog is None:
            self._hub_catalog = HubCatalog()
        return self._hub_catalog

    def _on_searched(self, token: int, future: Future) -> None:
        if token != self._search_token:
            return
        self.search_button.setEnabled(True)
        self.results.setRowCount(0)
        try:
            result: SearchResult = future.result()
        except CatalogError as exc:
            self._show_banner(f"Search failed: {exc}")
            return
        if result.offline:
            if result.hits and not result.source.from_cache:
                self._show_banner(f"Offline — showing the catalog shipped with deskllm "
                                  f"({result.source.reason})")  # fmt: skip
            elif result.hits:
                self._show_banner(f"Offline — showing cached results ({result.source.reason})")
            else:
                self._show_banner(f"Offline — search needs the internet ({result.source.reason})")
        else:
            self.banner.hide()
        for hit in result.hits:
            row = self.results.rowCount()
            self.results.insertRow(row)
            name = _item(hit.repo_id + ("  (gated)" if hit.gated else ""))
            name.setData(_REPO, hit.repo_id)
            self.results.setItem(row, 0, name)
            self.results.setItem(row, 1, _item(f"{hit.downloads:,}", True))
            self.results.setItem(row, 2, _item(f"{hit.likes:,}", True))
            self.results.setItem(row, 3, _item((hit.last_modified or "")[:10]))
        if not result.hits and not result.offline:
            self.plan_status.setText("No GGUF models match this search")

    def _show_banner(self, text: str) -> None:
        self.banner.setText(text)
        self.banner.show()

    def result_repo(self, row: int) -> str | None:
        item = self.results.item(row, 0)
        return item.data(_REPO) if item is not None else None

    # Quantizations -------------------------------------------------------------------------
    def _select_result(self, row: int) -> None:
        repo_id = self.result_repo(row)
        if repo_id and repo_id != self.repo_id:
            self.show_repo(repo_id)

    def _embedding_chosen(self, index: int) -> None:
        repo_id = self.embedding.itemData(index)
        if repo_id:
            self.show_repo(repo_id)

    def show_repo(self, repo_id: str, curated: bool = False) -> None:
        """Plan a repo's quantizations: from the Hub, or from the curated catalog."""
        self.repo_id = repo_id
        self.curated_repo = curated
        self.plan = None
        self.quants.setRowCount(0)
        self.recommended.clear()
        self._show_pairs(())
        self.replan()

    def replan(self) -> None:
        """Plan the selected repo's quantizations for the chosen context (headers are cached,
        so a new context costs no download)."""
        if self.repo_id is None:
            return
        self._plan_token += 1
        token, repo_id, n_ctx = self._plan_token, self.repo_id, self.n_ctx
        usable, speeds, curated = self.usable_tps, dict(self.speeds), self.curated_repo
        models = self.installed_models()  # here: the library's connection is this thread's
        self.plan_status.setText(f"Planning {repo_id} for {n_ctx:,} tokens of context…")

        def work() -> tuple[ModelPlan, tuple[QuantPairs, ...]]:
            plan = plan_repo(repo_id, n_ctx, usable, speeds, curated)
            return plan, repo_draft_pairs(self._catalog(), plan, models, cached_only=curated)

        self._calls.run(work, lambda f: self._on_planned(token, f))

    def _on_planned(self, token: int, future: Future) -> None:
        if token != self._plan_token:
            return
        try:
            plan, pairs = future.result()
        except Exception as exc:  # catalog, header and planner errors all carry their words
            self.quants.setRowCount(0)
            self._show_pairs(())
            self.plan_status.setText(f"Cannot plan {self.repo_id}: {exc}")
            return
        self.plan = plan
        self._show_pairs(pairs)
        context = f"{plan.n_ctx:,} tokens of context ({plan.kv_type} KV cache)"
        self.plan_status.setText(f"{plan.model}: {len(plan.plans)} files, at {context}")
        self.quants.setRowCount(0)
        best = plan.recommended.file if plan.recommended else None
        for quant_plan in sorted(plan.plans, key=lambda p: (quality_rank(p.quant), p.size_bytes)):
            self._add_quant_row(quant_plan, quant_plan.file == best)
        if plan.recommended:
            self.recommended.setText(f"Recommended: {plan.recommended.reason}")
        else:
            self.recommended.setText("Nothing fits this machine at this context.")

    def _show_pairs(self, found: tuple[QuantPairs, ...]) -> None:
        text = pairs_text(found)
        self.pairs.setText(text)
        self.pairs.setVisible(bool(text))

    def _add_quant_row(self, quant_plan: QuantPlan, recommended: bool) -> None:
        row = self.quants.rowCount()
        self.quants.insertRow(row)
        measured = self.qualities.get(PurePath(quant_plan.file).name)  # checked here
        cells = [
            _item(quant_plan.quant),
            _item(human_bytes(quant_plan.size_bytes), True),
            _item(quality_text(quant_plan.quant, measured)),
            _item(memory_text(quant_plan), True),
            _item(fit_badge(quant_plan)),
            _item(self._speed(quant_plan), True),
        ]
        for column, cell in enumerate(cells):
            cell.setToolTip(quant_plan.plan.reason)
            if recommended:
                font = cell.font()
                font.setWeight(QFont.Weight.Bold)
                cell.setFont(font)
                cell.setBackground(self.palette().color(QPalette.ColorRole.AlternateBase))
            self.quants.setItem(row, column, cell)
        self.quants.item(row, 0).setData(_REPO, quant_plan.file)
        button = QPushButton("Download")
        repo_id, file = self.repo_id, quant_plan.file
        button.clicked.connect(lambda: self.download(repo_id, file))
        self.quants.setCellWidget(row, len(cells), button)

    def _speed(self, quant_plan: QuantPlan) -> str:
        measured = self.speeds.get(PurePath(quant_plan.file).name)
        return speed_text(measured or quant_plan.plan.tps_ceiling, bool(measured))

    def recommended_row(self) -> int | None:
        best = self.plan.recommended.file if self.plan and self.plan.recommended else None
        for row in range(self.quants.rowCount()):
            if self.quants.item(row, 0).data(_REPO) == best:
                return row
        return None

    # Downloads -----------------------------------------------------------------------------
    def download(self, repo_id: str | None, file: str) -> None:
        if repo_id is None:
            return
        self.downloads_box.show()
        self.download_status.setText(f"Starting {file}…")
        self.downloads.add(repo_id, file)

    def _row(self, download_id: int, name: str) -> DownloadRow:
        row = self.rows.get(download_id)
        if row is None:
            row = self.rows[download_id] = DownloadRow(download_id, name, self.downloads)
            self.downloads_layout.addWidget(row)
            self.downloads_box.show()
        return row

    def _on_progress(self, event: Progress) -> None:
        if event.id is None:
            return
        if event.state in (DownloadState.DONE, DownloadState.CANCELLED):
            row = self.rows.pop(event.id, None)
            if row is not None:
                row.deleteLater()
            if event.state == DownloadState.DONE:
                self.download_status.setText(f"Downloaded {event.name}: it is in Installed")
                self.download_finished.emit(event.path or "")
                self._show_curated_answer()  # mark the new file installed
            else:
                self.download_status.setText(f"Cancelled {event.name}; its partial file is gone")
            return
        self._row(event.id, event.name).show_progress(event)

    def _on_restored(self, records: list) -> None:
        for record in records:
            event = Progress(
                id=record.id, name=record.item.what, state=record.state,
                bytes_done=record.bytes_done, total=record.total, error=record.error,
            )  # fmt: skip
            self._on_progress(event)
        if records:
            self.download_status.setText(f"{len(records)} unfinished download(s) from last time")

    def _on_download_failed(self, message: str) -> None:
        self.downloads_box.show()
        self.download_status.setText(message)

    def shutdown(self) -> None:
        self._calls.shutdown(wait=False)
