"""A real local HTTP server that speaks the Hugging Face Hub routes huggingface_hub uses.

Point huggingface_hub at it with `HF_ENDPOINT=hub.url` (the `hub` fixture in hub_fixtures.py
also patches huggingface_hub.constants, which read HF_ENDPOINT once, at import). Everything
goes over real sockets: HTTP/1.1 with keep-alive, Range requests, redirects, error headers.

    with FakeHub() as hub:
        hub.add_repo("bartowski/X-GGUF", {"X-Q4_K_M.gguf": path, "README.md": b"# X"},
                     gated=False, license="apache-2.0", downloads=10, likes=2)
        hub.fault("bartowski/X-GGUF", "X-Q4_K_M.gguf", drop_after_bytes=1 << 20, drop_times=2)
        hf_hub_download("bartowski/X-GGUF", "X-Q4_K_M.gguf", cache_dir=...)
        hub.bytes_served["bartowski/X-GGUF/X-Q4_K_M.gguf"]   # body bytes sent for that file

Routes (as huggingface_hub 2.4 calls them):
  GET  /api/models?search=&author=&filter=&sort=&limit=&expand=&full=   (Link-header pages)
  GET  /api/models/{repo}[/revision/{rev}][?blobs=true&expand=...]      repo info + siblings
  GET  /api/models/{repo}/tree/{rev}[/{dir}]?recursive=&expand=          (Link-header pages)
  GET|HEAD /{repo}/resolve/{rev}/{path}    small files: 200 here, with Range and a git ETag;
                                           LFS files (.gguf, or over 10 MB): 302 to the CDN
                                           route with X-Linked-Etag (sha256), X-Linked-Size
  GET|HEAD /cdn-lfs/{repo}/{commit}/{path} the "CDN": Range (206 + Content-Range), ETag sha256
File bodies honour Range (one range; 416 past the end) and If-Range (an ETag that is not
the file's current one gets the whole file, 200).

The CDN links use the host name `localhost` while the API uses 127.0.0.1: another origin, as
on the real Hub, so huggingface_hub reads the metadata off the 302 and drops the
Authorization header before following it (falls back to 127.0.0.1 if localhost is not
loopback here).

Errors carry the Hub's headers (X-Error-Code / X-Error-Message) so huggingface_hub raises its
own exceptions: RepoNotFound, RevisionNotFound, EntryNotFound, and GatedRepo (401 without a
token, 403 with a token other than `FakeHub.ACCESS_TOKEN`). Gating, as on the Hub, guards file
contents only: repo info and the tree stay public.

Fault knobs, per file, through `fault(repo_id, path, **knobs)` (they act on responses that
carry the file's body; a call with no knobs clears them):
  drop_after_bytes=N  close the connection after N body bytes of a response ...
  drop_times=1        ... this many times (then serve normally)
  throttle_bytes_per_s=R   pace the body at about R bytes per second
  corrupt_byte_at=OFFSET   serve the byte at that file offset wrong (xor 0xFF) ...
  corrupt_times=None       ... that many times (None: always)
  fail_status=503, fail_times=1   answer with that HTTP status instead, that many times
Counters: `bytes_served` ("repo/path" -> body bytes sent, all responses together) and
`requests` (one RequestLog per request, in order).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

LFS_MIN_SIZE = 10 << 20  # the Hub stores .gguf files and anything large in LFS
CHUNK = 64 << 10
SENDFILE_CHUNK = 8 << 20  # counted as served after each piece
POINTER_SIZE = 134  # bytes of a git-lfs pointer file, as the Hub reports it

# Properties the Hub returns for a model in a search listing without `expand` or `full`.
DEFAULT_LIST_FIELDS = (
    "id", "likes", "trendingScore", "private", "downloads", "tags", "pipeline_tag",
    "library_name", "createdAt",
)  # fmt: skip
SORT_KEYS = {
    "downloads": "downloads",
    "likes": "likes",
    "lastModified": "lastModified",
    "createdAt": "createdAt",
    "trendingScore": "trendingScore",
}

_DIGESTS: dict[tuple[str, int, int], tuple[str, str]] = {}  # (path, size, mtime) -> (sha256, git)
_DIGEST_LOCK = threading.Lock()


def _digests(path: Path) -> tuple[str, str]:
    """(sha256, git blob sha1) of a file; memoised because fixtures re-add the same big files."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _DIGEST_LOCK:
        if key in _DIGESTS:
            return _DIGESTS[key]
    sha, git = hashlib.sha256(), hashlib.sha1(f"blob {st.st_size}\0".encode())
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            sha.update(block)
            git.update(block)
    result = (sha.hexdigest(), git.hexdigest())
    with _DIGEST_LOCK:
        _DIGESTS[key] = result
    return result


