"""Import GGUF files the user already has: a file, a folder, and the model folders of other
tools when they are on this computer (the huggingface_hub cache, LM Studio). Files are
recorded where they are, never copied."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from deskllm.catalog.gguf_header import GgufError
from deskllm.store.library import InstalledModel, ModelLibrary

_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_NOT_MODELS = ("mmproj", "imatrix")  # projectors and importance matrices are not chat models


@dataclass(frozen=True)
class ImportResult:
    added: tuple[InstalledModel, ...]
    skipped: tuple[tuple[str, str], ...]  # (path, why) in plain words


def gguf_files(folder: Path) -> list[Path]:
    """Model files under `folder`: one per split model (its first shard), no projectors,
    nothing half-downloaded."""
    found = []
    for root, _dirs, files in os.walk(folder, followlinks=True):
        for name in files:
            lower = name.lower()
            if not lower.endswith(".gguf") or any(word in lower for word in _NOT_MODELS):
                continue
            shard = _SHARD.search(name)
            if shard and int(shard.group(1)) != 1:
                continue
            found.append(Path(root) / name)
    return sorted(found)


def import_path(library: ModelLibrary, path: Path | str, source: str = "import") -> ImportResult:
    path = Path(path).expanduser()
    if not path.exists():
        return ImportResult((), ((str(path), "no such file or folder"),))
    files = [path] if path.is_file() else gguf_files(path)
    added, skipped = [], []
    for file in files:
        try:
            added.append(library.add(file, source=source))
        except GgufError as exc:
            skipped.append((str(file), str(exc)))
    if path.is_dir() and not files:
        skipped.append((str(path), "no .gguf model files in this folder"))
    return ImportResult(tuple(added), tuple(skipped))


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


def import_known_folders(library: ModelLibrary) -> ImportResult:
    added, skipped = [], []
    for tool, folder in known_model_folders():
        result = import_path(library, folder, source=f"import:{tool}")
        added += result.added
        skipped += [s for s in result.skipped if not s[1].startswith("no .gguf")]
    return ImportResult(tuple(added), tuple(skipped))
