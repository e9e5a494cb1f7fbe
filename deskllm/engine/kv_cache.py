"""KvStateCache: the KV state of conversations the user switched away from.

An LRU in RAM (budget in bytes) spills to disk (budget in bytes); states on disk survive a
restart. Every state carries a guard (model file identity, n_ctx, KV types, template, engine
build) and a state whose guard differs from the current one is never returned.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("deskllm.engine")

_FILE_MAGIC = b"DKVS2\n"  # then <QQ: token count, data length; tokens; data


@dataclass(frozen=True)
class KvState:
    """The tokens a context holds and llama.cpp's serialized sequence state for them."""

    tokens: tuple[int, ...]
    data: bytes

    @property
    def size_bytes(self) -> int:
        return len(self.data) + 4 * len(self.tokens)


def make_guard(**parts: object) -> str:
    """A short hash of everything that must match for a saved state to be valid."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def model_identity(path: str) -> dict[str, object]:
    """Identity of a model file: a changed file (same name, new bytes) gets a new identity."""
    st = os.stat(path)
    return {"path": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


class KvStateCache:
    def __init__(
        self, guard: str, ram_budget_bytes: int, disk_dir: Path | None, disk_budget_bytes: int
    ):
        self.guard = guard
        self.ram_budget = ram_budget_bytes
        self.disk_budget = disk_budget_bytes if disk_dir else 0
        self.disk_dir = disk_dir
        self._ram: OrderedDict[str, KvState] = OrderedDict()
        if self.disk_dir:
            self.disk_dir.mkdir(parents=True, exist_ok=True)

    # Public -----------------------------------------------------------------------------------
    def put(self, key: str, state: KvState) -> None:
        self._ram.pop(key, None)
        if state.size_bytes > self.ram_budget:
            self._spill(key, state)
            return
        self._ram[key] = state
        while sum(s.size_bytes for s in self._ram.values()) > self.ram_budget:
            old_key, old_state = self._ram.popitem(last=False)
            self._spill(old_key, old_state)

    def get(self, key: str) -> tuple[KvState, str] | None:
        """The state and where it came from ("ram" | "disk"), or None."""
        if key in self._ram:
            self._ram.move_to_end(key)
            return self._ram[key], "ram"
        state = self._read_disk(key)
        return (state, "disk") if state else None

    def discard(self, key: str) -> None:
        self._ram.pop(key, None)
        path = self._path(key)
        if path:
            path.unlink(missing_ok=True)

    def keys(self) -> list[str]:
        on_disk = []
        if self.disk_dir:
            suffix = f".{self.guard}.kv"
            on_disk = [p.name[: -len(suffix)] for p in self.disk_dir.glob(f"*{suffix}")]
        return list(self._ram) + [k for k in on_disk if k not in self._ram]

    def flush_to_disk(self) -> None:
        """Persist states held only in RAM (clean shutdown, unload)."""
        for key, state in list(self._ram.items()):
            self._spill(key, state)

    # Disk -------------------------------------------------------------------------------------
    def _path(self, key: str) -> Path | None:
        if not self.disk_dir:
            return None
        safe = re.sub(r"[^A-Za-z0-9_-]", "_", key)
        return self.disk_dir / f"{safe}.{self.guard}.kv"

    def _spill(self, key: str, state: KvState) -> None:
        path = self._path(key)
        if not path or state.size_bytes > self.disk_budget:
            return
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            fh.write(_FILE_MAGIC)
            fh.write(struct.pack("<QQ", len(state.tokens), len(state.data)))
            fh.write(struct.pack(f"<{len(state.tokens)}i", *state.tokens))
            fh.write(state.data)
        os.replace(tmp, path)  # a crash mid-write never leaves a half state under the real name
        self._enforce_disk_budget(keep=path)

    def _read_disk(self, key: str) -> KvState | None:
        path = self._path(key)
        if not path or not path.is_file():
            return None
        try:
            raw = path.read_bytes()
            if not raw.startswith(_FILE_MAGIC):
                raise ValueError("bad magic")
            offset = len(_FILE_MAGIC)
            n, n_data = struct.unpack_from("<QQ", raw, offset)
            offset += 16
            if len(raw) != offset + 4 * n + n_data:
                raise ValueError("truncated or padded file")
            tokens = struct.unpack_from(f"<{n}i", raw, offset)
            offset += 4 * n
            os.utime(path)  # LRU on disk by mtime
            return KvState(tuple(tokens), raw[offset:])
        except (OSError, ValueError, struct.error) as exc:
            log.warning("dropping unreadable KV state %s: %s", path.name, exc)
            path.unlink(missing_ok=True)
            return None

    def _enforce_disk_budget(self, keep: Path) -> None:
        """Evict least recently used files; the one just written (`keep`) goes last, even when
        the file system's timestamps are too coarse to order it after the others."""
        assert self.disk_dir is not None
        files = sorted(self.disk_dir.glob("*.kv"), key=lambda p: (p == keep, p.stat().st_mtime_ns))
        total = sum(p.stat().st_size for p in files)
        for path in files:
            if total <= self.disk_budget:
                break
            total -= path.stat().st_size
            path.unlink(missing_ok=True)
