"""Usage view (View → Usage…): tokens and cost per day, per engine and model, local against
remote, the router's local share and a chart, for a period picked like `deskllm usage
--since`. The figures are store/usage.py's; this dialog only shows them."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from deskllm.database import open_database
from deskllm.gui.qt import (
    QAbstractItemView,
    QComboBox,
    QDate,
    QDateEdit,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.gui.tasks import TaskRunner
from deskllm.gui.usage_chart import UsageChart
from deskllm.hardware.energy_cost import LocalCostRates
from deskllm.store.usage import Usage, UsageRow, per_model, tokens_per_day, usage

# (label, days back from today; None: everything; -1: the date picker's day)
PERIODS = [("Last 7 days", 6), ("Last 30 days", 29), ("Last 365 days", 364),
           ("Everything", None), ("Since a date", -1)]  # fmt: skip
DEFAULT_PERIOD = 1
SOURCE_TEXT = {  # cost_source → (cell, tooltip)
    "measured": ("measured energy", "joules from this machine's energy counter × the tariff"),
    "estimated": (
        "estimated energy",
        "joules from the watts in Settings × the reply's time, "
        "× the tariff: an estimate, not a measurement",
    ),
    "price": ("endpoint price", "the tokens at the price set for this endpoint's model"),
    "none": ("not priced", "no tariff or price set, or no energy figure: never guessed"),
}
DAY_COLUMNS = ["Day", "Engine", "Model", "Requests", "Prompt tokens", "Completion tokens",
               "Cost", "Per M tokens", "Cost from"]  # fmt: skip


def money(value: float | None) -> str:
    """A cost in the tariff's currency: 4 decimals, 6 below a cent (one local reply's
    electricity is often a few millionths)."""
    if value is None:
        return "—"
    return f"{value:.4f}" if value == 0 or value >= 0.01 else f"{value:.6f}"


def period_start(index: int, picked: datetime.date, today: datetime.date) -> str | None:
    """The `since` day (YYYY-MM-DD) of PERIODS[index]."""
    back = PERIODS[index][1]
    if back is None:
        return None
    return (picked if back < 0 else today - datetime.timedelta(days=back)).isoformat()


class UsageDialog(QDialog):
    """Attributes: `report` (the Usage shown), `chart`, `per_day` and `per_model` tables,
    `summary` and `note` labels. `rates()` gives the settings' tariff and watts at each
    refresh. The query runs on a TaskRunner with its own connection to `db_path`."""

    settings_requested = Signal()
    refreshed = Signal()

    def __init__(
        self, db_path: Path, rates: Callable[[], LocalCostRates], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Usage")
        self.db_path = db_path
        self.rates = rates
        self.report: Usage | None = None
        self._tasks = TaskRunner("usage", self)
        self._closed = False

        self.period = QComboBox()
        for label, _back in PERIODS:
            self.period.addItem(label)
        self.period.setCurrentIndex(DEFAULT_PERIOD)
        self.since = QDateEdit(QDate.currentDate().addDays(-29))
        self.since.setCalendarPopup(True)
        self.since.setDisplayFormat("yyyy-MM-dd")
        self.since.setEnabled(False)
        period_row = QHBoxLayout()
        period_row.addWidget(QLabel("Period:"))
        period_row.addWidget(self.period)
        period_row.addWidget(self.since)
        period_row.addStretch(1)

        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.chart = UsageChart()
        self.per_day = self._table(DAY_COLUMNS)
        self.per_model = self._table(DAY_COLUMNS[1:])
        self.views = QTabWidget()
        self.views.addTab(self.per_day, "Per day")
        self.views.addTab(self.per_model, "Per model")
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.linkActivated.connect(self.settings_requested)
        self.note.hide()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addLayout(period_row)
        layout.addWidget(self.summary)
        layout.addWidget(self.chart)
        layout.addWidget(self.views, 1)
        layout.addWidget(self.note)
        layout.addWidget(buttons)
        line = self.fontMetrics().height()
        self.resize(64 * line, 36 * line)

        self.period.currentIndexChanged.connect(self._period_changed)
        self.since.dateChanged.connect(self.refresh)
        self.refresh()

    def _table(self, columns: list[str]) -> QTableWidget:
        table = QTableWidget(0, len(columns))
        table.setHorizontalHeaderLabels(columns)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.verticalHeader().hide()
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        table.horizontalHeader().setStretchLastSection(True)
        return table

    def since_day(self) -> str | None:
        picked = self.since.date()
        day = datetime.date(picked.year(), picked.month(), picked.day())
        return period_start(self.period.currentIndex(), day, datetime.date.today())

    def _period_changed(self, index: int) -> None:
        self.since.setEnabled(PERIODS[index][1] == -1)
        self.refresh()

    def refresh(self, *_changed: object) -> None:
        """Query again (period or settings changed) in the background."""
        if self._closed:
            return
        since, rates, path = self.since_day(), self.rates(), self.db_path

        def work() -> tuple[Usage, LocalCostRates]:
            db = open_database(path)  # this thread's own connection
            try:
                return usage(db, since, rates), rates
            finally:
                db.close()

        self.summary.setText("Counting…")
        self._tasks.run(work, self._shown)

    def _shown(self, future: Future) -> None:
        try:
            report, rates = future.result()
        except Exception as exc:  # a locked or unreadable database: say so here
            self.summary.setText(f"Usage could not be read from {self.db_path}: {exc}")
            return
        self.report = report
        # The whole period on the time axis, up to today (local time, as the rows' days).
        today = datetime.date.today().isoformat()
        self.chart.set_days(tokens_per_day(report.rows, report.since, today))
        self._fill(self.per_day, report.rows, with_day=True)
        self._fill(self.per_model, per_model(report.rows), with_day=False)
        self.summary.setText(summary_text(report))
        note = local_cost_note(report.rows, rates)
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self.refreshed.emit()

    def _fill(self, table: QTableWidget, rows: list[UsageRow], with_day: bool) -> None:
        table.setRowCount(len(rows))
        for i, row in enumerate(rows):
            cells = [row.engine, row.model, f"{row.requests:,}", f"{row.prompt_tokens:,}",
                     f"{row.completion_tokens:,}", money(row.cost), money(row.cost_per_mtok),
                     SOURCE_TEXT.get(row.cost_source, (row.cost_source, ""))[0]]  # fmt: skip
            if with_day:
                cells.insert(0, row.day)
            first_number = 3 if with_day else 2
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if first_number <= j < first_number + 5:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                if j == len(cells) - 1:
                    item.setToolTip(SOURCE_TEXT.get(row.cost_source, ("", ""))[1])
                table.setItem(i, j, item)

    def done(self, code: int) -> None:
        self._closed = True
        self._tasks.shutdown(wait=True)
        super().done(code)


def summary_text(report: Usage) -> str:
    """Local against remote over the period, and the router's share kept local."""
    if not report.rows:
        return "No replies in this period."
    parts = []
    for label, rows in (("Local", [r for r in report.rows if r.local]),
                        ("Remote", [r for r in report.rows if not r.local])):  # fmt: skip
        tokens = sum(r.tokens for r in rows)
        priced = [r.cost for r in rows if r.cost is not None]
        cost = f", cost {money(sum(priced))}" if priced else ""
        if len(priced) < len(rows) and priced:
            cost += " (part not priced)"
        replies = sum(r.requests for r in rows)
        noun = "reply" if replies == 1 else "replies"
        parts.append(f"{label}: {replies:,} {noun}, {tokens:,} tokens{cost}")
    share = report.local_share
    router = ("the router placed no replies" if share is None
              else f"the router kept {share:.0%} of its replies local")  # fmt: skip
    return " · ".join(parts) + f" · {router}."


def local_cost_note(rows: list[UsageRow], rates: LocalCostRates) -> str:
    """Why local replies show no cost, when a setting would price them ("" otherwise)."""
    if not any(r.local and r.cost_source == "none" for r in rows):
        return ""
    if not rates.tariff_per_kwh > 0:
        return ("Local replies are not priced: set the electricity price per kWh in "
                "<a href='settings'>Settings</a>.")  # fmt: skip
    if not rates.estimated_watts > 0:
        return ("Some local replies have no measured energy (no readable sensor): an "
                "estimated power draw in <a href='settings'>Settings</a> prices them, "
                "labelled estimated.")  # fmt: skip
    return "Some local replies have neither measured energy nor a measured time."
