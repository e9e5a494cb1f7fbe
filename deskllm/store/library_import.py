"""Import GGUF files the user already has: a file, a folder, and the model folders of other
tools when they are on this computer (the huggingface_hub cache, LM Studio). Files are
recorded where they are, never copied.

A folder is walked by hand rather than with os.walk(followlinks=True), which loops forever on
a link to a parent folder: each real folder is entered once, nothing but regular files is ever
opened (a FIFO would block the read), and what could not be read is reported, not raised."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deskllm.gguf.header import GgufError
from deskllm.store.library import InstalledModel, ModelLibrary

_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_NOT_MODELS = ("mmproj", "imatrix")  # projectors and importance matrices are not chat models
PROGRESS_EVERY = 1000  # entries between two progress calls

Cancel = Callable[[], bool]  # e.g. threading.Event().is_set
Progress = Callable[[int], None]  # folder entries seen so far


@dataclass(frozen=True)
class FolderScan:
    files: tuple[Path, ...]  # model files found, sorted
    skipped: tuple[tuple[str, str], ...]  # (path, why) in plain words
    seen: int  # folder entries looked at
    cancelled: bool = False


@dataclass(frozen=True)
class ImportResult:
    added: tuple[InstalledModel, ...]
    skipped: tuple[tuple[str, str], ...]  # (path, why) in plain words
    seen: int = 0  # folder entries looked at
    cancelled: bool = False


def _is_model_name(name: str) -> bool:
    lower = name.lower()
    if not lower.endswith(".gguf") or any(word in lower for word in _NOT_MODELS):
        return False
    shard = _SHARD.search(name)
    return not shard or int(shard.group(1)) == 1


def _not_regular(mode: int) -> str:
    kind = (
        "a FIFO" if stat.S_ISFIFO(mode)
        else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "not a regular file"
    )  # fmt: skip
    return f"{kind}, not a model file: left alone"


def scan_folder(
    folder: Path, cancel: Cancel | None = None, on_progress: Progress | None = None
) -> FolderScan:
    """Model files under `folder` (one per split model, its first shard; no projectors),
    following links to folders but entering each real folder once. Stops early when `cancel()`
    turns true; `on_progress(seen)` is called every PROGRESS_EVERY entries and at the end."""
    found: list[Path] = []
    skipped: list[tuple[str, str]] = []
    entered: set[tuple[int, int]] = set()
    seen = 0
    try:
        top = os.stat(folder)
    except OSError as exc:
        return FolderScan((), ((str(folder), f"cannot read: {exc.strerror}"),), 0)
    entered.add((top.st_dev, top.st_ino))
    pending = [Path(folder)]
    cancelled = False
    while pending and not cancelled:
        if cancel and cancel():
            cancelled = True
            break
        current = pending.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    seen += 1
                    if seen % PROGRESS_EVERY == 0:
                        if on_progress:
                            on_progress(seen)
                        if cancel and cancel():
                            cancelled = True
                            break
                    _visit(entry, pending, found, skipped, entered)
        except OSError as exc:
            skipped.append((str(current), f"cannot read this folder: {exc.strerror}"))
    if on_progress:
        on_progress(seen)
    return FolderScan(tuple(sorted(found)), tuple(skipped), seen, cancelled)


def _visit(
    entry: os.DirEntry,
    pending: list[Path],
    found: list[Path],
    skipped: list[tuple[str, str]],
    entered: set[tuple[int, int]],
) -> None:
    path = Path(entry.path)
    try:
        is_dir = entry.is_dir()  # follows links; no system call for a plain entry
    except OSError:
        is_dir = False
    if is_dir:
        try:
            st = entry.stat()
        except OSError as exc:
            skipped.append((str(path), f"cannot read this folder: {exc.strerror}"))
            return
        key = (st.st_dev, st.st_ino)
        if key in entered:
            if entry.is_symlink():
                skipped.append((str(path), "a link to a folder already looked through"))
            return
        entered.add(key)
        pending.append(path)
        return
    if not _is_model_name(entry.name):
        return  # other files are not stat'ed: a folder of 100,000 files stays quick
    try:
        st = entry.stat()
    except FileNotFoundError:
        skipped.append((str(path), "a broken link: its target does not exist"))
        return
    except OSError as exc:
        skipped.append((str(path), f"cannot read: {exc.strerror}"))
        return
    if not stat.S_ISREG(st.st_mode):
        skipped.append((str(path), _not_regular(st.st_mode)))
        return
    found.append(path)


def gguf_files(folder: Path) -> list[Path]:
    """Model files under `folder`: one per split model (its first shard), no projectors,
    nothing half-downloaded."""
    return list(scan_folder(folder).files)


def import_path(
    library: ModelLibrary,
    path: Path | str,
    source: str = "import",
    *,
    cancel: Cancel | None = None,
    on_progress: Progress | None = None,
) -> ImportResult:
    """Record a model file, or the model files of a folder, in `library`. Never raises for
    what is on disk: every file left out is in `skipped`, with the reason."""
    path = Path(path).expanduser()
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return ImportResult((), ((str(path), "no such file or folder"),))
    except OSError as exc:
        return ImportResult((), ((str(path), f"cannot read: {exc.strerror}"),))
    if stat.S_ISDIR(mode):
        scan = scan_folder(path, cancel, on_progress)
    elif stat.S_ISREG(mode):
        scan = FolderScan((path,), (), 1)
    else:
        return ImportResult((), ((str(path), _not_regular(mode)),))
    added, skipped = [], list(scan.skipped)
    cancelled = scan.cancelled
    for file in scan.files:
        if cancel and cancel():
            cancelled = True
            break
        try:
            added.append(library.add(file, source=source))
        except GgufError as exc:
            skipped.append((str(file), str(exc)))
        except OSError as exc:
            skipped.append((str(file), f"cannot read: {exc.strerror or exc}"))
    if stat.S_ISDIR(mode) and not scan.files and not cancelled:
        skipped.append((str(path), "no .gguf model files in this folder"))
    return ImportResult(tuple(added), tuple(skipped), scan.seen, cancelled)


def known_model_folders() -> list[tuple[str, Path]]:
    """Other tools' model folders that exist here: (tool, folder)."""
    candidates = []
    try:
        from huggingface_hub import constants

        candidates.append(("Hugging Face cache", Path(constants.HF_HUB_CACHE)))
    except Exception:  # the cache location is a convenience, never a failure
        pass
    home = Path.home()
    candidates += [
        ("LM Studio", home / ".lmstudio" / "models"),
        ("LM Studio", home / ".cache" / "lm-studio" / "models"),
    ]
    return [(tool, folder) for tool, folder in candidates if folder.is_dir()]


def import_known_folders(
    library: ModelLibrary, *, cancel: Cancel | None = None, on_progress: Progress | None = None
) -> ImportResult:
    added, skipped, seen = [], [], 0
    for tool, folder in known_model_folders():
        if cancel and cancel():
            return ImportResult(tuple(added), tuple(skipped), seen, cancelled=True)
        result = import_path(
            library,
            folder,
            source=f"import:{tool}",
            cancel=cancel,
            on_progress=(lambda n, base=seen: on_progress(base + n)) if on_progress else None,
        )
        added += result.added
        skipped += [s for s in result.skipped if not s[1].startswith("no .gguf")]
        seen += result.seen
        if result.cancelled:
            return ImportResult(tuple(added), tuple(skipped), seen, cancelled=True)
    return ImportResult(tuple(added), tuple(skipped), seen)
