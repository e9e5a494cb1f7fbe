"""The minimal main window on real Qt widgets (offscreen) and the real engine."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from deskllm.engine.client import EngineClient  # noqa: E402
from deskllm.gui.engine_bridge import EngineBridge  # noqa: E402
from deskllm.gui.main_window import MainWindow  # noqa: E402
from deskllm.gui.qt import QSettings, Qt  # noqa: E402
from deskllm.store import ConversationStore, open_database  # noqa: E402


@pytest.fixture
def window(qtbot, load_params, deskllm_home):
    store = ConversationStore(open_database())
    client = EngineClient()
    bridge = EngineBridge(client, deskllm_home / "deskllm.sqlite3")
    state = QSettings(str(deskllm_home / "gui.ini"), QSettings.Format.IniFormat)
    win = MainWindow(store, bridge, load_params(), state)
    qtbot.addWidget(win)
    win.show()
    with qtbot.waitSignal(bridge.loaded, timeout=60000):
        win.load_model()
    yield win
    bridge.shutdown()


def _send(qtbot, win, text: str) -> None:
    win.input.setPlainText(text)
    qtbot.keyClick(win.input, Qt.Key.Key_Return)


def test_first_start_opens_a_new_conversation_ready_to_send(window):
    assert window.conversation_list.count() == 1
    assert window.conversation_id is not None
    assert window.send_button.isEnabled()
    assert "context 2048" in window.model_label.text()


def test_enter_sends_and_the_reply_is_streamed_and_stored(qtbot, window):
    deltas: list[str] = []
    window.bridge.delta.connect(lambda _cid, text: deltas.append(text))
    with qtbot.waitSignal(window.bridge.finished, timeout=60000):
        _send(qtbot, window, "What is two plus two?")
        assert window.stop_button.isEnabled()
    messages = window.store.messages(window.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == "What is two plus two?"
    assert messages[1].status == "complete" and messages[1].content == "".join(deltas)
    assert messages[1].metrics["generated_tokens"] > 0
    shown = window.chat_view.toPlainText()
    assert "What is two plus two?" in shown
    assert messages[1].content.strip().splitlines()[0][:20] in shown
    assert window.conversation_list.currentItem().text() == "What is two plus two?"
    assert "tok/s" in window.metrics_label.text()
    assert window.input.toPlainText() == ""


def test_shift_enter_adds_a_line_instead_of_sending(qtbot, window):
    window.input.setPlainText("first line")
    window.input.moveCursor(window.input.textCursor().MoveOperation.End)
    qtbot.keyClick(window.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert window.input.toPlainText() == "first line\n"
    assert window.store.messages(window.conversation_id) == []


def test_escape_stops_the_reply_and_keeps_it_marked_interrupted(qtbot, window):
    window.store.update(window.conversation_id, sampling={"max_tokens": 4000,
                                                          "ignore_eos": True})
    got: list[str] = []
    window.bridge.delta.connect(lambda _cid, text: got.append(text))
    with qtbot.waitSignal(window.bridge.finished, timeout=60000):
        _send(qtbot, window, "Write a very long story.")
        qtbot.waitUntil(lambda: len(got) >= 5, timeout=30000)
        qtbot.keyClick(window, Qt.Key.Key_Escape)
    reply = window.store.messages(window.conversation_id)[-1]
    assert reply.status == "interrupted" and reply.content == "".join(got)
    assert reply.metrics["finish_reason"] == "cancelled"
    assert "interrupted" in window.chat_view.toPlainText()


def test_regenerate_replaces_the_last_reply(qtbot, window):
    with qtbot.waitSignal(window.bridge.finished, timeout=60000):
        _send(qtbot, window, "Say hi.")
    first = window.store.messages(window.conversation_id)[-1]
    with qtbot.waitSignal(window.bridge.finished, timeout=60000):
        window.regenerate_button.click()
    messages = window.store.messages(window.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[-1].created_at > first.created_at and messages[-1].status == "complete"


def test_delete_asks_first(qtbot, window, monkeypatch):
    from deskllm.gui.qt import QMessageBox

    monkeypatch.setattr(QMessageBox, "question",
                        lambda *a, **k: QMessageBox.StandardButton.No)
    window.delete_button.click()
    assert len(window.store.list()) == 1
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *a, **k: QMessageBox.StandardButton.Yes)
    old = window.conversation_id
    window.delete_button.click()
    conversations = window.store.list()
    assert len(conversations) == 1 and conversations[0].id != old  # a fresh one replaces it


def test_geometry_and_last_conversation_are_restored(qtbot, window, deskllm_home):
    window.new_button.click()
    chosen = window.conversation_id
    window.resize(700, 520)
    window.close()
    state = QSettings(str(deskllm_home / "gui.ini"), QSettings.Format.IniFormat)
    again = MainWindow(window.store, window.bridge, window.load_params, state)
    qtbot.addWidget(again)
    assert again.conversation_id == chosen
    assert (again.width(), again.height()) == (700, 520)
