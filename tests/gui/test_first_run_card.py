"""The first-run card on the real app: after the starter model loads in a fresh home, one line
from the planner on what this computer can run and a way to the recommended models; gone for
good once closed or once the user chatted."""

from __future__ import annotations

from gui_helpers import REPLY_TIMEOUT_MS, send_and_wait, set_sampling

from deskllm.gui.first_run_card import DONE_KEY, LOOKING


def line_ready(window) -> bool:
    return window.first_run.line.text() != LOOKING


def test_the_card_shows_what_the_machine_runs_and_leads_to_discover(qtbot, make_window):
    window = make_window()
    card = window.first_run
    assert card.isVisible() and card.parentWidget() is not None  # in the chat, not a window
    qtbot.waitUntil(lambda: line_ready(window), timeout=REPLY_TIMEOUT_MS)
    # This machine: the planner's line (a model size and where it runs), or why none fits.
    text = card.line.text()
    assert "parameters at Q4_K_M" in text or text.startswith("Even a 0.5B model"), text
    # ... and the curated catalog's pick, as Discover and `deskllm recommend` make it.
    assert "Recommended from the catalog: " in text or text.startswith("Even a 0.5B"), text
    card.discover_button.click()
    assert window.tabs.currentWidget() is window.models
    assert window.models.tabs.currentWidget() is window.models.discover

    # Chatting ends it, in this window and the next.
    window.tabs.setCurrentWidget(window.chat)
    set_sampling(window, max_tokens=4)
    send_and_wait(qtbot, window, "Hi")
    assert not card.isVisible() and window.gui_state.value(DONE_KEY, type=bool)
    again = make_window()
    assert again.first_run.isHidden()


def test_a_closed_card_never_shows_again(qtbot, make_window):
    window = make_window()
    assert window.first_run.isVisible()
    window.first_run.close_button.click()
    assert window.first_run.isHidden()
    assert not window.store.has_messages()  # closed without chatting
    again = make_window()
    assert again.first_run.isHidden() and again.chat.model_ready
