"""Check quality… on an installed model: the real check in the real engine, off the GUI
thread, with progress, cancel and the stored result."""

from __future__ import annotations

import multiprocessing

import pytest

from deskllm.gui.live_settings import LiveSettings
from deskllm.gui.models_panel import ModelsPanel
from deskllm.measure.quality_text import sample_text
from deskllm.settings import Settings
from deskllm.store import ModelLibrary, open_database
from deskllm.store.library_import import import_path
from deskllm.store.quality_results import QualityResults

CHECK_TIMEOUT_MS = 600_000


@pytest.fixture
def panel(qtbot, deskllm_home, quant_ladder):
    library = ModelLibrary(open_database())
    library.ensure_starter()
    for label in ("Q8_0", "Q2_K"):
        import_path(library, str(quant_ladder[label]))
    panel = ModelsPanel(library, LiveSettings(Settings(n_threads=2, gpu_offload="off")))
    qtbot.addWidget(panel)
    panel.show()
    yield panel
    panel.shutdown()


def select(panel: ModelsPanel, path) -> None:
    for row in range(panel.list.count()):
        if panel.list.item(row).toolTip() == str(path):  # the tooltip is the file's path
            panel.list.setCurrentRow(row)
            return
    raise AssertionError(f"{path} is not in the list")


def test_check_quality_runs_shows_and_stores_the_result(qtbot, panel, quant_ladder, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(sample_text()[:1200], encoding="utf-8")  # ~270 tokens: 4 chunks of 64
    select(panel, quant_ladder["Q2_K"])
    panel.quality_button.click()
    dialog = panel.quality_dialog
    assert dialog is not None and dialog.isVisible()
    # the same model's largest other file is offered first: the Q8_0
    assert dialog.reference.itemText(0) == str(quant_ladder["Q8_0"])
    dialog.set_text_file(text)
    dialog.ctx.setValue(64)
    seen: list[int] = []
    dialog.progress.valueChanged.connect(seen.append)
    dialog.check_button.click()
    assert dialog.running and not dialog.check_button.isEnabled()
    qtbot.waitUntil(lambda: not dialog.running, timeout=CHECK_TIMEOUT_MS)
    assert dialog.result is not None, dialog.status.text()
    assert dialog.result.mean_kld > 0 and dialog.result.tokens in (4 * 31, 5 * 31)
    assert "KL divergence" in dialog.status.text() and dialog.progress.value() == 100
    assert min(seen) > 0 and 50 in seen  # the reference pass filled the first half
    [stored] = QualityResults(open_database()).for_model(str(quant_ladder["Q2_K"]))
    assert stored["reference"] == str(quant_ladder["Q8_0"]) and stored["n_ctx"] == 64


def test_cancel_stops_the_check(qtbot, panel, quant_ladder):
    select(panel, quant_ladder["Q2_K"])
    panel.quality_button.click()
    dialog = panel.quality_dialog
    dialog.ctx.setValue(128)  # the bundled sample: 32 chunks, long enough to cancel
    dialog.check_button.click()
    qtbot.waitUntil(lambda: dialog.progress.value() > 0, timeout=CHECK_TIMEOUT_MS)
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=60_000)
    assert dialog.status.text() == "Cancelled." and dialog.result is None
    assert [p for p in multiprocessing.active_children() if p.name.startswith("deskllm-q")] == []
    assert dialog.check_button.isEnabled()  # it can run again
