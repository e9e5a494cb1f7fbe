"""Indexing a collection's folders: only what changed is read again.

A pass walks the folders (symlinks followed once, loops and unreadable folders listed with their
reason), compares each file's size and mtime with what the index holds, and reads, chunks and
embeds only the new and changed files; a file that is gone has its chunks removed (a rename is a
removal and an addition). Each file is committed on its own, so a killed app loses nothing that
was indexed, and the next pass goes on where it stopped. Progress (files, chunks, speed, ETA)
goes to a callback; pause and cancel are honoured between two files, or two batches of chunks.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from deskllm.documents.chunking import chunk_document
from deskllm.documents.readers import Changing, Skip, kind_of, read_document, size_limit
from deskllm.documents.store import Collection, DocumentStore

IGNORED_DIRS = {"node_modules", "__pycache__", "venv", "site-packages"}  # and every hidden one


@dataclass(frozen=True)
class Found:
    """What a walk of the folders found: files to consider, and paths skipped with a reason."""

    files: dict[str, os.stat_result]
    skipped: dict[str, str]


def scan_folders(folders: Iterable[str | Path]) -> Found:
    """Every file under `folders` (a file among them is taken as it is: a chat's attachment).
    Hidden entries (.git) and build folders are left out without a word; a folder that cannot
    be listed, a symlink loop or a dangling link is listed as skipped. A folder reached twice
    (through a link) is walked once."""
    files: dict[str, os.stat_result] = {}
    skipped: dict[str, str] = {}
    seen: set[tuple[int, int]] = set()
    stack = [Path(f) for f in folders]
    roots = set(stack)
    while stack:
        folder = stack.pop()
        try:
            st = folder.stat()
        except OSError as e:
            gone = folder in roots and not folder.is_symlink()
            skipped[str(folder)] = "not found (moved or deleted?)" if gone else _link_reason(e)
            continue
        if not stat.S_ISDIR(st.st_mode):
            files[str(folder)] = st
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            skipped[str(folder)] = f"the folder cannot be read: {e.strerror or e}"
            continue
        for entry in entries:
            if entry.name.startswith(".") or entry.name in IGNORED_DIRS:
                continue
            path = Path(entry.path)
            try:
                st = entry.stat()  # follows a symlink
            except OSError as e:
                skipped[str(path)] = _link_reason(e)
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
            else:
                files[str(path)] = st
    return Found(files, skipped)


def _link_reason(e: OSError) -> str:
    import errno

    if e.errno == errno.ELOOP:
        return "a symbolic link loop"
    if e.errno == errno.ENOENT:
        return "a symbolic link to nothing (or it was removed)"
    return f"cannot be read: {e.strerror or e}"


@dataclass
class IndexProgress:
    collection: str
    files_total: int = 0  # files to read in this pass (new or changed)
    files_done: int = 0
    files_skipped: int = 0
    files_removed: int = 0
    chunks: int = 0
    bytes_total: int = 0
    bytes_done: int = 0
    elapsed_s: float = 0.0
    current: str = ""
    paused: bool = False
    finished: bool = False
    cancelled: bool = False

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left, from the bytes read so far (files differ too much in size to count)."""
        if self.bytes_done <= 0 or self.elapsed_s <= 0:
            return None
        return (self.bytes_total - self.bytes_done) * self.elapsed_s / self.bytes_done


@dataclass
class IndexControl:
    """Pause, resume and cancel an indexing pass from another thread."""

    _run: threading.Event = field(default_factory=threading.Event)
    _cancel: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._run.set()

    def pause(self) -> None:
        self._run.clear()

    def resume(self) -> None:
        self._run.set()

    def cancel(self) -> None:
        self._cancel.set()
        self._run.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def paused(self) -> bool:
        return not self._run.is_set()

    def wait_if_paused(self) -> bool:
        """Block while paused; False when cancelled."""
        self._run.wait()
        return not self._cancel.is_set()


class Indexer:
    def __init__(
        self,
        store: DocumentStore,
        embed: Callable[[list[str]], list[tuple[float, ...]]],
        on_progress: Callable[[IndexProgress], None] | None = None,
        control: IndexControl | None = None,
    ) -> None:
        self.store = store
        self.embed = embed
        self.on_progress = on_progress or (lambda progress: None)
        self.control = control or IndexControl()
        self.read_paths: list[str] = []  # the files this pass read (the tests' witness)

    def index(self, collection: Collection) -> IndexProgress:
        started = time.monotonic()
        progress = IndexProgress(collection.name)
        found = scan_folders(collection.folders)
        known = self.store.file_states(collection)
        for path in sorted(set(known) - set(found.files) - set(found.skipped)):
            self.store.remove_file(collection, path)  # deleted, or renamed away
            progress.files_removed += 1
        for path, reason in found.skipped.items():
            state = known.get(path)
            if state is None or state.reason != reason:
                self.store.skip_file(collection, path, 0, 0, reason)
            progress.files_skipped += 1
        todo = []
        for path, st in sorted(found.files.items()):
            state = known.get(path)
            if state is not None and (state.size, state.mtime_ns) == (st.st_size, st.st_mtime_ns):
                progress.files_skipped += state.status == "skipped"
                continue  # unchanged since it was indexed (or skipped)
            todo.append((path, st))
        progress.files_total = len(todo)
        progress.bytes_total = sum(_weight(Path(path), st.st_size) for path, st in todo)
        self.on_progress(progress)
        for path, st in todo:
            if not self._wait(progress):
                break
            progress.current = path
            self._index_file(collection, path, st, progress)
            progress.files_done += 1
            progress.elapsed_s = time.monotonic() - started
            self.on_progress(progress)
        progress.cancelled = self.control.cancelled
        progress.finished = not progress.cancelled
        progress.current = ""
        progress.elapsed_s = time.monotonic() - started
        self.on_progress(progress)
        return progress

    def _wait(self, progress: IndexProgress) -> bool:
        if self.control.paused:
            progress.paused = True
            self.on_progress(progress)
        going = self.control.wait_if_paused()
        progress.paused = False
        return going

    def _index_file(self, collection: Collection, path: str, st, progress: IndexProgress) -> None:
        self.read_paths.append(path)
        try:
            document = read_document(Path(path), (st.st_size, st.st_mtime_ns))
        except Skip as skip:
            # A file that changed while read keeps no size and mtime: the next pass reads it.
            changing = isinstance(skip, Changing)
            size, mtime = (0, 0) if changing else (st.st_size, st.st_mtime_ns)
            self.store.skip_file(collection, path, size, mtime, str(skip))
            progress.files_skipped += 1
            progress.bytes_done += _weight(Path(path), st.st_size)
            return
        chunks = chunk_document(document.kind, document.sections)
        texts = [f"{c.heading}\n\n{c.text}" if c.heading else c.text for c in chunks]
        vectors = self.embed(texts) if texts else []
        self.store.put_file(collection, path, document.size, document.mtime_ns, chunks, vectors)
        progress.chunks += len(chunks)
        progress.bytes_done += st.st_size


def _weight(path: Path, size: int) -> int:
    """The bytes a file counts for in the time left: what is read of it (a file deskllm does
    not read, or skips for its size, takes no time)."""
    kind = kind_of(path)
    return size if kind is not None and size <= size_limit(kind) else 0
