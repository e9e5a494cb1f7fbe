"""Start the desktop app: open the store, make sure the starter model is installed, start the
engine process and show the main window on the last model used (the starter model at first)."""

from __future__ import annotations

import argparse
import logging
import sys

from deskllm import paths
from deskllm import settings as settings_mod

log = logging.getLogger("deskllm.app")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="deskllm-gui", description="the deskllm desktop app")
    parser.add_argument("--model", help="a .gguf path or an installed model's name")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from deskllm.engine.client import EngineClient
    from deskllm.gui.engine_bridge import EngineBridge
    from deskllm.gui.main_thread_gc import MainThreadGc
    from deskllm.gui.main_window import MainWindow, run_window
    from deskllm.gui.qt import QApplication, QIcon, QMessageBox, QSettings
    from deskllm.gui.theme import apply_theme
    from deskllm.store import (
        ConversationStore,
        DatabaseTooNew,
        ModelLibrary,
        ModelNotFound,
        open_database,
    )

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("deskllm")
    app.setOrganizationName("deskllm")
    MainThreadGc(app)  # Qt objects in reference cycles die on this thread, never on a worker
    icon = paths.resources_dir() / "icons" / "deskllm.svg"
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))
    try:
        db = open_database()
    except DatabaseTooNew as exc:
        QMessageBox.critical(None, "deskllm cannot open your chats", str(exc))
        return 1
    store, library = ConversationStore(db), ModelLibrary(db)
    interrupted = store.mark_streaming_interrupted()
    if interrupted:
        log.info("%d replies were cut off when deskllm last ended; marked interrupted", interrupted)
    try:
        model_path = library.resolve(args.model)
    except ModelNotFound as exc:
        QMessageBox.critical(None, "No model", str(exc))
        return 1

    user_settings = settings_mod.load()
    apply_theme(app, user_settings.theme)
    client = EngineClient()
    bridge = EngineBridge(client, paths.database_path())
    gui_ini = paths.ensure_private_file(paths.home() / "gui.ini")  # Qt keeps the file's mode
    gui_state = QSettings(str(gui_ini), QSettings.Format.IniFormat)
    window = MainWindow(store, bridge, model_path, gui_state, user_settings, library)
    try:
        return run_window(window)
    finally:
        bridge.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
