"""Download one file from a Hub repo: resumable, verified, atomic.

The bytes go to `<dest>.part` (appended, never rewritten), the hash runs while writing, and a
sidecar records how far both got. A restart continues with an HTTP Range request from the
last byte on disk; If-Range with the ETag makes a file that changed on the server start over
instead of mixing two versions. The file gets its final name (os.replace) only after its
sha256 matched the Hub's LFS sha256.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import http.client
import logging
import os
import queue
import random
import shutil
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from deskllm.downloads.checkpoint import Checkpointer
from deskllm.downloads.control import Control
from deskllm.downloads.errors import (
    ChecksumError,
    DiskFullError,
    DownloadError,
    Interrupted,
    OfflineError,
    RemoteChangedError,
    RetryableError,
)
from deskllm.downloads.events import DownloadState
from deskllm.downloads.http import (
    ConnectError,
    RangeResponse,
    Target,
    file_url,
    hub_headers,
    open_range,
)
from deskllm.downloads.lock import FileLock
from deskllm.downloads.partfile import (
    Sidecar,
    lock_path,
    part_path,
    remove_partial,
    sidecar_path,
)
from deskllm.downloads.sha256_state import (
    STATE_KIND,
    HashStateError,
    HashThread,
    Sha256,
    load_sha256,
    new_sha256,
)
from deskllm.downloads.units import human_bytes

log = logging.getLogger("deskllm.downloads")

# Read buffers per transfer (of TransferOptions.chunk_bytes each): enough for the hashing
# thread to lag a few reads behind without stopping the socket reads.
_BUFFERS = 8

# Errors of a connection that was working: retried from the last byte on disk.
_NETWORK_ERRORS = (OSError, http.client.HTTPException, ssl.SSLError)


@dataclass(frozen=True)
class RemoteFile:
    """One file of a Hub repo, as the catalog lists it."""

    repo_id: str
    path: str  # inside the repo
    size: int
    sha256: str | None  # the LFS sha256; None only for small non-LFS files (size check only)
    revision: str = "main"

    @property
    def what(self) -> str:
        return f"{self.repo_id}/{self.path}"


@dataclass(frozen=True)
class TransferOptions:
    connect_timeout_s: float = 10.0
    stall_timeout_s: float = 30.0  # no byte for this long: drop the connection, reconnect
    max_retries: int = 8  # consecutive failed attempts without a byte of progress
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    chunk_bytes: int = 1 << 20
    # A checkpoint fsyncs the data and saves the hash state: after a crash at most this much
    # is read back to re-hash (never fetched again).
    checkpoint_every_s: float = 1.0
    checkpoint_every_bytes: int = 32 << 20
    disk_margin_bytes: int = 64 << 20  # left free after the download, for the system's sake
    token: str | bool | None = None  # None: HF_TOKEN or the saved login, as huggingface_hub


@dataclass
class TransferStats:
    fetched: int = 0  # body bytes received and written by this run
    resumed_from: int = 0  # bytes already on disk when this run started
    rehashed: int = 0  # bytes read back from disk to continue the hash
    retries: int = 0
    restarts: int = 0  # times the partial was discarded because the server's file changed
    seconds: float = 0.0  # the whole call, up to a verified file under its final name
    sync_seconds: float = 0.0  # of which: waiting for the disk before the rename (fsync)

    def add(self, other: TransferStats) -> None:
        for name in ("fetched", "resumed_from", "rehashed", "retries", "restarts", "seconds",
                     "sync_seconds"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))


BytesCallback = Callable[[int, DownloadState], None]


def download_file(
    remote: RemoteFile,
    dest: Path,
    *,
    control: Control | None = None,
    on_progress: BytesCallback | None = None,
    options: TransferOptions | None = None,
) -> TransferStats:
    """Fetch `remote` to `dest`. Raises DownloadError subclasses or Interrupted (pause/cancel:
    a pause keeps the partial file, a cancel removes it)."""
    started = time.monotonic()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(lock_path(dest), remote.what):
        stats = _Transfer(remote, dest, control or Control(), on_progress, options).run()
    stats.seconds = time.monotonic() - started
    return stats


class _Transfer:
    def __init__(
        self,
        remote: RemoteFile,
        dest: Path,
        control: Control,
        on_progress: BytesCallback | None,
        options: TransferOptions | None,
    ) -> None:
        self.remote = remote
        self.dest = dest
        self.control = control
        self.report = on_progress or (lambda done, state: None)
        self.opts = options or TransferOptions()
        self.stats = TransferStats()
        self.part = part_path(dest)
        self.side = sidecar_path(dest)
        self.target = Target(remote.what, remote.repo_id)
        self.url = file_url(remote.repo_id, remote.path, remote.revision)
        self.offset = 0
        self.hasher: Sha256 | HashThread = new_sha256()
        self.sidecar = Sidecar(url=self.url, size=remote.size, sha256=remote.sha256)
        self._last_checkpoint = (time.monotonic(), 0)
        self._checkpoints: Checkpointer | None = None

    def run(self) -> TransferStats:
        if self.dest.is_file() and self.dest.stat().st_size == self.remote.size:
            # It only ever gets this name after its sha256 matched: nothing to do.
            remove_partial(self.dest)
            self.report(self.remote.size, DownloadState.DONE)
            return self.stats
        try:
            self.control.check()
            self._resume()
            self._check_space()
            self.report(self.offset, DownloadState.DOWNLOADING)
            with open(self.part, "ab", buffering=0) as f:
                self.hasher = HashThread(self.hasher)
                self._checkpoints = Checkpointer(f.fileno(), self.side)
                try:
                    self._fetch(f)
                finally:
                    self._checkpoints.close()
                    self.hasher.close()
                synced = time.monotonic()
                # The final name must mean "complete and on disk": after a power cut it must
                # never hold bytes the kernel had not written yet.
                os.fsync(f.fileno())
                self.stats.sync_seconds = time.monotonic() - synced
            self.report(self.offset, DownloadState.VERIFYING)
            self._verify()  # the hash ran while writing: this only compares
            os.replace(self.part, self.dest)
            _fsync_dir(self.dest.parent)
            self.side.unlink(missing_ok=True)
        except Interrupted as stop:
            if stop.cancelled:
                remove_partial(self.dest)
            raise
        except DownloadError:
            if self.offset == 0:  # nothing to resume from: leave no empty partial behind
                remove_partial(self.dest)
            raise
        self.report(self.offset, DownloadState.DONE)
        return self.stats

    # -- resume ------------------------------------------------------------------------------

    def _resume(self) -> None:
        """Continue from the partial file when its sidecar can be trusted; otherwise start
        over (or re-hash the partial file), saying so with the file's name. Whatever is on
        disk, this raises nothing but a DownloadError."""
        sidecar = Sidecar.load(self.side)  # checks every field; logs why one is not used
        if self.part.exists() and not self.part.is_file():
            raise DownloadError(f"{self.part} is in the way (it is not a file): move it away")
        on_disk = self.part.stat().st_size if self.part.exists() else None
        reason = _unusable(sidecar, on_disk, self.remote)
        if reason:
            if on_disk or sidecar is not None:
                log.warning("%s: starting over, %s (%s)", self.remote.what, reason, self.part)
            remove_partial(self.dest)
            self.part.touch()
            # Before any byte: a partial without a sidecar is not trusted. Not fsynced: if a
            # power cut loses it, all that is lost is an empty partial.
            self._save_sidecar(durable=False)
            return
        assert sidecar is not None and on_disk is not None
        self.sidecar = sidecar
        self.sidecar.url = self.url
        hasher = self._saved_hash(sidecar, on_disk)
        start = sidecar.bytes_done if hasher else 0
        self.hasher = hasher or new_sha256()
        # Bytes written after the last checkpoint (or all of them, without a usable hash
        # state) are read back once: they are never fetched again.
        try:
            self.stats.rehashed = _hash_range(self.part, start, on_disk, self.hasher)
        except OSError as exc:
            raise DownloadError(f"cannot read the partial file {self.part}: {exc}") from exc
        self.offset = self.stats.resumed_from = on_disk
        self._last_checkpoint = (time.monotonic(), on_disk)
        log.info(
            "%s: resuming at %d bytes (re-hashed %d)",
            self.remote.what,
            on_disk,
            self.stats.rehashed,
        )

    def _saved_hash(self, sidecar: Sidecar, on_disk: int) -> Sha256 | None:
        """The hash continued from the sidecar's state, or None: then the whole partial file
        is hashed again (with a log line when a saved state was there but is not usable)."""
        if on_disk < sidecar.bytes_done:
            log.warning(
                "%s: %s is shorter than its sidecar says (%d < %d bytes); re-hashing it",
                self.remote.what, self.part, on_disk, sidecar.bytes_done,
            )  # fmt: skip
            return None
        if sidecar.hash_kind is None and sidecar.hash_state is None:
            return None  # saved without OpenSSL: a re-hash was always the plan
        try:
            return load_sha256(sidecar.hash_kind, sidecar.hash_state, sidecar.bytes_done)
        except HashStateError as exc:
            log.warning(
                "%s: the saved hash state in %s is not usable (%s); re-hashing %s",
                self.remote.what, self.side, exc, self.part,
            )  # fmt: skip
            return None

    def _check_space(self) -> None:
        remaining = self.remote.size - self.offset
        if remaining <= 0:
            return
        folder = self.dest.parent
        free = shutil.disk_usage(folder).free
        if free < remaining + self.opts.disk_margin_bytes:
            raise DiskFullError(
                f"not enough free space in {folder}: {self.remote.what} needs "
                f"{human_bytes(remaining)} more (and {human_bytes(self.opts.disk_margin_bytes)} "
                f"to spare), {human_bytes(free)} is free. Free some space and try again.",
                str(folder),
                remaining + self.opts.disk_margin_bytes,
            )

    # -- fetch -------------------------------------------------------------------------------

    def _fetch(self, f) -> None:
        failures = 0
        reached = False  # did the server answer at least once in this run?
        headers = hub_headers(self.opts.token)
        while self.offset < self.remote.size:
            self.control.check()
            before = self.offset
            try:
                response = open_range(
                    self.url,
                    self.offset,
                    target=self.target,
                    headers=headers,
                    if_range=self.sidecar.etag,
                    connect_s=self.opts.connect_timeout_s,
                    stall_s=self.opts.stall_timeout_s,
                )
                reached = True
                self._receive(f, response)
                return
            except Interrupted:
                self._checkpoint(force=True)
                raise
            except ConnectError as exc:
                if not reached:
                    # Offline start: say so now instead of backing off for a minute.
                    self._checkpoint(force=True)
                    raise OfflineError(
                        f"cannot download {self.remote.what}: {exc}. Check the network"
                        + (
                            f"; the {human_bytes(self.offset)} already downloaded are kept and "
                            "the download resumes from there"
                            if self.offset
                            else ""
                        )
                        + "."
                    ) from exc
                error: Exception = exc
            except (RetryableError, *_NETWORK_ERRORS) as exc:
                error = exc
            self._checkpoint(force=True)
            self.control.check()  # a pause or cancel (its abort() broke the read) is no failure
            failures = 1 if self.offset > before else failures + 1
            self.stats.retries += 1
            if failures > self.opts.max_retries:
                raise DownloadError(
                    f"gave up on {self.remote.what} after {failures} failed attempts "
                    f"({error}); the {human_bytes(self.offset)} downloaded so far are kept: "
                    "try again later to resume"
                ) from error
            delay = self._backoff(failures, getattr(error, "retry_after", None))
            log.warning(
                "%s: %s; retrying from byte %d in %.1f s",
                self.remote.what,
                error,
                self.offset,
                delay,
            )
            self.control.sleep(delay)

    def _backoff(self, failures: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.opts.backoff_max_s)
        delay = min(self.opts.backoff_max_s, self.opts.backoff_base_s * 2 ** (failures - 1))
        return delay * random.uniform(0.5, 1.0)  # jitter: many clients do not retry in step

    def _receive(self, f, response: RangeResponse) -> None:
        self.control.attach(response)
        try:
            self._check_remote(response)
            if response.start != self.offset:
                if response.start != 0:
                    raise RetryableError(
                        f"the server sent byte {response.start} instead of {self.offset}"
                    )
                # A 200 to a ranged request: the file changed (If-Range) or ranges are not
                # supported. Start over rather than append a different file's bytes.
                log.info("%s: the server sent the whole file; starting over", self.remote.what)
                f.truncate(0)
                self.offset = 0
                self.hasher.close()
                self.hasher = HashThread(new_sha256())
                self.stats.restarts += 1
            if response.etag != self.sidecar.etag:
                self.sidecar.etag = response.etag
                self._checkpoint(force=True)
            # Socket reads go into a few reused buffers: each one goes back to the pool once
            # its bytes are written and hashed (a new bytes object per read cost more CPU than
            # the read itself).
            size, chunk = self.remote.size, self.opts.chunk_bytes
            pool: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
            for _ in range(_BUFFERS):
                pool.put(bytearray(chunk))
            while self.offset < size:
                self.control.check()
                buf = pool.get()  # waits while every buffer is still being hashed
                view = memoryview(buf)[: min(chunk, size - self.offset)]
                n = response.readinto1(view)
                if not n:
                    raise RetryableError(f"the connection closed at byte {self.offset} of {size}")
                self._write(f, view[:n])
                self.hasher.after(functools.partial(pool.put, buf))
                self.report(self.offset, DownloadState.DOWNLOADING)
                self._checkpoint()
        finally:
            self.control.attach(None)
            response.close()

    def _check_remote(self, response: RangeResponse) -> None:
        remote = self.remote
        if response.linked_sha256 and remote.sha256 and response.linked_sha256 != remote.sha256:
            raise RemoteChangedError(
                f"{remote.what} changed on the Hub since its file list was read (sha256 "
                f"{response.linked_sha256[:12]}…, expected {remote.sha256[:12]}…); "
                "look the repo up again and retry"
            )
        if response.total is not None and response.total != remote.size:
            raise RemoteChangedError(
                f"{remote.what} changed on the Hub since its file list was read (size "
                f"{response.total}, expected {remote.size}); look the repo up again and retry"
            )

    def _write(self, f, view: memoryview) -> None:
        done, total = 0, len(view)
        while done < total:
            try:
                n = f.write(view[done:]) or 0
            except OSError as exc:
                self._disk_error(exc)
            # Hash exactly what reached the file, so a short write stays consistent.
            self.hasher.update(view[done : done + n])
            done += n
            self.offset += n
            self.stats.fetched += n

    def _disk_error(self, exc: OSError) -> NoReturn:
        remaining = self.remote.size - self.offset
        # Best effort: the disk is full and the sidecar may not fit; resume copes without it
        # (it re-hashes the bytes past the last sidecar it finds).
        with contextlib.suppress(OSError, DownloadError):
            self._checkpoint(force=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            folder = self.dest.parent
            raise DiskFullError(
                f"the disk is full: {self.remote.what} needs {human_bytes(remaining)} more in "
                f"{folder}. The {human_bytes(self.offset)} downloaded so far are kept; free "
                "some space and resume.",
                str(folder),
                remaining,
            ) from exc
        raise DownloadError(f"cannot write {self.part}: {exc}") from exc

    # -- checkpoint and verify ---------------------------------------------------------------

    def _checkpoint(self, force: bool = False) -> None:
        """Record how far the file and its hash got: now and waiting for the disk (`force`:
        pause, error, a new ETag) or, every second or 32 MiB, in the background."""
        at, done = self._last_checkpoint
        now = time.monotonic()
        if not force and (
            now - at < self.opts.checkpoint_every_s
            and self.offset - done < self.opts.checkpoint_every_bytes
        ):
            return
        self._last_checkpoint = (now, self.offset)
        assert self._checkpoints is not None
        try:
            self._checkpoints.submit(self._snapshot())
            if force:
                self._checkpoints.flush()
        except OSError as exc:
            self._raise_sidecar_error(exc)

    def _snapshot(self) -> Sidecar:
        state = self.hasher.state()
        return dataclasses.replace(
            self.sidecar,
            bytes_done=self.offset,
            hash_kind=STATE_KIND if state else None,
            hash_state=state,
        )

    def _save_sidecar(self, durable: bool = True) -> None:
        self.sidecar = self._snapshot()
        try:
            self.sidecar.save(self.side, durable)
        except OSError as exc:
            self._raise_sidecar_error(exc)

    def _raise_sidecar_error(self, exc: OSError) -> NoReturn:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(
                f"the disk is full: {self.dest.parent} has no room for "
                f"{self.remote.what} ({human_bytes(self.remote.size - self.offset)} needed)",
                str(self.dest.parent),
                self.remote.size - self.offset,
            ) from exc
        raise exc

    def _verify(self) -> None:
        expected = self.remote.sha256
        if not expected:
            log.warning(
                "%s: the Hub lists no sha256 (not an LFS file); size checked only", self.remote.what
            )
            return
        digest = self.hasher.hexdigest()
        if digest != expected.lower():
            remove_partial(self.dest)
            raise ChecksumError(
                f"{self.remote.what} is corrupt: its sha256 is {digest[:16]}…, the Hub lists "
                f"{expected[:16]}…. The file was removed; download it again."
            )


def _unusable(sidecar: Sidecar | None, on_disk: int | None, remote: RemoteFile) -> str | None:
    """Why the partial file cannot be continued (None: it can)."""
    if on_disk is None:
        return "no partial file"
    if sidecar is None:
        return "the partial file has no readable sidecar"
    if (sidecar.sha256 or None) != (remote.sha256 or None) or sidecar.size != remote.size:
        return "the partial file belongs to another version of the file"
    if on_disk > remote.size:
        return "the partial file is longer than the file"
    return None


def _hash_range(path: Path, start: int, end: int, hasher: Sha256) -> int:
    if end <= start:
        return 0
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        left = end - start
        buf = bytearray(4 << 20)
        view = memoryview(buf)
        while left > 0:
            n = f.readinto(view[: min(len(buf), left)])
            if not n:
                raise DownloadError(f"{path} shrank while it was being read")
            hasher.update(view[:n])
            left -= n
    return end - start


def _fsync_dir(folder: Path) -> None:
    if os.name == "nt":
        return  # directories cannot be opened for fsync on Windows; NTFS journals the rename
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
