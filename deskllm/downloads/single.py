"""One download from start to end, for a caller that waits for it (`deskllm download`,
Ollama's /api/pull): a DownloadManager of its own runs just this item, and stopping (a stop
event, Ctrl+C, a client that hung up) pauses it, so the same request later resumes it."""

from __future__ import annotations

import threading
from pathlib import Path

from deskllm.downloads.events import DownloadState, ProgressCallback
from deskllm.downloads.item import DownloadItem
from deskllm.downloads.manager import DownloadManager, DownloadRecord
from deskllm.downloads.transfer import TransferStats

_POLL_S = 0.25


def download_one(
    item: DownloadItem,
    models_dir: Path,
    on_progress: ProgressCallback | None = None,
    stop: threading.Event | None = None,
) -> tuple[DownloadRecord, TransferStats | None]:
    """The item downloaded, verified and added to the library (its record says how it
    ended: done, failed, or paused when stopped), and this run's transfer figures."""
    manager = DownloadManager(models_dir=models_dir, max_concurrent=1, on_progress=on_progress)
    download_id = None
    try:
        download_id = manager.add(item)
        manager.start(restore=False)  # only this item: the app's queue is the app's business
        while True:
            record = manager.wait(download_id, timeout=_POLL_S)
            if record.state.finished or record.state == DownloadState.PAUSED:
                break
            if stop is not None and stop.is_set():
                manager.pause(download_id)
                record = manager.wait(download_id, timeout=15)
                break
    except BaseException:  # Ctrl+C: the partial file stays, paused, for the next run
        if download_id is not None:
            manager.pause(download_id)
            manager.wait(download_id, timeout=15)
        raise
    finally:
        manager.close()
    return record, manager.stats(download_id)
