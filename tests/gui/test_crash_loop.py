"""A model that keeps killing the engine, in the real window: after CRASH_LIMIT crashes in a
row it is not started again by itself, the window says why and how to retry, and Engine →
Restart engine tries again."""

from __future__ import annotations

import os
import signal

from gui_helpers import REPLY_TIMEOUT_MS, send_and_wait, set_sampling

from deskllm.engine.client import CRASH_LIMIT
from deskllm.engine.domain import Done
from deskllm.engine.errors import ErrorKind


def test_a_model_that_keeps_killing_the_engine_is_not_restarted_and_the_window_says_why(
    qtbot, window
):
    set_sampling(window, max_tokens=64, temperature=0.0)
    bridge = window.bridge

    def kill_on_first_text(_cid: str, _text: str) -> None:
        if bridge.client.pid is not None:
            os.kill(bridge.client.pid, signal.SIGKILL)

    bridge.delta.connect(kill_on_first_text)
    for crash in range(1, CRASH_LIMIT + 1):
        final = send_and_wait(qtbot, window, f"Tell me a story, take {crash}.")
        assert final.kind == ErrorKind.EXITED, final
    bridge.delta.disconnect(kill_on_first_text)
    shown = window.engine_banner.text()
    assert window.engine_banner.isVisible()  # above the chat until resolved, no timeout
    assert f"{CRASH_LIMIT} times in a row" in shown and "Restart engine" in shown, shown

    refused = send_and_wait(qtbot, window, "Hello?")
    assert refused.kind == ErrorKind.CRASH_LOOP and bridge.client.pid is None
    shown = window.engine_banner.text()
    assert "not started again by itself" in shown and "Restart engine" in shown, shown

    with qtbot.waitSignal(bridge.loaded, timeout=REPLY_TIMEOUT_MS):
        window.restart_engine()  # what Engine → Restart engine does
    assert not window.engine_banner.isVisible()  # resolved: the banner is gone
    set_sampling(window, max_tokens=4)
    answered = send_and_wait(qtbot, window, "Hello again")
    assert isinstance(answered, Done), answered
