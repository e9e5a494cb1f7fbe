"""Help → Keyboard shortcuts lists every menu action with the keys that trigger it, and those
keys work: pressed on the real window (offscreen), they do what the list says."""

from __future__ import annotations

from gui_helpers import listed

from deskllm.gui.qt import QApplication, QKeySequence, QLineEdit, Qt
from deskllm.gui.shortcuts_dialog import ShortcutsDialog, key_text, mnemonic, plain_text

CTRL = Qt.KeyboardModifier.ControlModifier


def menu_actions(window):
    """(menu, action) for every action of the menu bar, submenus included."""
    pairs = []

    def walk(menu):
        for action in menu.actions():
            if action.menu() is not None:
                walk(action.menu())
            elif not action.isSeparator():
                pairs.append((menu, action))

    for top in window.menuBar().actions():
        walk(top.menu())
    return pairs


def open_dialog(qtbot, window) -> ShortcutsDialog:
    qtbot.keyClick(window, Qt.Key.Key_F1)  # HelpContents on Linux and Windows
    qtbot.waitUntil(lambda: window.findChild(ShortcutsDialog) is not None)
    dialog = window.findChild(ShortcutsDialog)
    qtbot.waitUntil(dialog.isVisible)
    return dialog


def test_the_list_shows_every_action_with_its_keys(qtbot, window):
    dialog = open_dialog(qtbot, window)
    table = dialog.table
    shown = {table.item(r, 1).text(): table.item(r, 2).text() for r in range(table.rowCount())}
    actions = menu_actions(window)
    with_keys = [a for _m, a in actions if not a.shortcut().isEmpty()]
    assert len(with_keys) >= 12  # New, Find, message box, Rename, Regenerate, Import, ...
    for _menu, action in actions:
        keys = shown[plain_text(action.text())]
        if action.shortcut().isEmpty():
            assert keys.startswith("Alt+") and keys.endswith(mnemonic(action.text()))
        else:
            assert keys == key_text(action.shortcut())
    assert shown["New chat"] == key_text(QKeySequence(QKeySequence.StandardKey.New))
    # Keys of the chat's own widgets, read from them.
    assert shown["Stop the reply"] == "Esc" and shown["Send"] == "Enter"
    dialog.close()
    qtbot.waitUntil(lambda: window.findChild(ShortcutsDialog) is None)


def test_every_menu_and_action_has_its_own_mnemonic(window):
    titles = [a.text() for a in window.menuBar().actions()]
    letters = [mnemonic(t) for t in titles]
    assert None not in letters and len(set(letters)) == len(letters), titles
    menus: dict[object, list[str]] = {}
    for menu, action in menu_actions(window):
        menus.setdefault(menu, []).append(mnemonic(action.text()))
    for menu, marks in menus.items():
        assert None not in marks and len(set(marks)) == len(marks), menu.title()


def test_the_shortcuts_do_what_the_list_says(qtbot, window):
    store = window.store
    first = window.chat.conversation_id
    before = len(store.list())
    qtbot.keyClick(window, Qt.Key.Key_N, CTRL)
    assert len(store.list()) == before + 1
    assert window.chat.conversation_id not in (None, first)
    listed(qtbot, window)
    assert window.sidebar.current_id() == window.chat.conversation_id

    qtbot.keyClick(window, Qt.Key.Key_2, CTRL)
    assert window.tabs.currentWidget() is window.models
    qtbot.keyClick(window, Qt.Key.Key_L, CTRL)  # back to the chat, in the message box
    assert window.tabs.currentWidget() is window.chat
    qtbot.waitUntil(window.chat.input.hasFocus)
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_F, CTRL)
    qtbot.waitUntil(window.sidebar.search.hasFocus)
    qtbot.keyClicks(window.sidebar.search, "zzz")
    assert window.sidebar.search.text() == "zzz"
    window.sidebar.search.clear()
    qtbot.wait(300)  # the search's pause ends and the whole list is read again
    listed(qtbot, window)

    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_F2)  # rename, in place
    editor = window.sidebar.list.findChild(QLineEdit)
    assert editor is not None
    qtbot.waitUntil(editor.hasFocus)
    editor.selectAll()
    qtbot.keyClicks(editor, "Renamed by keys")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: store.get(window.chat.conversation_id).title == "Renamed by keys")
