"""The chat view on the real engine: one widget per message, throttled streaming that touches
only the reply being written, stop / continue / regenerate / edit and resend, copying."""

from __future__ import annotations

import time

from gui_helpers import REPLY_TIMEOUT_MS, send_and_wait, set_sampling, type_and_send

from deskllm.gui.chat_panel import REPAINT_INTERVAL_MS
from deskllm.gui.qt import QApplication, QFontInfo, Qt

CODE_REPLY = "Here it is:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\nDone."


def _seed(window) -> None:
    """Two stored turns (one with a code block), shown in the chat."""
    cid = window.chat.conversation_id
    window.store.add_message(cid, "user", "Show me an add function.")
    window.store.add_message(cid, "assistant", CODE_REPLY)
    window.chat.show_conversation(cid)


def test_streaming_rerenders_only_the_reply_and_at_a_bounded_rate(qtbot, window):
    _seed(window)
    old = list(window.chat.widgets)
    revisions = [w.revision for w in old]
    set_sampling(window, max_tokens=200, ignore_eos=True)
    deltas: list[str] = []
    window.bridge.delta.connect(lambda _cid, text: deltas.append(text))
    start = time.monotonic()
    event = send_and_wait(qtbot, window, "Tell me a long story about a lighthouse.")
    elapsed_ms = (time.monotonic() - start) * 1000
    assert event.metrics.generated_tokens == 200

    assert [w.revision for w in old] == revisions  # earlier messages were never re-rendered
    assert all(w in window.chat.widgets for w in old)
    user, reply = window.chat.widgets[-2:]
    assert user.revision == 1  # rendered once, when sent
    # Several renders while it streamed, never more than the tokens nor the frame budget.
    assert 2 <= reply.revision <= len(deltas) + 1
    assert reply.revision <= elapsed_ms / REPAINT_INTERVAL_MS + 3
    assert reply.message.content == "".join(deltas) and reply.message.status == "complete"


def test_a_burst_of_tokens_is_one_repaint(qtbot, window):
    set_sampling(window, max_tokens=2000, ignore_eos=True)
    type_and_send(qtbot, window, "Write a long poem.")
    reply = window.chat.widgets[-1]
    qtbot.waitUntil(lambda: reply.revision >= 3, timeout=REPLY_TIMEOUT_MS)  # streaming
    before = reply.revision
    # 500 chunks within one pass of the GUI thread (no event loop between them): at most one
    # render now; the rest is merged into one render at the end of the interval.
    for _ in range(500):
        window.bridge.delta.emit(window.chat.conversation_id, " x")
    assert reply.revision - before <= 1
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        window.chat.stop_button.click()


def test_code_blocks_are_monospace_and_copyable(qtbot, window):
    _seed(window)
    reply = window.chat.widgets[1]
    (code,) = reply.code_blocks()
    assert code.block.text == "def add(a, b):\n    return a + b" and code.block.lang == "python"
    assert QFontInfo(code.text.font()).fixedPitch()
    assert "Here it is:" in reply.plain_text() and "Done." in reply.plain_text()
    code.copy_button.click()
    assert QApplication.clipboard().text() == "def add(a, b):\n    return a + b"
    reply.copy_button.click()
    assert QApplication.clipboard().text() == CODE_REPLY