@dataclass
class HubFile:
    path: str  # path in the repo
    source: Path | bytes
    size: int
    sha256: str
    git_oid: str  # git blob sha1: the ETag of a file kept in git
    lfs: bool

    def read(self, start: int, length: int) -> bytes:
        if isinstance(self.source, bytes):
            return self.source[start : start + length]
        with self.source.open("rb") as fh:
            fh.seek(start)
            return fh.read(length)


@dataclass
class HubRepo:
    repo_id: str
    files: dict[str, HubFile]
    gated: str | bool  # False, "auto" or "manual", as the Hub's `gated` field
    license: str | None
    downloads: int
    likes: int
    last_modified: str
    created_at: str
    tags: list[str]
    sha: str  # the commit every revision alias resolves to

    def info(self, blobs: bool) -> dict[str, Any]:
        siblings = []
        for f in sorted(self.files.values(), key=lambda f: f.path):
            entry: dict[str, Any] = {"rfilename": f.path}
            if blobs:
                entry |= {"size": f.size, "blobId": f.git_oid}
                if f.lfs:
                    entry["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": POINTER_SIZE}
            siblings.append(entry)
        card: dict[str, Any] = {"tags": [t for t in self.tags if ":" not in t]}
        if self.license:
            card["license"] = self.license
        return {
            "_id": self.sha[:24],
            "id": self.repo_id,
            "modelId": self.repo_id,
            "author": self.repo_id.split("/")[0],
            "sha": self.sha,
            "lastModified": self.last_modified,
            "createdAt": self.created_at,
            "private": False,
            "disabled": False,
            "gated": self.gated,
            "downloads": self.downloads,
            "likes": self.likes,
            "trendingScore": 0,
            "tags": self.tags,
            "pipeline_tag": "text-generation",
            "library_name": "gguf" if "gguf" in self.tags else None,
            "cardData": card,
            "siblings": siblings,
            "usedStorage": sum(f.size for f in self.files.values()),
        }


@dataclass
class Fault:
    drop_after_bytes: int | None = None
    drop_times: int = 1
    throttle_bytes_per_s: float | None = None
    corrupt_byte_at: int | None = None
    corrupt_times: int | None = None  # None: every time
    fail_status: int | None = None
    fail_times: int = 1


