"""The Usage view (View → Usage…) on real stored rows, offscreen: tokens and cost per day and
per model, local against remote, the router's share, the period picker, and the chart's
stacked bars painted in both colours."""

from __future__ import annotations

import pytest
from usage_helpers import MODEL, TARIFF, WATTS, kwh_cost, seed

from deskllm.database import open_database
from deskllm.gui.qt import QPoint
from deskllm.gui.settings_dialog import SettingsDialog
from deskllm.gui.usage_chart import UsageChart, local_colour, remote_colour
from deskllm.gui.usage_dialog import PERIODS, UsageDialog
from deskllm.hardware.energy_cost import LocalCostRates
from deskllm.loader.params import cost_rates_from_settings
from deskllm.settings import Settings
from deskllm.store.usage import DayTokens

RATES = LocalCostRates(tariff_per_kwh=TARIFF, estimated_watts=WATTS)


@pytest.fixture
def seeded(tmp_path):
    path = tmp_path / "store.sqlite3"
    db = open_database(path)
    days = seed(db)
    db.close()
    return path, days


def cells(table) -> list[list[str]]:
    return [[table.item(r, c).text() for c in range(table.columnCount())]
            for r in range(table.rowCount())]  # fmt: skip


def colour_count(image, colour) -> int:
    want = colour.rgb()
    return sum(image.pixelColor(x, y).rgb() == want
               for x in range(image.width()) for y in range(image.height()))  # fmt: skip


def test_the_view_shows_each_day_model_and_cost_source(qtbot, seeded):
    path, days = seeded
    rates = [RATES]
    dialog = UsageDialog(path, lambda: rates[0])
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.report is not None, timeout=10_000)
    assert dialog.period.currentText() == "Last 30 days"  # the old reply is left out
    rows = cells(dialog.per_day)
    assert [r[0] for r in rows] == [days.first] * 3 + [days.second] * 2
    measured = next(r for r in rows if r[0] == days.first and r[8].startswith("measured"))
    assert measured[1:6] == ["local", MODEL, "2", "150", "75"]
    assert measured[6] == f"{kwh_cost(10800):.6f}"  # below a cent: 6 decimals
    estimated = next(r for r in rows if r[8].startswith("estimated"))
    assert estimated[6] == f"{kwh_cost(1800 + WATTS * 13):.6f}"
    unpriced = next(r for r in rows if r[8] == "not priced")
    assert unpriced[3] == "1" and unpriced[6] == "—"
    remote = next(r for r in rows if r[1] == "desk")
    assert remote[2] == "big" and remote[6] == "0.003500" and remote[8] == "endpoint price"
    by_model = cells(dialog.per_model)
    assert len(by_model) == 4
    measured_total = next(r for r in by_model if r[7].startswith("measured"))
    assert measured_total[:3] == ["local", MODEL, "3"]
    summary = dialog.summary.text()
    assert "Local: 6 replies" in summary
    assert "Remote: 1 reply, 1,100 tokens, cost 0.003500" in summary
    assert "the router kept 50% of its replies local" in summary
    # The period's whole time axis (30 days to today), the days with replies among them.
    chart_days = dialog.chart.days
    assert len(chart_days) == 30 and chart_days[0].day == dialog.since_day()
    busy = [d for d in chart_days if d.local or d.remote]
    assert busy == [DayTokens(days.first, 301, 0), DayTokens(days.second, 40, 1100)]

    with qtbot.waitSignal(dialog.refreshed, timeout=10_000):
        dialog.period.setCurrentIndex([p[0] for p in PERIODS].index("Everything"))
    assert cells(dialog.per_day)[0][0] == days.old
    with qtbot.waitSignal(dialog.refreshed, timeout=10_000):
        dialog.period.setCurrentIndex([p[0] for p in PERIODS].index("Since a date"))
    assert dialog.since.isEnabled()
    # No tariff: no local cost at all, and the note says which setting prices them.
    rates[0] = LocalCostRates()
    with qtbot.waitSignal(dialog.refreshed, timeout=10_000):
        dialog.refresh()
    assert all(r[6] == "—" for r in cells(dialog.per_day) if r[1] == "local")
    assert dialog.note.isVisible() and "electricity price per kWh" in dialog.note.text()
    with qtbot.waitSignal(dialog.settings_requested, timeout=1000):
        dialog.note.linkActivated.emit("settings")
    dialog.close()


def test_settings_has_the_fields_usage_prices_with(qtbot):
    dialog = SettingsDialog(Settings())
    qtbot.addWidget(dialog)
    for name in ("electricity_price_per_kwh", "energy_watts", "hardware_cost", "hardware_hours"):
        assert dialog.widgets[name].specialValueText() not in ("", None), name
    dialog.set_value("electricity_price_per_kwh", 0.3)
    dialog.set_value("hardware_cost", 1200.0)
    dialog.set_value("hardware_hours", 6000)
    edited = dialog.edited()
    assert (edited.electricity_price_per_kwh, edited.hardware_cost) == (0.3, 1200.0)
    assert cost_rates_from_settings(edited) == LocalCostRates(0.3, 0.0, 0.2)


def test_the_chart_stacks_local_and_remote_tokens(qtbot):
    chart = UsageChart()
    qtbot.addWidget(chart)
    chart.resize(320, 160)
    chart.show()
    qtbot.waitExposed(chart)
    chart.set_days([DayTokens("2026-01-01", 300, 0), DayTokens("2026-01-02", 100, 300)])
    image = chart.grab().toImage()
    local, remote = local_colour(chart.palette()), remote_colour(chart.palette())
    assert local.rgb() != remote.rgb()
    local_px, remote_px = colour_count(image, local), colour_count(image, remote)
    assert local_px > 1000 and remote_px > 1000  # the bars, beyond the legend's squares
    # The second day's local part lies under its remote part, in the right half.
    column = [image.pixelColor(240, y).rgb() for y in range(image.height())]
    assert local.rgb() in column and remote.rgb() in column
    assert column.index(remote.rgb()) < column.index(local.rgb())
    qtbot.mouseMove(chart, QPoint(240, 100))  # over the second day's bar
    assert chart.toolTip() == "2026-01-02: 100 tokens local, 300 remote"
    assert chart.day_at(40) == DayTokens("2026-01-01", 300, 0)
    chart.set_days([])
    empty = chart.grab().toImage()
    assert colour_count(empty, remote) < 200  # the legend only


def test_view_menu_opens_usage_on_the_window_database(qtbot, make_window, deskllm_home):
    db = open_database()
    days = seed(db)
    db.close()
    window = make_window(electricity_price_per_kwh=TARIFF, energy_watts=int(WATTS))
    [action] = [a for a in window.menuBar().actions() if a.text() == "&View"]
    [usage_action] = [a for a in action.menu().actions() if a.text() == "&Usage…"]
    usage_action.trigger()
    dialog = window.usage_dialog
    qtbot.waitUntil(lambda: dialog.report is not None, timeout=10_000)
    sources = {r.cost_source for r in dialog.report.rows if r.day == days.first}
    assert sources == {"measured", "estimated", "none"}  # the settings' tariff and watts
    dialog.close()
