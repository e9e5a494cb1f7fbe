"""GUI fixtures: a real main window (offscreen) on the real engine with the starter model."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from gui_helpers import REPLY_TIMEOUT_MS, listed  # noqa: E402

from deskllm.engine.client import EngineClient  # noqa: E402
from deskllm.gui.engine_bridge import EngineBridge  # noqa: E402
from deskllm.gui.main_thread_gc import MainThreadGc  # noqa: E402
from deskllm.gui.main_window import MainWindow  # noqa: E402
from deskllm.gui.qt import QSettings  # noqa: E402
from deskllm.settings import Settings  # noqa: E402
from deskllm.store import ConversationStore, ModelLibrary, open_database  # noqa: E402


@pytest.fixture(autouse=True)
def main_thread_gc(qapp):
    """As in the app (gui/app.py): reference cycles are collected on the GUI thread only, so a
    widget an earlier test left in a cycle is never destroyed by a later test's worker thread
    (that crashes the process). Teardown collects what this test left, on this thread."""
    collector = MainThreadGc(qapp)
    yield collector
    collector.uninstall()
    collector.deleteLater()


@pytest.fixture
def gui_state(deskllm_home):
    def make() -> QSettings:
        return QSettings(str(deskllm_home / "gui.ini"), QSettings.Format.IniFormat)

    return make


@pytest.fixture
def load_overrides(extra_bufts, tmp_path):
    """What the tests fix whatever the settings say: the probe's answer (already known) and
    a KV folder of the test's own."""
    return {"use_extra_bufts": extra_bufts, "kv_disk_dir": str(tmp_path / "kv")}


@pytest.fixture
def make_window(qtbot, starter_model, deskllm_home, gui_state, load_overrides):
    """make_window(model_path=None, **settings_changes): a shown MainWindow with the starter
    model (or `model_path`) loaded, on settings for this 2-core machine (2048 tokens, 2
    threads, GPU offload off)."""
    bridges: list[EngineBridge] = []

    def make(model_path: str | None = None, **changes) -> MainWindow:
        store = ConversationStore(open_database())
        library = ModelLibrary(store.db)
        library.ensure_starter()  # what app.py does on every start
        bridge = EngineBridge(EngineClient(), deskllm_home / "deskllm.sqlite3")
        bridges.append(bridge)
        settings = Settings(**({"n_ctx": 2048, "n_threads": 2, "gpu_offload": "off"} | changes))
        win = MainWindow(store, bridge, model_path or str(starter_model), gui_state(), settings,
                         library, load_overrides)  # fmt: skip
        qtbot.addWidget(win)
        win.show()
        with qtbot.waitSignal(bridge.loaded, timeout=REPLY_TIMEOUT_MS):
            win.load_model()
        listed(qtbot, win)
        return win

    yield make
    for bridge in bridges:
        bridge.shutdown()


@pytest.fixture
def window(make_window) -> MainWindow:
    return make_window()


@pytest.fixture
def make_panel(qtbot, deskllm_home):
    """make_panel(*extra_models) -> a shown ModelsPanel on this test's library: the starter
    model and `extra_models` (paths) installed; every one is shut down at the end."""
    from deskllm import settings as settings_mod
    from deskllm.gui.live_settings import LiveSettings
    from deskllm.gui.models_panel import ModelsPanel

    panels: list[ModelsPanel] = []

    def make(*extra_models) -> ModelsPanel:
        library = ModelLibrary(open_database())
        library.ensure_starter()
        for path in extra_models:
            library.add(path)
        panel = ModelsPanel(library, LiveSettings(settings_mod.load()))
        qtbot.addWidget(panel)
        panel.show()
        panels.append(panel)
        return panel

    yield make
    for panel in panels:
        panel.shutdown()
