"""The Documents tab and a chat that cites documents, in the real window: real engine, real
all-MiniLM-L6-v2, real sqlite-vec, real folders watched with watchdog."""

from __future__ import annotations

from pathlib import Path

import pytest
from gui_helpers import REPLY_TIMEOUT_MS, send_and_wait

from deskllm.gui.qt import QMessageBox

INDEX_TIMEOUT_MS = 120_000


@pytest.fixture(autouse=True)
def _embedding_model(embedding_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKLLM_EMBEDDING_MODEL", str(embedding_model))


def write_notes(folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"note{i:03d}.md").write_text(
            f"# Note {i}\n\nThe lighthouse keeper number {i} paints the door "
            f"{['red', 'blue', 'green'][i % 3]} every spring, and feeds {i} gulls.\n"
        )


def make_collection(qtbot, panel, name: str, folder: Path):
    with qtbot.waitSignal(panel.indexed, timeout=INDEX_TIMEOUT_MS) as done:
        panel.create(name, [folder])
    progress = done.args[1]
    indexed = progress.files_done - progress.files_skipped
    # The list is read again after each pass.
    qtbot.waitUntil(lambda: any(c.name == name and c.files == indexed for c in panel.collections))
    return progress


def test_a_collection_is_made_indexed_watched_and_removed(qtbot, window, tmp_path, monkeypatch):
    panel = window.documents_panel
    panel.debounce.setInterval(300)
    folder = tmp_path / "notes"
    write_notes(folder, 6)
    (folder / "photo.png").write_bytes(b"\x89PNG....")
    progress = make_collection(qtbot, panel, "notes", folder)
    assert progress.finished and progress.files_done == 7 and progress.chunks == 6
    qtbot.waitUntil(lambda: panel.table.rowCount() == 1 and panel.table.item(0, 1).text() == "6")
    assert panel.table.item(0, 3).text() == "1"  # the picture, skipped with its reason
    assert "done in" in panel.status.text()

    # A file added while the app runs is indexed without asking, and only it is read.
    with qtbot.waitSignal(panel.indexed, timeout=INDEX_TIMEOUT_MS) as again:
        (folder / "late.md").write_text("# Late\n\nThe ferry leaves at nine.\n")
    assert again.args[1].files_done == 1
    qtbot.waitUntil(lambda: panel.table.item(0, 1).text() == "7")

    panel.table.selectRow(0)
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *a, **k: QMessageBox.StandardButton.No)  # fmt: skip
    panel.remove_selected()
    qtbot.wait(200)
    assert panel.table.rowCount() == 1  # "No" keeps it
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *a, **k: QMessageBox.StandardButton.Yes)  # fmt: skip
    panel.remove_selected()
    qtbot.waitUntil(lambda: panel.table.rowCount() == 0)
    assert folder.joinpath("note000.md").exists()  # the files themselves are not touched


def test_indexing_pauses_resumes_and_cancels(qtbot, window, tmp_path):
    panel = window.documents_panel
    folder = tmp_path / "many"
    write_notes(folder, 80)
    seen = []
    panel.documents.store()  # the panel's work below is queued behind its first refresh
    with qtbot.waitSignal(panel.indexed, timeout=INDEX_TIMEOUT_MS) as cancelled:
        panel.create("many", [folder])
        qtbot.waitUntil(lambda: panel.control is not None and "files" in panel.status.text(),
                        timeout=INDEX_TIMEOUT_MS)  # fmt: skip
        panel.toggle_pause()
        qtbot.waitUntil(lambda: "paused" in panel.status.text(), timeout=INDEX_TIMEOUT_MS)
        assert panel.pause_button.text() == "Resume"
        seen.append(panel.status.text())
        qtbot.wait(500)
        assert panel.status.text() == seen[0]  # nothing is read while paused
        panel.toggle_pause()
        qtbot.waitUntil(lambda: panel.status.text() != seen[0], timeout=INDEX_TIMEOUT_MS)
        panel.cancel()
    progress = cancelled.args[1]
    assert progress.cancelled and 0 < progress.files_done < 80
    assert "cancelled" in panel.status.text()
    # Indexing again goes on where it stopped: what was indexed is not read again.
    with qtbot.waitSignal(panel.indexed, timeout=INDEX_TIMEOUT_MS) as rest:
        panel.index("many")
    assert rest.args[1].files_done == 80 - progress.files_done


def test_a_chat_searches_its_collections_and_its_reply_shows_the_sources(
    qtbot, window, tmp_path
):
    panel = window.documents_panel
    folder = tmp_path / "keepers"
    write_notes(folder, 9)
    make_collection(qtbot, panel, "keepers", folder)
    window.new_conversation()
    button = window.chat.docs_button
    button._fill()
    [action] = [a for a in button.menu_.actions() if a.isCheckable()]
    assert action.text().startswith("keepers (9 files")
    action.setChecked(True)
    assert button.text() == "Documents: keepers"

    send_and_wait(qtbot, window, "Which keeper feeds 7 gulls?")
    reply = window.chat.widgets[-1]
    sources = reply.message.metrics["sources"]
    assert sources[0]["path"] == str(folder / "note007.md")
    assert reply.sources.isVisible() and "note007.md" in reply.sources.text()

    opened = []
    reply.sources.open_url = lambda url: opened.append(url) or True
    dialog = reply.sources.open_source(0)
    qtbot.waitUntil(lambda: "highlighted" in dialog.note.text(), timeout=REPLY_TIMEOUT_MS)
    assert dialog.highlighted == sources[0]["text"]
    assert "feeds 7 gulls" in dialog.text.toPlainText()
    dialog.open_button.click()
    assert opened[0].toLocalFile() == str(folder / "note007.md")
    dialog.close()

    # The chat's choice is the conversation's: another chat searches nothing.
    window.new_conversation()
    assert button.text() == "Documents"
    send_and_wait(qtbot, window, "Which keeper feeds 7 gulls?")
    assert "sources" not in window.chat.widgets[-1].message.metrics


