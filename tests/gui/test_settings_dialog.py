"""The Settings dialog: validated with Settings.validate(), saved with settings.save(),
send key and theme applied at once, engine settings on the next load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deskllm import paths
from deskllm import settings as settings_mod
from deskllm.gui.qt import QApplication, QDialogButtonBox, Qt
from deskllm.gui.settings_dialog import SettingsDialog
from deskllm.gui.theme import apply_theme, is_dark, readable_links
from deskllm.loader import params_from_settings
from deskllm.settings import Settings


@pytest.fixture
def dialog(qtbot):
    dialog = SettingsDialog(Settings())
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def _save(dialog) -> None:
    dialog.buttons.button(QDialogButtonBox.StandardButton.Save).click()


def test_invalid_values_are_explained_and_not_saved(qtbot, dialog, tmp_path):
    dialog.set_value("kv_type", "q8_0")  # needs flash attention, which is off
    dialog.set_value("n_ctx", 100)
    not_a_folder = tmp_path / "models.txt"
    not_a_folder.write_text("x")
    dialog.set_value("models_dir", str(not_a_folder))
    dialog.set_value("gpu_offload", "manual")
    dialog.set_value("n_gpu_layers", 0)
    assert not dialog.widgets["draft_model"].isEnabled()  # only with a draft model's drafts
    dialog.set_value("speculation", "draft")
    assert dialog.widgets["draft_model"].isEnabled()
    dialog.set_value("draft_model", str(tmp_path / "gone.gguf"))
    _save(dialog)
    assert dialog.isVisible() and dialog.result() == 0
    problems = dialog.problems.text()
    assert dialog.problems.isVisible()
    for words in ("flash attention", "at least 256", "is a file", "at least 1 layer",
                  f"draft model {tmp_path / 'gone.gguf'} is not a file"):  # fmt: skip
        assert words in problems
    assert not paths.settings_path().exists()


def test_valid_values_are_saved(qtbot, dialog):
    saved = []
    dialog.saved.connect(saved.append)
    assert not dialog.widgets["n_gpu_layers"].isEnabled()  # only with manual offload
    dialog.set_value("kv_type", "q8_0")
    dialog.set_value("flash_attn", True)
    dialog.set_value("n_ctx", 8192)
    dialog.set_value("n_threads", 2)
    dialog.set_value("gpu_offload", "manual")
    assert dialog.widgets["n_gpu_layers"].isEnabled()
    dialog.set_value("n_gpu_layers", 12)
    dialog.set_value("kv_ram_budget_mb", 256)
    dialog.set_value("send_key", "ctrl+enter")
    _save(dialog)
    assert not dialog.isVisible() and dialog.result() == 1
    stored = settings_mod.load()
    assert stored == saved[0]
    assert (stored.kv_type, stored.flash_attn, stored.n_ctx, stored.n_threads) == (
        "q8_0", True, 8192, 2)  # fmt: skip
    assert (stored.gpu_offload, stored.n_gpu_layers, stored.kv_ram_budget_mb) == ("manual", 12, 256)
    assert stored.send_key == "ctrl+enter"
    assert params_from_settings(stored, "/m.gguf").n_gpu_layers == 12


def test_every_setting_has_an_editor_with_its_declared_choices(dialog):
    for name, spec in settings_mod.specs().items():
        widget = dialog.widgets[name]
        if spec.choices:
            values = [widget.itemData(i) for i in range(widget.count())]
            assert values == list(spec.choices), name
    assert dialog.edited() == Settings()


def test_gpu_offload_modes_map_to_layers():
    auto = params_from_settings(Settings(gpu_offload="auto"), "/m.gguf")
    assert auto.gpu_auto and auto.n_gpu_layers == 0  # the planner decides at load time
    off = params_from_settings(Settings(gpu_offload="off", n_gpu_layers=30), "/m.gguf")
    assert not off.gpu_auto and off.n_gpu_layers == 0
    manual = params_from_settings(Settings(gpu_offload="manual", n_gpu_layers=30), "/m.gguf")
    assert not manual.gpu_auto and manual.n_gpu_layers == 30


def test_send_key_and_theme_apply_at_once_engine_settings_on_the_next_load(qtbot, window):
    app = QApplication.instance()
    window.open_settings()
    dialog = window.settings_dialog
    dialog.set_value("send_key", "ctrl+enter")
    dialog.set_value("theme", "dark")
    dialog.set_value("n_ctx", 1024)
    try:
        _save(dialog)
        assert is_dark(app.palette())
        qtbot.waitUntil(lambda: is_dark(window.chat.scroll.widget().palette()))  # propagated
        # The hint banner's link reads on the dark window (it was dark blue on dark grey).
        label = window.hint.label.palette()
        link, ground = label.color(label.ColorRole.Link), label.color(label.ColorRole.Window)
        assert link.lightness() - ground.lightness() > 90
        assert window.settings.theme == "dark"
        assert "apply when the model is next loaded" in window.statusBar().currentMessage()
        assert window.load_params.n_ctx == 1024  # for the next load
        assert "context 2048" in window.model_label.full_text()  # the loaded one is unchanged

        chat_input = window.chat.input
        chat_input.setPlainText("one")
        chat_input.moveCursor(chat_input.textCursor().MoveOperation.End)
        qtbot.keyClick(chat_input, Qt.Key.Key_Return)
        assert chat_input.toPlainText() == "one\n"  # Enter is a new line now
        assert "Ctrl+Enter" in chat_input.placeholderText()
        with qtbot.waitSignal(window.bridge.finished, timeout=120_000):
            window.store.update(window.chat.conversation_id, sampling={"max_tokens": 4})
            qtbot.keyClick(chat_input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        assert window.store.messages(window.chat.conversation_id)[0].content == "one"
    finally:
        apply_theme(app, "system")
    assert not is_dark(app.palette())
    qtbot.waitUntil(lambda: not is_dark(window.chat.scroll.widget().palette()))


def test_a_dark_platform_palette_gets_links_that_read_on_it(qapp):
    from deskllm.gui.qt import QColor, QPalette

    dark = QPalette(QColor(0x35, 0x35, 0x35))
    dark.setColor(QPalette.ColorRole.Link, QColor(0x00, 0x00, 0xCC))  # a light theme's blue
    fixed = readable_links(QPalette(dark))
    assert fixed.color(QPalette.ColorRole.Link).lightness() >= 150
    light = QPalette(QColor(0xEF, 0xEF, 0xEF))
    kept = light.color(QPalette.ColorRole.Link)
    assert readable_links(QPalette(light)).color(QPalette.ColorRole.Link) == kept


def test_gpu_offload_automatic_off_automatic_changes_the_next_load(qtbot, make_window):
    """Automatic → Off → the next load has no GPU layers; Off → Automatic → the planner's
    layers (planned here for a recorded laptop with an 8 GB GPU, so Automatic means all 31)."""
    from deskllm.hardware import report_from_dict
    from deskllm.planner.machine import remember_hardware

    profile = Path(__file__).parent.parent / "data" / "hardware" / "laptop_rtx4070_8gb.json"
    remember_hardware(report_from_dict(json.loads(profile.read_text())))
    try:
        window = make_window(gpu_offload="auto")
        assert window.bridge.client.params.n_gpu_layers == 31
        for mode, layers in (("off", 0), ("auto", 31)):
            window.open_settings()
            window.settings_dialog.set_value("gpu_offload", mode)
            _save(window.settings_dialog)
            with qtbot.waitSignal(window.bridge.loaded, timeout=120_000) as loaded:
                window.load_model()
            assert window.bridge.client.params.n_gpu_layers == layers, mode
            assert loaded.args[0].n_gpu_layers == layers
    finally:
        remember_hardware(None)
