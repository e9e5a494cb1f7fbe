"""The Benchmark dialog (Hardware panel → Benchmark…): the real suite on the real engine (the
default CPU build here; lavapipe is tested in tests/integration/test_bench_suite.py), its
table, bars (with the cost beside them) and choice, the result stored, and Cancel; in the
main window the app's loaded model is freed while the suite runs and loaded again after it,
Cancel included."""

from __future__ import annotations

import socket

import pytest
from gui_helpers import REPLY_TIMEOUT_MS

from deskllm.gui.bench_charts import DepthChart, bar_text, line_points
from deskllm.gui.bench_dialog import COLUMNS, UNLOAD_NOTE, SpeedBars
from deskllm.gui.hardware_panel import HardwarePanel
from deskllm.gui.qt import QApplication, QColor, QMessageBox, QPalette
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


@pytest.fixture
def window_dialog(qtbot, window, starter_model):
    """The dialog opened from the main window's Hardware panel, the starter model loaded."""
    assert window.loaded_path == str(starter_model)
    dialog = window.hardware.open_benchmark()
    assert UNLOAD_NOTE in dialog.status.text()  # said before starting
    dialog.quick.setChecked(True)
    return dialog


def app_model_events(window, dialog) -> list[str]:
    """What happens to the app's model, in order, and whether the suite had begun by then."""
    events: list[str] = []
    began = lambda: "began" if "[1/" in dialog.log.toPlainText() else "before"  # noqa: E731
    window.bridge.unloaded.connect(lambda: events.append(f"unloaded {began()}"))
    window.bridge.loaded.connect(lambda _loaded: events.append(f"loaded {began()}"))
    return events


def test_a_run_shows_every_configuration_the_choice_and_stores_it(
    qtbot, window, window_dialog, starter_model
):
    dialog = window_dialog
    events = app_model_events(window, dialog)
    dialog.run_button.click()
    assert dialog.running and not dialog.run_button.isEnabled()
    # The app's model is freed before the suite loads its own copy, and stays freed.
    qtbot.waitUntil(lambda: "[1/" in dialog.log.toPlainText(), timeout=SUITE_TIMEOUT_MS)
    assert events == ["unloaded before"]
    assert window.loaded_path is None and window.bridge.client.loaded is None
    qtbot.waitUntil(lambda: not dialog.running, timeout=SUITE_TIMEOUT_MS)
    qtbot.waitUntil(lambda: window.loaded_path == str(starter_model), timeout=120_000)
    assert events == ["unloaded before", "loaded began"]
    assert dialog.status.text().startswith("Stored"), dialog.status.text()
    result = dialog.result
    assert dialog.table.rowCount() == len(result["configs"]) >= 1
    assert dialog.table.columnCount() == len(COLUMNS)
    assert dialog.table.item(0, 0).text().startswith("CPU ")
    assert dialog.chosen.text().startswith(f"Chosen: {result['chosen']['id']} — fastest")
    assert "[1/" in dialog.log.toPlainText()  # progress, line by line
    # No tariff set: no cost is made up, and the table says so.
    cost_column = COLUMNS.index("Cost / M tokens")
    for row, config in enumerate(result["configs"]):
        assert (config["cost_per_mtok"], config["cost_source"]) == (None, "none")
        assert dialog.table.item(row, cost_column).text() == "–"
    # The chosen configuration's decode speed against context depth, drawn beside the bars.
    assert len(result["depth_tps"]) >= 3
    assert dialog.depth_chart.points and dialog.depth_chart.config == result["chosen"]["id"]
    # Then speculative decoding on it, and what Automatic speculation will take, said.
    speculation = result["speculation"]
    assert [row["label"] for row in speculation["measured"]] == ["n-gram drafts"]
    chosen = speculation["chosen"]
    assert f"Automatic speculation: {chosen['label']} ({chosen['reason']})." in \
        dialog.chosen.text()
    db = open_database()
    assert stored_suite(db, current_keys(), str(starter_model)) == result


