"""Per conversation: system prompt, sampling and model, stored and used by the real engine;
the note when old turns were left out to fit a small context."""

from __future__ import annotations

from pathlib import Path

from gui_helpers import REPLY_TIMEOUT_MS, send_and_wait

from deskllm.gui.qt import QDialogButtonBox


def _open_settings(window):
    window.chat.settings_button.click()
    dialog = window.chat.settings_dialog
    assert dialog is not None and dialog.isVisible()
    return dialog


def _ok(dialog) -> None:
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()


def test_sampling_and_system_prompt_are_stored_and_used(qtbot, window):
    dialog = _open_settings(window)
    dialog.system_prompt.setPlainText("You answer in one word.")
    dialog.fields["max_tokens"].setValue(5)
    dialog.fields["temperature"].setValue(0.0)
    dialog.fields["seed"].setValue(42)
    _ok(dialog)
    conversation = window.store.get(window.chat.conversation_id)
    assert conversation.system_prompt == "You answer in one word."
    assert conversation.sampling["max_tokens"] == 5 and conversation.sampling["seed"] == 42
    assert "system prompt set" in window.chat.details.full_text()

    event = send_and_wait(qtbot, window, "Write an essay about the sea.")
    assert event.finish_reason == "length" and event.metrics.generated_tokens == 5
    reply = window.store.messages(window.chat.conversation_id)[-1]
    assert reply.metrics["generated_tokens"] == 5
    assert reply.sampling["max_tokens"] == 5 and reply.sampling["temperature"] == 0.0

    again = _open_settings(window)  # the dialog shows what is stored
    assert again.fields["max_tokens"].value() == 5
    assert again.system_prompt.toPlainText() == "You answer in one word."
    assert again.think.currentData() is None  # the model's default
    again.think.setCurrentIndex(again.think.findData("off"))
    again.fields["reasoning_budget"].setValue(512)
    _ok(again)
    sampling = window.store.get(window.chat.conversation_id).sampling
    assert sampling["think"] == "off" and sampling["reasoning_budget"] == 512
    third = _open_settings(window)
    assert third.think.currentText() == "Off"
    third.reject()


def test_restore_defaults_and_cancel(qtbot, window):
    window.store.update(window.chat.conversation_id, sampling={"max_tokens": 9, "top_k": 3})
    dialog = _open_settings(window)
    dialog.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults).click()
    assert dialog.fields["max_tokens"].value() == 512 and dialog.fields["top_k"].value() == 40
    dialog.reject()
    assert window.store.get(window.chat.conversation_id).sampling == {"max_tokens": 9, "top_k": 3}


def test_a_chat_uses_its_own_model(qtbot, window, copy_model):
    other = copy_model("other-model.gguf")
    window.library.add(other, name="Other model")
    dialog = _open_settings(window)
    index = dialog.model.findData(str(other.resolve()))
    assert index >= 0
    dialog.model.setCurrentIndex(index)
    dialog.fields["max_tokens"].setValue(4)
    _ok(dialog)
    assert window.store.get(window.chat.conversation_id).model == str(other.resolve())
    assert "other-model.gguf" in window.chat.details.full_text()

    with (
        qtbot.waitSignal(window.bridge.loaded, timeout=REPLY_TIMEOUT_MS) as loaded,
        qtbot.waitSignal(window.bridge.finished, timeout=REPLY_TIMEOUT_MS),
    ):
        window.chat.input.setPlainText("Hello")
        window.chat.send_button.click()
    assert Path(loaded.args[0].model_path).resolve() == other.resolve()
    reply = window.store.messages(window.chat.conversation_id)[-1]
    assert reply.status == "complete" and Path(reply.model).resolve() == other.resolve()
    assert "other-model.gguf" in window.model_label.full_text()


def test_dropped_turns_are_noted_on_the_reply(qtbot, make_window):
    window = make_window(n_ctx=512)
    cid = window.chat.conversation_id
    filler = " ".join(["The quick brown fox jumps over the lazy dog."] * 25)  # ~250 tokens
    for n in range(3):
        window.store.add_message(cid, "user", f"Story part {n}: {filler}")
        window.store.add_message(cid, "assistant", f"Noted part {n}.")
    window.chat.show_conversation(cid)
    window.store.update(cid, sampling={"max_tokens": 8})
    event = send_and_wait(qtbot, window, "What was the story about?")
    assert event.dropped_messages > 0
    reply = window.chat.widgets[-1]
    assert reply.message.metrics["dropped_messages"] == event.dropped_messages
    assert reply.note.isVisible() and "left out to fit the context" in reply.note.text()
