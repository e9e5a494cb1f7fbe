"""The main window on real Qt widgets (offscreen) and the real engine: first start, sending,
keys, window state."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gui_helpers import listed, send_and_wait, type_and_send

from deskllm.gui.main_window import MainWindow
from deskllm.gui.qt import QApplication, Qt


def test_first_start_opens_a_new_conversation_ready_to_send(window, starter_model):
    assert window.sidebar.list.count() == 1
    conversation = window.store.get(window.chat.conversation_id)
    assert conversation.title == "New chat"
    assert Path(conversation.model).resolve() == starter_model.resolve()  # installed, selected
    assert window.chat.send_button.isEnabled()
    assert "context 2048" in window.model_label.full_text()
    # The loaded model is named once in the chat's header: on its model button.
    assert "SmolLM2" in window.chat.model_button.text()
    assert starter_model.name not in window.chat.details.full_text()
    assert window.tabs.currentWidget() is window.chat
    assert window.chat.empty_label.isVisible()
    models = [window.models.list.item(i).text() for i in range(window.models.list.count())]
    assert len(models) == 1 and "SmolLM2" in models[0] and "loaded" in models[0]


def test_the_first_window_fits_the_screen_it_opens_on(window):
    room = window.screen().availableGeometry()
    line = window.fontMetrics().height()
    # Most of the screen, at least 70 × 45 lines where there is room, never past the screen.
    assert window.width() == min(max(room.width() * 3 // 4, 70 * line), room.width())
    assert window.height() == min(max(room.height() * 4 // 5, 45 * line), room.height())
    assert room.contains(window.geometry().center())


def test_a_chat_template_that_was_not_used_is_said_above_the_chat(
    qtbot, window, tmp_path, starter_model
):
    from engine_helpers import BROKEN_TEMPLATE, with_template
    from gui_helpers import REPLY_TIMEOUT_MS

    broken = with_template(starter_model, tmp_path / "broken.gguf", BROKEN_TEMPLATE)
    with qtbot.waitSignal(window.bridge.loaded, timeout=REPLY_TIMEOUT_MS):
        window.load_model(str(broken))
    note = window.template_note
    assert note.isVisible(), "only in a tooltip"
    assert "chat template does not compile" in note.text() and "ChatML" in note.text()
    assert "Replies may be worse" in note.text()
    with qtbot.waitSignal(window.bridge.loaded, timeout=REPLY_TIMEOUT_MS):
        window.load_model(str(starter_model))
    assert not note.isVisible()


def test_the_models_hint_points_to_the_panel_and_stays_dismissed(qtbot, window, gui_state):
    assert window.hint.isVisible() and "Models" in window.hint.label.text()
    window.hint.label.linkActivated.emit("models")
    assert window.tabs.currentWidget() is window.models
    window.hint.close_button.click()
    assert not window.hint.isVisible()
    again = MainWindow(window.store, window.bridge, window.model_path, gui_state())
    qtbot.addWidget(again)
    assert again.hint.dismissed() and not again.hint.isVisibleTo(again)


def test_enter_sends_and_the_reply_is_streamed_and_stored(qtbot, window):
    deltas: list[str] = []
    window.bridge.delta.connect(lambda _cid, text: deltas.append(text))
    with qtbot.waitSignal(window.bridge.finished, timeout=120_000):
        type_and_send(qtbot, window, "What is two plus two?")
        assert window.chat.stop_button.isEnabled()
        assert not window.chat.send_button.isEnabled()
    messages = window.store.messages(window.chat.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == "What is two plus two?"
    assert messages[1].status == "complete" and messages[1].content == "".join(deltas)
    assert messages[1].metrics["generated_tokens"] > 0
    widgets = window.chat.widgets
    assert [w.message.id for w in widgets] == [m.id for m in messages]
    assert "What is two plus two?" in widgets[0].plain_text()
    assert messages[1].content.strip().splitlines()[0][:20] in widgets[1].plain_text()
    assert "tok/s" in widgets[1].figures.text()
    listed(qtbot, window)
    assert window.sidebar.list.currentItem().text() == "What is two plus two?"
    assert window.chat.title.full_text() == "What is two plus two?"
    assert window.chat.input.toPlainText() == ""
    assert window.chat.send_button.isEnabled() and not window.chat.stop_button.isEnabled()
    # No widget flashed up as a window of its own and took the focus (shortcuts need it).
    assert [w for w in QApplication.topLevelWidgets() if w.isVisible()] == [window]
    assert QApplication.focusWindow() is window.windowHandle()


def test_shift_enter_adds_a_line_instead_of_sending(qtbot, window):
    window.chat.input.setPlainText("first line")
    window.chat.input.moveCursor(window.chat.input.textCursor().MoveOperation.End)
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert window.chat.input.toPlainText() == "first line\n"
    assert window.store.messages(window.chat.conversation_id) == []
    small = window.chat.input.sizeHint().height()
    window.chat.input.setPlainText("\n".join(["line"] * 6))
    assert window.chat.input.sizeHint().height() > small  # the box grows with its text


def test_geometry_splitter_tab_and_last_conversation_are_restored(qtbot, window, gui_state):
    window.sidebar.new_button.click()
    chosen = window.chat.conversation_id
    window.resize(760, 540)  # the offscreen screen is 800 px wide
    window.splitter.setSizes([200, 560])
    sizes = window.splitter.sizes()
    window.tabs.setCurrentWidget(window.models)
    window.close()
    again = MainWindow(window.store, window.bridge, window.model_path, gui_state())
    qtbot.addWidget(again)
    again.show()
    assert again.chat.conversation_id == chosen
    listed(qtbot, again)
    assert again.sidebar.current_id() == chosen
    assert (again.width(), again.height()) == (760, 540)
    assert again.splitter.sizes() == sizes
    assert again.tabs.currentWidget() is again.models


def test_gui_loads_record_calibration_and_the_next_load_applies_it(qtbot, window):
    """The window's load went through the loader with the app's database: it was recorded,
    and the next load is planned with that record."""
    db = window.store.db
    assert db["calibration"].count == 1
    assert window.bridge.loader.last_check.corrections.samples == 0
    with qtbot.waitSignal(window.bridge.loaded, timeout=120_000):
        window.load_model()
    assert db["calibration"].count == 2
    assert window.bridge.loader.last_check.corrections.samples == 1


def test_restart_engine_gives_a_fresh_engine_with_the_same_model(qtbot, window):
    first_pid = window.bridge.client.pid
    ended: list = []  # what the restart ended with: loaded, or why it failed (said, not hung)
    window.bridge.loaded.connect(ended.append)
    window.bridge.load_failed.connect(ended.append)
    window.restart_engine()
    assert not window.chat.send_button.isEnabled()  # no sending while it restarts
    qtbot.waitUntil(lambda: bool(ended), timeout=120_000)
    window.bridge.loaded.disconnect(ended.append)
    window.bridge.load_failed.disconnect(ended.append)
    assert not isinstance(ended[0], str), ended[0]
    assert window.bridge.client.pid not in (None, first_pid)
    assert ended[0].model_path == window.model_path
    assert "context 2048" in window.model_label.full_text()


def test_a_model_file_that_cannot_be_read_is_a_message_not_a_dead_thread(
    qtbot, window, tmp_path
):
    """Every load failure, whatever raised it, reaches the window as words naming the file;
    the engine thread goes on serving the next load."""
    from gguf import GGUFWriter

    path = tmp_path / "odd-alignment.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_string("general.alignment", "thirty-two")  # a number is expected
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    with qtbot.waitSignal(window.bridge.load_failed, timeout=60_000) as failed:
        window.load_model(str(path))
    assert "odd-alignment.gguf" in failed.args[0] and "general.alignment" in failed.args[0]
    assert "No model loaded" in window.model_label.full_text()
    with qtbot.waitSignal(window.bridge.loaded, timeout=120_000):
        window.load_model(str(window.library.resolve(None)))


def test_the_readouts_clear_once_the_model_is_unloaded_and_a_saved_settings_note_expires(
        qtbot, window, monkeypatch):  # fmt: skip
    send_and_wait(qtbot, window, "Hello.")
    qtbot.waitUntil(lambda: window.readouts.ram.text() != "RAM –", timeout=10_000)
    with qtbot.waitSignal(window.bridge.unloaded, timeout=60_000):
        window.bridge.unload()
    assert window.readouts.ram.text() == "RAM –"  # no figures of a model no longer there
    assert window.readouts.speed.text() == "– tok/s"
    # "Settings saved." is a passing note, not a state: it leaves the status bar by itself.
    monkeypatch.setattr("deskllm.gui.main_window.SETTINGS_NOTE_MS", 300)
    window.apply_settings(replace(window.settings, tool_steps=9))
    assert window.statusBar().currentMessage() == "Settings saved."
    qtbot.waitUntil(lambda: window.statusBar().currentMessage() == "", timeout=5_000)
