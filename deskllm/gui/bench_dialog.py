"""The Benchmark dialog: `deskllm bench --suite` with progress, cancel, the figures as a table
(cost per million tokens included), as bars (each with its cost beside it) and as decode speed
against context depth, the choice and its reason (see deskllm.measure.suite). The suite runs
on a worker thread in an engine process of its own; its result is stored like the command's,
so the next automatic load takes the winner. The app's own loaded model is freed while it
runs (AppModel) and loaded again after it, Cancel included: two copies of a big model may not
fit together.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from deskllm import settings as user_settings
from deskllm.gui.app_model import AppModel
from deskllm.gui.bench_charts import DepthChart, SpeedBars, cost_text
from deskllm.gui.qt import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from deskllm.gui.tasks import TaskRunner
from deskllm.loader.params import cost_rates_from_settings
from deskllm.measure.suite import BenchSuite, SuiteCancelled
from deskllm.planner.measured_configs import config_label, save_suite
from deskllm.store import ModelLibrary, open_database

# Said before a run where the app may hold a model: the suite loads its own copy.
UNLOAD_NOTE = "The loaded model is unloaded during the benchmark and loaded again after it."
COLUMNS = ("Configuration", "Prompt tok/s", "Decode tok/s", "TTFT s", "Score", "Of ceiling",
           "Cost / M tokens", "Status")  # fmt: skip


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


class BenchSuiteDialog(QDialog):
    """Choose a model and the options, run, watch progress, cancel; the result stays shown."""

    def __init__(
        self,
        models: list[tuple[str, str]],
        metric: str = "decode",
        parent: QWidget | None = None,
        app_model: AppModel | None = None,
    ) -> None:
        """`models`: (name, path) of the installed models, the default one first;
        `app_model`: the app's loaded model, freed while the suite runs (None: nothing to free,
        as in the Hardware panel alone)."""
        super().__init__(parent)
        self.app_model = app_model
        self.setWindowTitle("Benchmark this machine")
        self.suite: BenchSuite | None = None
        self.result: dict[str, Any] | None = None
        self._tasks = TaskRunner("bench", self)

        self.model_box = QComboBox()
        for name, path in models:
            self.model_box.addItem(name, path)
        self.metric_box = QComboBox()
        self.metric_box.addItem("Decode speed (replies)", "decode")
        self.metric_box.addItem("Prompt speed (long inputs)", "prompt")
        self.metric_box.setCurrentIndex(max(0, self.metric_box.findData(metric)))
        self.allow_cpu_devices = QCheckBox(
            "Also measure CPU-type devices (Mesa llvmpipe through Vulkan)"
        )
        self.quick = QCheckBox("Quick: every shape 8× smaller")
        form = QFormLayout()
        form.addRow("Model", self.model_box)
        form.addRow("Fastest by", self.metric_box)
        form.addRow("", self.allow_cpu_devices)
        form.addRow("", self.quick)

        self.status = QLabel(
            "Measures the model on the CPU with each thread count and on each device the "
            "engine can use; a configuration 10× slower than the best after a few tokens is "
            "abandoned. The fastest is then measured with speculative decoding (n-gram "
            "drafts, each installed draft model). Automatic loads then use the fastest that "
            "fits, and the speculation that paid."
            + (f" {UNLOAD_NOTE}" if app_model is not None else "")
        )
        self.status.setWordWrap(True)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(500)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.bars = SpeedBars()
        self.depth_chart = DepthChart()
        self.chosen = QLabel("")
        self.chosen.setWordWrap(True)
        self.run_button = QPushButton("Run benchmark")
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.log, 1)
        layout.addWidget(self.table, 1)
        charts = QHBoxLayout()
        charts.addWidget(self.bars, 1)
        charts.addWidget(self.depth_chart, 1)
        layout.addLayout(charts)
        layout.addWidget(self.chosen)
        layout.addLayout(buttons)

    def fit_columns(self) -> None:
        """Widen the dialog until every column shows (the last ones were cut off), up to the
        screen's width."""
        table = self.table
        table.resizeColumnsToContents()
        need = table.horizontalHeader().length() + table.verticalHeader().sizeHint().width()
        need += 2 * table.frameWidth() + table.verticalScrollBar().sizeHint().width()
        extra = need - table.width()
        screen = self.screen()
        if extra > 0:
            limit = screen.availableGeometry().width() if screen is not None else self.width()
            self.resize(min(self.width() + extra, limit), self.height())

    def showEvent(self, event) -> None:  # noqa: N802 (Qt name)
        super().showEvent(event)
        self.fit_columns()

    @property
    def running(self) -> bool:
        return self.suite is not None

    def start(self) -> None:
        if self.running or self.model_box.currentData() is None:
            return
        if self.app_model is not None and self.app_model.serving:
            answer = QMessageBox.question(
                self, "Benchmark",
                "The local API server is serving the loaded model. The benchmark unloads it, "
                "which stops the server while it runs; the model and the server come back "
                "after it.\n\nRun the benchmark?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No,
            )  # fmt: skip
            if answer != QMessageBox.StandardButton.Yes:
                self.status.setText("Not started: the local API server keeps serving.")
                return
        self.log.clear()
        self.result = None
        self.suite = BenchSuite(
            self.model_box.currentData(),
            quick=self.quick.isChecked(),
            allow_cpu_devices=self.allow_cpu_devices.isChecked(),
            metric=self.metric_box.currentData(),
            cost_rates=cost_rates_from_settings(user_settings.load()),
            on_progress=lambda line: self._tasks.post(self.log.appendPlainText, line),
        )
        suite = self.suite
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        if self.app_model is not None and self.app_model.loaded:
            self.status.setText("Unloading the app's model to free its memory…")
            self.app_model.release(lambda: self._launch(suite))
        else:
            self._launch(suite)

    def _launch(self, suite: BenchSuite) -> None:
        if suite.cancelled:  # cancelled while the app's model was being freed
            self._ended()
            self.status.setText("Cancelled: nothing was stored.")
            return
        self.status.setText("Measuring… (the machine is busy until it ends)")
        self._tasks.run(lambda: self._run(suite), self._on_done)

    @staticmethod
    def _run(suite: BenchSuite) -> dict[str, Any]:
        db = open_database()  # this worker thread's own connection
        try:
            # The installed models that can draft for it, for the speculation stage.
            library = ModelLibrary(db)
            suite.drafts = [m.path for m in library.draft_candidates(suite.model_path)]
            result = suite.run()
            save_suite(db, result)
        finally:
            db.close()
        return result

    def cancel(self) -> None:
        if self.suite is not None:
            self.status.setText("Cancelling…")
            self.cancel_button.setEnabled(False)
            self.suite.cancel()

    def reject(self) -> None:
        self.cancel()  # closing the dialog stops the suite too
        super().reject()

    def _ended(self) -> None:
        """The suite is over (done, failed or cancelled): the app's model comes back."""
        self.suite = None
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        if self.app_model is not None:
            self.app_model.restore()

    def _on_done(self, future: Future) -> None:
        self._ended()
        try:
            result = future.result()
        except SuiteCancelled:
            self.status.setText("Cancelled: nothing was stored.")
            return
        except Exception as exc:
            self.status.setText(f"The benchmark failed: {exc}")
            return
        self.show_result(result)
        self.status.setText("Stored: automatic loads of this model now use the choice below.")

    def show_result(self, result: dict[str, Any]) -> None:
        self.result = result
        self.table.setRowCount(len(result["configs"]))
        for row, c in enumerate(result["configs"]):
            share = f"{c['ceiling_share']:.0%}" if c.get("ceiling_share") else "–"
            cells = (config_label(c), _num(c["pp_tps"]), _num(c["tg_tps"]),
                     _num(c["ttft_s"], 2), _num(c["score"]), share, cost_text(c),
                     c.get("abandoned") or c.get("error") or c["status"])  # fmt: skip
            for column, text in enumerate(cells):
                self.table.setItem(row, column, QTableWidgetItem(text))
        self.fit_columns()
        self.bars.set_result(result)
        self.depth_chart.set_result(result)
        chosen = result["chosen"]
        ceiling = result.get("ceiling_tps")
        bound = f" The bandwidth ceiling is {ceiling:.0f} tok/s." if ceiling else ""
        speculation = (result.get("speculation") or {}).get("chosen")
        drafts = (f" Automatic speculation: {speculation['label']} ({speculation['reason']})."
                  if speculation else "")  # fmt: skip
        self.chosen.setText(
            f"Chosen: {chosen['id'] or 'none'} — {chosen['reason']}.{bound}{drafts}")
