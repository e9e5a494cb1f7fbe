"""Per-user locations. `DESKLLM_HOME` overrides the platform app-data dir (tests set it).

What deskllm creates there is private on POSIX: folders 0700, files 0600 (conversations,
settings and caches are nobody else's business on a shared machine). A folder or file that
already exists, e.g. one the user made for DESKLLM_HOME, is left as it is. On Windows the
per-user AppData folder is private already and the modes are ignored.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, Any

APP_NAME = "deskllm"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def home() -> Path:
    """The per-user data dir, created on first use."""
    override = os.environ.get("DESKLLM_HOME")
    if override:
        base = Path(override)
    elif sys.platform == "win32":
        base = Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming") / APP_NAME
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support" / APP_NAME
    else:
        xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        base = Path(xdg) / APP_NAME
    return private_dir(base)


def _subdir(name: str) -> Path:
    return private_dir(home() / name)


def private_dir(path: Path) -> Path:
    """`path`, created owner-only (0700) when missing. Missing parents get the usual mode
    (~/.local/share is not ours); an existing folder is not touched."""
    if path.is_dir():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE)
    except FileExistsError:
        return path  # made at the same moment by another process: theirs to decide
    os.chmod(path, PRIVATE_DIR_MODE)  # mkdir's mode passes through the umask; make it exact
    return path


def ensure_private_file(path: Path) -> Path:
    """Create `path` empty and owner-only (0600) when missing, so that what opens it next
    (SQLite, which gives its -wal and -shm files the database's mode) writes a private file.
    An existing file is not touched."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        return path
    os.close(fd)
    return path


def open_private(path: Path, mode: str = "w") -> IO[Any]:
    """Open `path` to write it whole ('w' or 'wb'), created or truncated, owner-only (0600)
    whatever the umask. Meant for our own files, typically a temporary file then renamed over
    the real one (the rename keeps the mode)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"open_private writes whole files ('w' or 'wb'), not {mode!r}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, PRIVATE_FILE_MODE)  # a file left from before keeps its mode on open
        return os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")
    except BaseException:
        os.close(fd)
        raise


def write_private_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path`, owner-only: see open_private."""
    with open_private(path, "w") as f:
        f.write(text)


def database_path() -> Path:
    return home() / "deskllm.sqlite3"


def settings_path() -> Path:
    return home() / "settings.json"


def models_dir() -> Path:
    return _subdir("models")


def kv_cache_dir() -> Path:
    return _subdir("kv-cache")


def probe_cache_dir() -> Path:
    """Results of machine probes (crash-safe engine probe, memory bandwidth), per build."""
    return _subdir("probes")


def logs_dir() -> Path:
    return _subdir("logs")


def resources_dir() -> Path:
    """Bundled resources: next to the package in a checkout, inside the bundle when frozen."""
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"