def test_attached_files_go_in_whole_when_they_fit_and_are_searched_when_not(
    qtbot, window, tmp_path
):
    from deskllm.gui.qt import QMimeData, QUrl

    window.new_conversation()
    bar = window.chat.attachments
    short = tmp_path / "recipe.md"
    short.write_text("# Soup\n\nSimmer the leeks for twenty minutes, then add the cream.\n")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(short))])
    with qtbot.waitSignal(bar.attached, timeout=INDEX_TIMEOUT_MS):
        window.chat.input.insertFromMimeData(mime)  # a drop (or paste) of a file attaches it
    assert window.chat.input.toPlainText() == ""  # not pasted as its path
    assert bar.label.text() == "Attached: recipe.md" and bar.detach_button.isVisible()

    send_and_wait(qtbot, window, "How long do the leeks simmer?")
    [source] = window.chat.widgets[-1].message.metrics["sources"]
    assert source["path"] == str(short) and source["text"] == short.read_text().strip()

    # A file longer than half the chat's context (2048 tokens here) is searched instead.
    long = tmp_path / "almanac.txt"
    days = [f"Day {d}: the tide turns at {d % 12 + 1} o'clock and the fishermen mend {d} nets "
            "by the harbour wall." for d in range(300)]  # fmt: skip
    long.write_text("\n\n".join(days))
    with qtbot.waitSignal(bar.attached, timeout=INDEX_TIMEOUT_MS):
        bar.attach_paths([long])
    assert bar.label.text() == "Attached: almanac.txt, recipe.md"
    send_and_wait(qtbot, window, "On which day do the fishermen mend 123 nets?")
    sources = window.chat.widgets[-1].message.metrics["sources"]
    assert len(sources) <= 5 and all(len(s["text"]) < 2000 for s in sources)
    assert any("mend 123 nets" in s["text"] for s in sources)

    with qtbot.waitSignal(bar.attached, timeout=5000, raising=False):
        bar.detach()
    qtbot.waitUntil(lambda: bar.label.text() == "" and not bar.detach_button.isVisible())
    send_and_wait(qtbot, window, "How long do the leeks simmer?")
    assert "sources" not in window.chat.widgets[-1].message.metrics


def test_an_embedding_model_from_discover_indexes_a_collection(
    qtbot, hub, window, tmp_path, embedding_model
):
    """Discover offers embedding GGUFs; one downloaded from the (test) Hub is offered for a new
    collection, never as a chat model, and indexes and searches it in its own engine."""
    from deskllm.catalog.embedding_repos import EMBEDDING_REPOS

    repo = next(r for r in EMBEDDING_REPOS if r.repo_id.startswith("CompendiumLabs/"))
    # The test Hub serves the bundled model's GGUF as that repo's file (a BERT GGUF too).
    hub.add_repo(repo.repo_id, {"bge-small-en-v1.5-f16.gguf": embedding_model})
    view = window.models.discover
    window.tabs.setCurrentWidget(window.models)
    window.models.tabs.setCurrentWidget(view)
    index = view.embedding.findData(repo.repo_id)
    assert index > 0
    view.embedding.setCurrentIndex(index)
    view.embedding.activated.emit(index)
    qtbot.waitUntil(lambda: view.plan is not None, timeout=INDEX_TIMEOUT_MS)
    with qtbot.waitSignal(view.download_finished, timeout=INDEX_TIMEOUT_MS) as done:
        view.download(repo.repo_id, "bge-small-en-v1.5-f16.gguf")
    downloaded = Path(done.args[0])

    panel = window.documents_panel
    qtbot.waitUntil(lambda: [p for _, p in panel.embedding_models()] == [downloaded])
    window.chat.model_button.refresh()
    chat_models = [a.data() for a in window.chat.model_button.menu().actions()]
    assert str(downloaded) not in chat_models  # it cannot chat

    folder = tmp_path / "bge"
    write_notes(folder, 4)
    with qtbot.waitSignal(panel.indexed, timeout=INDEX_TIMEOUT_MS) as indexed:
        panel.create("bge", [folder], downloaded)
    assert indexed.args[1].chunks == 4
    store = panel.documents.store()
    assert store.get("bge").embedding_model == str(downloaded)
    window.new_conversation()
    window.chat.docs_button.choose(["bge"])
    hits = panel.documents.retrieve(window.chat.conversation_id, "Who feeds 2 gulls?")
    assert hits[0].chunk.path == str(folder / "note002.md")
    assert str(downloaded) in panel.documents._engines  # its own engine process