@dataclass(frozen=True)
class RequestLog:
    method: str
    path: str  # the URL path and query
    range: str | None
    status: int
    authorized: bool


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class FakeHub:
    """The server. Use as a context manager, or call start() / close()."""

    page_size: int = 1000  # entries per page of search results and tree listings
    cdn_host: str = "localhost"
    url: str = ""
    repos: dict[str, HubRepo] = field(default_factory=dict)
    faults: dict[tuple[str, str], Fault] = field(default_factory=dict)
    bytes_served: dict[str, int] = field(default_factory=dict)
    requests: list[RequestLog] = field(default_factory=list)

    ACCESS_TOKEN = "hf_fakehub_access_granted"  # the one token gated repos accept

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeHub:
        handler = type("Handler", (_Handler,), {"hub": self})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        self._server = server
        port = server.server_address[1]
        self.url = f"http://127.0.0.1:{port}"
        if not _is_loopback(self.cdn_host):
            self.cdn_host = "127.0.0.1"
        self._thread = threading.Thread(target=server.serve_forever, name="fakehub", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and cut every open connection (a stopped server must look stopped)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._server = None

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    # -- content -----------------------------------------------------------------------------
    def add_repo(
        self,
        repo_id: str,
        files: dict[str, Path | bytes],
        *,
        gated: bool | str = False,
        license: str | None = "apache-2.0",
        downloads: int = 0,
        likes: int = 0,
        last_modified: str = "2026-01-01T00:00:00.000Z",
        created_at: str = "2025-06-01T00:00:00.000Z",
        tags: list[str] | tuple[str, ...] = (),
    ) -> HubRepo:
        entries: dict[str, HubFile] = {}
        for path, source in files.items():
            if isinstance(source, bytes):
                size = len(source)
                sha = hashlib.sha256(source).hexdigest()
                git = hashlib.sha1(f"blob {size}\0".encode() + source).hexdigest()
            else:
                source = Path(source)
                size = source.stat().st_size
                sha, git = _digests(source)
            lfs = path.endswith(".gguf") or size >= LFS_MIN_SIZE
            entries[path] = HubFile(path, source, size, sha, git, lfs)
        all_tags = list(tags)
        if any(p.endswith(".gguf") for p in entries) and "gguf" not in all_tags:
            all_tags.insert(0, "gguf")
        if license:
            all_tags.append(f"license:{license}")
        commit = hashlib.sha1(
            (repo_id + "".join(sorted(f.path + f.sha256 for f in entries.values()))).encode()
        ).hexdigest()
        repo = HubRepo(
            repo_id=repo_id,
            files=entries,
            gated="manual" if gated is True else gated,
            license=license,
            downloads=downloads,
            likes=likes,
            last_modified=last_modified,
            created_at=created_at,
            tags=all_tags,
            sha=commit,
        )
        with self._lock:
            self.repos[repo_id] = repo
        return repo

    def fault(self, repo_id: str, path: str, **knobs: Any) -> None:
        """Set the fault knobs of one file (see the module docstring); no knobs clears them."""
        with self._lock:
            if knobs:
                self.faults[(repo_id, path)] = Fault(**knobs)
            else:
                self.faults.pop((repo_id, path), None)

    def served(self, repo_id: str, path: str) -> int:
        return self.bytes_served.get(f"{repo_id}/{path}", 0)

    def file_url(self, repo_id: str, path: str, revision: str = "main") -> str:
        return f"{self.url}/{repo_id}/resolve/{revision}/{quote(path)}"

    # -- used by the handler -----------------------------------------------------------------
    def _repo(self, repo_id: str, revision: str | None = None) -> HubRepo:
        repo = self.repos.get(repo_id)
        if repo is None:
            raise HubError(404, "RepoNotFound", "Repository not found")
        if revision is not None and revision not in ("main", repo.sha):
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return repo

    def _count(self, key: str, n: int) -> None:
        with self._lock:
            self.bytes_served[key] = self.bytes_served.get(key, 0) + n


def _is_loopback(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET)
    except OSError:
        return False
    return bool(infos) and all(info[4][0].startswith("127.") for info in infos)


def _tree_entry(kind: str, oid: str, size: int, path: str) -> dict[str, Any]:
    return {"type": kind, "oid": oid, "size": size, "path": path}


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None | str:
    """(start, end inclusive), None for no/ignored Range, or 'bad' when unsatisfiable."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[6:].strip().partition("-")
    try:
        if first == "":
            n = int(last)
            if n <= 0:
                return "bad"
            return max(0, size - n), size - 1
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return "bad"
    return start, min(end, size - 1)


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"  # keep-alive, like the real Hub
    timeout = 30  # an idle keep-alive connection is dropped after this
    server_version = "FakeHub/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet in tests
        pass

    def setup(self) -> None:
        super().setup()
        with self.hub._lock:
            self.hub._conns.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.hub._lock:
            self.hub._conns.discard(self.connection)

    # -- dispatch ----------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch(head=False)

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def _dispatch(self, head: bool) -> None:
        self._status = 0
        split = urlsplit(self.path)
        parts = [unquote(p) for p in split.path.split("/")[1:]]
        query = parse_qs(split.query)
        try:
            if parts[:2] == ["api", "models"]:
                if head:
                    raise HubError(405, None, "Method not allowed")
                self._api_models(parts[2:], query)
            elif parts[:1] == ["cdn-lfs"] and len(parts) >= 5:
                self._cdn(parts[1] + "/" + parts[2], parts[3], "/".join(parts[4:]), head)
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), head)
            else:
                raise HubError(404, None, "Not found")
        except HubError as err:
            self._error(err, head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with self.hub._lock:
                self.hub.requests.append(
                    RequestLog(
                        self.command,
                        self.path,
                        self.headers.get("Range"),
                        self._status,
                        self.headers.get("Authorization") is not None,
                    )
                )

    # -- responses ---------------------------------------------------------------------------
    def _start(self, status: int, headers: dict[str, str]) -> None:
        self._status = status
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def _json(self, data: Any, link: str | None = None) -> None:
        body = json.dumps(data).encode()
        headers = {"Content-Type": "application/json; charset=utf-8"}
        headers["Content-Length"] = str(len(body))
        if link:
            headers["Link"] = f'<{link}>; rel="next"'
        self._start(200, headers)
        self.wfile.write(body)

    def _error(self, err: HubError, head: bool) -> None:
        body = b"" if head else json.dumps({"error": err.message}).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        if err.code:
            headers["X-Error-Code"] = err.code
        headers["X-Error-Message"] = err.message
        self._start(err.status, headers)
        if body:
            self.wfile.write(body)

    def _page_link(self, items: list, query: dict[str, list[str]]) -> tuple[list, str | None]:
        """One page of `items` and the Link URL of the next, cursor-based like the Hub's."""
        start = int(query.get("cursor", ["0"])[0])
        end = start + self.hub.page_size
        if end >= len(items):
            return items[start:], None
        flat = [(k, v) for k, values in query.items() if k != "cursor" for v in values]
        path = urlsplit(self.path).path
        return items[start:end], f"{self.hub.url}{path}?{urlencode(flat + [('cursor', end)])}"

    # -- /api/models -------------------------------------------------------------------------
    def _api_models(self, rest: list[str], query: dict[str, list[str]]) -> None:
        if not rest:
            return self._search(query)
        if len(rest) < 2:
            raise HubError(404, "RepoNotFound", "Repository not found")
        repo_id = f"{rest[0]}/{rest[1]}"
        tail = rest[2:]
        if not tail:
            return self._info(self.hub._repo(repo_id, None), query)
        if tail[0] == "revision" and len(tail) == 2:
            return self._info(self.hub._repo(repo_id, tail[1]), query)
        if tail[0] == "tree" and len(tail) >= 2:
            return self._tree(self.hub._repo(repo_id, tail[1]), "/".join(tail[2:]), query)
        raise HubError(404, None, "Not found")

    def _search(self, query: dict[str, list[str]]) -> None:
        repos = list(self.hub.repos.values())
        if search := query.get("search", [""])[0].lower():
            repos = [r for r in repos if search in r.repo_id.lower()]
        if author := query.get("author", [""])[0]:
            repos = [r for r in repos if r.repo_id.split("/")[0] == author]
        for wanted in query.get("filter", []):
            repos = [r for r in repos if wanted in r.tags or wanted == r.repo_id.split("/")[0]]
        infos = [r.info(blobs=False) for r in repos]
        if sort := query.get("sort", [""])[0]:
            key = SORT_KEYS.get(sort)
            if key is None:
                raise HubError(400, None, f"Invalid sort parameter: {sort}")
            infos.sort(key=lambda i: i[key], reverse=True)  # the Hub sorts descending
        if limit := query.get("limit", [""])[0]:
            infos = infos[: int(limit)]
        expand = query.get("expand", []) + query.get("expand[]", [])
        full = query.get("full", [""])[0].lower() == "true"
        out = []
        for info in infos:
            if expand:
                keep = {"_id", "id", *expand}
            elif full:
                keep = set(info)
            else:
                keep = {"_id", "modelId", *DEFAULT_LIST_FIELDS}
            if "cardData" in query:
                keep.add("cardData")
            out.append({k: v for k, v in info.items() if k in keep})
        page, link = self._page_link(out, query)
        self._json(page, link)

    def _info(self, repo: HubRepo, query: dict[str, list[str]]) -> None:
        info = repo.info(blobs=query.get("blobs", [""])[0].lower() == "true")
        if expand := query.get("expand", []) + query.get("expand[]", []):
            info = {k: v for k, v in info.items() if k in {"_id", "id", *expand}}
        self._json(info)

    def _tree(self, repo: HubRepo, base: str, query: dict[str, list[str]]) -> None:
        recursive = query.get("recursive", [""])[0].lower() == "true"
        prefix = base.strip("/") + "/" if base.strip("/") else ""
        entries: dict[str, dict[str, Any]] = {}
        for f in sorted(repo.files.values(), key=lambda f: f.path):
            if not f.path.startswith(prefix):
                continue
            dirs = f.path[len(prefix) :].split("/")[:-1]
            # Folders on the way to the file: all of them when recursive, else the first.
            for depth in range(1, (len(dirs) if recursive else min(1, len(dirs))) + 1):
                folder = prefix + "/".join(dirs[:depth])
                oid = hashlib.sha1(folder.encode()).hexdigest()
                entries.setdefault(folder, _tree_entry("directory", oid, 0, folder))
            if recursive or not dirs:
                entry = _tree_entry("file", f.git_oid, f.size, f.path)
                if f.lfs:
                    entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": POINTER_SIZE}
                entries[f.path] = entry
        if prefix and not entries:
            raise HubError(404, "EntryNotFound", f'{base} does not exist on "main"')
        page, link = self._page_link(list(entries.values()), query)
        self._json(page, link)

    # -- files -------------------------------------------------------------------------------
    def _check_access(self, repo: HubRepo) -> None:
        if not repo.gated:
            return
        auth = self.headers.get("Authorization", "")
        if not auth:
            raise HubError(
                401,
                "GatedRepo",
                f"Access to model {repo.repo_id} is restricted. You must have access to it and "
                "be authenticated to access it. Please log in.",
            )
        if auth.removeprefix("Bearer ").strip() != self.hub.ACCESS_TOKEN:
            raise HubError(
                403,
                "GatedRepo",
                f"Access to model {repo.repo_id} is restricted and you are not in the authorized "
                f"list. Visit {self.hub.url}/{repo.repo_id} to ask for access.",
            )

    def _file(self, repo: HubRepo, path: str) -> HubFile:
        f = repo.files.get(path)
        if f is None:
            raise HubError(404, "EntryNotFound", f'{path} does not exist on "main"')
        return f

    def _resolve(self, repo_id: str, revision: str, path: str, head: bool) -> None:
        repo = self.hub._repo(repo_id, revision)
        self._check_access(repo)
        f = self._file(repo, path)
        meta = {"X-Repo-Commit": repo.sha, "Accept-Ranges": "bytes"}
        if not f.lfs:
            meta["ETag"] = f'"{f.git_oid}"'
            return self._body(repo, f, head, meta)
        cdn = (
            f"http://{self.hub.cdn_host}:{self.hub.port}/cdn-lfs/{repo_id}/{repo.sha}/{quote(path)}"
        )
        body = f"Found. Redirecting to {cdn}".encode()
        self._start(
            302,
            meta
            | {
                "Location": cdn,
                "ETag": f'"{f.sha256}"',
                "X-Linked-Etag": f'"{f.sha256}"',
                "X-Linked-Size": str(f.size),
                "Content-Type": "text/plain; charset=utf-8",
                "Content-Length": str(len(body)),
            },
        )
        if not head:
            self.wfile.write(body)

    def _cdn(self, repo_id: str, commit: str, path: str, head: bool) -> None:
        repo = self.hub._repo(repo_id, commit)
        f = self._file(repo, path)
        meta = {"ETag": f'"{f.sha256}"', "Accept-Ranges": "bytes"}
        meta["Content-Disposition"] = f'inline; filename="{path.rsplit("/", 1)[-1]}"'
        if self.hub.cdn_host == "127.0.0.1":  # same origin: HEAD follows, so carry the Hub's
            meta |= {"X-Repo-Commit": repo.sha, "X-Linked-Size": str(f.size)}
        self._body(repo, f, head, meta)

    def _body(self, repo: HubRepo, f: HubFile, head: bool, meta: dict[str, str]) -> None:
        wanted = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if if_range is not None and if_range.strip() != meta["ETag"]:
            wanted = None  # the client's copy is of other bytes: send the file whole (RFC 9110)
        rng = _parse_range(wanted, f.size)
        if rng == "bad":
            raise HubError(416, None, "Range Not Satisfiable")
        fault = self.hub.faults.get((repo.repo_id, f.path)) if not head else None
        with self.hub._lock:
            fail = fault is not None and bool(fault.fail_status) and fault.fail_times > 0
            if fail:
                fault.fail_times -= 1
        if fail:
            raise HubError(fault.fail_status, None, f"injected HTTP {fault.fail_status}")
        start, end = rng if isinstance(rng, tuple) else (0, f.size - 1)
        length = end - start + 1 if f.size else 0
        headers = meta | {"Content-Type": "application/octet-stream"}
        headers["Content-Length"] = str(length)
        if isinstance(rng, tuple):
            headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
        self._start(206 if isinstance(rng, tuple) else 200, headers)
        if head or not length:
            return
        self._send_body(repo, f, start, length, fault)

    def _send_file(self, key: str, source: Path, start: int, length: int) -> None:
        """A plain body straight from the file with sendfile(2), as real file servers and CDNs
        send it: the server then costs next to no CPU, so a benchmark measures the client."""
        with source.open("rb") as fh:
            sent = 0
            while sent < length:
                n = self.connection.sendfile(fh, start + sent, min(SENDFILE_CHUNK, length - sent))
                if not n:
                    break
                sent += n
                self.hub._count(key, n)

    def _send_body(
        self, repo: HubRepo, f: HubFile, start: int, length: int, fault: Fault | None
    ) -> None:
        key = f"{repo.repo_id}/{f.path}"
        drop_at = None
        corrupt = None
        rate = None
        if fault:
            with self.hub._lock:
                if fault.drop_after_bytes is not None and fault.drop_times > 0:
                    fault.drop_times -= 1
                    drop_at = fault.drop_after_bytes
                at = fault.corrupt_byte_at
                left = fault.corrupt_times
                if at is not None and start <= at < start + length and (left is None or left > 0):
                    corrupt = at - start
                    if left is not None:
                        fault.corrupt_times = left - 1
            rate = fault.throttle_bytes_per_s
        if drop_at is None and corrupt is None and not rate and isinstance(f.source, Path):
            self._send_file(key, f.source, start, length)
            return
        # Throttled bodies go in small pieces so the pace is smooth; others in 64 KiB blocks.
        chunk = CHUNK if not rate else max(1, min(CHUNK, math.ceil(rate / 20)))
        sent = 0
        t0 = time.monotonic()
        limit = length if drop_at is None else min(length, drop_at)
        while sent < limit:
            block = bytearray(f.read(start + sent, min(chunk, limit - sent)))
            if not block:
                break
            if corrupt is not None and sent <= corrupt < sent + len(block):
                block[corrupt - sent] ^= 0xFF
            self.wfile.write(block)
            sent += len(block)
            self.hub._count(key, len(block))
            if rate:
                ahead = sent / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        if sent < length:
            # Cut mid-body: the client sees fewer bytes than Content-Length promised.
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
