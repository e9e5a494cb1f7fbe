"""TaskRunner: the GUI's one way to run blocking core calls (engine, hub, header reads,
planning, the download queue, the hardware probe) off the GUI thread and get their results
back on it — Anki's TaskManager idea.

    tasks = TaskRunner("catalog", parent=self)
    tasks.run(lambda: HubCatalog().search(text), self._on_searched)

`_on_searched(future)` runs on the GUI thread with the finished Future: `future.result()`
returns the value or raises what the call raised, so a failure reaches the view as an error to
show, never as a dead thread. `post(fn, *args)` runs `fn` on the GUI thread from inside a task
(streamed text, progress). A runner has `workers` threads; with one (the default) calls run in
order, one at a time, which is what a database connection or the engine client needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from deskllm.gui.qt import QObject, Signal

log = logging.getLogger("deskllm.gui")


class TaskRunner(QObject):
    _deliver = Signal(object)  # a zero-argument callable to run on the GUI thread

    def __init__(self, name: str, parent: QObject | None = None, workers: int = 1) -> None:
        super().__init__(parent)
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"gui-{name}")
        self._closed = False
        # The runner lives in the GUI thread, so a signal emitted from a pool thread is queued
        # and its slot runs on the GUI thread.
        self._deliver.connect(self._on_deliver)

    def run(
        self, fn: Callable[[], Any], callback: Callable[[Future], None] | None = None
    ) -> Future | None:
        """Queue `fn`; `callback(future)` on the GUI thread when it ends. None once shut down
        (the app is closing: nothing runs any more). A failure without a callback is logged."""
        if self._closed:
            return None
        future = self._pool.submit(fn)
        future.add_done_callback(lambda f: self._finished(f, callback))
        return future

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the GUI thread (from a task: streamed text, progress)."""
        if not self._closed:
            self._emit(lambda: fn(*args))

    def shutdown(self, wait: bool = True) -> None:
        """Stop taking calls; with `wait`, block until the queued ones ran (app exit only)."""
        self._closed = True
        self._pool.shutdown(wait=wait, cancel_futures=True)

    def _finished(self, future: Future, callback: Callable[[Future], None] | None) -> None:
        if future.cancelled():
            return
        if callback is None:
            if future.exception() is not None:
                log.error("background task of %s failed", self.name, exc_info=future.exception())
            return
        self._emit(lambda: callback(future))

    def _emit(self, fn: Callable[[], Any]) -> None:
        try:
            self._deliver.emit(fn)
        except RuntimeError:  # the runner was deleted with its widget (a closed dialog)
            log.debug("%s: a result arrived after the runner was deleted", self.name)

    def _on_deliver(self, fn: Callable[[], Any]) -> None:
        if not self._closed:
            fn()
