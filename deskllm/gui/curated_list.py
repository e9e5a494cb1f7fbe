"""The curated models planned for this machine: what Discover shows before (or without) a
search, offline included. One row per curated repo with the quant the recommendation rule
picks, its fit, expected speed, quality tier and license, whether a quant of it is installed,
and a "Download recommended" button; the model to take in bold, with the reason below.

Signals:
    download_requested(str, str): repo id and file of a "Download recommended" click.
    repo_selected(str): a row was chosen (show its quantizations).
    refresh_requested(): read the catalog's real file sizes from the Hub.
"""

from __future__ import annotations

from pathlib import PurePath

from deskllm.catalog.curated import age_text
from deskllm.catalog.quants import quality_tier
from deskllm.downloads.units import human_bytes
from deskllm.gui.plan_text import fit_badge, speed_text
from deskllm.gui.qt import (
    QAbstractItemView,
    QFont,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPalette,
    QPushButton,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.planner.catalog_plan import CatalogPlan, CatalogRow
from deskllm.planner.fit import QuantPlan

COLUMNS = ("Model", "Params", "Quant", "Size", "Fit", "Expected speed", "Quality", "License", "")
_REPO = Qt.ItemDataRole.UserRole


def _cell(text: str, right: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


class CuratedList(QWidget):
    download_requested = Signal(str, str)
    repo_selected = Signal(str)
    refresh_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plan: CatalogPlan | None = None
        self.status = QLabel("Planning the popular models for this machine…")
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # The repo name gives way (elided) so the figures and the whole button stay readable.
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setStretchLastSection(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.recommended = QLabel()
        self.recommended.setWordWrap(True)
        self.refresh_button = QPushButton("Refresh from the Hub")
        self.refresh_button.setToolTip("Read the real file sizes of these models from the Hub")
        self.refresh_button.clicked.connect(self._refresh_clicked)
        bar = QHBoxLayout()
        bar.addWidget(self.status, 1)
        bar.addWidget(self.refresh_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.recommended)
        self.table.currentCellChanged.connect(lambda row, *_: self._selected(row))

    def show_plan(
        self,
        plan: CatalogPlan,
        catalog_date: str,
        refreshed_at: float | None,
        installed: set[str],
        offline: bool,
    ) -> None:
        """Fill the table. `installed`: file names (no folder) of models in the library."""
        self.plan = plan
        self.refresh_button.setEnabled(not offline)
        where = "offline, " if offline else ""
        self.status.setText(
            f"Popular models planned for this machine ({where}catalog of {catalog_date}, "
            f"last refreshed from the Hub: {age_text(refreshed_at)}). Search above for more."
        )
        self.table.setRowCount(0)
        for row in plan.rows:
            if row is plan.recommended and plan.recommended_quant is not None:
                # The model to take shows the file the catalog's rule chose for it (it may be
                # a smaller quant than the row's own pick, to run wholly on the GPU).
                self._add(row, plan.recommended_quant, plan.reason or "", True, installed)
            else:
                reason = row.recommendation.reason if row.recommendation else ""
                self._add(row, row.chosen, reason or row.chosen.plan.reason, False, installed)
        if plan.recommended is not None and plan.reason:
            self.recommended.setText(f"Recommended: {plan.reason}")
        else:
            self.recommended.setText("Nothing in the catalog fits this machine.")

    def show_error(self, message: str) -> None:
        self.refresh_button.setEnabled(True)
        self.status.setText(f"Cannot plan the popular models: {message}")

    def _refresh_clicked(self) -> None:
        self.refresh_button.setEnabled(False)
        self.status.setText("Reading the models' files from the Hub…")
        self.refresh_requested.emit()

    def _add(
        self, row: CatalogRow, chosen: QuantPlan, reason: str, best: bool, installed: set[str]
    ) -> None:
        r = self.table.rowCount()
        self.table.insertRow(r)
        have = [f.quant for f in row.model.files if PurePath(f.file).name in installed]
        name = row.model.repo_id + (f"  (installed: {', '.join(have)})" if have else "")
        measured = row.measured_tps.get(chosen.file)
        tps = measured or chosen.plan.tps_ceiling
        estimated = any(f.size_estimated for f in row.model.files if f.file == chosen.file)
        size = ("~" if estimated else "") + human_bytes(chosen.size_bytes)
        cells = [
            _cell(name),
            _cell(f"{row.model.params / 1e9:.1f}B", True),
            _cell(chosen.quant + (" ✓" if chosen.quant in have else "")),
            _cell(size, True),
            _cell(fit_badge(chosen)),
            _cell(speed_text(tps, bool(measured)), True),
            _cell(quality_tier(chosen.quant)),
            _cell(row.model.license),
        ]
        for column, cell in enumerate(cells):
            cell.setToolTip(reason)
            if best:
                font = cell.font()
                font.setWeight(QFont.Weight.Bold)
                cell.setFont(font)
                cell.setBackground(self.palette().color(QPalette.ColorRole.AlternateBase))
            self.table.setItem(r, column, cell)
        self.table.item(r, 0).setData(_REPO, row.model.repo_id)
        button = QPushButton("Download recommended")
        button.setEnabled(chosen.plan.fit != "too_big" and chosen.quant not in have)
        floor = self.plan.usable_tps if self.plan is not None else 0.0
        if chosen.quant in have:
            button.setText("Installed")
        elif tps is not None and tps < floor:
            # The rule behind the recommendation: below the usable speed it is not one.
            button.setText(f"Slow here: ~{tps:.1f} tok/s")
            button.setToolTip(f"Expected ~{tps:.1f} tokens/s on this machine, below the "
                              f"{floor:g} tokens/s the app counts as usable (Settings); "
                              "download it anyway with this button")  # fmt: skip
        repo_id, file = row.model.repo_id, chosen.file
        button.clicked.connect(lambda: self.download_requested.emit(repo_id, file))
        self.table.setCellWidget(r, len(cells), button)

    def repo_at(self, row: int) -> str | None:
        item = self.table.item(row, 0)
        return item.data(_REPO) if item is not None else None

    def row_of(self, repo_id: str) -> int | None:
        return next((r for r in range(self.table.rowCount()) if self.repo_at(r) == repo_id), None)

    def _selected(self, row: int) -> None:
        repo_id = self.repo_at(row)
        if repo_id:
            self.repo_selected.emit(repo_id)

