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


ENV_VAR = "DESKLLM_API_KEY"


class KeyFileError(ValueError):
    """A key file that cannot be used, with the reason and what to do."""


def read_key_file(path: Path) -> str:
    """The key in `path` (its first line), read once. A file other users may read is refused:
    a key they can read is no key (what ssh does with a private key)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"cannot read the key file {path}: {exc}") from None
    if mode & 0o077:
        raise KeyFileError(
            f"refusing the key file {path}: its mode {mode & 0o777:04o} lets other users of "
            f"this machine read it; make it private with `chmod 600 {path}`"
        )
    key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not key:
        raise KeyFileError(f"the key file {path} is empty")
    return key
