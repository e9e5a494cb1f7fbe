"""KvStateCache: the KV state of conversations the user switched away from.

An LRU in RAM (budget in bytes) spills to disk (budget in bytes); states on disk survive a
restart. Every state carries a guard (model file identity, n_ctx, KV types, template, engine
build) and a state whose guard differs from the current one is never returned.

A state file is `<key>.<guard>.kv`, private (0600) and written whole under a temporary name
first. It says itself what it is for: a versioned header holds the guard, the key, the sizes
and a BLAKE2b digest of all of it, so a renamed, truncated or altered file is dropped (with a
log line naming it) instead of being handed to llama.cpp.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from deskllm.paths import open_private, private_dir

log = logging.getLogger("deskllm.engine")

_MAGIC = b"DKVS"
_VERSION = 3
# magic, version, guard length, key length, token count, data length, digest; then the guard,
# the key (UTF-8), the tokens (int32 LE) and llama.cpp's state data.
_HEADER = struct.Struct("<4sHHHQQ32s")
_NO_DIGEST = bytes(32)
_WRITER_IDLE_S = 30.0  # the writer thread ends after this long with nothing to write


class KvStateFileError(ValueError):
    """A state file that cannot be used (damaged, altered, too large, or for another key)."""


@dataclass(frozen=True)
class KvState:
    """The tokens a context holds and llama.cpp's serialized sequence state for them."""

    tokens: tuple[int, ...]
    data: bytes

    @property
    def size_bytes(self) -> int:
        return len(self.data) + 4 * len(self.tokens)


