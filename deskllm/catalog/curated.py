"""The curated catalog: popular instruct GGUF repos shipped with the app
(resources/catalog/curated.json), so Discover and `deskllm recommend` work offline.

Each entry gives the repo, its family, parameter count and license, the model's shape (from
its config.json) and its quant files. A file whose size was never read from the Hub has an
estimated size (`size_estimated`, from the shape: synthetic_header) and no sha256. Online,
`refresh_curated` reads each repo's real file list (sizes, sha256) through HubCatalog and
keeps the answer in the catalog cache with the refresh time; `load_curated` lays the cached
answers for the current Hub endpoint over the shipped file.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deskllm.catalog.cache import CatalogCache
from deskllm.catalog.quants import normalize_label
from deskllm.catalog.synthetic_header import QUANT_MIXES, ShapeFacts, synthetic_header
from deskllm.gguf.header import GgufHeader

CACHE_KIND = "curated"
_SHAPE_INTS = ("layers", "embedding", "feed_forward", "heads", "kv_heads", "vocab", "context")
_SHAPE_OPTIONAL = ("head_dim", "sliding_window", "sliding_window_pattern",
                   "expert_feed_forward")  # fmt: skip


class CuratedError(ValueError):
    """The curated file (or one of its entries) is not what the app expects; says which."""


@dataclass(frozen=True)
class CuratedFile:
    """One quantization in a repo. `file` is its path (the first part's for a split model);
    `size_bytes` all parts together; `sha256` the first part's, None while estimated."""

    quant: str
    file: str
    size_bytes: int
    sha256: str | None
    size_estimated: bool


@dataclass(frozen=True)
class CuratedModel:
    """Attributes:
    params: parameter count (every expert of a MoE counted).
    refreshed_at: when the files were last read from the Hub (epoch seconds); None: never.
    """

    repo_id: str
    family: str
    params: int
    license: str
    source: str
    shape: ShapeFacts
    files: tuple[CuratedFile, ...]
    refreshed_at: float | None = None

    def header(self, quant: str) -> GgufHeader:
        """What the planner plans from: the header this quant of the shape would have. A quant
        with no mix of its own (IQ3_M, ...) is planned as the nearest K-quant of its bits."""
        label = normalize_label(quant)
        return synthetic_header(self.shape, label if label in QUANT_MIXES else _nearest(label))

    @property
    def is_moe(self) -> bool:
        return self.shape.experts > 0


@dataclass(frozen=True)
class CuratedCatalog:
    catalog_date: str
    models: tuple[CuratedModel, ...]

    @property
    def refreshed_at(self) -> float | None:
        """The latest refresh of any entry; None when every entry is as shipped."""
        return max((m.refreshed_at for m in self.models if m.refreshed_at), default=None)

    def model(self, repo_id: str) -> CuratedModel | None:
        return next((m for m in self.models if m.repo_id == repo_id), None)


def curated_path() -> Path:
    from deskllm import paths

    return paths.resources_dir() / "catalog" / "curated.json"


def _nearest(label: str) -> str:
    bits = next((c for c in label if c.isdigit()), "4")
    return {"2": "Q2_K", "3": "Q3_K_M", "4": "Q4_K_M", "5": "Q5_K_M", "6": "Q6_K"}.get(bits, "Q8_0")


# -- parsing ----------------------------------------------------------------------------------


def parse_curated(data: Any) -> CuratedCatalog:
    """The catalog from its JSON form; CuratedError naming the entry and field otherwise."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise CuratedError("the curated catalog is not an object with a `models` list")
    date = data.get("catalog_date")
    if not isinstance(date, str) or not date:
        raise CuratedError("the curated catalog has no `catalog_date`")
    models, seen = [], set()
    for i, entry in enumerate(data["models"]):
        name = entry.get("repo_id") if isinstance(entry, dict) else None
        where = f"entry {i} ({name})" if isinstance(name, str) else f"entry {i}"
        try:
            model = model_from_json(entry)
        except (KeyError, TypeError, ValueError) as exc:
            raise CuratedError(f"curated catalog {where}: {_message(exc)}") from None
        if model.repo_id in seen:
            raise CuratedError(f"curated catalog {where}: {model.repo_id} is listed twice")
        seen.add(model.repo_id)
        models.append(model)
    return CuratedCatalog(date, tuple(models))


def _message(exc: Exception) -> str:
    return f"missing {exc}" if isinstance(exc, KeyError) else str(exc)


def _need(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise ValueError(f"{what} should be {getattr(kind, '__name__', kind)}, not {value!r}")
    return value


def model_from_json(entry: dict[str, Any]) -> CuratedModel:
    _need(entry, dict, "an entry")
    repo_id = _need(entry["repo_id"], str, "repo_id")
    if repo_id.count("/") != 1:
        raise ValueError(f"repo_id {repo_id!r} is not owner/name")
    params = _need(entry["params"], int, "params")
    files = tuple(_file(f) for f in _need(entry["files"], list, "files"))
    if not files:
        raise ValueError("no quant files")
    refreshed = entry.get("refreshed_at")
    return CuratedModel(
        repo_id=repo_id,
        family=_need(entry["family"], str, "family"),
        params=params,
        license=_need(entry["license"], str, "license"),
        source=_need(entry["source"], str, "source"),
        shape=_shape(_need(entry["shape"], dict, "shape")),
        files=files,
        refreshed_at=float(refreshed) if isinstance(refreshed, (int, float)) else None,
    )


def _shape(data: dict[str, Any]) -> ShapeFacts:
    values: dict[str, Any] = {"architecture": _need(data["architecture"], str, "architecture")}
    for key in _SHAPE_INTS:
        values[key] = _need(data[key], int, f"shape.{key}")
        if values[key] <= 0 and key != "feed_forward":
            raise ValueError(f"shape.{key} must be positive")
    for key in _SHAPE_OPTIONAL:
        if data.get(key) is not None:
            values[key] = _need(data[key], int, f"shape.{key}")
    values["tied_embeddings"] = _need(data["tied_embeddings"], bool, "shape.tied_embeddings")
    values["experts"] = _need(data.get("experts", 0), int, "shape.experts")
    values["experts_used"] = _need(data.get("experts_used", 0), int, "shape.experts_used")
    shape = ShapeFacts(**values)
    if shape.heads % shape.kv_heads:
        raise ValueError("shape.heads must be a multiple of shape.kv_heads")
    if shape.experts and not (0 < shape.experts_used <= shape.experts):
        raise ValueError("shape.experts_used must be between 1 and shape.experts")
    if not shape.experts and not shape.feed_forward:
        raise ValueError("a dense model needs shape.feed_forward")
    return shape


def _file(data: dict[str, Any]) -> CuratedFile:
    _need(data, dict, "a file")
    sha = data.get("sha256")
    estimated = _need(data.get("size_estimated", sha is None), bool, "size_estimated")
    if sha is None and not estimated:
        raise ValueError(f"{data.get('file')}: a size read from the Hub comes with its sha256")
    if sha is not None:
        _need(sha, str, "sha256")
    f = CuratedFile(
        quant=_need(data["quant"], str, "quant"),
        file=_need(data["file"], str, "file"),
        size_bytes=_need(data["size_bytes"], int, "size_bytes"),
        sha256=sha,
        size_estimated=estimated,
    )
    if not f.file.endswith(".gguf") or f.size_bytes <= 0:
        raise ValueError(f"{f.file}: not a .gguf file with a size")
    return f


def model_to_json(model: CuratedModel) -> dict[str, Any]:
    shape = {k: v for k, v in dataclasses.asdict(model.shape).items()
             if v is not None and not (k in ("experts", "experts_used") and not v)}  # fmt: skip
    data: dict[str, Any] = {
        "repo_id": model.repo_id,
        "family": model.family,
        "params": model.params,
        "license": model.license,
        "source": model.source,
        "shape": shape,
        "files": [dataclasses.asdict(f) for f in model.files],
    }
    if model.refreshed_at is not None:
        data["refreshed_at"] = model.refreshed_at
    return data


def catalog_to_json(catalog: CuratedCatalog) -> dict[str, Any]:
    return {
        "catalog_date": catalog.catalog_date,
        "models": [model_to_json(m) for m in catalog.models],
    }


# -- loading and refreshing -------------------------------------------------------------------


def load_curated(
    path: Path | None = None, cache: CatalogCache | None = None, endpoint: str | None = None
) -> CuratedCatalog:
    """The shipped catalog, with the refreshed entries `cache` holds for `endpoint` (the
    current Hub by default) laid over it. A damaged cache entry is skipped, never fatal."""
    path = path or curated_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CuratedError(f"cannot read the curated catalog {path}: {exc}") from None
    catalog = parse_curated(data)
    if cache is None:
        return catalog
    prefix = _cache_prefix(endpoint)
    models = []
    for model in catalog.models:
        entry = cache.get(CACHE_KIND, prefix + model.repo_id)
        if entry is not None:
            try:
                files = tuple(_file(f) for f in entry.payload["files"])
                model = dataclasses.replace(model, files=files, refreshed_at=entry.fetched_at)
            except (KeyError, TypeError, ValueError):
                pass
        models.append(model)
    return dataclasses.replace(catalog, models=tuple(models))


def _cache_prefix(endpoint: str | None) -> str:
    from deskllm.catalog.hub import hub_endpoint

    return f"{(endpoint or hub_endpoint()).rstrip('/')}\n"


@dataclass(frozen=True)
class RefreshResult:
    catalog: CuratedCatalog
    refreshed: tuple[str, ...]  # repo ids read from the Hub
    errors: tuple[tuple[str, str], ...]  # (repo id, message)


def refreshed_files(model: CuratedModel, details: Any) -> tuple[CuratedFile, ...]:
    """The model's quants with the Hub's real paths, sizes and sha256 (a RepoDetails from
    HubCatalog.repo), matched by quant label, smallest first. Quants the repo lacks are
    dropped; quants it added since the catalog was made join when the planner has a mix for
    them (a label it cannot plan, F16 say, would be planned at the wrong size); a repo that
    lists none of them keeps the curated files as they are."""
    curated = {normalize_label(f.quant): f for f in model.files}
    files, seen = [], set()
    for hub_file in details.files:
        label = normalize_label(hub_file.quant or "")
        if not (hub_file.complete and hub_file.parts) or label in seen:
            continue
        if label in curated or label in QUANT_MIXES:
            seen.add(label)
            quant = curated[label].quant if label in curated else label
            files.append(CuratedFile(quant, hub_file.first_path, hub_file.size,
                                     hub_file.sha256, False))  # fmt: skip
    files.sort(key=lambda f: f.size_bytes)
    return tuple(files) or model.files


def refresh_curated(catalog: CuratedCatalog, hub: Any) -> RefreshResult:
    """Read every entry's files from the Hub (a HubCatalog: HF_ENDPOINT and HF_HUB_OFFLINE
    are honoured) and keep them in its cache with the time. Entries the Hub cannot answer
    for keep what they had; their errors come back with the repo id."""
    from deskllm.catalog.hub import CatalogError

    prefix = _cache_prefix(hub.endpoint)
    models, done, errors = [], [], []
    for model in catalog.models:
        try:
            details = hub.repo(model.repo_id)
        except CatalogError as exc:
            errors.append((model.repo_id, str(exc)))
            models.append(model)
            continue
        if details.offline:
            errors.append((model.repo_id, details.source.reason or "offline"))
            models.append(model)
            continue
        files = refreshed_files(model, details)
        payload = {"files": [dataclasses.asdict(f) for f in files], "revision": details.revision}
        fetched = hub.cache.put(CACHE_KIND, prefix + model.repo_id, payload)
        models.append(dataclasses.replace(model, files=files, refreshed_at=fetched))
        done.append(model.repo_id)
    refreshed = dataclasses.replace(catalog, models=tuple(models))
    return RefreshResult(refreshed, tuple(done), tuple(errors))


def age_text(refreshed_at: float | None, now: float | None = None) -> str:
    """"never" or how long ago, in words, for a "last refreshed" line."""
    if refreshed_at is None:
        return "never"
    seconds = max(0.0, (now or time.time()) - refreshed_at)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now"
