"""A lock file per destination, so two deskllm processes never write the same partial file."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from deskllm.downloads.errors import LockedError
from deskllm.paths import PRIVATE_FILE_MODE


class FileLock:
    """Exclusive, non-blocking, released by the OS if the process dies (flock / msvcrt)."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
            try:
                _lock(fd)
            except OSError:
                os.close(fd)
                raise LockedError(
                    f"{self.what} is already being downloaded by another deskllm process; "
                    "wait for it to finish or close it, then try again"
                ) from None
            # The holder before us may have unlinked the file after we opened it: then we hold
            # a lock on a name nobody else can find. Lock the file that is there now instead.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                return
            os.close(fd)

    def release(self) -> None:
        if self._fd is None:
            return
        # Unlink while still holding the lock (see acquire), then let go. Windows refuses to
        # unlink an open file: the empty lock file then stays, which is harmless.
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


if sys.platform == "win32":
    import msvcrt

    def _lock(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

else:
    import fcntl

    def _lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
