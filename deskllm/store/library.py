"""Installed models: a row per GGUF file with metadata read from its own header."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

from sqlite_utils import Database

from deskllm.catalog.quants import file_type_name
from deskllm.gguf.header import GgufError, GgufHeader, read_header

log = logging.getLogger("deskllm.store")


@dataclass(frozen=True)
class InstalledModel:
    id: int
    path: str
    name: str
    architecture: str
    parameters: int
    quant: str
    size_bytes: int
    context_length: int
    has_chat_template: bool
    license: str
    source: str
    added_at: float

    @property
    def exists(self) -> bool:
        return Path(self.path).is_file()


def _model(row: dict) -> InstalledModel:
    return InstalledModel(
        id=row["id"],
        path=row["path"],
        name=row["name"],
        architecture=row["architecture"] or "unknown",
        parameters=row["parameters"] or 0,
        quant=row["quant"] or "?",
        size_bytes=row["size_bytes"] or 0,
        context_length=row["context_length"] or 0,
        has_chat_template=bool(row["has_chat_template"]),
        license=row["license"] or "",
        source=row["source"] or "import",
        added_at=row["added_at"] or 0.0,
    )


def library_name(path: Path, quant: str | None) -> str:
    """"SmolLM2-135M-Instruct (Q4_1)" for SmolLM2-135M-Instruct.Q4_1.gguf: the file's name,
    which the user chose or downloaded and recognises, with its quant set apart, as the starter
    model is named. Not the header's general.name: often a training run's ("Smollm2 135M 8k
    Lc100K Mix1 Ep2"), so the same file had two names."""
    stem = path.stem
    if not quant or quant == "?":
        return stem
    base = re.sub(rf"[.\-_ ]{re.escape(quant)}$", "", stem, flags=re.IGNORECASE) or stem
    return f"{base} ({quant})"


def describe(header: GgufHeader, path: Path) -> dict:
    """The library row for a model file, from its header."""
    meta = header.metadata
    quant = file_type_name(meta.get("general.file_type"))
    return {
        "path": str(path.resolve()),
        "name": library_name(path, quant),
        "architecture": header.architecture,
        "parameters": header.n_params,
        "quant": quant,
        "size_bytes": path.stat().st_size,
        "context_length": header.context_length or 0,
        "has_chat_template": int(bool(header.chat_template)),
        "license": str(meta.get("general.license") or ""),
    }


# A draft's file at most this share of its model's (a Q4_1 copy of a Q8_0 one: 0.68; a 1B for
# an 8B: ~0.13). Whether it pays on a machine, bench/spec.py measures.
DRAFT_SIZE_SHARE = 0.75


def vocabulary_key(header: GgufHeader) -> tuple:
    """What two models must share for one to draft for the other, as the header tells it."""
    m = header.metadata
    tokens = header.array_lengths.get("tokenizer.ggml.tokens")
    if tokens is None:
        tokens = len(m.get("tokenizer.ggml.tokens") or ())
    return (m.get("tokenizer.ggml.model"), tokens, m.get("tokenizer.ggml.bos_token_id"),
            m.get("tokenizer.ggml.eos_token_id"))  # fmt: skip


def _is_starter_file(path: str) -> bool:
    from deskllm.catalog.starter import starter_model_path

    starter = starter_model_path()
    return starter is not None and str(starter.resolve()) == str(Path(path).resolve())


class ModelNotFound(LookupError):
    """No installed model matches what the user asked for."""


class ModelLibrary:
    """The models the user has on disk."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(
        self, path: Path | str, source: str = "import", name: str | None = None
    ) -> InstalledModel:
        """Validate a GGUF file's header and record it (idempotent per path)."""
        path = Path(path)
        row = describe(read_header(path), path)
        if name:
            row["name"] = name
        row["source"] = source
        existing = list(self.db["models"].rows_where("path = ?", [row["path"]]))
        if existing:
            self.db["models"].update(existing[0]["id"], row)
            return self.get(existing[0]["id"])
        row["added_at"] = time.time()
        return self.get(self.db["models"].insert(row).last_pk)

    def get(self, model_id: int) -> InstalledModel:
        return _model(self.db["models"].get(model_id))

    def list(self) -> list[InstalledModel]:
        return [_model(r) for r in self.db["models"].rows_where(order_by="added_at")]

    def remove(self, model_id: int, delete_file: bool = False) -> None:
        model = self.get(model_id)
        # The bundled starter file is never deleted, even when it was imported like any file.
        if delete_file and model.source != "starter" and not _is_starter_file(model.path):
            Path(model.path).unlink(missing_ok=True)
        self.db["models"].delete(model_id)

    def find(self, name_or_path: str) -> InstalledModel | None:
        """By path, exact name, or a case-insensitive substring of the name or file name."""
        candidate = Path(name_or_path).expanduser()
        if candidate.is_file():
            resolved = str(candidate.resolve())
            for model in self.list():
                if model.path == resolved:
                    return model
            return None
        needle = name_or_path.lower()
        models = self.list()
        for model in models:
            if model.name.lower() == needle:
                return model
        for model in models:
            if needle in model.name.lower() or needle in Path(model.path).name.lower():
                return model
        return None

    def resolve(self, name: str | None) -> str:
        """A model argument (a .gguf path, or any part of an installed model's name; None:
        the starter model) → a model path. Raises ModelNotFound with words for the user."""
        if name is None:
            starter = self.ensure_starter()
            if starter is None:
                raise ModelNotFound("no model given and the starter model is not installed")
            return starter.path
        if Path(name).expanduser().is_file():
            return str(Path(name).expanduser())
        found = self.find(name)
        if found is None:
            raise ModelNotFound(f"no installed model matches {name!r}; see `deskllm models`")
        return found.path

    def suggest_draft(self, model_path: str) -> InstalledModel | None:
        """The installed model likeliest to draft well for `model_path` (speculative
        decoding): the largest of draft_candidates (a larger draft is taken more often)."""
        candidates = self.draft_candidates(model_path)
        return candidates[0] if candidates else None

    def draft_candidates(self, model_path: str) -> list[InstalledModel]:
        """The installed models that can draft for `model_path`, the largest first: the same
        vocabulary by the headers (tokenizer, token count, BOS and EOS ids) and a file at
        most DRAFT_SIZE_SHARE of the model's. The engine checks the token texts when it loads
        one."""
        path = Path(model_path)
        try:
            wanted = vocabulary_key(read_header(path))
            size = path.stat().st_size
        except (GgufError, OSError):
            return []
        return list(draft_pairs(wanted, size, self.list(), str(path.resolve())).drafts)

    def missing(self) -> list[InstalledModel]:
        """Models whose file is gone (moved or deleted outside the app)."""
        return [m for m in self.list() if not m.exists]

    def ensure_starter(self) -> InstalledModel | None:
        """Register the bundled starter model on first start (and after it moved)."""
        from deskllm.catalog.starter import STARTER_NAME, starter_model_path

        path = starter_model_path()
        if path is None:
            log.warning("the starter model is not installed")
            return None
        resolved = str(path.resolve())
        size = path.stat().st_size
        for model in self.list():
            if model.source != "starter":
                continue
            if model.path == resolved and model.size_bytes == size:
                return model  # registered already: no header to read again on every start
            self.db["models"].delete(model.id)  # the app moved (update, reinstall)
        return self.add(path, source="starter", name=STARTER_NAME)


# -- Which installed models pair for speculative decoding ----------------------------------------

_vocabularies: dict[tuple[str, int], tuple] = {}  # (path, size) -> vocabulary_key


def cached_vocabulary(path: str, size: int) -> tuple | None:
    """vocabulary_key of the model file at `path`, kept per (path, size): pairing reads every
    installed model's header, once, not at each look. None where the file cannot be read."""
    key = (path, size)
    if key not in _vocabularies:
        try:
            _vocabularies[key] = vocabulary_key(read_header(Path(path)))
        except (GgufError, OSError):
            return None  # not kept: the file may come back (a drive plugged in again)
    return _vocabularies[key]


@dataclass(frozen=True)
class DraftPairs:
    """The installed models that pair with one model file for speculative decoding."""

    drafts: tuple[InstalledModel, ...] = ()  # they can draft for the file, the largest first
    drafts_for: tuple[InstalledModel, ...] = ()  # the file can draft for them, smallest first


def draft_pairs(
    vocabulary: tuple, size: int, models: list[InstalledModel], path: str | None = None
) -> DraftPairs:
    """Which of `models` pair with a file of this vocabulary_key and `size` bytes (the
    installed one at `path`, which is left out, or a file on the Hub), by the rule of
    ModelLibrary.draft_candidates: the same vocabulary, and a draft's file at most
    DRAFT_SIZE_SHARE of its model's. Reads headers: call it off the GUI thread."""
    same = [
        m
        for m in models
        if m.path != path and m.exists and cached_vocabulary(m.path, m.size_bytes) == vocabulary
    ]
    drafts = [m for m in same if m.size_bytes <= DRAFT_SIZE_SHARE * size]
    drafts_for = [m for m in same if size <= DRAFT_SIZE_SHARE * m.size_bytes]
    return DraftPairs(
        tuple(sorted(drafts, key=lambda m: m.size_bytes, reverse=True)),
        tuple(sorted(drafts_for, key=lambda m: m.size_bytes)),
    )


def installed_draft_pairs(model: InstalledModel, models: list[InstalledModel]) -> DraftPairs:
    """draft_pairs of an installed model among `models` (nothing where its file is unreadable)."""
    vocabulary = cached_vocabulary(model.path, model.size_bytes)
    if vocabulary is None:
        return DraftPairs()
    return draft_pairs(vocabulary, model.size_bytes, models, model.path)
