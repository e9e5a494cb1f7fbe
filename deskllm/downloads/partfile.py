"""The partial file of a download and its JSON sidecar: what lets a download resume after the
app (or the machine) restarts."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def sidecar_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part.json")


def lock_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".lock")


@dataclass
class Sidecar:
    """Written after the bytes it describes are on disk (fsync), replaced atomically.

    `bytes_done` and `hash_state` always agree with each other; the partial file may be longer
    (bytes written after the last checkpoint), and those bytes are hashed again on resume: only
    the tail, never the whole file, unless the hash state is unusable."""

    url: str
    size: int
    sha256: str | None
    etag: str | None = None
    bytes_done: int = 0
    hash_kind: str | None = None
    hash_state: str | None = None
    version: int = 1

    @classmethod
    def load(cls, path: Path) -> Sidecar | None:
        """None when missing or unreadable (a partial without a sidecar is not trusted)."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            known = {f.name for f in dataclasses.fields(cls)}
            sidecar = cls(**{k: v for k, v in raw.items() if k in known})
        except (OSError, ValueError, TypeError):
            return None
        return sidecar if sidecar.version == 1 else None

    def save(self, path: Path, durable: bool = True) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(dataclasses.asdict(self), f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)


def remove_partial(dest: Path) -> None:
    for path in (part_path(dest), sidecar_path(dest), sidecar_path(dest).with_suffix(".json.tmp")):
        path.unlink(missing_ok=True)
