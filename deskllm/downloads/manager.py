"""The download queue: a few downloads at a time, pause / resume / cancel, and a queue kept in
SQLite so it survives an app restart (the bytes themselves survive in the partial files)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from deskllm import paths
from deskllm.downloads.control import Control
from deskllm.downloads.errors import DownloadError, Interrupted, LockedError
from deskllm.downloads.events import DownloadState, Progress, ProgressCallback
from deskllm.downloads.item import DownloadItem, ItemResult, download_item
from deskllm.downloads.lock import FileLock
from deskllm.downloads.partfile import lock_path, remove_partial
from deskllm.downloads.transfer import TransferOptions, TransferStats
from deskllm.gguf.header import GgufError

log = logging.getLogger("deskllm.downloads")

ACTIVE = (DownloadState.QUEUED, DownloadState.DOWNLOADING, DownloadState.VERIFYING)
_DB_PROGRESS_EVERY_S = 2.0


@dataclass(frozen=True)
class DownloadRecord:
    id: int
    item: DownloadItem
    state: DownloadState
    bytes_done: int
    total: int
    error: str | None
    path: str | None  # the final file once done
    model_id: int | None
    created_at: float
    updated_at: float


def _record(row: dict) -> DownloadRecord:
    return DownloadRecord(
        id=row["id"],
        item=DownloadItem.from_json(row["repo_id"], row["parts"], row["quant"]),
        state=DownloadState(row["state"]),
        bytes_done=row["bytes_done"] or 0,
        total=row["total_bytes"] or 0,
        error=row["error"],
        path=row["path"],
        model_id=row["model_id"],
        created_at=row["created_at"] or 0.0,
        updated_at=row["updated_at"] or 0.0,
    )


class DownloadManager:
    """Runs at most `max_concurrent` downloads, each on its own thread.

    Progress events (typed, see events.py) go to `on_progress` from worker threads; the GUI
    forwards them as Qt signals. Every state change is committed to SQLite before it is
    announced. Closing the manager pauses running downloads and leaves them queued, so the
    next start() resumes them."""

    def __init__(
        self,
        db_path: Path | None = None,
        models_dir: Path | None = None,
        *,
        max_concurrent: int = 2,
        on_progress: ProgressCallback | None = None,
        options: TransferOptions | None = None,
    ) -> None:
        from deskllm.database import open_database

        self.models_dir = Path(models_dir) if models_dir else paths.models_dir()
        self.max_concurrent = max(1, max_concurrent)
        self.options = options or TransferOptions()
        # One connection that the worker threads share: every use is under the manager's lock.
        self._db = open_database(db_path, shared=True)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._callbacks: list[ProgressCallback] = [on_progress] if on_progress else []
        self._queue: list[int] = []  # ids this manager runs, in order
        self._controls: dict[int, Control] = {}
        self._threads: dict[int, threading.Thread] = {}
        self._started = False
        self._closing = False
        self._saved_at: dict[int, float] = {}
        self._stats: dict[int, TransferStats] = {}  # of this process's last run, per id
        self._errors: dict[int, str] = {}  # failures that are not this process's to record
        self._closed = False

    # -- public ------------------------------------------------------------------------------

    def subscribe(self, callback: ProgressCallback) -> None:
        with self._lock:
            self._callbacks.append(callback)

    def start(self, restore: bool = True) -> None:
        """Begin downloading. With `restore`, the queue left by the last run comes back:
        what was queued or running is queued again (and resumes from its partial files)."""
        with self._lock:
            self._started = True
            if restore:
                for row in self._db["downloads"].rows_where(
                    "state in (?, ?, ?)", [s.value for s in ACTIVE], order_by="id"
                ):
                    self._set(row["id"], DownloadState.QUEUED)
                    if row["id"] not in self._queue:
                        self._queue.append(row["id"])
            self._schedule()

    def add(self, item: DownloadItem) -> int:
        """Queue `item` (or return the id of the same file already in the queue)."""
        with self._lock:
            for row in self._db["downloads"].rows_where(
                "repo_id = ? and name = ? and state not in (?, ?)",
                [item.repo_id, item.name, DownloadState.DONE.value, DownloadState.CANCELLED.value],
                order_by="id desc",
            ):
                self._requeue(row["id"], item)
                return row["id"]
            now = time.time()
            row_id = (
                self._db["downloads"]
                .insert(
                    {
                        "repo_id": item.repo_id,
                        "name": item.name,
                        "quant": item.quant,
                        "parts": item.to_json(),
                        "total_bytes": item.total,
                        "bytes_done": item.bytes_on_disk(self.models_dir),
                        "state": DownloadState.QUEUED.value,
                        "created_at": now,
                        "updated_at": now,
                    }
                )
                .last_pk
            )
            self._queue.append(row_id)
            self._announce(row_id)
            self._schedule()
            return row_id

    def pause(self, download_id: int) -> None:
        """Stop, keep the partial file; resume() continues from it."""
        with self._lock:
            control = self._controls.get(download_id)
            if control is not None:
                control.pause()  # the worker records PAUSED when it has stopped
            elif self.get(download_id).state == DownloadState.QUEUED:
                self._dequeue(download_id)
                self._set(download_id, DownloadState.PAUSED)
                self._announce(download_id)

    def resume(self, download_id: int) -> None:
        """Queue a paused or failed download again (it continues from its partial file)."""
        with self._lock:
            record = self.get(download_id)
            if record.state in (DownloadState.PAUSED, DownloadState.FAILED):
                self._requeue(download_id, record.item)

    def cancel(self, download_id: int) -> None:
        """Stop and delete the partial files. Finished files are not touched. Raises
        LockedError when another deskllm process is downloading the file right now."""
        with self._lock:
            control = self._controls.get(download_id)
            if control is not None:
                control.cancel()  # the worker removes the partial and records CANCELLED
                return
            record = self.get(download_id)
            if record.state.finished and record.state != DownloadState.FAILED:
                return
            self._dequeue(download_id)
            for part in record.item.parts:
                dest = record.item.dest(self.models_dir, part)
                if not dest.parent.is_dir():
                    continue  # never started
                with FileLock(lock_path(dest), part.what):  # not under another process's feet
                    remove_partial(dest)
            self._set(download_id, DownloadState.CANCELLED)
            self._announce(download_id)

    def get(self, download_id: int) -> DownloadRecord:
        with self._lock:
            return _record(self._db["downloads"].get(download_id))

    def list(self) -> list[DownloadRecord]:
        with self._lock:
            return [_record(r) for r in self._db["downloads"].rows_where(order_by="id")]

    def stats(self, download_id: int) -> TransferStats | None:
        """Bytes fetched, resumed, re-hashed and retries of this process's last run."""
        with self._lock:
            return self._stats.get(download_id)

    def wait(self, download_id: int, timeout: float | None = None) -> DownloadRecord:
        """Block until this manager no longer runs or queues the download (done, failed,
        cancelled, paused), or the timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                record = self.get(download_id)
                if download_id not in self._threads and download_id not in self._queue:
                    if download_id in self._errors:  # another process owns the row's state
                        return dataclasses.replace(
                            record, state=DownloadState.FAILED, error=self._errors[download_id]
                        )
                    return record
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return record
                self._changed.wait(left)

    def close(self, timeout: float = 10.0) -> None:
        """Pause what runs (the partial files stay) and leave it queued for the next start."""
        with self._lock:
            self._closing = True
            threads = list(self._threads.values())
            for control in self._controls.values():
                control.pause()
        for thread in threads:
            thread.join(timeout)
        with self._lock:
            self._closed = True
            self._db.conn.close()

    # -- internals ---------------------------------------------------------------------------

    def _requeue(self, download_id: int, item: DownloadItem) -> None:
        if download_id in self._threads or download_id in self._queue:
            return
        self._db["downloads"].update(
            download_id, {"parts": item.to_json(), "total_bytes": item.total}
        )
        self._set(download_id, DownloadState.QUEUED, error=None)
        self._errors.pop(download_id, None)
        self._queue.append(download_id)
        self._announce(download_id)
        self._schedule()

    def _dequeue(self, download_id: int) -> None:
        if download_id in self._queue:
            self._queue.remove(download_id)

    def _schedule(self) -> None:
        if not self._started or self._closing:
            return
        while self._queue and len(self._threads) < self.max_concurrent:
            download_id = self._queue.pop(0)
            control = Control()
            thread = threading.Thread(
                target=self._run, args=(download_id, control), name=f"download-{download_id}",
                daemon=True,
            )  # fmt: skip
            self._controls[download_id] = control
            self._threads[download_id] = thread
            self._set(download_id, DownloadState.DOWNLOADING)
            thread.start()
        self._changed.notify_all()

    def _run(self, download_id: int, control: Control) -> None:
        record = self.get(download_id)
        state, error, result = DownloadState.FAILED, None, None
        try:
            result = download_item(
                record.item, self.models_dir, control=control, options=self.options,
                on_progress=self._progress, item_id=download_id,
            )  # fmt: skip
            state = DownloadState.DONE
        except Interrupted as stop:
            if stop.cancelled:
                state = DownloadState.CANCELLED
            else:
                state = DownloadState.QUEUED if self._closing else DownloadState.PAUSED
        except LockedError as exc:
            # Another process owns this file (and this row): report, but do not overwrite its
            # state.
            with self._lock:
                self._errors[download_id] = str(exc)
                event = self._progress_of(self.get(download_id), DownloadState.FAILED, str(exc))
                self._finish(download_id)
            self._emit(event)
            return
        except DownloadError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a bug must fail the item, not the app
            log.exception("download %s failed", download_id)
            error = f"unexpected error: {exc!r}"
        model_id = None
        if result is not None:
            try:
                model_id = self._add_to_library(result)
            except Exception as exc:  # noqa: BLE001 - the file is fine; say why it is not listed
                # A file the Hub has but that is no GGUF model is refused with a GgufError:
                # expected, no traceback. Anything else is a bug worth one.
                if isinstance(exc, GgufError):
                    log.warning("%s is not added to the library: %s", result.path, exc)
                else:
                    log.exception("adding %s to the library failed", result.path)
                state, error = (
                    DownloadState.FAILED,
                    (f"downloaded {result.path}, but it could not be added to the library: {exc}"),
                )
        with self._lock:
            if self._closed:
                return
            if result is not None:
                self._stats[download_id] = result.stats
            record = self.get(download_id)
            done = record.item.bytes_on_disk(self.models_dir)
            fields: dict = {"bytes_done": done, "error": error}
            if result is not None:
                fields |= {"path": str(result.path), "model_id": model_id}
            self._set(download_id, state, **fields)
            self._finish(download_id)
            self._announce(download_id)
            self._schedule()

    def _finish(self, download_id: int) -> None:
        with self._lock:
            self._threads.pop(download_id, None)
            self._controls.pop(download_id, None)
            self._saved_at.pop(download_id, None)
            self._changed.notify_all()

    def _add_to_library(self, result: ItemResult) -> int:
        from deskllm.store import ModelLibrary

        with self._lock:
            return ModelLibrary(self._db).add(result.path, source="download").id

    def _set(self, download_id: int, state: DownloadState, **fields) -> None:
        with self._lock:
            self._db["downloads"].update(
                download_id, {"state": state.value, "updated_at": time.time(), **fields}
            )
            self._changed.notify_all()

    def _progress(self, event: Progress) -> None:
        """From a worker: persist progress now and then, pass every event on."""
        assert event.id is not None
        now = time.monotonic()
        if now - self._saved_at.get(event.id, 0.0) >= _DB_PROGRESS_EVERY_S or (
            event.state == DownloadState.VERIFYING
        ):
            with self._lock:
                self._saved_at[event.id] = now
                self._set(event.id, event.state, bytes_done=event.bytes_done)
        self._emit(event)

    def _announce(self, download_id: int) -> None:
        record = self.get(download_id)
        self._emit(self._progress_of(record, record.state, record.error))

    def _progress_of(
        self, record: DownloadRecord, state: DownloadState, error: str | None
    ) -> Progress:
        return Progress(
            id=record.id, name=record.item.what, state=state, bytes_done=record.bytes_done,
            total=record.total, error=error, path=record.path,
        )  # fmt: skip

    def _emit(self, event: Progress) -> None:
        for callback in list(self._callbacks):
            try:
                callback(event)
            except Exception:  # noqa: BLE001 - a broken listener must not stop a download
                log.exception("progress callback failed")
