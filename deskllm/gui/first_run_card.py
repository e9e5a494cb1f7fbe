"""FirstRunCard: on a first run, once the starter model is loaded, a short card in the chat
with one line from the planner on what this computer can run and a button to the models
recommended for it (the Models panel's Discover tab). Once closed, or once the user has
chatted, it never shows again (remembered in the window's QSettings under DONE_KEY).

The line needs the hardware report with its memory bandwidth (the speed a model would reach),
so it is worked out on a task thread; the card says it is looking until then.

Signals:
    discover_requested(): the user wants to see the models recommended for this machine.
"""

from __future__ import annotations

from concurrent.futures import Future

from deskllm.gui.qt import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPalette,
    QPushButton,
    QSettings,
    Qt,
    QToolButton,
    QVBoxLayout,
    QWidget,
    Signal,
)
from deskllm.gui.tasks import TaskRunner

DONE_KEY = "hints/first_run_card_done"
LOOKING = "Looking at what this computer can run…"


def capacity_line(n_ctx: int, usable_tps: float) -> str:
    """The planner's line for this machine and the curated catalog's pick for it, as Discover
    shows it (runs on a task thread: probes the hardware)."""
    from deskllm.catalog.curated import load_curated
    from deskllm.hardware.probe import probe_hardware
    from deskllm.planner.capacity import catalog_pick_line, machine_capacity
    from deskllm.planner.catalog_plan import plan_catalog
    from deskllm.planner.machine import current_hardware, remember_hardware

    # The report the rest of the app plans with (the Hardware panel may have shared one);
    # probed again only when it lacks the bandwidth test, which speeds need.
    report = current_hardware()
    if report is None or report.bandwidth_gbps is None:
        report = probe_hardware()  # the bandwidth test is cached per machine
        remember_hardware(report)  # the planner's other users need not probe again
    line = machine_capacity(report, n_ctx, usable_tps).line
    planned = plan_catalog(load_curated(), report, n_ctx=n_ctx, usable_tps=usable_tps)
    pick = catalog_pick_line(planned)
    return f"{line} {pick}" if pick else line


class FirstRunCard(QFrame):
    """Attributes:
    line: the label with the planner's line.
    """

    discover_requested = Signal()

    def __init__(self, state: QSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._asked = False
        self._tasks = TaskRunner("first-run", self)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        title = QLabel("<b>Welcome. The starter model is ready: type below to chat.</b>")
        self.line = QLabel(LOOKING)
        self.line.setWordWrap(True)
        self.line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.discover_button = QPushButton("See models recommended for this machine")
        self.discover_button.clicked.connect(self.discover_requested)
        self.close_button = QToolButton(text="✕")
        self.close_button.setAutoRaise(True)
        self.close_button.setToolTip("Hide this card for good")
        self.close_button.clicked.connect(self.finish)
        text = QVBoxLayout()
        text.addWidget(title)
        text.addWidget(self.line)
        row = QHBoxLayout()
        row.addWidget(self.discover_button)
        row.addStretch(1)
        text.addLayout(row)
        layout = QHBoxLayout(self)
        layout.addLayout(text, 1)
        layout.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()  # (never show() here: a card without a parent yet would be a window)

    def done(self) -> bool:
        return self.state.value(DONE_KEY, False, type=bool)

    def offer(self, n_ctx: int, usable_tps: float) -> None:
        """Show the card (unless it is done) and work out its line, once per run."""
        if self.done():
            return
        self.show()
        if not self._asked:
            self._asked = True
            self._tasks.run(lambda: capacity_line(n_ctx, usable_tps), self._on_line)

    def _on_line(self, future: Future) -> None:
        try:
            self.line.setText(future.result())
        except Exception as exc:  # the card is a courtesy: say what failed, keep the button
            self.line.setText(f"Could not look at this computer's hardware ({exc}).")

    def finish(self) -> None:
        """Closed, or the user chatted: hide it for good."""
        self.state.setValue(DONE_KEY, True)
        self.hide()

    def shutdown(self) -> None:
        self._tasks.shutdown(wait=False)