def _shared_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """The length of a's and b's common prefix, by halving with tuple comparisons (C speed:
    a prompt is matched against every state in memory)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def make_guard(**parts: object) -> str:
    """A short hash of everything that must match for a saved state to be valid."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def model_identity(path: str) -> dict[str, object]:
    """Identity of a model file: a changed file (same name, new bytes) gets a new identity."""
    st = os.stat(path)
    return {"path": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _safe_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", key)


def _digest(header: bytes, *parts: bytes) -> bytes:
    h = hashlib.blake2b(header, digest_size=32)
    for part in parts:
        h.update(part)
    return h.digest()


def encode_state(key: str, guard: str, state: KvState) -> list[bytes]:
    """The bytes of a state file, in parts (the state data is not copied)."""
    guard_b, key_b = guard.encode(), key.encode()
    tokens = struct.pack(f"<{len(state.tokens)}i", *state.tokens)
    fields = (_MAGIC, _VERSION, len(guard_b), len(key_b), len(state.tokens), len(state.data))
    digest = _digest(_HEADER.pack(*fields, _NO_DIGEST), guard_b, key_b, tokens, state.data)
    return [_HEADER.pack(*fields, digest), guard_b, key_b, tokens, state.data]


def read_state_file(
    path: Path, key: str, guard: str, max_bytes: int, max_tokens: int | None = None
) -> KvState:
    """The state saved in `path` for `key` under `guard`. Reads at most `max_bytes` (a larger
    file is refused before it is read). Raises KvStateFileError or OSError."""
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise KvStateFileError(f"{size} bytes, more than the {max_bytes}-byte budget")
        head = fh.read(_HEADER.size)
        if len(head) < _HEADER.size:
            raise KvStateFileError("truncated header")
        magic, version, n_guard, n_key, n_tokens, n_data, digest = _HEADER.unpack(head)
        if magic != _MAGIC:
            raise KvStateFileError("not a KV state file")
        if version != _VERSION:
            raise KvStateFileError(f"format version {version}, this app reads {_VERSION}")
        if size != _HEADER.size + n_guard + n_key + 4 * n_tokens + n_data:
            raise KvStateFileError("truncated or padded file")
        if max_tokens is not None and n_tokens > max_tokens:
            raise KvStateFileError(f"{n_tokens} tokens, more than the context's {max_tokens}")
        body = fh.read(size - _HEADER.size)
    if len(body) != size - _HEADER.size:
        raise KvStateFileError("the file changed while it was read")
    fields = _HEADER.pack(magic, version, n_guard, n_key, n_tokens, n_data, _NO_DIGEST)
    if _digest(fields, body) != digest:
        raise KvStateFileError("checksum mismatch: the file was damaged or altered")
    view = memoryview(body)
    offset = n_guard + n_key
    if bytes(view[:n_guard]) != guard.encode():
        raise KvStateFileError("made for another model, context or engine (guard differs)")
    if bytes(view[n_guard:offset]) != key.encode():
        raise KvStateFileError("the state of another conversation")
    tokens = struct.unpack_from(f"<{n_tokens}i", view, offset)
    return KvState(tuple(tokens), bytes(view[offset + 4 * n_tokens :]))


def _write_private(path: Path, parts: list[bytes]) -> None:
    """Write `parts` to `path` atomically: a crash mid-write never leaves a half state under
    the real name, and the file is readable by its owner only."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open_private(tmp, "wb") as fh:
            for part in parts:
                fh.write(part)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def delete_conversation_states(kv_dir: Path | str, conversation_id: str) -> int:
    """Remove every saved state of a conversation from `kv_dir`, whatever model or settings
    it was saved under (also when no engine runs). Returns how many files were removed."""
    kv_dir = Path(kv_dir)
    prefix = _safe_name(conversation_id) + "."
    removed = 0
    try:
        names = [entry.name for entry in os.scandir(kv_dir)]
    except FileNotFoundError:
        return 0
    for name in names:
        if not name.startswith(prefix):
            continue
        guard = name[len(prefix) :].removesuffix(".tmp").removesuffix(".kv")
        if "." in guard or not name.endswith((".kv", ".kv.tmp")):
            continue  # another conversation's file ("<id>.<more>..."): not ours
        try:
            (kv_dir / name).unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed


class KvStateCache:
    """States in RAM (LRU within a byte budget) and on disk (LRU by mtime within another).

    A state pushed out of RAM is written to disk by a writer thread: the engine saves states
    between decode steps, and writing tens of MB there stalled every running stream. Until
    its file is written the state stays readable from memory (get() says "ram"). Written
    states wait for the writer only while more than a RAM budget's worth is queued.
    """

    def __init__(
        self,
        guard: str,
        ram_budget_bytes: int,
        disk_dir: Path | None,
        disk_budget_bytes: int,
        max_tokens: int | None = None,
    ):
        self.guard = guard
        self.ram_budget = ram_budget_bytes
        self.disk_budget = disk_budget_bytes if disk_dir else 0
        self.disk_dir = disk_dir
        self.max_tokens = max_tokens  # a state file with more tokens is refused unread
        self._ram: OrderedDict[str, KvState] = OrderedDict()
        # The writer's queue, oldest first, and the key it is writing (still in the queue).
        # A key dropped while its file is being written is unlinked once the write ends.
        self._cond = threading.Condition()
        self._queued: OrderedDict[str, KvState] = OrderedDict()
        self._writing: str | None = None
        self._writing_dropped = False
        self._writer: threading.Thread | None = None
        if self.disk_dir:
            private_dir(self.disk_dir)

    # Public -----------------------------------------------------------------------------------
    def put(self, key: str, state: KvState) -> None:
        self._ram.pop(key, None)
        with self._cond:
            self._queued.pop(key, None)  # an older state not written yet: this one supersedes it
        if state.size_bytes > self.ram_budget:
            self._queue_write(key, state)
        else:
            self._ram[key] = state
            while sum(s.size_bytes for s in self._ram.values()) > self.ram_budget:
                self._queue_write(*self._ram.popitem(last=False))
        with self._cond:  # bounded memory: wait while the writer is a RAM budget behind
            self._cond.wait_for(
                lambda: len(self._queued) <= 1 or self._queued_bytes() <= self.ram_budget
            )

    def get(self, key: str) -> tuple[KvState, str] | None:
        """The state and where it came from ("ram" | "disk"), or None."""
        if key in self._ram:
            self._ram.move_to_end(key)
            return self._ram[key], "ram"
        with self._cond:
            queued = self._queued.get(key)
        if queued is not None:
            return queued, "ram"  # on its way to disk, still in memory
        state = self._read_disk(key)
        return (state, "disk") if state else None

    def longest_prefix(self, tokens: Sequence[int]) -> tuple[KvState, int] | None:
        """Of the states in memory, the one whose tokens share the longest prefix with
        `tokens`, and that length (None: none shares any). The cache in RAM is then also a
        prompt cache keyed by tokens, as llama-server's --cache-ram: another conversation's
        state gives the prompt its cells wherever the two begin alike (a system prompt, the
        same question). States on disk are not read for it."""
        wanted = tuple(tokens)
        with self._cond:
            states = list(self._ram.values()) + list(self._queued.values())
        best, best_n = None, 0
        for state in states:
            n = _shared_prefix(state.tokens, wanted)
            if n > best_n:
                best, best_n = state, n
        return (best, best_n) if best is not None else None

    def discard(self, key: str) -> None:
        self._ram.pop(key, None)
        self._unqueue(key)
        path = self._path(key)
        if path:
            path.unlink(missing_ok=True)

    def keys(self) -> list[str]:
        on_disk = []
        if self.disk_dir:
            suffix = f".{self.guard}.kv"
            on_disk = [p.name[: -len(suffix)] for p in self.disk_dir.glob(f"*{suffix}")]
        with self._cond:
            queued = list(self._queued)
        in_memory = list(self._ram) + [k for k in queued if k not in self._ram]
        return in_memory + [k for k in on_disk if k not in in_memory]

    def flush_to_disk(self) -> None:
        """Persist states held only in RAM (clean shutdown, unload); returns once written."""
        for key, state in list(self._ram.items()):
            self._queue_write(key, state)
        self.wait_written()

    def wait_written(self) -> None:
        """Return once every queued state is on disk (or failed to be written), and a write
        under way of one dropped meanwhile has ended."""
        with self._cond:
            self._cond.wait_for(lambda: not self._queued and self._writing is None)

    # Disk -------------------------------------------------------------------------------------
    def _path(self, key: str) -> Path | None:
        if not self.disk_dir:
            return None
        return self.disk_dir / f"{_safe_name(key)}.{self.guard}.kv"

    def _queued_bytes(self) -> int:
        return sum(s.size_bytes for s in self._queued.values())

    def _queue_write(self, key: str, state: KvState) -> None:
        if not self.disk_dir or state.size_bytes > self.disk_budget:
            return  # nowhere to keep it
        with self._cond:
            self._queued.pop(key, None)
            self._queued[key] = state
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_queued, name="kv-state-writer", daemon=True
                )
                self._writer.start()
            self._cond.notify_all()

    def _unqueue(self, key: str) -> None:
        with self._cond:
            self._queued.pop(key, None)
            if self._writing == key:
                self._writing_dropped = True
            self._cond.notify_all()

    def _write_queued(self) -> None:
        while True:
            with self._cond:
                if not self._cond.wait_for(lambda: self._queued, timeout=_WRITER_IDLE_S):
                    self._writer = None  # idle: the next state pushed out starts another
                    return
                key, state = next(iter(self._queued.items()))
                self._writing, self._writing_dropped = key, False
            path = self._path(key)
            assert path is not None
            try:
                _write_private(path, encode_state(key, self.guard, state))
                self._enforce_disk_budget(keep=path)
            except OSError as exc:  # a full or read-only disk: the conversation is read again
                log.warning("could not write the KV state of %s to %s: %s", key, path, exc)
            except Exception:  # never leave the queue stuck: put() and unload wait on it
                log.exception("could not write the KV state of %s to %s", key, path)
            with self._cond:
                if self._writing_dropped:
                    path.unlink(missing_ok=True)
                if self._queued.get(key) is state:
                    del self._queued[key]
                self._writing = None
                self._cond.notify_all()

    def _read_disk(self, key: str) -> KvState | None:
        path = self._path(key)
        if not path or not path.is_file():
            return None
        try:
            # A file a little over the budget is allowed: its header is not counted in it.
            limit = self.disk_budget + _HEADER.size + 4096
            state = read_state_file(path, key, self.guard, limit, self.max_tokens)
            os.utime(path)  # LRU on disk by mtime
            return state
        except FileNotFoundError:
            return None  # evicted by the writer (disk budget) since is_file()
        except (OSError, KvStateFileError, struct.error) as exc:
            self.drop(key, str(exc))
            return None

    def drop(self, key: str, why: str) -> None:
        """Remove a state of `key` that cannot be used (RAM and disk), logging the file and why."""
        self._ram.pop(key, None)
        self._unqueue(key)
        path = self._path(key)
        where = str(path) if path and path.exists() else "held in memory"
        log.warning("dropping the KV state of %s (%s): %s", key, where, why)
        if path:
            path.unlink(missing_ok=True)

    def _enforce_disk_budget(self, keep: Path) -> None:
        """Evict least recently used files; the one just written (`keep`) goes last, even when
        the file system's timestamps are too coarse to order it after the others. Runs on the
        writer thread: a file removed meanwhile (a deleted conversation) is skipped."""
        assert self.disk_dir is not None
        files: list[tuple[bool, int, int, Path]] = []
        for path in self.disk_dir.glob("*.kv"):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            files.append((path == keep, st.st_mtime_ns, st.st_size, path))
        files.sort(key=lambda f: f[:2])
        total = sum(f[2] for f in files)
        for _keep, _mtime, size, path in files:
            if total <= self.disk_budget:
                break
            total -= size
            path.unlink(missing_ok=True)
