"""The Benchmark dialog (Hardware panel → Benchmark…): the real suite on the real engine (the
default CPU build here; lavapipe is tested in tests/integration/test_bench_suite.py), its
table, bars and choice, the result stored, and Cancel."""

from __future__ import annotations

import pytest

from deskllm.gui.bench_dialog import COLUMNS, SpeedBars
from deskllm.gui.hardware_panel import HardwarePanel
from deskllm.gui.qt import QApplication, QColor, QPalette
from deskllm.planner.measured_configs import current_keys, stored_suite
from deskllm.store import open_database

SUITE_TIMEOUT_MS = 600_000


@pytest.fixture
def dialog(qtbot, starter_model):
    panel = HardwarePanel()
    qtbot.addWidget(panel)
    dialog = panel.open_benchmark()
    assert dialog.model_box.currentData() == str(starter_model)  # the starter model first
    dialog.quick.setChecked(True)
    return dialog


def test_a_run_shows_every_configuration_the_choice_and_stores_it(qtbot, dialog, starter_model):
    dialog.run_button.click()
    assert dialog.running and not dialog.run_button.isEnabled()
    qtbot.waitUntil(lambda: not dialog.running, timeout=SUITE_TIMEOUT_MS)
    assert dialog.status.text().startswith("Stored"), dialog.status.text()
    result = dialog.result
    assert dialog.table.rowCount() == len(result["configs"]) >= 1
    assert dialog.table.columnCount() == len(COLUMNS)
    assert dialog.table.item(0, 0).text().startswith("CPU ")
    assert dialog.chosen.text().startswith(f"Chosen: {result['chosen']['id']} — fastest")
    assert "[1/" in dialog.log.toPlainText()  # progress, line by line
    db = open_database()
    assert stored_suite(db, current_keys(), str(starter_model)) == result


def test_cancel_stops_the_suite_and_stores_nothing(qtbot, dialog, starter_model):
    dialog.quick.setChecked(False)  # full shapes: still running when cancelled
    dialog.run_button.click()
    qtbot.waitUntil(lambda: "pp " in dialog.log.toPlainText(), timeout=SUITE_TIMEOUT_MS)
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=60_000)
    assert dialog.status.text() == "Cancelled: nothing was stored."
    assert dialog.run_button.isEnabled() and dialog.table.rowCount() == 0
    assert stored_suite(open_database(), current_keys(), str(starter_model)) is None


def test_the_bars_show_the_chosen_configuration_in_the_highlight_colour(qtbot):
    bars = SpeedBars()
    qtbot.addWidget(bars)
    configs = [
        {"id": "cpu-2t", "tg_tps": 147.0, "status": "measured"},
        {"id": "vulkan0-31l", "tg_tps": 1.6, "status": "abandoned"},
    ]
    bars.set_result({"configs": configs, "chosen": {"id": "cpu-2t"}})
    bars.resize(bars.sizeHint())
    image = bars.grab().toImage()
    colours = {image.pixelColor(x, y).rgb() for x in range(image.width())
               for y in range(image.height())}  # fmt: skip
    highlight = QColor(bars.palette().color(QPalette.ColorRole.Highlight)).rgb()
    assert highlight in colours
    bars.set_result({"configs": configs, "chosen": {"id": None}})
    image = bars.grab().toImage()
    colours = {image.pixelColor(x, y).rgb() for x in range(image.width())
               for y in range(image.height())}  # fmt: skip
    assert highlight not in colours
    QApplication.processEvents()
