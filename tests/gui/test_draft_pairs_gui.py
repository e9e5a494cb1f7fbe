"""Draft models in the Models panel: the Installed tab's details name the installed model that
can draft for the selected one (speculative decoding) and the models it can draft for; Discover
says which installed models pair with a Hub repo's files. The pair: the starter model (Q4_1)
drafts for a Q8_0 requantization of itself; a model of another vocabulary never pairs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_fixtures import MAIN_REPO

from deskllm.gui.models_panel import ModelsPanel

TIMEOUT_MS = 120_000  # the first plan probes the hardware and reads remote headers
NO_DRAFT = ("No installed model can draft for it (a draft needs the same vocabulary and a "
            "smaller file)")  # fmt: skip
STARTER = "SmolLM2-135M-Instruct.Q4_1.gguf"
Q8 = "SmolLM2-135M-Instruct-Q8_0.gguf"  # quant_ladder's name


@pytest.fixture
def gemma_model_or_none(request) -> Path | None:
    """Gemma 3 270M where this machine has it (bench/fetch_gemma.sh), else None."""
    try:
        return request.getfixturevalue("gemma_model")
    except pytest.skip.Exception:
        return None


def row_of(panel: ModelsPanel, file_name: str) -> int:
    paths = [panel.list.item(r).toolTip() for r in range(panel.list.count())]
    rows = [r for r, path in enumerate(paths) if Path(path).name == file_name]
    assert rows, f"{file_name} is not listed"
    return rows[0]


def details_of(qtbot, panel: ModelsPanel, file_name: str) -> str:
    """Select the model and wait until its details say what drafts for it (the pairs are
    worked out on the panel's worker thread)."""
    panel.list.setCurrentRow(row_of(panel, file_name))
    qtbot.waitUntil(lambda: "draft" in panel.details.text().lower(), timeout=TIMEOUT_MS)
    return panel.details.text()


def mib(path: Path) -> str:
    return f"{path.stat().st_size / 2**20:,.0f} MiB"


def open_repo(qtbot, panel: ModelsPanel, repo_id: str):
    view = panel.discover
    panel.tabs.setCurrentWidget(view)
    view.search_edit.setText("SmolLM2")
    view.search()
    qtbot.waitUntil(view.search_button.isEnabled, timeout=TIMEOUT_MS)
    rows = [r for r in range(view.results.rowCount()) if view.result_repo(r) == repo_id]
    assert rows, f"{repo_id} is not among the results"
    view.results.setCurrentCell(rows[0], 0)
    qtbot.waitUntil(lambda: view.plan is not None, timeout=TIMEOUT_MS)
    return view


def test_the_starter_alone_has_no_draft(qtbot, make_panel):
    panel = make_panel()
    text = details_of(qtbot, panel, STARTER)
    assert NO_DRAFT in text
    assert "Draft model for speculative decoding" not in text and "Can draft for" not in text


def test_the_details_name_the_draft_of_a_q8_0_copy_and_what_the_starter_drafts_for(
    qtbot, make_panel, starter_model, quant_ladder
):
    panel = make_panel()
    details_of(qtbot, panel, STARTER)
    panel.import_from(str(quant_ladder["Q8_0"]))  # a real import, on the worker thread
    qtbot.waitUntil(lambda: panel.list.count() == 2, timeout=TIMEOUT_MS)

    text = details_of(qtbot, panel, Q8)
    assert (f"Draft model for speculative decoding: {STARTER} (same vocabulary, "
            f"{mib(starter_model)})") in text  # fmt: skip
    assert NO_DRAFT not in text and "Can draft for" not in text

    panel.list.setCurrentRow(row_of(panel, STARTER))
    text = panel.details.text()  # known already: the pairs of every model come at once
    assert f"Can draft for: {Q8}" in text
    assert "Draft model for speculative decoding" not in text and NO_DRAFT not in text


def test_a_model_of_another_vocabulary_is_not_offered(
    qtbot, make_panel, quant_ladder, embedding_model
):
    # all-MiniLM-L6-v2 (BERT's vocabulary) is small enough to draft for either by the size
    # rule: only the vocabulary keeps it out.
    panel = make_panel(quant_ladder["Q8_0"], embedding_model)
    text = details_of(qtbot, panel, Q8)
    assert f"Draft model for speculative decoding: {STARTER} " in text
    assert embedding_model.name not in text
    assert NO_DRAFT in details_of(qtbot, panel, embedding_model.name)
    assert embedding_model.name not in details_of(qtbot, panel, STARTER)


def test_gemma_is_not_offered_as_a_draft_nor_drafted_for(
    qtbot, make_panel, quant_ladder, gemma_model
):
    panel = make_panel(quant_ladder["Q8_0"], gemma_model)
    assert gemma_model.name not in details_of(qtbot, panel, Q8)
    assert gemma_model.name not in details_of(qtbot, panel, STARTER)
    assert NO_DRAFT in details_of(qtbot, panel, gemma_model.name)


def test_discover_shows_which_installed_models_pair_with_a_repos_files(
    qtbot, hub, make_panel, quant_ladder
):
    # Installed: the starter (Q4_1) and a Q8_0 copy; the repo holds the whole ladder, both
    # of these files among it (the same file pairs with nothing: it is not smaller).
    view = open_repo(qtbot, make_panel(quant_ladder["Q8_0"]), MAIN_REPO)
    size = {label: path.stat().st_size for label, path in quant_ladder.items()}
    quants = [p.quant for p in view.plan.plans]  # best quality first, as the table
    by_starter = [q for q in quants if size["Q4_1"] <= 0.75 * size[q]]
    for_q8 = [q for q in quants if size[q] <= 0.75 * size["Q8_0"]]
    assert "Q8_0" in by_starter and "Q4_1" not in by_starter
    assert "Q4_1" in for_q8 and "Q8_0" not in for_q8
    assert view.pairs.isVisible()
    assert view.pairs.text() == (
        f"Pairs with installed models for speculative decoding: {STARTER} can draft for this "
        f"repo's {', '.join(by_starter)}; this repo's {', '.join(for_q8)} can draft for {Q8} "
        "(the same vocabulary, and a draft at most 75% of its model's size)"
    )


def test_discover_pairs_nothing_with_another_vocabulary(
    qtbot, hub, make_panel, embedding_model, gemma_model_or_none
):
    others = [p for p in (embedding_model, gemma_model_or_none) if p is not None]
    panel = make_panel(*others)
    starter = panel.library.find(STARTER)
    assert starter is not None
    panel.library.remove(starter.id)  # out of the list (its file stays): only others remain
    view = open_repo(qtbot, panel, MAIN_REPO)
    assert view.pairs.text() == "" and not view.pairs.isVisible()
