"""Discover without a search, offline: the curated catalog planned for this machine (fit,
expected speed, quality, license, installed quants, a download button per row), a curated
repo's quantizations planned from the catalog with their expected speed, and a measured
speed from an earlier chat taking the ceiling's place."""

from __future__ import annotations

import shutil

import pytest
from curated_helpers import REPO, serve_curated_repo

from deskllm import settings as settings_mod
from deskllm.catalog.curated import load_curated
from deskllm.gui.live_settings import LiveSettings
from deskllm.gui.model_discover import QUANT_COLUMNS
from deskllm.gui.models_panel import ModelsPanel
from deskllm.gui.plan_text import quality_text
from deskllm.gui.qt import Qt
from deskllm.store import ConversationStore, ModelLibrary, open_database
from deskllm.store.quality_results import QualityResults

TIMEOUT_MS = 120_000  # the first plan probes the hardware
INSTALLED = "Qwen2.5-0.5B-Instruct-Q8_0.gguf"
SPEED = 5  # curated table: Model, Params, Quant, Size, Fit, Expected speed
QUALITY = {
    "reference": "/models/Qwen2.5-0.5B-Instruct-f16.gguf",
    "tokens": 1024, "mean_kld": 0.01234, "median_kld": 0.008, "kld_p99": 0.09,
    "same_top_pct": 96.25, "ppl": 12.5, "ppl_reference": 12.4, "ppl_ratio": 1.008,
    "seconds": 30.0, "delta_p": {"mean": 0.0, "rms": 0.01},
}  # fmt: skip
MEASURED = "measured on your text: KL 0.0123, same top token 96.2% against "


@pytest.fixture
def offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def panel(qtbot, deskllm_home, starter_model, tmp_path):
    db = open_database()
    library = ModelLibrary(db)
    library.ensure_starter()
    # A curated file "installed": the starter model's bytes under a curated file's name.
    installed = tmp_path / INSTALLED
    shutil.copy(starter_model, installed)
    library.add(installed)
    # A chat with it measured 42 tok/s.
    store = ConversationStore(db)
    conv = store.create()
    store.add_message(conv.id, "user", "Hi")
    store.add_message(conv.id, "assistant", "Hello", model=str(installed),
                      metrics={"tg_tps": 42.0})  # fmt: skip
    # And Check quality measured it against a reference on the user's text.
    QualityResults(db).save(QUALITY | {"model": str(installed)}, text_sha256="ab" * 32, n_ctx=512)
    panel = ModelsPanel(library, LiveSettings(settings_mod.load()))
    qtbot.addWidget(panel)
    panel.show()
    yield panel
    panel.shutdown()


def curated_rows(view) -> dict[str, int]:
    table = view.curated.table
    return {view.curated.repo_at(r): r for r in range(table.rowCount())}


def test_discover_opens_on_the_curated_catalog_offline(qtbot, offline, panel):
    view = panel.discover
    assert view.curated.plan is None  # planned when Discover is first seen
    panel.tabs.setCurrentWidget(view)
    qtbot.waitUntil(lambda: view.curated.plan is not None, timeout=TIMEOUT_MS)
    assert view.curated.isVisible() and not view.results.isVisible()
    catalog = load_curated()
    rows = curated_rows(view)
    assert list(rows) == [m.repo_id for m in catalog.models]
    status = view.curated.status.text()
    assert "offline" in status and "last refreshed from the Hub: never" in status
    table = view.curated.table
    for r in rows.values():
        fit = table.item(r, 4).text()
        assert fit in ("Full GPU", "CPU", "Too large") or fit.startswith("Partial")
        speed = table.item(r, SPEED).text()
        assert speed == "unknown" or speed.endswith("tok/s (ceiling)") or "measured" in speed
        assert table.item(r, 6).text() in ("near-lossless", "good", "fair", "low")
        assert table.item(r, 7).text() == catalog.model(view.curated.repo_at(r)).license
        button = table.cellWidget(r, 8).text()
        assert button in ("Download recommended", "Installed") or button.startswith("Slow here")
        if speed.endswith("tok/s (ceiling)"):  # below the usable floor: the button says so
            tps = float(speed.removeprefix("~").split()[0])
            floor = view.curated.plan.usable_tps
            slow = tps < floor and button != "Installed"
            if abs(tps - floor) > 0.1:  # (the cell is rounded)
                assert button.startswith("Slow here: ~") == slow, (speed, button)
    # The installed file is marked, its row's button says so, and its measured speed shows.
    row = rows[REPO]
    assert "(installed: Q8_0)" in table.item(row, 0).text()
    assert table.item(row, 2).text() == "Q8_0 ✓"
    assert table.cellWidget(row, 8).text() == "Installed"
    assert not table.cellWidget(row, 8).isEnabled()
    assert table.item(row, SPEED).text() == "~42 tok/s (measured)"
    # The model to take is in bold, with the reason below.
    best = rows[view.curated.plan.recommended.model.repo_id]
    assert table.item(best, 0).font().bold()
    assert view.curated.recommended.text().startswith("Recommended: ")