def test_cancel_stops_the_suite_stores_nothing_and_loads_the_apps_model_again(
    qtbot, window, window_dialog, starter_model
):
    dialog = window_dialog
    events = app_model_events(window, dialog)
    dialog.quick.setChecked(False)  # full shapes: still running when cancelled
    dialog.run_button.click()
    qtbot.waitUntil(lambda: "pp " in dialog.log.toPlainText(), timeout=SUITE_TIMEOUT_MS)
    assert window.loaded_path is None
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=60_000)
    assert dialog.status.text() == "Cancelled: nothing was stored."
    assert dialog.run_button.isEnabled() and dialog.table.rowCount() == 0
    assert stored_suite(open_database(), current_keys(), str(starter_model)) is None
    qtbot.waitUntil(lambda: window.loaded_path == str(starter_model), timeout=120_000)
    assert events == ["unloaded before", "loaded began"]


def test_cancel_while_the_apps_model_is_being_freed_runs_nothing_and_loads_it_again(
    qtbot, window, window_dialog, starter_model
):
    dialog = window_dialog
    events = app_model_events(window, dialog)
    dialog.run_button.click()
    dialog.cancel_button.click()  # before the unload has ended: the suite never starts
    qtbot.waitUntil(lambda: not dialog.running, timeout=60_000)
    assert dialog.status.text() == "Cancelled: nothing was stored."
    qtbot.waitUntil(lambda: window.loaded_path == str(starter_model), timeout=120_000)
    assert events == ["unloaded before", "loaded before"]
    assert dialog.log.toPlainText() == ""


def test_a_model_the_api_server_serves_is_unloaded_only_when_the_user_agrees(
    qtbot, window, window_dialog, starter_model, monkeypatch
):
    window.open_server_panel()
    panel = window.server_panel
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        panel.port.setValue(s.getsockname()[1])
    panel.slots.setValue(1)
    with qtbot.waitSignal(window.bridge.serving, timeout=REPLY_TIMEOUT_MS) as serving:
        panel.start_button.click()
    assert serving.args[0] is not None, panel.status.text()
    dialog = window_dialog
    asked: list[str] = []

    def answer(button):
        def question(_parent, _title, text, *_args):
            asked.append(text)
            return button

        return question

    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.No))
    dialog.run_button.click()
    assert "stops the server" in asked[0]
    assert not dialog.running and dialog.status.text().startswith("Not started")
    assert window.bridge.server is not None  # still serving

    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Yes))
    with qtbot.waitSignal(window.bridge.serving, timeout=REPLY_TIMEOUT_MS) as stopped:
        dialog.run_button.click()
        dialog.cancel_button.click()  # nothing measured: the model comes back at once
    assert stopped.args[0] is None and window.bridge.server is None
    qtbot.waitUntil(lambda: not dialog.running, timeout=60_000)
    qtbot.waitUntil(lambda: window.loaded_path == str(starter_model), timeout=120_000)
    # The model is back, and so is the server, at the same address with the same slots.
    qtbot.waitUntil(lambda: window.bridge.server is not None, timeout=120_000)
    assert window.bridge.server.url == serving.args[0].url
    assert window.bridge.server.slots == 1


def test_without_the_main_window_nothing_is_unloaded_and_nothing_said(dialog):
    assert dialog.app_model is None and UNLOAD_NOTE not in dialog.status.text()


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


