"""The energy per token in the status bar and under a finished reply: shown once known,
"est." when it comes from the watts entered in settings, absent where nothing measures it."""

from __future__ import annotations

from deskllm.engine.domain import Metrics
from deskllm.gui.chat_render import metrics_details, metrics_line
from deskllm.gui.readouts import LiveReadouts

MEASURED = Metrics(request_id=1, generated_tokens=80, tg_tps=20.0, joules=46.0,
                   joules_per_token=0.5, watts_prompt=12.0, watts_decode=20.0,
                   energy_source="rapl")  # fmt: skip


def test_the_status_bar_shows_joules_per_token_once_the_reply_is_done(qtbot):
    readouts = LiveReadouts()
    qtbot.addWidget(readouts)
    readouts.show_metrics(Metrics(request_id=1, generated_tokens=10, tg_tps=20.0))
    assert "J/token" not in readouts.text()  # while it streams: not known yet

    readouts.show_metrics(MEASURED, final=True)
    assert readouts.text().endswith(" · 0.5 J/token")

    estimated = {"joules_per_token": 0.0123, "energy_source": "estimated", "tg_tps": 9.0}
    readouts.show_metrics(estimated, final=True)  # a stored reply's dict
    assert readouts.text().endswith(" · 0.0123 J/token est.")

    readouts.clear()
    readouts.show_metrics(Metrics(request_id=2, generated_tokens=5, tg_tps=20.0), final=True)
    assert "J/token" not in readouts.text()  # no sensor, no watts figure: nothing made up


def test_a_replys_figures_line_and_details_carry_its_energy():
    line = metrics_line({"generated_tokens": 80, "joules_per_token": 0.5,
                         "energy_source": "rapl"})  # fmt: skip
    assert line == "80 tokens · 0.5 J/token"
    details = metrics_details({"joules": 46.0, "joules_per_token": 0.5, "watts_prompt": 12.0,
                               "watts_decode": 20.0, "energy_source": "rapl+nvml"})  # fmt: skip
    assert "Energy: 46 J (measured, rapl+nvml)" in details
    assert "power prompt / decode: 12.0 W / 20.0 W" in details
    estimated = metrics_details({"joules": 90.0, "joules_per_token": 1.5, "watts_prompt": 30.0,
                                 "watts_decode": 30.0, "energy_source": "estimated"})  # fmt: skip
    assert "Energy: 90 J (estimated from the watts in settings)" in estimated
    assert "1.5 J/token est." in estimated
    assert "Energy" not in metrics_details({"generated_tokens": 3})
