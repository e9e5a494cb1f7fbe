"""GUI fixtures: a real main window (offscreen) on the real engine with the starter model."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from gui_helpers import REPLY_TIMEOUT_MS  # noqa: E402

from deskllm.engine.client import EngineClient  # noqa: E402
from deskllm.gui.engine_bridge import EngineBridge  # noqa: E402
from deskllm.gui.main_window import MainWindow  # noqa: E402
from deskllm.gui.qt import QSettings  # noqa: E402
from deskllm.store import ConversationStore, ModelLibrary, open_database  # noqa: E402


@pytest.fixture
def gui_state(deskllm_home):
    def make() -> QSettings:
        return QSettings(str(deskllm_home / "gui.ini"), QSettings.Format.IniFormat)

    return make


@pytest.fixture
def make_window(qtbot, load_params, deskllm_home, gui_state):
    """make_window(**load_param_changes): a shown MainWindow with the model loaded."""
    bridges: list[EngineBridge] = []

    def make(**changes) -> MainWindow:
        store = ConversationStore(open_database())
        library = ModelLibrary(store.db)
        library.ensure_starter()  # what app.py does on every start
        bridge = EngineBridge(EngineClient(), deskllm_home / "deskllm.sqlite3")
        bridges.append(bridge)
        win = MainWindow(store, bridge, load_params(**changes), gui_state(), library=library)
        qtbot.addWidget(win)
        win.show()
        with qtbot.waitSignal(bridge.loaded, timeout=REPLY_TIMEOUT_MS):
            win.load_model()
        return win

    yield make
    for bridge in bridges:
        bridge.shutdown()


@pytest.fixture
def window(make_window) -> MainWindow:
    return make_window()
