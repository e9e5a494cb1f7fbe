"""HTTP for downloads: one ranged GET with redirects, TLS always verified, Hub errors in words.

We use huggingface_hub for what it defines (the endpoint, file URLs, the token) but not for
the transfer: since 1.18 its downloads do not resume across process restarts and check only
the size, not the sha256; and its HTTP client changed between the versions we allow (requests,
then httpx2). http.client gives us a socket read timeout (stall detection), a socket we can
shut down from another thread (instant pause and cancel) and reads straight into our loop.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import threading
import urllib.request
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from deskllm import __version__
from deskllm.downloads.errors import (
    AuthError,
    DownloadError,
    NotFoundError,
    OfflineError,
    RetryableError,
    TlsError,
)

_TRUE = {"1", "ON", "YES", "TRUE"}
MAX_REDIRECTS = 10


def hub_endpoint() -> str:
    """HF_ENDPOINT as huggingface_hub defines it, read now (its constant is read at import)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def is_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub defines it, read now."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in _TRUE


def file_url(repo_id: str, filename: str, revision: str = "main") -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, filename, revision=revision, endpoint=hub_endpoint())


def hub_headers(token: str | bool | None = None) -> dict[str, str]:
    """User agent and, when there is one, the token: the argument, else HF_TOKEN or the saved
    `hf auth login` (huggingface_hub's get_token), unless HF_HUB_DISABLE_IMPLICIT_TOKEN.

    Not build_hf_headers: in huggingface_hub 2.x it also fetches {endpoint}/api/agent-harnesses
    (telemetry, once a day, 3 s timeout), a hidden request that would slow an offline start.
    """
    import platform

    import huggingface_hub

    headers = {
        "user-agent": f"deskllm/{__version__}; hf_hub/{huggingface_hub.__version__}; "
        f"python/{platform.python_version()}"
    }
    if isinstance(token, str):
        value: str | None = token
    elif token is False or (
        token is None and os.environ.get("HF_HUB_DISABLE_IMPLICIT_TOKEN", "").upper() in _TRUE
    ):
        value = None
    else:
        value = huggingface_hub.get_token()
    if value:
        headers["authorization"] = f"Bearer {value}"
    return headers


class ConnectError(RetryableError):
    """The server could not be reached at all (DNS, refused, unreachable, connect timeout)."""


@dataclass(frozen=True)
class Target:
    """What is being fetched, for error messages."""

    what: str  # "owner/name/file.gguf"
    repo_id: str


def _tls_context() -> ssl.SSLContext:
    # The OS trust store where truststore is available (corporate roots, macOS keychain), else
    # OpenSSL's defaults. Verification is never turned off.
    try:
        import truststore

        ctx = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    except ImportError:
        ctx = ssl.create_default_context()
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


_TLS: ssl.SSLContext | None = None
_TLS_LOCK = threading.Lock()


def tls_context() -> ssl.SSLContext:
    global _TLS
    with _TLS_LOCK:
        if _TLS is None:
            _TLS = _tls_context()
        return _TLS


def _proxy_for(scheme: str, host: str) -> tuple[str, int] | None:
    """HTTP(S)_PROXY / NO_PROXY from the environment, as urllib reads them."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    parts = urlsplit(proxy if "://" in proxy else "http://" + proxy)
    return (parts.hostname or "", parts.port or 8080)


def _connect(url: str, connect_s: float, stall_s: float) -> tuple[http.client.HTTPConnection, str]:
    """An open connection and the request target (path, or the full URL for an HTTP proxy)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DownloadError(f"cannot download from {url!r}: not an http(s) URL")
    host, port = parts.hostname, parts.port
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    proxy = _proxy_for(parts.scheme, host)
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        if proxy:
            conn = http.client.HTTPSConnection(*proxy, timeout=connect_s, context=tls_context())
            conn.set_tunnel(host, port or 443)
        else:
            conn = http.client.HTTPSConnection(host, port, timeout=connect_s, context=tls_context())
    elif proxy:
        conn = http.client.HTTPConnection(*proxy, timeout=connect_s)
        target = url
    else:
        conn = http.client.HTTPConnection(host, port, timeout=connect_s)
    try:
        conn.connect()
    except ssl.SSLCertVerificationError as exc:
        conn.close()
        raise TlsError(
            f"the certificate of {host} could not be verified ({exc.verify_message}); "
            "deskllm does not download over unverified connections"
        ) from exc
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        raise ConnectError(f"cannot reach {host}: {_reason(exc)}") from exc
    assert conn.sock is not None
    conn.sock.settimeout(stall_s)  # from now on: no byte for stall_s seconds is a stall
    return conn, target


def _reason(exc: BaseException) -> str:
    if isinstance(exc, socket.gaierror):
        return "the name does not resolve (offline?)"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


class RangeResponse:
    """A response whose body starts at byte `start` of the file."""

    def __init__(
        self,
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
        start: int,
        total: int | None,
        linked_sha256: str | None,
    ) -> None:
        self._conn = conn
        self._resp = resp
        self.status = resp.status
        self.start = start
        self.total = total
        self.etag = _strong_etag(resp.getheader("ETag"))
        self.linked_sha256 = linked_sha256  # the Hub's X-Linked-Etag: the LFS sha256

    def read1(self, n: int) -> bytes:
        """Up to n bytes, from a single socket read; b"" at the end of the body."""
        return self._resp.read1(n)

    def readinto1(self, buffer: memoryview) -> int:
        """read1 into a buffer the caller reuses (no new bytes object per read); 0 at the end
        of the body. Mirrors HTTPResponse.read1, which has no readinto1."""
        resp = self._resp
        if resp.fp is None:
            return 0
        if resp.chunked or resp.length is None:
            data = resp.read1(len(buffer))
            buffer[: len(data)] = data
            return len(data)
        n = resp.fp.readinto1(buffer[: resp.length]) if resp.length else 0
        resp.length -= n
        return n

    def abort(self) -> None:
        """From another thread: make a blocked read return at once (pause, cancel)."""
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._resp.close()
        self._conn.close()


