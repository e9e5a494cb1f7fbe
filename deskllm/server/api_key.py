"""The server's own API key, for when it listens beyond this machine: generated on first use
and kept in an owner-only file of the deskllm home, so it survives restarts and the user (or
the GUI) can read it again."""

from __future__ import annotations

import secrets
from pathlib import Path

from deskllm import paths

KEY_PREFIX = "dsk-"


def key_path() -> Path:
    return paths.private_dir(paths.home() / "server") / "api_key"


def stored_key(path: Path | None = None) -> str:
    """The stored key, made (and stored 0600) when there is none or the file is damaged."""
    path = path or key_path()
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        key = ""
    if key.startswith(KEY_PREFIX) and len(key) >= 24 and key.isascii() and key.isprintable():
        return key
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    tmp = path.with_suffix(".tmp")
    paths.write_private_text(tmp, key + "\n")
    tmp.replace(path)  # whole or not at all
    return key
