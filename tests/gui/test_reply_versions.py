"""Reply versions and branches in the real window: Regenerate keeps the earlier reply as a
version (‹ 1/2 ›), editing a message starts a branch beside the old one, both navigable and
stored; a message can be deleted (asked first); export writes the branch shown; the KV state
follows the branch shown."""

from __future__ import annotations

from gui_helpers import REPLY_TIMEOUT_MS, send_and_wait, set_sampling

from deskllm.gui.qt import QApplication, QMessageBox
from deskllm.store.export import conversation_markdown


def shown(window) -> list[tuple[str, str]]:
    return [(w.message.role, w.message.content) for w in window.chat.widgets]


def version_of(widget) -> str:
    return "" if widget.version_label.isHidden() else widget.version_label.text()


def last_figures(window, cid: int) -> dict:
    """The figures stored with the last message of the branch shown."""
    return window.store.messages(cid)[-1].metrics


def wait_reply(qtbot, window, action) -> None:
    with qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS):
        action()
    QApplication.processEvents()


def test_regenerate_keeps_versions_and_an_edit_starts_a_branch(qtbot, window, monkeypatch):
    chat, store = window.chat, window.store
    set_sampling(window, max_tokens=6, temperature=1.0, seed=-1)
    send_and_wait(qtbot, window, "Name a colour.")
    QApplication.processEvents()
    first = shown(window)
    wait_reply(qtbot, window, chat.regenerate_button.click)
    reply = chat.widgets[-1]
    assert version_of(reply) == "2/2" and not reply.next_version.isEnabled()
    second = shown(window)
    assert len(second) == 2 and second[0] == first[0]

    reply.previous_version.click()  # ‹: the first reply again, stored as shown
    assert shown(window) == first and version_of(chat.widgets[-1]) == "1/2"
    assert [m.content for m in store.messages(chat.conversation_id)] == [c for _, c in first]

    # Editing the question starts a branch; the old one keeps its two replies.
    chat.edit_message(chat.widgets[0].message)
    chat.input.setPlainText("Name an animal.")
    wait_reply(qtbot, window, chat.send_button.click)
    assert shown(window)[0] == ("user", "Name an animal.")
    assert version_of(chat.widgets[0]) == "2/2" and version_of(chat.widgets[-1]) == ""
    cid = chat.conversation_id
    exported = conversation_markdown(store, cid)
    body = exported.split("## You", 1)[1]  # (the title stays the first question)
    assert "Name an animal." in body and "Name a colour." not in body
    chat.widgets[0].previous_version.click()  # the old branch, at its newest reply
    assert shown(window) == second and version_of(chat.widgets[-1]) == "2/2"

    # Delete asks first; No keeps it, Yes deletes the reply and shows its other version.
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.No)
    chat.widgets[-1].delete_button.click()
    assert shown(window) == second
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    chat.widgets[-1].delete_button.click()
    assert shown(window) == first and version_of(chat.widgets[-1]) == ""
    # The branch shown is stored: the chat opens on it again.
    chat.show_conversation(None)
    chat.show_conversation(cid)
    assert shown(window) == first and version_of(chat.widgets[0]) == "1/2"


def test_the_kv_state_follows_the_branch_shown(qtbot, window):
    """A conversation's cells are reused only where the branch shown agrees with them: on the
    branch just written the whole history is cached; shown the other branch again (after
    another chat took the engine's slot, so the state comes back from the state cache), only
    the prefix the two branches share is restored, and the rest of the branch shown is read."""
    chat = window.chat
    set_sampling(window, max_tokens=4, temperature=0.0)
    send_and_wait(qtbot, window, "Name a colour.")
    chat.edit_message(chat.widgets[0].message)
    chat.input.setPlainText("Name an animal.")
    wait_reply(qtbot, window, chat.send_button.click)
    cid = chat.conversation_id
    first_b = last_figures(window, cid)
    send_and_wait(qtbot, window, "And another one?")
    follow_b = last_figures(window, cid)
    # On the branch shown, everything before the new question was cached.
    assert follow_b["cached_tokens"] > first_b["prompt_tokens"]

    window.new_conversation()  # another chat takes the slot: the first one's state is saved
    send_and_wait(qtbot, window, "Hello.")
    chat.show_conversation(cid)
    chat.widgets[0].previous_version.click()  # "Name a colour." and its reply
    assert shown(window)[0] == ("user", "Name a colour.") and len(shown(window)) == 2
    first_a = last_figures(window, cid)
    send_and_wait(qtbot, window, "And another one?")
    follow_a = last_figures(window, cid)
    assert follow_a["restored_from"]  # the saved state of the other branch
    # Only the two branches' common prefix (it ends inside the first question) is reused:
    # the branch shown is read from there, its reply included.
    assert 0 < follow_a["cached_tokens"] < first_a["prompt_tokens"]
    assert follow_a["evaluated_tokens"] > follow_a["prompt_tokens"] - first_a["prompt_tokens"]