def _strong_etag(value: str | None) -> str | None:
    # If-Range needs a strong validator; a weak one is as good as none.
    if not value or value.startswith("W/"):
        return None
    return value


def _linked_sha(resp: http.client.HTTPResponse) -> str | None:
    value = (resp.getheader("X-Linked-Etag") or "").strip('"').lower()
    return value if len(value) == 64 and all(c in "0123456789abcdef" for c in value) else None


def _content_range(value: str | None) -> tuple[int, int | None] | None:
    """'bytes 100-199/1000' -> (100, 1000)."""
    if not value or not value.startswith("bytes "):
        return None
    span, _, total = value[6:].partition("/")
    first, _, _ = span.partition("-")
    try:
        return int(first), (int(total) if total.strip() != "*" else None)
    except ValueError:
        return None


def open_range(
    url: str,
    start: int,
    *,
    target: Target,
    headers: dict[str, str],
    if_range: str | None = None,
    connect_s: float = 10.0,
    stall_s: float = 30.0,
) -> RangeResponse:
    """GET url from byte `start`, following redirects. Raises a DownloadError subclass.

    A 206 answers the range; a 200 means the whole file (the server ignored the range or the
    If-Range validator no longer matches: the file changed) and `start` is then 0."""
    if is_offline():
        raise OfflineError(
            f"cannot download {target.what}: offline mode is on (HF_HUB_OFFLINE is set). "
            "Unset it and try again; any partial download is kept."
        )
    request_headers = dict(headers)
    if start > 0:
        request_headers["Range"] = f"bytes={start}-"
        if if_range:
            request_headers["If-Range"] = if_range
    origin = urlsplit(url)[:2]
    linked_sha = None
    for _ in range(MAX_REDIRECTS + 1):
        conn, path = _connect(url, connect_s, stall_s)
        try:
            conn.request("GET", path, headers=request_headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise RetryableError(
                f"connection to {urlsplit(url).hostname} failed: {_reason(exc)}"
            ) from exc
        linked_sha = linked_sha or _linked_sha(resp)
        if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
            url = urljoin(url, resp.getheader("Location") or "")
            resp.close()
            conn.close()
            if urlsplit(url)[:2] != origin:
                # Like huggingface_hub: the token goes to the Hub, never to a CDN.
                request_headers = {
                    k: v for k, v in request_headers.items() if k.lower() != "authorization"
                }
            continue
        if resp.status == 206:
            span = _content_range(resp.getheader("Content-Range"))
            if span is None:
                resp.close()
                conn.close()
                raise RetryableError(f"bad Content-Range from {urlsplit(url).hostname}")
            return RangeResponse(conn, resp, span[0], span[1], linked_sha)
        if resp.status == 200:
            length = resp.getheader("Content-Length")
            total = int(length) if length and length.isdigit() else None
            return RangeResponse(conn, resp, 0, total, linked_sha)
        try:
            raise status_error(
                resp, target, had_token="authorization" in {k.lower() for k in request_headers}
            )
        finally:
            resp.close()
            conn.close()
    raise DownloadError(f"cannot download {target.what}: too many redirects")


def status_error(resp: http.client.HTTPResponse, target: Target, had_token: bool) -> DownloadError:
    """The error for a failed status, in words the user can act on."""
    status = resp.status
    code = resp.getheader("X-Error-Code") or ""
    message = resp.getheader("X-Error-Message") or _body_message(resp)
    where = f"{hub_endpoint()}/{target.repo_id}"
    if status == 416:
        return RetryableError(f"the server refused the range for {target.what}")
    if status in (401, 403) and code != "RepoNotFound":
        if code == "GatedRepo" or "gated" in message.lower():
            fix = (
                "the token in use has no access: accept the terms at " + where
                if had_token
                else f"accept its terms at {where}, then set HF_TOKEN or run `hf auth login`"
            )
            return AuthError(f"{target.repo_id} is a gated model: {fix}")
        fix = (
            "the token in use has no access to it"
            if had_token
            else "set HF_TOKEN or run `hf auth login` if it is private"
        )
        return AuthError(f"access to {target.what} was refused (HTTP {status}): {fix}")
    if status in (401, 403, 404):
        kind = {
            "RepoNotFound": "repository",
            "RevisionNotFound": "revision",
            "EntryNotFound": "file",
        }.get(code, "file")
        return NotFoundError(
            f"{target.what}: no such {kind} on {hub_endpoint()}"
            + (f" ({message})" if message else "")
        )
    if status == 429 or status >= 500:
        return RetryableError(
            f"the server answered HTTP {status} for {target.what}",
            retry_after=_retry_after(resp.getheader("Retry-After")),
        )
    return DownloadError(f"cannot download {target.what}: HTTP {status} {message}".strip())


def _body_message(resp: http.client.HTTPResponse) -> str:
    try:
        body = resp.read(65536)
    except (OSError, http.client.HTTPException):
        return ""
    try:
        data = json.loads(body)
        return str(data.get("error", "")) if isinstance(data, dict) else ""
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:200]


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None
