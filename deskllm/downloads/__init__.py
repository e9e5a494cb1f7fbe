"""Resumable, verified model downloads from the Hugging Face Hub (Qt-free).

    item = resolve("bartowski/SmolLM2-135M-Instruct-GGUF", "Q4_K_M")
    manager = DownloadManager(on_progress=print)   # queue kept in SQLite
    manager.start()
    manager.wait(manager.add(item))

Bytes go to `<models>/<owner>/<name>/<file>.part` with a JSON sidecar; the sha256 runs while
writing and is compared with the Hub's LFS sha256 before the file is renamed into place.
"""

from deskllm.downloads.control import Control
from deskllm.downloads.errors import (
    AuthError,
    ChecksumError,
    DiskFullError,
    DownloadError,
    Interrupted,
    LockedError,
    NotFoundError,
    OfflineError,
    RemoteChangedError,
    TlsError,
)
from deskllm.downloads.events import DownloadState, Progress, ProgressCallback, SpeedMeter
from deskllm.downloads.item import DownloadItem, ItemResult, download_item
from deskllm.downloads.manager import DownloadManager, DownloadRecord
from deskllm.downloads.resolve import resolve
from deskllm.downloads.transfer import RemoteFile, TransferOptions, TransferStats, download_file

__all__ = [
    "AuthError",
    "ChecksumError",
    "Control",
    "DiskFullError",
    "DownloadError",
    "DownloadItem",
    "DownloadManager",
    "DownloadRecord",
    "DownloadState",
    "Interrupted",
    "ItemResult",
    "LockedError",
    "NotFoundError",
    "OfflineError",
    "Progress",
    "ProgressCallback",
    "RemoteChangedError",
    "RemoteFile",
    "SpeedMeter",
    "TlsError",
    "TransferOptions",
    "TransferStats",
    "download_file",
    "download_item",
    "resolve",
]
