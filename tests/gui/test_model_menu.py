"""The chat header's model menu on the real engine: installed models with fit badges planned
for this machine, the loaded one checked, and a switch that loads the chosen one (Ctrl+M)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gui_helpers import REPLY_TIMEOUT_MS

from deskllm.gui.model_menu import FIT_BADGES, ModelMenuButton
from deskllm.gui.qt import QKeySequence, Qt
from deskllm.gui.shortcuts_dialog import ShortcutsDialog, key_text

CTRL = Qt.KeyboardModifier.ControlModifier


def badged(button: ModelMenuButton) -> bool:
    return all(any(f"[{b}]" in a.text() for b in FIT_BADGES.values())
               for a in button.model_actions() if a.isEnabled())  # fmt: skip


# A menu popup on the offscreen platform: raise and keyboard grabs are not supported there, and
# the Enter that picks an item closes the menu, so nothing takes that key's release.
@pytest.mark.qt_log_ignore(
    "This plugin does not support (raise|grabbing the keyboard)",
    "Keyboard event not accepted by receiving widget",
)
def test_switching_models_from_the_chat_header(
    qtbot, window, starter_model, quant_ladder, copy_model
):
    other = window.library.add(quant_ladder["Q8_0"])
    gone = window.library.add(copy_model("gone.gguf"))
    Path(gone.path).unlink()  # deleted outside the app: listed, not offered
    starter = str(starter_model.resolve())
    button = window.chat.model_button
    menu = button.menu()
    qtbot.keyClick(window, Qt.Key.Key_M, CTRL)  # Engine → Switch model
    qtbot.waitUntil(menu.isVisible)
    actions = button.model_actions()
    assert [a.data() for a in actions] == [starter, other.path, gone.path]
    assert not actions[2].isEnabled() and actions[2].text().endswith("file missing")
    assert [a.data() for a in actions if a.isChecked()] == [starter]
    assert "Model: " in button.text()
    # Badges come from the planner on a task thread, for each file's own header.
    qtbot.waitUntil(lambda: badged(button), timeout=REPLY_TIMEOUT_MS)
    assert set(button.badges) == {starter, other.path}
    assert all(reason for _badge, reason in button.badges.values())
    tip = actions[1].toolTip()
    assert other.path in tip and button.badges[other.path][1] in tip

    # The keyboard picks the other model: the same load as the Models panel's Load button.
    assert menu.activeAction() is actions[0]
    qtbot.keyClick(menu, Qt.Key.Key_Down)
    assert menu.activeAction() is actions[1]
    with qtbot.waitSignal(window.bridge.loaded, timeout=REPLY_TIMEOUT_MS) as loaded:
        qtbot.keyClick(menu, Qt.Key.Key_Return)
        assert not button.isEnabled()  # no second switch while this one loads
    assert str(Path(loaded.args[0].model_path).resolve()) == other.path
    assert window.bridge.client.status().model_path == str(quant_ladder["Q8_0"])
    assert window.store.get(window.chat.conversation_id).model == other.path
    assert window.models.loaded_path == other.path and button.isEnabled()
    assert [a.data() for a in button.model_actions() if a.isChecked()] == [other.path]
    assert button.toolTip().splitlines()[0] == f"Model: {other.name}"  # the text is elided

    # Help → Keyboard shortcuts lists it.
    qtbot.keyClick(window, Qt.Key.Key_F1)
    qtbot.waitUntil(lambda: window.findChild(ShortcutsDialog) is not None)
    assert window.findChild(ShortcutsDialog).keys_for("Switch model") == key_text(
        QKeySequence("Ctrl+M")
    )
