"""A long prompt in the window: the reply being written shows a bar with the tokens read and
the time left until its first text, and Stop works while it reads (real engine, one thread,
so reading takes seconds)."""

from __future__ import annotations

from gui_helpers import REPLY_TIMEOUT_MS, set_sampling, type_and_send

from deskllm.gui.qt import QApplication

LONG = "Which word comes first? " + " ".join(f"lantern{i % 89}" for i in range(400))


def send_long(qtbot, make_window):
    """A window on one thread with LONG sent; it and the reply once its bar shows."""
    win = make_window(n_ctx=4096, n_threads=1)
    set_sampling(win, temperature=0, max_tokens=8)
    type_and_send(qtbot, win, LONG)
    reply = win.chat.widgets[-1]
    qtbot.waitUntil(reply.progress.isVisible, timeout=REPLY_TIMEOUT_MS)
    return win, reply


def test_the_reply_shows_a_progress_bar_until_its_text(qtbot, make_window):
    win, reply = send_long(qtbot, make_window)
    assert "prompt tokens read" in reply.progress.format()
    # Once some of it is read, the time left too (the first chunk after a load shows 0%
    # until it ends: how far through a step is learned from the step before).
    qtbot.waitUntil(lambda: "left" in reply.progress.format(), timeout=REPLY_TIMEOUT_MS)
    assert 0 < reply.progress.value() < reply.progress.maximum()
    with qtbot.waitSignal(win.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        pass
    QApplication.processEvents()
    reply = win.chat.widgets[-1]
    assert not reply.progress.isVisible()
    assert reply.message.status == "complete" and reply.message.content


def test_stop_while_the_prompt_is_read(qtbot, make_window):
    win, reply = send_long(qtbot, make_window)
    with qtbot.waitSignal(win.bridge.finished, timeout=10_000):
        win.chat.stop_button.click()
    QApplication.processEvents()
    reply = win.chat.widgets[-1]
    assert not reply.progress.isVisible()
    assert reply.message.content == "" and reply.message.status == "interrupted"
    assert reply.note.text().startswith("Stopped before the reply began")
    assert win.chat.send_button.isEnabled()
    # Nothing to continue from: Regenerate only.
    assert reply.regenerate_button.isVisible() and not reply.continue_button.isVisible()
