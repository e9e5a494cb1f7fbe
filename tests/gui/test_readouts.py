"""Live readouts from the real engine's Metrics, and the figures that stay on each reply."""

from __future__ import annotations

import re

from gui_helpers import REPLY_TIMEOUT_MS, send_and_wait, set_sampling, type_and_send

from deskllm.engine.domain import Metrics
from deskllm.gui.readouts import LiveReadouts


def test_readouts_follow_the_reply_and_its_figures_stay_on_the_message(qtbot, window):
    set_sampling(window, max_tokens=120, ignore_eos=True)
    events = []
    window.bridge.metrics.connect(events.append)
    updates_before = window.readouts.updates
    event = send_and_wait(qtbot, window, "Tell me about lighthouses.")
    m = event.metrics
    # Every Metrics event (one per 0.25 s) was shown, then the final figures.
    assert window.readouts.updates - updates_before == len(events) + 1
    points = window.readouts.sparkline.values  # the last `maxlen` speeds (a slow machine: more)
    assert len(points) == min(points.maxlen, len([e for e in events if e.tg_tps]))

    r = window.readouts
    assert re.fullmatch(r"\d+\.\d tok/s", r.speed.text())
    assert r.ttft.text() == f"TTFT {m.ttft_s * 1000:.0f} ms"
    assert re.fullmatch(r"prompt \d+ tok/s", r.prompt_speed.text())
    assert r.cache.text() == f"cached {m.cached_tokens} · evaluated {m.evaluated_tokens}"
    assert (r.context.value(), r.context.maximum()) == (m.n_past, 2048)
    assert r.context.text() == f"context {m.n_past}/2048"
    assert re.fullmatch(r"RAM [\d,]+ MiB", r.ram.text())
    assert r.device.text() == "CPU" and not r.vram.isVisibleTo(r)  # no GPU used here
    # The window's settings fix 2 threads: the readout says so, and that it is fixed.
    assert r.threads.text() == "threads 2/2" and "fixed count" in r.threads.toolTip()

    figures = window.chat.widgets[-1].figures
    assert figures.isVisible() and "120 tokens" in figures.text() and "tok/s" in figures.text()
    assert "Time to first token" in figures.toolTip() and "Engine RAM" in figures.toolTip()


def test_the_second_turn_reads_the_prompt_from_the_cache(qtbot, window):
    set_sampling(window, max_tokens=16)
    send_and_wait(qtbot, window, "Name a colour.")
    event = send_and_wait(qtbot, window, "Name another one.")
    assert event.metrics.cached_tokens > 0
    assert window.readouts.cache.text().startswith(f"cached {event.metrics.cached_tokens} ")


def test_readouts_update_while_the_reply_streams(qtbot, window):
    set_sampling(window, max_tokens=4000, ignore_eos=True)
    type_and_send(qtbot, window, "Write a long story.")
    # At least two updates while it streams (Metrics come every 0.25 s).
    start = window.readouts.updates
    qtbot.waitUntil(lambda: window.readouts.updates >= start + 2, timeout=REPLY_TIMEOUT_MS)
    assert window.chat.busy and "tok/s" in window.readouts.text()
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        window.chat.stop_button.click()


def test_the_threads_readout_says_why_fewer_threads_run(qtbot):
    from deskllm.engine.domain import Metrics
    from deskllm.gui.readouts import LiveReadouts

    readouts = LiveReadouts()
    qtbot.addWidget(readouts)
    reason = "other programs keep 1.8 of the cores busy; 3.1× faster than more"
    readouts.show_metrics(Metrics(request_id=1, tg_tps=30.0, n_threads=1, max_threads=2,
                                  threads_reason=reason))  # fmt: skip
    assert readouts.threads.text() == f"threads 1/2 ({reason})"
    assert "Automatic" in readouts.threads.toolTip() and reason in readouts.threads.toolTip()
    assert f"threads 1/2 ({reason})" in readouts.text()
    readouts.show_metrics(Metrics(request_id=2, tg_tps=80.0, n_threads=2, max_threads=2,
                                  threads_reason="all cores are free"))  # fmt: skip
    assert readouts.threads.text() == "threads 2/2"
    assert "all cores are free" in readouts.threads.toolTip()
    readouts.clear()
    assert readouts.threads.text() == "" and "threads" not in readouts.text()


def test_speculative_decodings_figures_show_only_when_it_drafted(qtbot):
    readouts = LiveReadouts()
    qtbot.addWidget(readouts)
    readouts.show()
    readouts.show_metrics(Metrics(request_id=1, tg_tps=50.0, generated_tokens=40), final=True)
    assert "drafts" not in readouts.text()
    readouts.show_metrics(Metrics(request_id=1, tg_tps=80.0, generated_tokens=40, draft_n=40,
                                  draft_n_accepted=30, draft_passes=10), final=True)  # fmt: skip
    assert "drafts 75% · 4.0 tok/pass" in readouts.text()
