"""Hugging Face catalog: search GGUF repos and list a repo's model files (huggingface_hub only).

Every answer is written to the SQLite cache; with HF_HUB_OFFLINE=1 or no network the same
calls answer from the cache, flagged offline, within a few seconds. Gated repos use the
standard Hugging Face token (HF_TOKEN or the token file `hf auth login` writes).

HF_ENDPOINT and HF_HUB_OFFLINE are read at each call (huggingface_hub reads them once, at
import), so a process that sets them later, as tests do, is still honoured.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import httpx2  # huggingface_hub 2.x's HTTP client: its errors are what a dead network raises
from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
)
from huggingface_hub.utils import get_session

from deskllm.catalog.cache import CatalogCache
from deskllm.catalog.hub_types import (
    SORTS,
    Answer,
    FilePart,
    ModelFile,
    RepoDetails,
    SearchHit,
    SearchResult,
    repo_from_json,
    search_from_json,
    to_json,
)
from deskllm.catalog.quant_names import parse_gguf_name

PROBE_TIMEOUT = 3.0  # seconds to find out the Hub is unreachable
REQUEST_TIMEOUT = 10.0
SEARCH_DEADLINE = 15.0  # list_models has no timeout of its own and retries for ~25 s
# Our sort name -> list_models' `sort` value, which is also the SearchHit field to re-sort by.
_SORT_FIELD = {"downloads": "downloads", "likes": "likes", "updated": "last_modified"}
_SEARCH_FIELDS = ["author", "downloads", "likes", "lastModified", "gated", "tags"]

T = TypeVar("T")


class CatalogError(Exception):
    """A catalog request failed; the message is meant for the user."""


class HubOffline(CatalogError):
    """The Hub cannot be reached and nothing is cached for this request."""


class RepoNotFound(CatalogError):
    pass


class GatedRepoAccess(CatalogError):
    """The repo is gated and this machine has no access to its files (yet)."""

    def __init__(self, repo_id: str, status: int, endpoint: str) -> None:
        self.repo_id, self.status = repo_id, status
        self.url = f"{endpoint}/{repo_id}"
        self.access = "login" if status == 401 else "request"
        if status == 401:
            how = (
                f"{repo_id} is a gated model: its files are only for logged-in users who "
                f"accepted its conditions. Open {self.url}, log in and accept them, then give "
                "this computer your Hugging Face token: run `hf auth login` (older versions: "
                "`huggingface-cli login`) or set HF_TOKEN."
            )
        else:
            how = (
                f"{repo_id} is a gated model and your Hugging Face account has no access to it "
                f"yet. Open {self.url} and accept its conditions (some owners approve requests "
                "by hand: wait for their e-mail), then try again."
            )
        super().__init__(how)


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_offline() -> bool:
    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return env.upper() in {"1", "ON", "YES", "TRUE"} or constants.is_offline_mode()


def unreachable_reason(endpoint: str) -> str | None:
    """None if the Hub answers at all (any HTTP status); else why not, in words. Cheap and
    bounded: one HEAD with a short timeout, no retries."""
    if hub_offline():
        return "offline mode (HF_HUB_OFFLINE is set)"
    try:
        get_session().head(endpoint, timeout=PROBE_TIMEOUT, follow_redirects=False)
    except OfflineModeIsEnabled:
        return "offline mode (HF_HUB_OFFLINE is set)"
    except httpx2.HTTPError as exc:
        return f"cannot reach {endpoint} ({type(exc).__name__}: {exc or 'no answer'})"
    return None


def network_reason(exc: BaseException, endpoint: str) -> str | None:
    """The words for an error that means "the Hub is not there"; None for other errors."""
    if isinstance(exc, OfflineModeIsEnabled):
        return "offline mode (HF_HUB_OFFLINE is set)"
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        if exc.response.status_code >= 500:
            return f"{endpoint} answered HTTP {exc.response.status_code}"
        return None
    if isinstance(exc, httpx2.TransportError | TimeoutError):
        return f"cannot reach {endpoint} ({type(exc).__name__}: {exc or 'no answer'})"
    return None


def _with_deadline(fn: Callable[[], T], seconds: float) -> T:
    """Run fn in a daemon thread and stop waiting after `seconds` (the call itself may run on
    until its own retries give up; its result is then dropped)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=run, name="hub-call", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _iso(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def _license_from_tags(tags: Iterable[str] | None) -> str | None:
    for tag in tags or ():
        if tag.startswith("license:"):
            return tag.split(":", 1)[1]
    return None


def group_model_files(
    siblings: Iterable[tuple[str, int, str | None]],
) -> tuple[tuple[ModelFile, ...], tuple[ModelFile, ...]]:
    """(model files largest first, mmproj files) from (path, size, sha256) of a repo's files.
    Shards of one model become one ModelFile; non-.gguf files and imatrix files are left out."""
    groups: dict[str, list[tuple[int, FilePart]]] = {}
    expected: dict[str, int] = {}
    for path, size, sha in siblings:
        if not path.lower().endswith(".gguf"):
            continue
        name = parse_gguf_name(path)
        if name.kind == "imatrix":
            continue
        number, count = (name.shard.number, name.shard.count) if name.shard else (1, 1)
        groups.setdefault(name.group, []).append((number, FilePart(path, size, sha)))
        expected[name.group] = max(expected.get(name.group, 1), count)
    models, mmproj = [], []
    for key, numbered in groups.items():
        parts = tuple(part for _, part in sorted(numbered, key=lambda x: x[0]))
        name = parse_gguf_name(parts[0].path)
        model = ModelFile(key, name.quant, parts, expected[key])
        (mmproj if name.kind == "mmproj" else models).append(model)
    models.sort(key=lambda m: (-m.size, m.name))
    mmproj.sort(key=lambda m: m.name)
    return tuple(models), tuple(mmproj)


class HubCatalog:
    """Search and repo details with a cache. One per thread (it holds an SQLite handle)."""

    def __init__(
        self,
        cache: CatalogCache | None = None,
        *,
        endpoint: str | None = None,
        token: str | bool | None = None,  # None: HF_TOKEN or the token file, if any
    ) -> None:
        self.cache = cache if cache is not None else CatalogCache()
        self._endpoint = endpoint
        self.token = token

    @property
    def endpoint(self) -> str:
        return (self._endpoint or hub_endpoint()).rstrip("/")

    def _api(self) -> HfApi:
        return HfApi(endpoint=self.endpoint, token=self.token)

    # -- search ------------------------------------------------------------------------------
    def search(
        self, text: str, sort: str = "downloads", limit: int = 20, max_age: float = 0.0
    ) -> SearchResult:
        """GGUF repos matching `text`, best first by `sort` (downloads | likes | updated)."""
        if sort not in SORTS:
            raise ValueError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
        query = " ".join(text.split()).lower()
        prefix = f"{self.endpoint}\n{query}\n"
        key = f"{prefix}{sort}\n{limit}"
        cached = self.cache.get("search", key)
        if cached and cached.age <= max_age:
            return search_from_json(cached.payload, Answer(False, True, cached.fetched_at))
        reason = unreachable_reason(self.endpoint)
        if reason is None:
            try:
                models = _with_deadline(
                    lambda: list(
                        self._api().list_models(
                            search=query or None,
                            filter="gguf",
                            sort=_SORT_FIELD[sort],
                            limit=limit,
                            expand=_SEARCH_FIELDS,
                        )
                    ),
                    SEARCH_DEADLINE,
                )
            except Exception as exc:
                reason = network_reason(exc, self.endpoint)
                if reason is None:
                    raise CatalogError(f"searching the Hub failed: {exc}") from exc
            else:
                hits = tuple(
                    SearchHit(
                        repo_id=m.id,
                        author=m.author,
                        downloads=m.downloads or 0,
                        likes=m.likes or 0,
                        last_modified=_iso(m.last_modified),
                        gated=bool(m.gated),
                        license=_license_from_tags(m.tags),
                    )
                    for m in models
                )
                result = SearchResult(query, sort, hits)
                fetched = self.cache.put("search", key, to_json(result))
                return SearchResult(query, sort, hits, Answer(fetched_at=fetched))
        return self._search_offline(query, sort, limit, key, prefix, reason or "")

    def _search_offline(
        self, query: str, sort: str, limit: int, key: str, prefix: str, reason: str
    ) -> SearchResult:
        entry = self.cache.get("search", key)
        note = reason
        if entry is None:
            # The same words searched with another sort or limit: sort those hits here.
            others = self.cache.with_prefix("search", prefix)
            if not others:
                return self._search_shipped(query, sort, limit, reason)
            entry = others[0]
            note = f"{reason}; re-sorted from an earlier search"
        cached = search_from_json(entry.payload, Answer())
        field = _SORT_FIELD[sort]
        # Missing values (a hit without last_modified) sort last without comparing to others.
        hits = sorted(
            cached.hits,
            key=lambda h: (getattr(h, field) is not None, getattr(h, field) or 0),
            reverse=True,
        )[:limit]
        return SearchResult(query, sort, tuple(hits), Answer(True, True, entry.fetched_at, note))

    def _search_shipped(self, query: str, sort: str, limit: int, reason: str) -> SearchResult:
        """Offline words never searched before: the models of the catalog shipped with the
        app whose repo id has every word, rather than nothing (their files are planned from
        that catalog, offline too)."""
        from deskllm.catalog.curated import CuratedError, load_curated

        try:
            shipped = load_curated(cache=self.cache, endpoint=self.endpoint)
        except CuratedError:
            return SearchResult(query, sort, (), Answer(True, False, 0.0, reason))
        words = query.split()
        hits = tuple(
            SearchHit(repo_id=m.repo_id, author=m.repo_id.split("/")[0], downloads=0, likes=0,
                      last_modified=None, gated=False, license=m.license)  # fmt: skip
            for m in shipped.models
            if all(w in m.repo_id.lower() or w in m.family.lower() for w in words)
        )[:limit]
        if hits:
            reason = f"{reason}; {len(hits)} from the catalog shipped with deskllm"
        return SearchResult(query, sort, hits, Answer(True, False, 0.0, reason))

    # -- repo details ------------------------------------------------------------------------
    def repo(self, repo_id: str, max_age: float = 0.0) -> RepoDetails:
        """Every GGUF model file of a repo (sizes, sha256, parts), license and gating.
        Raises RepoNotFound, or HubOffline when the Hub is unreachable and nothing is cached."""
        key = f"{self.endpoint}\n{repo_id}"
        cached = self.cache.get("repo", key)
        if cached and cached.age <= max_age:
            return repo_from_json(cached.payload, Answer(False, True, cached.fetched_at))
        if hub_offline():
            return self._repo_offline(repo_id, key, "offline mode (HF_HUB_OFFLINE is set)")
        try:
            # One request with sizes and LFS sha256 of every file (blobs=true); it takes a
            # timeout and does not retry, so a dead network fails fast.
            info = self._api().model_info(repo_id, files_metadata=True, timeout=REQUEST_TIMEOUT)
        except GatedRepoError as exc:  # info is public on the Hub; a mirror may differ
            raise GatedRepoAccess(repo_id, exc.response.status_code, self.endpoint) from exc
        except RepositoryNotFoundError as exc:
            raise RepoNotFound(
                f"{repo_id} was not found on {self.endpoint} (check the name; a private repo "
                "needs a token with access)"
            ) from exc
        except Exception as exc:
            reason = network_reason(exc, self.endpoint)
            if reason is None:
                raise CatalogError(f"reading {repo_id} from the Hub failed: {exc}") from exc
            return self._repo_offline(repo_id, key, reason)
        files, mmproj = group_model_files(
            (s.rfilename, s.size or 0, s.lfs.sha256 if s.lfs else None) for s in info.siblings or ()
        )
        license_ = getattr(info.card_data, "license", None)
        details = RepoDetails(
            repo_id=info.id,
            revision=info.sha,
            license=license_ or _license_from_tags(info.tags),
            gated=info.gated or None,
            downloads=info.downloads or 0,
            likes=info.likes or 0,
            last_modified=_iso(info.last_modified),
            files=files,
            mmproj=mmproj,
        )
        if details.gated and files:
            details = self._with_access(details)
        fetched = self.cache.put("repo", key, to_json(details))
        return repo_from_json(to_json(details), Answer(fetched_at=fetched))

    def _with_access(self, details: RepoDetails) -> RepoDetails:
        """For a gated repo: can this machine download its files? One HEAD request."""
        url = hf_hub_url(
            details.repo_id,
            details.files[0].first_path,
            revision=details.revision,
            endpoint=self.endpoint,
        )
        try:
            get_hf_file_metadata(
                url, token=self.token, timeout=REQUEST_TIMEOUT, endpoint=self.endpoint
            )
        except GatedRepoError as exc:
            err = GatedRepoAccess(details.repo_id, exc.response.status_code, self.endpoint)
            return replace(details, access=err.access, access_message=str(err))
        except Exception:
            return details  # unknown: the download will tell
        return replace(details, access="ok")

    def cached_repo(self, repo_id: str) -> RepoDetails | None:
        entry = self.cache.get("repo", f"{self.endpoint}\n{repo_id}")
        if entry is None:
            return None
        return repo_from_json(entry.payload, Answer(False, True, entry.fetched_at))

    def _repo_offline(self, repo_id: str, key: str, reason: str) -> RepoDetails:
        entry = self.cache.get("repo", key)
        if entry is None:
            raise HubOffline(
                f"{reason}, and {repo_id} has not been looked at on this computer before: "
                "connect to the internet and try again"
            )
        return repo_from_json(entry.payload, Answer(True, True, entry.fetched_at, reason))
