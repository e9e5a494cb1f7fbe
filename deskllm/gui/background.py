"""BackgroundCalls: run blocking core calls (hub, header reads, planning, download queue) on
one worker thread, in order, and hand each result back on the GUI thread.

    calls = BackgroundCalls("catalog", parent=self)
    calls.run(lambda: HubCatalog().search(text), self._on_searched)

`_on_searched(future)` runs on the GUI thread (a queued signal) with the finished Future;
`future.result()` returns the value or raises what the call raised.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from deskllm.gui.qt import QObject, Signal


class BackgroundCalls(QObject):
    _done = Signal(object)  # (Future, callback)

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gui-{name}")
        self._closed = False
        self._done.connect(self._on_done)

    def run(
        self, fn: Callable[[], Any], callback: Callable[[Future], None] | None = None
    ) -> Future | None:
        """Queue `fn`; None once shut down (the app is closing: nothing runs any more)."""
        if self._closed:
            return None
        future = self._pool.submit(fn)
        if callback is not None:
            future.add_done_callback(lambda f: self._done.emit((f, callback)))
        return future

    def shutdown(self, wait: bool = True) -> None:
        """Stop taking calls; with `wait`, block until the queued ones ran (app exit only)."""
        self._closed = True
        self._pool.shutdown(wait=wait, cancel_futures=True)

    def _on_done(self, pair: tuple[Future, Callable[[Future], None]]) -> None:
        future, callback = pair
        if not self._closed and not future.cancelled():
            callback(future)
