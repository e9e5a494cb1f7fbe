"""The "Check quality…" dialog of an installed model: `deskllm quality` with progress, cancel
and the result (see deskllm.measure.quality). The check runs on a worker thread (its passes
in their own processes); the result is stored like the command's.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

from deskllm.engine.client import EngineClient
from deskllm.gui.qt import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.gui.tasks import TaskRunner
from deskllm.loader import ModelLoader, params_from_settings
from deskllm.measure.quality import (
    DEFAULT_CTX,
    QualityCancelled,
    QualityProgress,
    QualityResult,
    check_quality,
)
from deskllm.measure.quality_text import file_text, sample_path, sample_text
from deskllm.settings import Settings
from deskllm.store import InstalledModel, open_database
from deskllm.store.quality_results import QualityResults


def reference_candidates(model: InstalledModel, installed: list[InstalledModel]) -> list[str]:
    """Other files of the same model (architecture and parameter count), largest first: the
    largest is the highest precision."""
    def same_model(m: InstalledModel) -> bool:
        return m.architecture == model.architecture and m.parameters == model.parameters

    same = [m for m in installed if m.path != model.path and m.exists and same_model(m)]
    return [m.path for m in sorted(same, key=lambda m: -m.size_bytes)]


def result_text(r: QualityResult) -> str:
    return (
        f"KL divergence {r.mean_kld:.4f} (median {r.median_kld:.4f}, 99th percentile "
        f"{r.kld_p99:.4f}) over {r.tokens:,} tokens. Same top token {r.same_top_pct:.1f}%. "
        f"Perplexity {r.ppl:.3f} vs {r.ppl_reference:.3f} (×{r.ppl_ratio:.3f}). "
        f"Δp rms {r.delta_p.rms * 100:.2f}%. {r.seconds:.0f} s."
    )


class QualityCheckDialog(QDialog):
    stored = Signal()  # a result was stored (the Installed list shows it)

    def __init__(
        self,
        model: InstalledModel,
        installed: list[InstalledModel],
        settings: Settings,
        db_path: Path | None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Check quality — {model.name}")
        self.model = model
        self.settings = settings
        self.db_path = db_path
        self.text_path: Path | None = None  # None: the bundled sample
        self.cancel_event = threading.Event()
        self.result: QualityResult | None = None
        self._tasks = TaskRunner("quality", self)

        self.reference = QComboBox()
        self.reference.setEditable(True)  # a path typed or chosen with Browse
        self.reference.addItems(reference_candidates(model, installed))
        self.browse_button = QPushButton("Browse…")
        self.text_label = QLabel(f"Bundled sample ({sample_path().name})")
        self.text_button = QPushButton("Text file…")
        self.ctx = QSpinBox()
        self.ctx.setRange(16, 32768)
        self.ctx.setValue(DEFAULT_CTX)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setValue(0)
        self.status = QLabel(
            "Compares this file's next-token predictions with a higher-precision file of the "
            "same model (Q8_0, F16) on a text." if self.reference.count() else
            "Choose a higher-precision file of the same model (Q8_0, F16) to compare with."
        )  # fmt: skip
        self.status.setWordWrap(True)
        self.check_button = QPushButton("Check")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.close_button = QPushButton("Close")

        reference_row = QHBoxLayout()
        reference_row.addWidget(self.reference, 1)
        reference_row.addWidget(self.browse_button)
        text_row = QHBoxLayout()
        text_row.addWidget(self.text_label, 1)
        text_row.addWidget(self.text_button)
        form = QFormLayout()
        form.addRow("Model", QLabel(model.path))
        form.addRow("Reference", reference_row)
        form.addRow("Text", text_row)
        form.addRow("Tokens per chunk", self.ctx)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for button in (self.check_button, self.cancel_button, self.close_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(buttons)

        self.browse_button.clicked.connect(self._browse_reference)
        self.text_button.clicked.connect(self._choose_text)
        self.check_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button.clicked.connect(self.close)
        self.reference.currentTextChanged.connect(lambda _t: self._update_buttons())
        self._update_buttons()

    @property
    def running(self) -> bool:
        return self.cancel_button.isEnabled()

    def set_text_file(self, path: Path | None) -> None:
        self.text_path = path
        self.text_label.setText(str(path) if path else f"Bundled sample ({sample_path().name})")

    def _browse_reference(self) -> None:
        path, _filter = QFileDialog.getOpenFileName(
            self, "Reference model file", str(Path(self.model.path).parent), "GGUF (*.gguf)"
        )
        if path:
            self.reference.setEditText(path)

    def _choose_text(self) -> None:
        path, _filter = QFileDialog.getOpenFileName(self, "Text to score", str(Path.home()))
        if path:
            self.set_text_file(Path(path))

    def _update_buttons(self) -> None:
        reference = self.reference.currentText().strip()
        ok = bool(reference) and Path(reference).is_file() and not self.running
        self.check_button.setEnabled(ok)
        for widget in (self.reference, self.browse_button, self.text_button, self.ctx):
            widget.setEnabled(not self.running)

    def start(self) -> None:
        reference = self.reference.currentText().strip()
        if self.running or not Path(reference).is_file():
            return
        self.cancel_event.clear()
        self.result = None
        self.cancel_button.setEnabled(True)
        self._update_buttons()
        self.progress.setValue(0)
        self.status.setText("Starting…")
        model_params = params_from_settings(self.settings, self.model.path)
        ref_params = params_from_settings(self.settings, reference)
        text_path, n_ctx, db_path = self.text_path, self.ctx.value(), self.db_path
        cancel = self.cancel_event

        def progress(p: QualityProgress) -> None:
            self._tasks.post(self._on_progress, p)

        def work() -> QualityResult:
            db = open_database(db_path)  # this thread's own connection
            try:
                text = file_text(text_path) if text_path else sample_text()
                loader = ModelLoader(EngineClient(), db=db)
                result = check_quality(
                    model_params, ref_params, text, n_ctx,
                    on_progress=progress, cancel=cancel, loader=loader,
                )  # fmt: skip
                QualityResults(db).save(result.to_json(), text_sha256=result.text_sha256,
                                        n_ctx=result.n_ctx)  # fmt: skip
                return result
            finally:
                db.close()

        self._tasks.run(work, self._on_finished)

    def cancel(self) -> None:
        if self.running:
            self.cancel_event.set()
            self.status.setText("Cancelling…")

    def _on_progress(self, p: QualityProgress) -> None:
        # the reference pass is the first half of the bar, the model's the second
        half = 0 if p.stage == "reference" else 50
        self.progress.setValue(half + int(50 * p.chunk / max(p.chunks, 1)))
        what = "reference" if p.stage == "reference" else "this model"
        self.status.setText(f"Reading the text with {what}: chunk {p.chunk} of {p.chunks}")

    def _on_finished(self, future: Future) -> None:
        self.cancel_button.setEnabled(False)
        self._update_buttons()
        try:
            self.result = future.result()
        except QualityCancelled:
            self.progress.setValue(0)
            self.status.setText("Cancelled.")
            return
        except Exception as exc:  # QualityError and the like: say it in the dialog
            self.progress.setValue(0)
            self.status.setText(f"The check failed: {exc}")
            return
        self.progress.setValue(100)
        self.status.setText(result_text(self.result))
        self.stored.emit()

    def done(self, code: int) -> None:
        """Closing the dialog cancels a running check and waits for its pass to end."""
        self.cancel_event.set()
        self._tasks.shutdown(wait=True)
        super().done(code)

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.cancel_event.set()
        self._tasks.shutdown(wait=True)
        super().closeEvent(event)