def test_escape_stops_and_the_interrupted_reply_can_be_continued(qtbot, window):
    set_sampling(window, max_tokens=4000, ignore_eos=True)
    got: list[str] = []
    window.bridge.delta.connect(lambda _cid, text: got.append(text))
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, window, "Write a very long story.")
        qtbot.waitUntil(lambda: len(got) >= 5, timeout=REPLY_TIMEOUT_MS)
        qtbot.keyClick(window, Qt.Key.Key_Escape)
    stopped = window.store.messages(window.chat.conversation_id)[-1]
    assert stopped.status == "interrupted" and stopped.content == "".join(got)
    assert stopped.metrics["finish_reason"] == "cancelled"
    widget = window.chat.widgets[-1]
    # The user's own stop says so; "Interrupted" is for crashes.
    assert widget.note.isVisible() and widget.note.text().startswith("Stopped: you stopped")
    assert widget.continue_button.isVisible() and widget.regenerate_button.isVisible()

    # Continue extends the same message, in the same bubble: no "Continue" user message.
    set_sampling(window, max_tokens=8, ignore_eos=True)
    more: list[str] = []
    window.bridge.delta.connect(lambda _cid, text: more.append(text))
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        widget.continue_button.click()
        assert not widget.note.isVisible()  # streaming again: the interrupted note is gone
    messages = window.store.messages(window.chat.conversation_id)
    assert [(m.role, m.status) for m in messages] == [
        ("user", "complete"), ("assistant", "complete")]  # fmt: skip
    grown = messages[-1]
    assert grown.id == stopped.id and more
    assert grown.content == stopped.content + "".join(more)
    assert len(grown.content) > len(stopped.content)
    assert grown.metrics["continued"] == 1
    assert grown.metrics["generated_tokens"] == stopped.metrics["generated_tokens"] + 8
    assert window.chat.widgets[-1] is widget and len(window.chat.widgets) == 2
    assert widget.message.id == stopped.id and widget.message.status == "complete"
    widget.copy_button.click()  # copies the text the bubble shows
    assert QApplication.clipboard().text() == grown.content
    assert not widget.continue_button.isVisible() and not widget.note.isVisible()


def test_an_interrupted_reply_can_be_regenerated_in_place(qtbot, window):
    set_sampling(window, max_tokens=4000, ignore_eos=True)
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, window, "Write a very long story.")
        qtbot.waitUntil(lambda: window.chat.widgets[-1].revision >= 2, timeout=REPLY_TIMEOUT_MS)
        window.chat.stop_button.click()
    set_sampling(window, max_tokens=8)
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        window.chat.widgets[-1].regenerate_button.click()
    messages = window.store.messages(window.chat.conversation_id)
    assert [(m.role, m.status) for m in messages] == [("user", "complete"),
                                                      ("assistant", "complete")]  # fmt: skip
    assert not window.chat.widgets[-1].note.isVisible()


def test_regenerate_replaces_the_last_reply(qtbot, window):
    set_sampling(window, max_tokens=16)
    send_and_wait(qtbot, window, "Say hi.")
    first = window.store.messages(window.chat.conversation_id)[-1]
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        window.chat.regenerate_button.click()
    messages = window.store.messages(window.chat.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[-1].created_at > first.created_at and messages[-1].status == "complete"
    assert [w.message.id for w in window.chat.widgets] == [m.id for m in messages]


def test_edit_and_resend_replaces_the_message_and_what_followed(qtbot, window):
    set_sampling(window, max_tokens=16)
    send_and_wait(qtbot, window, "Say hi.")
    send_and_wait(qtbot, window, "Now say bye.")
    first_user = window.chat.widgets[0]
    first_user.edit_button.click()
    assert window.chat.input.toPlainText() == "Say hi." and window.chat.edit_banner.isVisible()
    window.chat.input.setPlainText("Say hello.")
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    messages = window.store.messages(window.chat.conversation_id)
    assert [(m.role, m.content) for m in messages][:1] == [("user", "Say hello.")]
    assert [m.role for m in messages] == ["user", "assistant"]
    assert not window.chat.edit_banner.isVisible()
    assert [w.message.id for w in window.chat.widgets] == [m.id for m in messages]


def test_cancelled_edit_changes_nothing(qtbot, window):
    _seed(window)
    window.chat.widgets[0].edit_button.click()
    window.chat.cancel_edit_button.click()
    assert window.chat.input.toPlainText() == "" and not window.chat.edit_banner.isVisible()
    assert len(window.store.messages(window.chat.conversation_id)) == 2
