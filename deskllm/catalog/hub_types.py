"""Plain data the catalog hands out (search hits, repo details), and their JSON form for the
cache. No network, no Qt."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SORTS = ("downloads", "likes", "updated")


@dataclass(frozen=True)
class SearchHit:
    repo_id: str
    author: str | None
    downloads: int
    likes: int
    last_modified: str | None  # ISO 8601
    gated: bool
    license: str | None


@dataclass(frozen=True)
class Answer:
    """Where an answer came from: `offline` means the Hub was not reached (HF_HUB_OFFLINE or
    no network) and `reason` says why; `from_cache` answers are as old as `fetched_at`."""

    offline: bool = False
    from_cache: bool = False
    fetched_at: float = 0.0
    reason: str | None = None


@dataclass(frozen=True)
class SearchResult:
    query: str
    sort: str
    hits: tuple[SearchHit, ...]
    source: Answer = field(default_factory=Answer)

    @property
    def offline(self) -> bool:
        return self.source.offline


@dataclass(frozen=True)
class FilePart:
    path: str
    size: int
    sha256: str | None  # the LFS oid; None for a file kept in git


@dataclass(frozen=True)
class ModelFile:
    """One loadable model: a single .gguf or all shards of a split one (first part first)."""

    name: str  # the group key: the path, shard suffix removed
    quant: str | None
    parts: tuple[FilePart, ...]
    expected_parts: int = 1  # from the shard names; > len(parts) when some are missing

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def sha256(self) -> str | None:
        return self.parts[0].sha256 if self.parts else None

    @property
    def first_path(self) -> str:
        return self.parts[0].path

    @property
    def complete(self) -> bool:
        return len(self.parts) == self.expected_parts


@dataclass(frozen=True)
class RepoDetails:
    repo_id: str
    revision: str | None  # the commit the listing is of
    license: str | None
    gated: str | None  # None, "auto" or "manual"
    downloads: int
    likes: int
    last_modified: str | None
    files: tuple[ModelFile, ...]  # model files, largest first
    mmproj: tuple[ModelFile, ...]  # vision projectors: kept out of the quant list
    access: str | None = None  # gated repos: "ok" | "login" | "request"; None if not gated
    access_message: str | None = None
    source: Answer = field(default_factory=Answer)

    @property
    def offline(self) -> bool:
        return self.source.offline

    def file(self, name_or_quant: str) -> ModelFile | None:
        for f in self.files + self.mmproj:
            if name_or_quant in (f.name, f.quant, f.first_path):
                return f
        return None


# -- JSON form (cache, --json) --------------------------------------------------------------


def to_json(obj: SearchResult | RepoDetails) -> dict[str, Any]:
    data = asdict(obj)
    data.pop("source", None)
    if isinstance(obj, RepoDetails):
        for key, files in (("files", obj.files), ("mmproj", obj.mmproj)):
            for item, f in zip(data[key], files, strict=True):
                item |= {"size": f.size, "sha256": f.sha256, "complete": f.complete}
    return data


def search_from_json(data: dict[str, Any], source: Answer) -> SearchResult:
    hits = tuple(SearchHit(**h) for h in data["hits"])
    return SearchResult(data["query"], data["sort"], hits, source)


def _model_file(data: dict[str, Any]) -> ModelFile:
    parts = tuple(FilePart(p["path"], p["size"], p["sha256"]) for p in data["parts"])
    return ModelFile(data["name"], data["quant"], parts, data["expected_parts"])


def repo_from_json(data: dict[str, Any], source: Answer) -> RepoDetails:
    fields = {k: v for k, v in data.items() if k not in ("files", "mmproj")}
    files = tuple(_model_file(f) for f in data["files"])
    mmproj = tuple(_model_file(f) for f in data["mmproj"])
    return RepoDetails(**fields, files=files, mmproj=mmproj, source=source)
