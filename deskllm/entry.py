"""The one entry point of deskllm: `main.py`, `python -m deskllm`, the `deskllm` and
`deskllm-gui` scripts and the frozen executable all come here, so a frozen deskllm is a single
executable: with no arguments (or only the app's own options) it opens the window, otherwise
it is the `deskllm` command (`deskllm --self-test`, `deskllm hw`, ...)."""

from __future__ import annotations

import multiprocessing
import os
import sys

_APP_OPTIONS = {"--model", "-v", "--verbose"}


def _prepare() -> None:
    # A windowed executable (deskllm-gui.exe on Windows) has no console: stdout and stderr
    # are None, and the first write to them would raise.
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
    multiprocessing.freeze_support()  # the engine worker is this executable in worker mode


def main(argv: list[str] | None = None) -> int:
    _prepare()
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in _APP_OPTIONS:
        from deskllm.gui.app import main as app_main

        return app_main(args)
    from deskllm.cli import main as cli_main

    return cli_main(args)


def gui_main(argv: list[str] | None = None) -> int:
    """The `deskllm-gui` script: always the window."""
    _prepare()
    from deskllm.gui.app import main as app_main

    return app_main(sys.argv[1:] if argv is None else argv)
