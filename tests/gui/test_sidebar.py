"""The conversation sidebar: new, rename in place, delete after asking, search by title and
content, newest activity first."""

from __future__ import annotations

from gui_helpers import listed

from deskllm.gui.qt import QApplication, QLineEdit, QMessageBox, Qt


def test_new_chat_opens_an_empty_conversation_on_top(qtbot, window):
    first = window.chat.conversation_id
    window.sidebar.new_button.click()
    assert window.chat.conversation_id != first
    listed(qtbot, window)
    assert window.sidebar.ids() == [window.chat.conversation_id, first]
    assert window.sidebar.current_id() == window.chat.conversation_id
    assert window.chat.widgets == [] and window.chat.empty_label.isVisible()


def test_rename_in_place(qtbot, window):
    window.sidebar.rename_button.click()
    editor = window.sidebar.list.findChild(QLineEdit)
    assert editor is not None and editor.isVisible()
    editor.selectAll()
    qtbot.keyClicks(editor, "Trip planning")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.sidebar.list.currentItem().text() == "Trip planning")
    assert window.store.get(window.chat.conversation_id).title == "Trip planning"
    assert window.chat.title.full_text() == "Trip planning"


def test_renaming_keeps_the_chat_in_its_place(qtbot, window):
    older = window.chat.conversation_id
    window.sidebar.new_button.click()
    newer = window.chat.conversation_id
    listed(qtbot, window)
    assert window.sidebar.ids() == [newer, older]
    window.sidebar.list.setCurrentRow(1)
    assert window.chat.conversation_id == older
    window.sidebar.rename_button.click()
    editor = window.sidebar.list.findChild(QLineEdit)
    editor.selectAll()
    qtbot.keyClicks(editor, "Older, renamed")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.store.get(older).title == "Older, renamed")
    qtbot.wait(50)  # the list is rebuilt once control returns
    listed(qtbot, window)
    assert window.sidebar.ids() == [newer, older]
    assert window.sidebar.list.item(1).text() == "Older, renamed"
    assert window.sidebar.current_id() == older == window.chat.conversation_id


def test_an_empty_name_keeps_the_old_one(qtbot, window):
    item = window.sidebar.list.currentItem()
    item.setText("   ")
    assert item.text() == "New chat"
    assert window.store.get(window.chat.conversation_id).title == "New chat"


def test_delete_asks_first(qtbot, window, monkeypatch):
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.No)
    window.sidebar.delete_button.click()
    assert len(window.store.list()) == 1
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    old = window.chat.conversation_id
    window.sidebar.delete_button.click()
    conversations = window.store.list()
    assert len(conversations) == 1 and conversations[0].id != old  # a fresh one replaces it
    listed(qtbot, window)
    assert window.chat.conversation_id == conversations[0].id == window.sidebar.current_id()


def test_deleting_one_of_several_opens_the_next(qtbot, window, monkeypatch):
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    keep = window.chat.conversation_id
    window.sidebar.new_button.click()
    listed(qtbot, window)  # as a user sees it: the new chat listed and selected
    window.sidebar.delete_button.click()
    listed(qtbot, window)
    assert window.sidebar.ids() == [keep] and window.chat.conversation_id == keep


def test_search_by_title_and_by_content(qtbot, window):
    store = window.store
    pasta = store.create("Pasta recipes")
    store.add_message(pasta.id, "user", "How long do I boil spaghetti?")
    bikes = store.create("Bicycle repair")
    store.add_message(bikes.id, "user", "My chain keeps slipping off the cassette.")
    window.sidebar.refresh()

    qtbot.keyClicks(window.sidebar.search, "bicycle")
    qtbot.waitUntil(lambda: window.sidebar.ids() == [bikes.id])
    window.sidebar.search.clear()
    qtbot.keyClicks(window.sidebar.search, "spaghetti")  # only in a message
    qtbot.waitUntil(lambda: window.sidebar.ids() == [pasta.id])
    window.sidebar.list.setCurrentRow(0)  # picking a result opens it
    assert window.chat.conversation_id == pasta.id
    assert "spaghetti" in window.chat.widgets[0].plain_text()

    window.sidebar.search.clear()
    qtbot.keyClicks(window.sidebar.search, "zeppelin")
    qtbot.waitUntil(lambda: window.sidebar.ids() == [])
    assert window.sidebar.no_results.isVisible()
    window.sidebar.no_results.click()
    qtbot.waitUntil(lambda: len(window.sidebar.ids()) == 3)


def test_sorted_by_last_activity(qtbot, window):
    first = window.chat.conversation_id
    window.sidebar.new_button.click()
    second = window.chat.conversation_id
    listed(qtbot, window)
    assert window.sidebar.ids() == [second, first]
    window.store.add_message(first, "user", "back to the first chat")
    window.sidebar.refresh()
    listed(qtbot, window)
    assert window.sidebar.ids() == [first, second]
    assert QApplication.focusWindow() is window.windowHandle()


def test_the_list_and_search_are_read_off_the_gui_thread(qtbot, window, monkeypatch):
    import threading

    from deskllm.store import ConversationStore

    threads: list[str] = []
    real_list, real_search = ConversationStore.list, ConversationStore.search

    def spy_list(self, *args, **kwargs):
        threads.append(threading.current_thread().name)
        return real_list(self, *args, **kwargs)

    def spy_search(self, *args, **kwargs):
        threads.append(threading.current_thread().name)
        return real_search(self, *args, **kwargs)

    monkeypatch.setattr(ConversationStore, "list", spy_list)
    monkeypatch.setattr(ConversationStore, "search", spy_search)
    window.sidebar.refresh()
    listed(qtbot, window)
    qtbot.keyClicks(window.sidebar.search, "new")
    qtbot.waitUntil(lambda: len(threads) == 2)
    listed(qtbot, window)
    assert threads and all(name.startswith("gui-sidebar") for name in threads), threads
    assert window.sidebar.ids() == [window.chat.conversation_id]  # "New chat" matches


def test_only_the_newest_of_several_quick_refreshes_is_shown(qtbot, window):
    keep = window.chat.conversation_id
    other = window.store.create("Another chat")
    for _ in range(5):
        window.sidebar.refresh(select=other.id)
    window.sidebar.refresh()  # a later refresh without a choice keeps the pending one
    shown: list[list[str]] = []
    window.sidebar.refreshed.connect(lambda: shown.append(window.sidebar.ids()))
    listed(qtbot, window)
    assert shown == [[other.id, keep]]
    assert window.sidebar.current_id() == other.id
