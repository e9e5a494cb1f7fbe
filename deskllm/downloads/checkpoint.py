"""Checkpoints off the download thread: fsync the partial file, then save the sidecar.

The sidecar must never claim bytes that are not on disk, so each save waits for an fsync of
the data. Done inline, that fsync stalled the receive loop while the disk caught up (about 20%
of the throughput at local-network speeds, bench/downloads.py); here the loop only hands over
the latest (bytes done, hash state) and goes on, and waits only when it asks to (pause, error,
end of the transfer)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from deskllm.downloads.partfile import Sidecar


class Checkpointer:
    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self._path = path
        self._cond = threading.Condition()
        self._pending: Sidecar | None = None
        self._busy = False
        self._closed = False
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._loop, name="download-checkpoint", daemon=True)
        self._thread.start()

    def submit(self, sidecar: Sidecar) -> None:
        """Save `sidecar` soon (a newer one replaces one not yet saved). Raises the error of
        an earlier save, if any (a full disk)."""
        with self._cond:
            self._raise()
            self._pending = sidecar
            self._cond.notify_all()

    def flush(self) -> None:
        """Wait until everything submitted is on disk."""
        with self._cond:
            while self._pending is not None or self._busy:
                self._cond.wait()
            self._raise()

    def close(self) -> None:
        """Finish what is pending and stop. Never raises (it runs while unwinding errors)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                sidecar, self._pending, self._busy = self._pending, None, True
            error = None
            try:
                os.fsync(self._fd)
                sidecar.save(self._path)
            except OSError as exc:
                error = exc
            with self._cond:
                self._busy = False
                if error is not None:
                    self._error = error
                self._cond.notify_all()
