"""Read a GGUF file's header on the Hub without downloading the file.

HTTP Range requests through huggingface_hub's own session (its proxies, TLS verification and
headers), growing the range until `parse_header` stops asking for more: headers are ~1-8 MB,
mostly tokenizer arrays, models are GBs. Each request fetches only the bytes not yet held, so
the whole read costs about the header's size. The file name's quant label is then checked
against the header's `general.file_type`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from huggingface_hub import get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import GatedRepoError
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from deskllm.catalog.hub import (
    REQUEST_TIMEOUT,
    GatedRepoAccess,
    HubCatalog,
    HubOffline,
    hub_endpoint,
    hub_offline,
    network_reason,
)
from deskllm.catalog.quant_names import FileTypeCheck, check_file_type, parse_gguf_name
from deskllm.gguf.header import (
    GgufError,
    GgufHeader,
    NeedMoreData,
    TensorInfo,
    parse_header,
    validate_metadata,
)

FIRST_READ = 256 << 10
MAX_READ = 64 << 20  # no real header is this big; stop before fetching a model by mistake


@dataclass(frozen=True)
class RemoteHeader:
    repo_id: str
    path: str
    revision: str | None  # commit
    sha256: str | None  # the file's ETag: its sha256 for LFS files
    file_size: int
    bytes_fetched: int  # 0 when it came from the cache
    header: GgufHeader
    check: FileTypeCheck


def fetch_remote_header(
    repo_id: str,
    path: str,
    *,
    revision: str = "main",
    endpoint: str | None = None,
    token: str | bool | None = None,
    first_read: int = FIRST_READ,
    max_read: int = MAX_READ,
    timeout: float = REQUEST_TIMEOUT,
) -> RemoteHeader:
    """Fetch and parse the header of `path` in `repo_id`. Raises GatedRepoAccess for a gated
    repo this machine cannot read, GgufError for a file that is not valid GGUF, and
    huggingface_hub's errors for the rest (RepositoryNotFoundError, network errors)."""
    endpoint = (endpoint or hub_endpoint()).rstrip("/")
    url = hf_hub_url(repo_id, path, revision=revision, endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(url, token=token, timeout=timeout, endpoint=endpoint)
    except GatedRepoError as exc:
        raise GatedRepoAccess(repo_id, exc.response.status_code, endpoint) from exc
    if meta.size is None:
        raise GgufError(f"{path}: the Hub did not say how big the file is")
    headers = build_hf_headers(token=token)
    headers["Accept-Encoding"] = "identity"  # byte offsets must be the file's
    if urlsplit(meta.location).netloc != urlsplit(url).netloc:
        headers.pop("authorization", None)  # a CDN link is signed; the token stays with the Hub
    buf = bytearray()
    fetched = 0
    want = min(first_read, meta.size)
    while True:
        fetched += _fill(meta.location, headers, buf, want, timeout)
        try:
            header = parse_header(buf, meta.size)
            break
        except NeedMoreData as more:
            limit = min(max_read, meta.size)
            if want >= limit:
                raise GgufError(f"{path}: header larger than {limit} bytes") from None
            want = min(max(more.needed, want * 2), limit)
        except GgufError as exc:
            raise GgufError(f"{path}: {exc}") from None
    label = parse_gguf_name(path).quant
    check = check_file_type(label, header.metadata.get("general.file_type"))
    return RemoteHeader(
        repo_id, path, meta.commit_hash, meta.etag, meta.size, fetched, header, check
    )


def remote_header(
    catalog: HubCatalog,
    repo_id: str,
    path: str,
    *,
    sha256: str | None = None,
    revision: str = "main",
) -> RemoteHeader:
    """The header of one file, from the cache when this file (by sha256) was read before: a
    file's bytes never change, so neither does its header. Offline, only the cache answers
    (the sha256 then comes from cached repo details); HubOffline if it cannot."""
    if sha256 is None and (details := catalog.cached_repo(repo_id)) is not None:
        sha256 = next(
            (p.sha256 for f in details.files + details.mmproj for p in f.parts if p.path == path),
            None,
        )
    if sha256 and (entry := catalog.cache.get("header", sha256)) is not None:
        try:
            return header_from_json(entry.payload, path)
        except (GgufError, KeyError, TypeError, ValueError):
            pass  # a damaged or outdated cache entry: read the header from the Hub again
    endpoint = catalog.endpoint
    reason = "offline mode (HF_HUB_OFFLINE is set)" if hub_offline() else None
    if reason is None:
        try:
            header = fetch_remote_header(
                repo_id, path, revision=revision, endpoint=endpoint, token=catalog.token
            )
        except (GatedRepoAccess, GgufError):
            raise
        except Exception as exc:
            reason = network_reason(exc, endpoint)
            if reason is None:
                raise
        else:
            if header.sha256:
                catalog.cache.put("header", header.sha256, header_to_json(header))
            return header
    raise HubOffline(f"{reason}, and the header of {repo_id}/{path} is not cached")


def _fill(url: str, headers: dict[str, str], buf: bytearray, want: int, timeout: float) -> int:
    """Extend `buf` to `want` bytes from the file's start; returns the bytes received."""
    if len(buf) >= want:
        return 0
    ranged = headers | {"Range": f"bytes={len(buf)}-{want - 1}"}
    received = 0
    with get_session().stream("GET", url, headers=ranged, timeout=timeout) as response:
        hf_raise_for_status(response)
        if response.status_code == 200:
            buf.clear()  # the server ignored Range and sends the file from byte 0
        for chunk in response.iter_bytes():
            take = chunk[: want - len(buf)]
            buf += take
            received += len(chunk)
            if len(buf) >= want:
                break  # leaving the block closes the stream: the rest is never read
    if len(buf) < want:
        raise GgufError(f"the server sent {len(buf)} of the {want} header bytes asked for")
    return received


def combine_parts(parts: list[RemoteHeader]) -> GgufHeader:
    """One header for a split model: metadata of part 1, tensors of every part (so weight
    totals are right; tensor offsets stay relative to their own part)."""
    first = parts[0].header
    tensors = tuple(t for p in parts for t in p.header.tensors)
    return GgufHeader(
        first.version, first.metadata, tensors, first.data_offset, first.array_lengths
    )


# -- JSON form for the cache ------------------------------------------------------------------


def header_to_json(h: RemoteHeader) -> dict[str, Any]:
    g = h.header
    return {
        "repo_id": h.repo_id,
        "path": h.path,
        "revision": h.revision,
        "sha256": h.sha256,
        "file_size": h.file_size,
        "version": g.version,
        "metadata": g.metadata,
        "tensors": [[t.name, list(t.shape), t.type_id, t.offset] for t in g.tensors],
        "data_offset": g.data_offset,
        "array_lengths": g.array_lengths,
    }


def header_from_json(data: dict[str, Any], path: str | None = None) -> RemoteHeader:
    tensors = tuple(TensorInfo(n, tuple(s), t, o) for n, s, t, o in data["tensors"])
    g = GgufHeader(
        data["version"], data["metadata"], tensors, data["data_offset"], data["array_lengths"]
    )
    path = path or data["path"]
    try:  # a cache file from an older version, or a damaged one
        validate_metadata(g.metadata, g.array_lengths)
    except GgufError as exc:
        raise GgufError(f"{path}: {exc}") from None
    check = check_file_type(parse_gguf_name(path).quant, g.metadata.get("general.file_type"))
    return RemoteHeader(
        data["repo_id"], path, data["revision"], data["sha256"], data["file_size"], 0, g, check
    )
