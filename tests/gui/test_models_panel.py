"""The Models panel: installed models (Load / Unload, Delete, Reveal, Import) and Discover
(search on the local fake Hub, quantizations planned for this machine, real downloads)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from gui_helpers import REPLY_TIMEOUT_MS
from hub_fixtures import MAIN_REPO

from deskllm import settings as settings_mod
from deskllm.downloads import DownloadState
from deskllm.downloads.partfile import lock_path, part_path, sidecar_path
from deskllm.gui.models_panel import ModelsPanel
from deskllm.gui.qt import QDesktopServices, QMessageBox

HUB_TIMEOUT_MS = 120_000  # the first plan probes the hardware and reads remote headers


def search(qtbot, panel: ModelsPanel, text: str) -> None:
    view = panel.discover
    view.search_edit.setText(text)
    view.search()
    qtbot.waitUntil(view.search_button.isEnabled, timeout=HUB_TIMEOUT_MS)


def open_repo(qtbot, panel: ModelsPanel, repo_id: str) -> None:
    view = panel.discover
    rows = [r for r in range(view.results.rowCount()) if view.result_repo(r) == repo_id]
    assert rows, f"{repo_id} is not among the results"
    view.results.setCurrentCell(rows[0], 0)
    qtbot.waitUntil(lambda: view.plan is not None, timeout=HUB_TIMEOUT_MS)


def column(panel: ModelsPanel, index: int) -> list[str]:
    table = panel.discover.quants
    return [table.item(r, index).text() for r in range(table.rowCount())]


def quant_row(panel: ModelsPanel, quant: str) -> int:
    return column(panel, 0).index(quant)


def models_dir() -> Path:
    return settings_mod.load().models_path()


def test_unload_and_load_again(qtbot, window):
    panel = window.models
    window.tabs.setCurrentWidget(panel)
    assert panel.list.count() == 1 and "loaded" in panel.list.item(0).text()
    assert panel.unload_button.isEnabled() and not panel.load_button.isEnabled()

    with qtbot.waitSignal(window.bridge.unloaded, timeout=REPLY_TIMEOUT_MS):
        panel.unload_button.click()
    assert "loaded" not in panel.list.item(0).text()
    assert not window.chat.send_button.isEnabled()
    assert "No model loaded" in window.model_label.full_text()

    progress: list[float] = []
    window.bridge.load_progress.connect(progress.append)
    panel.list.setCurrentRow(0)
    with qtbot.waitSignal(window.bridge.loaded, timeout=REPLY_TIMEOUT_MS):
        panel.load_button.click()
        assert panel.progress.isVisible() and not panel.load_button.isEnabled()
    assert progress and all(0.0 <= p <= 1.0 for p in progress)
    assert not panel.progress.isVisible() and "loaded" in panel.list.item(0).text()
    assert window.chat.send_button.isEnabled()


def test_installed_details_import_reveal_and_delete(qtbot, make_panel, copy_model, monkeypatch):
    panel = make_panel()
    text = panel.list.item(0).text()
    assert "llama" in text and "M params" in text and "Q4_1" in text and "ctx 8,192" in text

    copy = copy_model("my-model.gguf")
    panel.import_from(str(copy))
    qtbot.waitUntil(lambda: panel.list.count() == 2, timeout=HUB_TIMEOUT_MS)
    assert "Added 1: my-model.gguf" in panel.status.text()

    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()))
    panel.list.setCurrentRow(1)
    assert str(copy) in panel.details.text()
    panel.reveal_button.click()
    assert opened == [str(copy.parent)]

    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.No)
    panel.delete_button.click()
    assert copy.is_file() and panel.list.count() == 2
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    panel.delete_button.click()
    assert not copy.exists() and panel.list.count() == 1

    starter = Path(panel.library.list()[0].path)
    panel.list.setCurrentRow(0)
    panel.delete_button.click()  # the starter leaves the list; its file stays
    assert panel.list.count() == 0 and starter.is_file()


def test_missing_file_and_models_from_other_apps(qtbot, hub, make_panel, copy_model):
    from huggingface_hub import constants

    panel = make_panel()
    gone = copy_model("gone.gguf")
    panel.library.add(gone)
    gone.unlink()
    panel.refresh()
    panel.list.setCurrentRow(1)
    assert "file missing" in panel.list.item(1).text() and not panel.load_button.isEnabled()

    cache = Path(constants.HF_HUB_CACHE) / "models--x--y" / "snapshots" / "abc"
    cache.mkdir(parents=True)
    shutil.copyfile(copy_model("a.gguf"), cache / "other-app.gguf")
    (cache / "broken.gguf").write_bytes(b"not a model")
    panel.find_button.click()
    qtbot.waitUntil(lambda: panel.list.count() == 3, timeout=HUB_TIMEOUT_MS)
    qtbot.waitUntil(panel.find_button.isEnabled)
    assert "other-app.gguf" in panel.status.text() and "Skipped 1: broken.gguf" in (
        panel.status.text()
    )


def test_search_plan_replan_and_download(qtbot, hub, make_panel, quant_ladder):
    panel = make_panel()
    view = panel.discover
    panel.tabs.setCurrentWidget(view)
    search(qtbot, panel, "SmolLM2")
    assert not view.banner.isVisible()
    repos = [view.result_repo(r) for r in range(view.results.rowCount())]
    assert MAIN_REPO in repos
    assert view.results.item(repos.index(MAIN_REPO), 1).text() == "5,000"

    view.context.setCurrentIndex(view.context.findData(2048))
    open_repo(qtbot, panel, MAIN_REPO)
    assert set(column(panel, 0)) >= {"Q8_0", "Q6_K", "Q4_K_M", "Q2_K", "Q4_1"}
    badges = column(panel, 4)
    assert all(b in ("Full GPU", "CPU", "Too large") or b.startswith("Partial") for b in badges)
    best = view.recommended_row()
    assert best is not None and view.quants.item(best, 0).font().bold()
    assert not view.quants.item((best + 1) % view.quants.rowCount(), 0).font().bold()
    assert view.recommended.text().startswith(f"Recommended: {view.plan.recommended.quant}")
    assert "near-lossless" in view.quants.item(quant_row(panel, "Q8_0"), 2).text()

    small = column(panel, 3)
    old_plan = view.plan
    view.context.setCurrentIndex(view.context.findData(8192))
    qtbot.waitUntil(lambda: view.plan is not old_plan, timeout=HUB_TIMEOUT_MS)
    assert view.plan.n_ctx == 8192 and column(panel, 3) != small

    events = []
    view.downloads.progress.connect(events.append)
    row = quant_row(panel, "Q2_K")
    with qtbot.waitSignal(view.download_finished, timeout=HUB_TIMEOUT_MS) as done:
        view.quants.cellWidget(row, 6).click()  # the Download button, after Expected speed
    path = Path(done.args[0])
    assert any(e.state == DownloadState.DOWNLOADING and e.bytes_done for e in events)
    qtbot.waitUntil(lambda: events[-1].state == DownloadState.DONE)  # after the view's slot
    assert events[-1].fraction == 1.0
    want = hashlib.sha256(quant_ladder["Q2_K"].read_bytes()).hexdigest()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == want
    assert panel.list.count() == 2 and "Q2_K" in panel.list.item(1).text()
    assert "it is in Installed" in view.download_status.text() and not view.rows


def test_pause_restart_resume_and_cancel(qtbot, hub, make_panel, quant_ladder):
    name = quant_ladder["Q8_0"].name
    hub.fault(MAIN_REPO, name, throttle_bytes_per_s=2e6)
    panel = make_panel()
    view = panel.discover
    view.download(MAIN_REPO, name)

    def started() -> bool:
        rows = list(view.rows.values())
        return bool(rows) and rows[0].state == DownloadState.DOWNLOADING and rows[0].bar.value() > 0

    qtbot.waitUntil(started, timeout=HUB_TIMEOUT_MS)
    ((download_id, row),) = view.rows.items()
    assert "/s" in row.detail.text() and "left" in row.detail.text()
    row.pause_button.click()
    qtbot.waitUntil(lambda: row.state == DownloadState.PAUSED, timeout=HUB_TIMEOUT_MS)
    assert not row.resume_button.isHidden() and row.pause_button.isHidden()

    panel.shutdown()  # the app closes; the next start shows the paused download
    again = make_panel()
    qtbot.waitUntil(lambda: download_id in again.discover.rows, timeout=HUB_TIMEOUT_MS)
    row = again.discover.rows[download_id]
    assert row.state == DownloadState.PAUSED and row.bar.value() > 0
    row.resume_button.click()
    qtbot.waitUntil(lambda: row.state == DownloadState.DOWNLOADING, timeout=HUB_TIMEOUT_MS)
    dest = models_dir().joinpath(*MAIN_REPO.split("/"), name)
    cancelled = lambda e: e.state == DownloadState.CANCELLED  # noqa: E731
    progress = again.discover.downloads.progress
    with qtbot.waitSignal(progress, timeout=HUB_TIMEOUT_MS, check_params_cb=cancelled):
        row.cancel_button.click()
    assert "Cancelled" in again.discover.download_status.text()
    leftovers = (dest, part_path(dest), sidecar_path(dest), lock_path(dest))
    assert not [p for p in leftovers if p.exists()]
    assert again.list.count() == 1


def test_offline_banner_and_installed_models_still_load(qtbot, hub, window, monkeypatch):
    from huggingface_hub import constants

    panel = window.models
    window.tabs.setCurrentWidget(panel)
    panel.tabs.setCurrentWidget(panel.discover)
    search(qtbot, panel, "SmolLM2")  # online: the answer is cached
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    search(qtbot, panel, "SmolLM2")
    assert panel.discover.banner.isVisible()
    assert panel.discover.banner.text().startswith("Offline — showing cached results")
    assert panel.discover.results.rowCount() > 0
    search(qtbot, panel, "gemma")  # never searched: the catalog shipped with the app
    assert panel.discover.banner.text().startswith("Offline — showing the catalog shipped")
    shown = [panel.discover.result_repo(r) for r in range(panel.discover.results.rowCount())]
    assert shown and all("gemma" in repo.lower() for repo in shown)
    search(qtbot, panel, "never searched")
    assert panel.discover.banner.text().startswith("Offline — search needs the internet")

    panel.tabs.setCurrentIndex(0)
    with qtbot.waitSignal(window.bridge.unloaded, timeout=REPLY_TIMEOUT_MS):
        panel.unload_button.click()
    panel.list.setCurrentRow(0)
    with qtbot.waitSignal(window.bridge.loaded, timeout=REPLY_TIMEOUT_MS):
        panel.load_button.click()
    assert "loaded" in panel.list.item(0).text()
