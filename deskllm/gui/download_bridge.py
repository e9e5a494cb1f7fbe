"""DownloadBridge: the download queue (deskllm.downloads.DownloadManager) for the GUI.

Every manager call (resolving a file on the Hub, SQLite writes, removing partial files) runs
on one worker thread; the manager's progress events, which come from its download threads,
are re-emitted as a Qt signal and so arrive on the GUI thread.

Signals:
    progress(Progress): a download changed (bytes, speed, state).
    restored(list): the unfinished downloads left by the last run (DownloadRecord), once the
        queue is started; queued ones continue by themselves.
    failed(str): a request could not be carried out (the repo is offline, gated, ...).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from pathlib import Path

from deskllm.downloads import DownloadManager, DownloadState, resolve
from deskllm.gui.qt import QObject, Signal
from deskllm.gui.tasks import TaskRunner

log = logging.getLogger("deskllm.gui")


class DownloadBridge(QObject):
    progress = Signal(object)
    restored = Signal(list)
    failed = Signal(str)

    def __init__(
        self,
        db_path: Path | None = None,
        parent: QObject | None = None,
        models_dir: Path | None = None,
    ) -> None:
        super().__init__(parent)
        self.db_path = db_path
        self.models_dir = models_dir  # None: the default folder under the per-user home
        self.manager: DownloadManager | None = None  # touched on the worker thread only
        self._calls = TaskRunner("downloads", self)

    def start(self) -> None:
        self._calls.run(self._start, self._on_started)

    def add(self, repo_id: str, file: str) -> None:
        self._calls.run(lambda: self._manager().add(resolve(repo_id, file)), self._on_request)

    def pause(self, download_id: int) -> None:
        self._calls.run(lambda: self._manager().pause(download_id), self._on_request)

    def resume(self, download_id: int) -> None:
        self._calls.run(lambda: self._manager().resume(download_id), self._on_request)

    def cancel(self, download_id: int) -> None:
        self._calls.run(lambda: self._manager().cancel(download_id), self._on_request)

    def set_models_dir(self, models_dir: Path) -> None:
        """Downloads added from now on go to `models_dir` (the setting changed)."""
        self.models_dir = models_dir

        def apply() -> None:
            if self.manager is not None:
                self.manager.models_dir = models_dir

        self._calls.run(apply)

    def shutdown(self) -> None:
        """Pause running downloads (they continue on the next start) and stop the worker."""
        self._calls.run(self._close)
        self._calls.shutdown(wait=True)

    # Worker thread -------------------------------------------------------------------------
    def _manager(self) -> DownloadManager:
        if self.manager is None:
            self.manager = DownloadManager(
                self.db_path, self.models_dir, on_progress=self.progress.emit
            )
        return self.manager

    def _start(self) -> list:
        manager = self._manager()
        manager.start(restore=True)
        return [r for r in manager.list() if r.state in _UNFINISHED]

    def _close(self) -> None:
        if self.manager is not None:
            self.manager.close()
            self.manager = None

    # GUI thread ----------------------------------------------------------------------------
    def _on_started(self, future: Future) -> None:
        try:
            self.restored.emit(future.result())
        except Exception as exc:  # the queue is broken; say so, the rest of the app works
            log.exception("the download queue could not start")
            self.failed.emit(f"The download queue could not start: {exc}")

    def _on_request(self, future: Future) -> None:
        try:
            future.result()
        except Exception as exc:  # DownloadError's words are meant for the user
            self.failed.emit(str(exc))


_UNFINISHED = (
    DownloadState.QUEUED,
    DownloadState.DOWNLOADING,
    DownloadState.VERIFYING,
    DownloadState.PAUSED,
    DownloadState.FAILED,
)
