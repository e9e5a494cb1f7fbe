"""The Models panel, first version: installed models, Load / Unload, load progress."""

from __future__ import annotations

from gui_helpers import REPLY_TIMEOUT_MS


def test_unload_and_load_again(qtbot, window):
    panel = window.models
    window.tabs.setCurrentWidget(panel)
    assert panel.list.count() == 1 and "loaded" in panel.list.item(0).text()
    assert panel.unload_button.isEnabled() and not panel.load_button.isEnabled()

    with qtbot.waitSignal(window.bridge.unloaded, timeout=REPLY_TIMEOUT_MS):
        panel.unload_button.click()
    assert "loaded" not in panel.list.item(0).text()
    assert not window.chat.send_button.isEnabled()
    assert "No model loaded" in window.model_label.full_text()

    progress: list[float] = []
    window.bridge.load_progress.connect(progress.append)
    panel.list.setCurrentRow(0)
    with qtbot.waitSignal(window.bridge.loaded, timeout=REPLY_TIMEOUT_MS):
        panel.load_button.click()
        assert panel.progress.isVisible() and not panel.load_button.isEnabled()
    assert progress and all(0.0 <= p <= 1.0 for p in progress)
    assert not panel.progress.isVisible() and "loaded" in panel.list.item(0).text()
    assert window.chat.send_button.isEnabled()
