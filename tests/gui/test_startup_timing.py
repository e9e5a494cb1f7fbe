"""The launch-to-window time the app logs (bench/startup.py reads it from the frozen app)."""

from __future__ import annotations

import logging

from deskllm.gui.qt import QWidget
from deskllm.gui.startup_timing import FirstExpose, seconds_since_launch


def test_the_first_expose_is_logged_once_with_the_process_age(qtbot, caplog):
    widget = QWidget()
    qtbot.addWidget(widget)
    before = seconds_since_launch()
    with caplog.at_level(logging.INFO, logger="deskllm.app"):
        timing = FirstExpose(widget)
        assert timing.seconds is None
        widget.show()
        qtbot.waitUntil(lambda: timing.seconds is not None)
        first = timing.seconds
        widget.hide()
        widget.show()  # exposed again: not logged again
        qtbot.wait(50)
    assert timing.seconds == first
    # The age of this very process (it started before this test), not a time since show().
    assert before <= first <= seconds_since_launch()
    messages = [r.getMessage() for r in caplog.records if "window visible" in r.getMessage()]
    assert messages == [f"window visible {timing.seconds:.2f} s after launch"]