def test_the_bars_show_the_cost_per_million_tokens_beside_the_speed_where_there_is_one(qtbot):
    bars = SpeedBars()
    qtbot.addWidget(bars)
    costed = {"id": "cpu-1t", "tg_tps": 48.4, "status": "measured", "cost_per_mtok": 0.0181,
              "cost_source": "estimated"}  # fmt: skip
    metered = costed | {"id": "cpu-2t", "cost_per_mtok": 0.129, "cost_source": "measured"}
    free = {"id": "vulkan0-31l", "tg_tps": 1.6, "status": "abandoned", "cost_per_mtok": None,
            "cost_source": "none"}  # fmt: skip
    assert bar_text(costed) == "48.4 tok/s · 0.0181 / M tokens (estimated)"
    assert bar_text(metered) == "48.4 tok/s · 0.1290 / M tokens (measured)"
    assert bar_text(free) == "1.6 tok/s"  # no cost: nothing made up
    bars.set_result({"configs": [free], "chosen": {"id": None}})
    narrow = bars.sizeHint().width()
    bars.set_result({"configs": [costed, metered, free], "chosen": {"id": "cpu-1t"}})
    assert [row[3] for row in bars.rows] == [bar_text(c) for c in (costed, metered, free)]
    assert bars.sizeHint().width() > narrow  # room for the cost beside the bars

    # The text is drawn: a cost row paints ink further right than a bar without one.
    def rightmost_ink(config) -> int:
        bars.set_result({"configs": [config], "chosen": {"id": None}})
        bars.resize(bars.sizeHint())
        image = bars.grab().toImage()
        text = QColor(bars.palette().color(QPalette.ColorRole.WindowText)).rgb()
        return max(x for x in range(image.width()) for y in range(image.height())
                   if image.pixelColor(x, y).rgb() == text)  # fmt: skip

    assert rightmost_ink(costed) > rightmost_ink(free | {"tg_tps": 48.4}) + 50


def test_the_cost_column_names_where_the_cost_comes_from(qtbot, dialog):
    config = {"id": "cpu-1t", "backend": "CPU", "device": "CPU", "description": "cpu",
              "n_threads": 1, "n_gpu_layers": 0, "pp_tps": 100.0, "tg_tps": 40.0,
              "ttft_s": 0.5, "score": 50.0, "status": "measured", "abandoned": None,
              "cost_per_mtok": 0.03125, "cost_source": "estimated"}  # fmt: skip
    dialog.show_result({"configs": [config], "chosen": {"id": "cpu-1t", "reason": "fastest"}})
    assert dialog.table.item(0, COLUMNS.index("Cost / M tokens")).text() == "0.0312 (estimated)"
    dialog.show()
    qtbot.waitExposed(dialog)
    # Every column shows, the last one too: it was cut off ("Cost / M t").
    table = dialog.table
    assert table.horizontalHeader().length() <= table.viewport().width()
    assert dialog.depth_chart.points == []  # a result stored before depths were measured


def test_line_points_scale_depth_and_speed_into_the_plot():
    points = line_points([(0, 100.0), (512, 50.0), (1024, 25.0)], 200, 100)
    assert points == [(0.0, 0.0), (100.0, 50.0), (200.0, 75.0)]
    assert line_points([], 200, 100) == []
    assert line_points([(0, 0.0)], 200, 100) == [(0.0, 100.0)]  # nothing divides by zero


def test_the_depth_chart_draws_its_line_in_the_highlight_colour(qtbot):
    chart = DepthChart()
    qtbot.addWidget(chart)
    chart.resize(chart.sizeHint())
    highlight = QColor(chart.palette().color(QPalette.ColorRole.Highlight)).rgb()

    def colours() -> set[int]:
        image = chart.grab().toImage()
        return {image.pixelColor(x, y).rgb() for x in range(image.width())
                for y in range(image.height())}  # fmt: skip

    assert highlight not in colours()  # nothing measured: nothing drawn
    chart.set_result({"chosen": {"id": "cpu-1t"},
                      "depth_tps": [{"depth": 27, "tg_tps": 48.0}, {"depth": 540, "tg_tps": 40.0},
                                    {"depth": 1060, "tg_tps": 33.5}]})  # fmt: skip
    assert highlight in colours()
    # The line falls from the top left to lower right: its first dot sits above its last.
    image = chart.grab().toImage()
    rows_at = {x: [y for y in range(image.height()) if image.pixelColor(x, y).rgb() == highlight]
               for x in range(image.width())}  # fmt: skip
    drawn = [x for x, ys in rows_at.items() if ys]
    left, right = min(drawn), max(drawn)
    assert min(rows_at[left]) < min(rows_at[right])
    assert "cpu-1t" in chart.toolTip()
