"""Export a conversation from the sidebar's context menu (Markdown and JSON, with each reply's
figures) and import a JSON export as a new conversation; the real file dialogs are answered as
a user would, and failures are shown with the file's name."""

from __future__ import annotations

import json

from gui_helpers import listed

from deskllm.gui.qt import QFileDialog, QLineEdit

FIGURES = {"generated_tokens": 12, "tg_tps": 88.5, "ttft_s": 0.05, "finish_reason": "stop"}


def _answer(sidebar, path) -> QFileDialog:
    """Type `path` into the file dialog the sidebar opened and press its accept button."""
    dialog = sidebar.file_dialog
    assert dialog.isVisible() and dialog.isModal()
    dialog.findChild(QLineEdit, "fileNameEdit").setText(str(path))
    dialog.accept()
    return dialog


def _seed(qtbot, window) -> str:
    cid = window.chat.conversation_id
    window.store.update(cid, title="Trip: Lisbon")
    window.store.add_message(cid, "user", "Which tram goes to Belém?")
    window.store.add_message(cid, "assistant", "Tram 15 does.", metrics=FIGURES)
    window.sidebar.refresh(select=cid)
    listed(qtbot, window)
    window.chat.show_conversation(cid)
    return cid


def _actions(menu) -> dict:
    return {a.text(): a for a in menu.actions() if not a.isSeparator()}


def test_export_both_ways_from_the_menu_then_import_the_json(qtbot, window, tmp_path):
    cid = _seed(qtbot, window)
    sidebar = window.sidebar
    sidebar.last_folder = tmp_path
    actions = _actions(sidebar.context_menu(on_item=True))
    assert list(actions) == ["Rename", "Export as Markdown…", "Export as JSON…", "Delete…",
                             "Import conversation…"]  # fmt: skip

    actions["Export as Markdown…"].trigger()
    proposed = sidebar.file_dialog.selectedFiles()
    assert proposed == [str(tmp_path / "Trip_ Lisbon.md")]  # a name any disk takes
    _answer(sidebar, tmp_path / "trip.md")
    markdown = (tmp_path / "trip.md").read_text(encoding="utf-8")
    assert "# Trip: Lisbon" in markdown and "Tram 15 does." in markdown
    assert "*12 tokens · 88.5 tok/s · TTFT 50 ms*" in markdown

    actions["Export as JSON…"].trigger()
    assert sidebar.file_dialog.selectedFiles() == [str(tmp_path / "Trip_ Lisbon.json")]
    _answer(sidebar, tmp_path / "trip.json")
    data = json.loads((tmp_path / "trip.json").read_text(encoding="utf-8"))
    assert [m["content"] for m in data["messages"]][-1] == "Tram 15 does."
    assert data["messages"][-1]["metrics"] == FIGURES

    menu = sidebar.context_menu(on_item=False)  # on the list's empty space
    assert list(_actions(menu)) == ["Import conversation…"]
    _actions(menu)["Import conversation…"].trigger()
    dialog = sidebar.file_dialog
    assert dialog.isVisible() and dialog.directory().absolutePath() == str(tmp_path)
    assert "*.json" in dialog.selectedNameFilter()
    # What picking a file does (an open dialog takes a typed name only once its folder listing
    # has loaded in the background, which a test cannot time).
    dialog.fileSelected.emit(str(tmp_path / "trip.json"))
    dialog.reject()
    imported = window.chat.conversation_id
    listed(qtbot, window)
    assert imported != cid and sorted(sidebar.ids()) == sorted([cid, imported])
    assert sidebar.current_id() == imported
    assert sidebar.list.currentItem().text() == "Trip: Lisbon"
    reply = window.chat.widgets[-1]
    assert "Tram 15 does." in reply.plain_text() and "88.5 tok/s" in reply.figures.text()
    assert sidebar.error_box is None


def test_a_refused_import_shows_why_and_adds_nothing(qtbot, window, tmp_path):
    before = window.sidebar.ids()
    shown = window.chat.conversation_id
    bad = tmp_path / "not-a-chat.json"
    bad.write_text('{"format": "something else"}', encoding="utf-8")
    assert window.sidebar.import_from(bad) is None
    box = window.sidebar.error_box
    assert box.isVisible() and box.windowTitle() == "Import failed"
    assert "not-a-chat.json" in box.text() and "format" in box.text()
    assert window.sidebar.ids() == before and window.chat.conversation_id == shown


def test_a_failed_export_shows_why(qtbot, window, tmp_path):
    _seed(qtbot, window)
    target = tmp_path / "missing folder" / "chat.md"
    assert not window.sidebar.export_to(target, "markdown")
    box = window.sidebar.error_box
    assert box.isVisible() and box.windowTitle() == "Export failed"
    assert "Cannot write" in box.text() and "chat.md" in box.text()
    assert not target.parent.exists()
