"""The code a probe child process runs. Kept apart and import-light: the child imports this
module (and the targets' modules) only, never the report dataclasses (see plain.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any


def run_targets(sender: Connection, targets: Sequence[Callable[[], Any]]) -> None:
    """Call each target in turn and send (True, result) or (False, error text) at once."""
    for target in targets:
        try:
            payload: tuple[bool, Any] = (True, target())
        except Exception as exc:  # reported to the parent as an error entry
            payload = (False, f"{type(exc).__name__}: {exc}")
        sender.send(payload)
    sender.close()
