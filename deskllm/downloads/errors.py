"""Download errors. Each message says what happened, to which file, and what the user can do."""

from __future__ import annotations


class DownloadError(RuntimeError):
    """A download failed. `retryable` errors are retried by the transfer loop (with backoff)."""

    retryable = False


class RetryableError(DownloadError):
    """A dropped connection, a stall, a 5xx or 429: try again from the last byte on disk."""

    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OfflineError(DownloadError):
    """HF_HUB_OFFLINE is set or the Hub cannot be reached at all. The partial file is kept."""


class AuthError(DownloadError):
    """401/403: the repo is gated or private and needs a token with access."""


class NotFoundError(DownloadError):
    """404: no such repo, revision or file."""


class RemoteChangedError(DownloadError):
    """The Hub now serves a different file than the one listed (size or sha256 differ)."""


class DiskFullError(DownloadError):
    """Not enough free space, before starting or mid-download (ENOSPC). The partial is kept."""

    def __init__(self, message: str, folder: str, bytes_needed: int) -> None:
        super().__init__(message)
        self.folder = folder
        self.bytes_needed = bytes_needed


class ChecksumError(DownloadError):
    """The downloaded bytes do not have the Hub's sha256. The file was removed."""


class TlsError(DownloadError):
    """The server's certificate could not be verified. Never retried, never bypassed."""


class LockedError(DownloadError):
    """Another deskllm process is downloading the same file right now."""


class Interrupted(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised inside a transfer when the user paused or cancelled it."""

    def __init__(self, cancelled: bool) -> None:
        super().__init__("cancelled" if cancelled else "paused")
        self.cancelled = cancelled
