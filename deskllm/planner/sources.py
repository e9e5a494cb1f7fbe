"""The model files to plan for: a local .gguf (all its shards), a folder of them (one file per
quantization), or a Hugging Face repo (headers read remotely, without downloading models)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from deskllm.catalog.quant_names import group_key, parse_gguf_name, shard_of
from deskllm.catalog.quants import file_type_name
from deskllm.gguf.header import GgufError, GgufHeader, read_header

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Candidate:
    """One loadable model file: `file` is its name (the first shard's for a split model)."""

    file: str
    quant: str
    size_bytes: int
    header: GgufHeader


@dataclass(frozen=True)
class Unreadable:
    file: str
    message: str


@dataclass(frozen=True)
class Sources:
    candidates: tuple[Candidate, ...]
    errors: tuple[Unreadable, ...]


class SourceError(Exception):
    """MODEL names nothing plannable; the message says what to give instead."""


def quant_of(header: GgufHeader, name: str) -> str:
    """The header's file type (what llama.cpp will load) where known, else the name's label."""
    label = file_type_name(header.metadata.get("general.file_type"))
    if label == "?" or label.startswith("type "):
        label = parse_gguf_name(name).quant or label
    return label


def combine(headers: list[GgufHeader]) -> GgufHeader:
    """One header for a split model: part 1's metadata, every part's tensors."""
    first = headers[0]
    tensors = tuple(t for h in headers for t in h.tensors)
    return GgufHeader(
        first.version, first.metadata, tensors, first.data_offset, first.array_lengths
    )


def _local_group(paths: list[Path]) -> Candidate:
    parts = sorted(paths, key=lambda p: shard_of(p.name).number if shard_of(p.name) else 1)
    header = combine([read_header(p) for p in parts])
    return Candidate(
        parts[0].name, quant_of(header, parts[0].name), sum(p.stat().st_size for p in parts), header
    )


def local_sources(path: Path) -> Sources:
    """A .gguf file (with its sibling shards) or every model .gguf in a folder."""
    if path.is_file():
        if shard_of(path.name):
            key = group_key(path.name)
            files = [p for p in path.parent.glob("*.gguf") if group_key(p.name) == key]
        else:
            files = [path]
        groups = {key: files} if shard_of(path.name) else {path.name: files}
    else:
        groups = {}
        for p in sorted(path.glob("*.gguf")):
            if parse_gguf_name(p.name).kind == "model":
                groups.setdefault(group_key(p.name), []).append(p)
    candidates, errors = [], []
    for key, files in groups.items():
        try:
            candidates.append(_local_group(files))
        except GgufError as exc:
            errors.append(Unreadable(key, str(exc)))
    return Sources(tuple(candidates), tuple(errors))


def repo_sources(repo_id: str) -> Sources:
    """Every model file of a Hub repo, by its remote header (cached by sha256 after the first
    read). Raises the catalog's errors (offline with nothing cached, gated, not found)."""
    from deskllm.catalog.hub import HubCatalog
    from deskllm.catalog.remote_header import remote_header

    catalog = HubCatalog()
    details = catalog.repo(repo_id)
    candidates, errors = [], []
    for model in details.files:
        if not model.complete:
            errors.append(
                Unreadable(
                    model.name,
                    f"only {len(model.parts)} of {model.expected_parts} parts are in the repo",
                )
            )
            continue
        try:
            headers = [
                remote_header(catalog, repo_id, part.path, sha256=part.sha256).header
                for part in model.parts
            ]
        except GgufError as exc:
            errors.append(Unreadable(model.first_path, str(exc)))
            continue
        header = combine(headers)
        candidates.append(
            Candidate(model.first_path, quant_of(header, model.first_path), model.size, header)
        )
    return Sources(tuple(candidates), tuple(errors))


def find_sources(model: str) -> Sources:
    path = Path(model).expanduser()
    if path.exists():
        if path.is_dir() or path.suffix.lower() == ".gguf":
            return local_sources(path)
        raise SourceError(f"{model} is not a .gguf file or a folder of them")
    if REPO_ID.match(model):
        return repo_sources(model)
    raise SourceError(f"{model} is not a file, a folder or a Hugging Face repo id (owner/name)")