def test_a_curated_repo_is_planned_offline_with_expected_speeds(qtbot, offline, panel):
    view = panel.discover
    panel.tabs.setCurrentWidget(view)
    qtbot.waitUntil(lambda: view.curated.plan is not None, timeout=TIMEOUT_MS)
    view.curated.table.setCurrentCell(curated_rows(view)[REPO], 0)
    qtbot.waitUntil(lambda: view.plan is not None, timeout=TIMEOUT_MS)
    assert view.plan.model == REPO and view.curated_repo
    files = load_curated().model(REPO).files
    assert view.quants.rowCount() == len(files)
    speed = QUANT_COLUMNS.index("Expected speed")
    speeds = [view.quants.item(r, speed).text() for r in range(view.quants.rowCount())]
    q8 = [view.quants.item(r, 0).text() for r in range(view.quants.rowCount())].index("Q8_0")
    assert speeds[q8] == "~42 tok/s (measured)"
    assert all(s == "unknown" or s.endswith("(ceiling)") for i, s in enumerate(speeds) if i != q8)
    # The quality check run on the installed Q8_0 shows beside the scoreboard's tier.
    quality = QUANT_COLUMNS.index("Quality")
    qualities = [view.quants.item(r, quality).text() for r in range(view.quants.rowCount())]
    assert qualities[q8].startswith("near-lossless (KL ") and MEASURED in qualities[q8]
    assert qualities[q8].endswith("Qwen2.5-0.5B-Instruct-f16.gguf")
    assert not any("measured" in q for i, q in enumerate(qualities) if i != q8)
    assert view.recommended.text().startswith("Recommended: ")


def test_a_download_offline_says_why_it_cannot_start(qtbot, offline, panel):
    view = panel.discover
    panel.tabs.setCurrentWidget(view)
    qtbot.waitUntil(lambda: view.curated.plan is not None, timeout=TIMEOUT_MS)
    table = view.curated.table
    row = curated_rows(view)["bartowski/SmolLM2-1.7B-Instruct-GGUF"]
    button = table.cellWidget(row, 8)
    assert button.text() == "Download recommended" and button.isEnabled()
    with qtbot.waitSignal(view.downloads.failed, timeout=TIMEOUT_MS) as failed:
        button.click()
    assert "SmolLM2-1.7B-Instruct-GGUF" in failed.args[0]
    assert view.download_status.text() == failed.args[0]


def test_an_empty_search_goes_back_to_the_curated_list(qtbot, offline, panel):
    view = panel.discover
    panel.tabs.setCurrentWidget(view)
    qtbot.waitUntil(lambda: view.curated.plan is not None, timeout=TIMEOUT_MS)
    view.search_edit.setText("SmolLM2")
    view.search()
    qtbot.waitUntil(view.search_button.isEnabled, timeout=TIMEOUT_MS)
    assert view.results.isVisible() and not view.curated.isVisible()
    view.search_edit.setText("  ")
    view.search()
    assert view.curated.isVisible() and not view.results.isVisible()


def test_refresh_from_the_hub_replaces_estimated_sizes(qtbot, hub, quant_ladder, panel):
    serve_curated_repo(hub, quant_ladder)
    view = panel.discover
    panel.tabs.setCurrentWidget(view)
    qtbot.waitUntil(lambda: view.curated.plan is not None, timeout=TIMEOUT_MS)
    assert "last refreshed from the Hub: never" in view.curated.status.text()
    first = view.curated.plan
    view.curated.refresh_button.click()
    qtbot.waitUntil(lambda: view.curated.plan is not first, timeout=TIMEOUT_MS)
    assert "last refreshed from the Hub: just now" in view.curated.status.text()
    row = next(r for r in view.curated.plan.rows if r.model.repo_id == REPO)
    assert not any(f.size_estimated for f in row.model.files)
    table = view.curated.table
    size = table.item(curated_rows(view)[REPO], 3).text()
    assert not size.startswith("~")  # read from the Hub, not estimated
    assert view.curated.refresh_button.isEnabled()


def test_the_model_to_take_shows_the_file_the_catalog_rule_chose(qtbot):
    import json
    from pathlib import Path

    from deskllm.gui.curated_list import CuratedList
    from deskllm.hardware import report_from_dict
    from deskllm.planner.catalog_plan import plan_catalog

    laptop = Path(__file__).parent.parent / "data" / "hardware" / "laptop_rtx4070_8gb.json"
    plan = plan_catalog(load_curated(), report_from_dict(json.loads(laptop.read_text())))
    best, quant = plan.recommended, plan.recommended_quant
    assert best.chosen.file != quant.file  # the row's own pick differs (Q8_0, split)
    view = CuratedList()
    qtbot.addWidget(view)
    view.show_plan(plan, "2026-12-03", None, set(), offline=True)
    row = view.row_of(best.model.repo_id)
    table = view.table
    assert table.item(row, 2).text() == quant.quant and table.item(row, 4).text() == "Full GPU"
    assert table.item(row, 0).font().bold()
    with qtbot.waitSignal(view.download_requested) as requested:
        table.cellWidget(row, 8).click()
    assert requested.args == [best.model.repo_id, quant.file]


def test_installed_shows_the_measured_quality_beside_the_scoreboard_tier(qtbot, panel):
    items = {panel.list.item(r).data(Qt.ItemDataRole.UserRole): panel.list.item(r)
             for r in range(panel.list.count())}  # fmt: skip
    checked = next(item for path, item in items.items() if path.endswith(INSTALLED))
    assert "measured KL 0.0123" in checked.text()
    assert not any("measured" in i.text() for i in items.values() if i is not checked)
    panel.list.setCurrentItem(checked)
    details = panel.details.text()
    # The file holds the starter model's bytes: its header's quant gives the tier.
    tier = quality_text(panel.selected_model().quant)
    assert f"Quality: {tier} · {MEASURED}" in details, details
