"""deskllm.downloads pieces against a tiny real HTTP server of our own: behaviours FakeHub does
not have (If-Range, a server that hangs, TLS with an unknown certificate)."""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from deskllm.catalog.hub import group_model_files
from deskllm.downloads import (
    DownloadItem,
    DownloadState,
    LockedError,
    OfflineError,
    RemoteFile,
    SpeedMeter,
    TlsError,
    TransferOptions,
    download_file,
)
from deskllm.downloads.lock import FileLock
from deskllm.downloads.partfile import Sidecar, lock_path, part_path, sidecar_path
from deskllm.downloads.resolve import choose, items_of
from deskllm.downloads.sha256_state import STATE_KIND, new_sha256, restore_sha256

REPO = "owner/name"
FILE = "model-Q4_K_M.gguf"
FAST = TransferOptions(backoff_base_s=0.01, stall_timeout_s=2.0, connect_timeout_s=2.0)


class Origin(ThreadingHTTPServer):
    """Serves one file at /owner/name/resolve/main/<FILE>, with knobs."""

    daemon_threads = True

    def __init__(self, body: bytes) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.body = body
        self.etag = '"v1"'
        self.hang_after: int | None = None  # send this many bytes, then stop sending (once)
        self.served = 0
        self.requests: list[dict[str, str | None]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.release = threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Origin

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        srv = self.server
        srv.requests.append({k: self.headers.get(k) for k in ("Range", "If-Range")})
        if self.path != f"/{REPO}/resolve/main/{FILE}":
            self.send_error(404)
            return
        start = 0
        rng = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if rng and (if_range is None or if_range == srv.etag):
            start = int(rng.removeprefix("bytes=").split("-")[0])
        body = srv.body[start:]
        self.send_response(206 if start else 200)
        self.send_header("ETag", srv.etag)
        self.send_header("Content-Length", str(len(body)))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(srv.body) - 1}/{len(srv.body)}")
        self.end_headers()
        if srv.hang_after is not None:
            n, srv.hang_after = srv.hang_after, None
            self.wfile.write(body[:n])
            self.wfile.flush()
            srv.served += n
            srv.release.wait(10)  # a stalled server: the connection stays open, silent
            return
        self.wfile.write(body)
        srv.served += len(body)


@pytest.fixture
def origin(monkeypatch: pytest.MonkeyPatch):
    body = os.urandom(3 << 20)
    server = Origin(body)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def remote(body: bytes) -> RemoteFile:
    return RemoteFile(REPO, FILE, len(body), hashlib.sha256(body).hexdigest())


# -- the saved hash state ------------------------------------------------------------------


def test_hash_state_round_trips_through_json_text():
    data = os.urandom(100_003)
    h = new_sha256()
    h.update(data[:70_001])
    state = h.state()
    if state is None:
        pytest.skip("OpenSSL's SHA256_CTX is not usable here; the fallback re-hashes")
    restored = restore_sha256(STATE_KIND, state, 70_001)
    assert restored is not None
    restored.update(data[70_001:])
    assert restored.hexdigest() == hashlib.sha256(data).hexdigest()
    # A state that does not match the byte count it claims is refused, not trusted.
    assert restore_sha256(STATE_KIND, state, 70_000) is None
    assert restore_sha256("something-else", state, 70_001) is None


def test_fallback_without_openssl_state(monkeypatch: pytest.MonkeyPatch):
    from deskllm.downloads import sha256_state

    monkeypatch.setattr(sha256_state, "_LIB", None)
    h = new_sha256()
    h.update(b"abc")
    assert h.state() is None
    assert h.hexdigest() == hashlib.sha256(b"abc").hexdigest()
    assert restore_sha256(STATE_KIND, "AAAA", 3) is None


def test_speed_meter_uses_a_sliding_window():
    now = [0.0]
    meter = SpeedMeter(window_s=5, clock=lambda: now[0])
    for i in range(20):
        now[0] = float(i)
        meter.add(i * 1000)
    assert meter.speed() == pytest.approx(1000)
    now[0] = 20.0
    assert meter.add(19_000 + 10_000) == pytest.approx((29_000 - 15_000) / 5)
    assert SpeedMeter.eta(1000, 5000) == 5
    assert SpeedMeter.eta(0, 5000) is None


def test_sidecar_ignores_garbage(tmp_path: Path):
    path = tmp_path / "x.part.json"
    path.write_text("{not json")
    assert Sidecar.load(path) is None
    Sidecar(url="u", size=3, sha256="ab", bytes_done=2).save(path)
    assert Sidecar.load(path) == Sidecar(url="u", size=3, sha256="ab", bytes_done=2)


# -- resolving a repo's files --------------------------------------------------------------


def test_items_from_the_catalog_and_choosing_one():
    files, mmproj = group_model_files(
        [
            ("X-Q8_0.gguf", 800, "a" * 64),
            ("X-Q4_K_M.gguf", 400, "b" * 64),
            ("Q2_K/X-Q2_K-00002-of-00002.gguf", 100, "c" * 64),
            ("Q2_K/X-Q2_K-00001-of-00002.gguf", 150, "d" * 64),
            ("Q3_K_M/X-Q3_K_M-00001-of-00002.gguf", 150, "e" * 64),  # part 2 missing
            ("mmproj-X-f16.gguf", 50, "f" * 64),
            ("README.md", 5, None),
        ]
    )
    items = items_of("o/X", files, revision="abc123")
    assert [i.quant for i in items] == ["Q2_K", "Q4_K_M", "Q8_0"]  # no incomplete Q3_K_M
    split = items[0]
    assert [p.path for p in split.parts] == [
        "Q2_K/X-Q2_K-00001-of-00002.gguf",
        "Q2_K/X-Q2_K-00002-of-00002.gguf",
    ]
    assert split.total == 250 and {p.revision for p in split.parts} == {"abc123"}
    side = items_of("o/X", mmproj)
    assert choose(items, "q4_k_m", "o/X").quant == "Q4_K_M"
    assert choose(items, "X-Q8_0.gguf", "o/X").quant == "Q8_0"
    assert choose(items, "Q2_K/X-Q2_K-00002-of-00002.gguf", "o/X") is split
    assert choose(items, "mmproj-X-f16.gguf", "o/X", side).name == "mmproj-X-f16.gguf"
    with pytest.raises(Exception, match="Q5_K_M.*it has: Q2_K"):
        choose(items, "Q5_K_M", "o/X")
    # No quant named and no plan possible (offline, a repo never seen): the smallest file;
    # the planner's choice is tested against the fake Hub in test_downloads.py.
    assert choose(items, None, "o/X").quant == "Q2_K"


def test_item_paths_stay_inside_the_models_folder(tmp_path: Path):
    ok = DownloadItem("o/n", (RemoteFile("o/n", "Q4/a.gguf", 1, None),))
    assert ok.main_path(tmp_path) == tmp_path / "o" / "n" / "Q4" / "a.gguf"
    for bad in ("../evil.gguf", "/etc/passwd", "a/../../b.gguf", "a\\..\\b.gguf"):
        with pytest.raises(Exception, match="unsafe"):
            DownloadItem("o/n", (RemoteFile("o/n", bad, 1, None),))


# -- transfers against the origin server ---------------------------------------------------


def test_if_range_mismatch_starts_over_cleanly(origin: Origin, tmp_path: Path):
    """A partial of an older version (its ETag no longer matches) is not continued: the server
    sends the whole new file and the downloader starts over instead of mixing versions."""
    dest = tmp_path / FILE
    old = os.urandom(len(origin.body))
    part_path(dest).write_bytes(old[:1_000_000])
    h = new_sha256()
    h.update(old[:1_000_000])
    Sidecar(
        url="", size=len(origin.body), sha256=remote(origin.body).sha256, etag='"v0"',
        bytes_done=1_000_000, hash_kind=STATE_KIND if h.state() else None, hash_state=h.state(),
    ).save(sidecar_path(dest))  # fmt: skip
    stats = download_file(remote(origin.body), dest, options=FAST)
    assert origin.requests[0] == {"Range": "bytes=1000000-", "If-Range": '"v0"'}
    assert stats.restarts == 1
    assert dest.read_bytes() == origin.body
    assert not part_path(dest).exists() and not sidecar_path(dest).exists()


def test_resume_fetches_only_the_missing_bytes(origin: Origin, tmp_path: Path):
    dest = tmp_path / FILE
    origin.hang_after = 1_500_000
    opts = TransferOptions(backoff_base_s=0.01, stall_timeout_s=0.5)
    events: list[tuple[int, DownloadState]] = []
    stats = download_file(remote(origin.body), dest, options=opts,
                          on_progress=lambda n, s: events.append((n, s)))  # fmt: skip
    # The stalled connection was dropped after 0.5 s silence and the rest fetched by Range.
    assert stats.retries == 1
    assert origin.requests[1]["Range"] == "bytes=1500000-"
    assert origin.served == len(origin.body)
    assert dest.read_bytes() == origin.body
    assert events[-2][1] == DownloadState.VERIFYING and events[-1][1] == DownloadState.DONE


def test_a_lock_held_elsewhere_refuses_a_second_writer(origin: Origin, tmp_path: Path):
    dest = tmp_path / FILE
    with FileLock(lock_path(dest), "it"), pytest.raises(LockedError, match="another deskllm"):
        download_file(remote(origin.body), dest, options=FAST)
    assert origin.requests == []
    download_file(remote(origin.body), dest, options=FAST)  # released: it works
    assert not lock_path(dest).exists()


def test_unreachable_server_fails_fast_as_offline(tmp_path: Path, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    started = time.monotonic()
    with pytest.raises(OfflineError, match="cannot reach 127.0.0.1"):
        download_file(RemoteFile(REPO, FILE, 10, None), tmp_path / FILE)
    assert time.monotonic() - started < 10  # no minute of backoff before saying so


@pytest.fixture
def tls_origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    if not shutil.which("openssl"):
        pytest.skip("needs the openssl command to make a self-signed certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server = Origin(b"x" * 1000)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    monkeypatch.setenv("HF_ENDPOINT", server.url.replace("http:", "https:"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.shutdown()
    server.server_close()


def test_tls_is_verified_and_never_retried(tls_origin: Origin, tmp_path: Path):
    with pytest.raises(TlsError, match="could not be verified"):
        download_file(remote(tls_origin.body), tmp_path / FILE, options=FAST)
    assert tls_origin.requests == []


def _partial(dest: Path, body: bytes, on_disk: int, hashed: int, with_state: bool) -> None:
    """A partial file of `on_disk` bytes whose sidecar has the hash state at `hashed`."""
    part_path(dest).write_bytes(body[:on_disk])
    h = new_sha256()
    h.update(body[:hashed])
    state = h.state() if with_state else None
    Sidecar(
        url="", size=len(body), sha256=remote(body).sha256, etag='"v1"', bytes_done=hashed,
        hash_kind=STATE_KIND if state else None, hash_state=state,
    ).save(sidecar_path(dest))  # fmt: skip


@pytest.mark.parametrize("with_state", [True, False, "no-openssl"])
def test_resume_rehashes_only_what_the_saved_state_does_not_cover(
    origin: Origin, tmp_path: Path, with_state: bool | str, monkeypatch: pytest.MonkeyPatch
):
    if with_state == "no-openssl":  # the hashlib fallback all the way
        from deskllm.downloads import sha256_state

        monkeypatch.setattr(sha256_state, "_LIB", None)
        with_state = True
    dest = tmp_path / FILE
    _partial(dest, origin.body, on_disk=1_200_000, hashed=1_000_000, with_state=with_state)
    stats = download_file(remote(origin.body), dest, options=FAST)
    assert dest.read_bytes() == origin.body
    assert stats.resumed_from == 1_200_000
    assert origin.served == len(origin.body) - 1_200_000  # bytes on disk are never fetched
    if with_state and new_sha256().state() is not None:
        assert stats.rehashed == 200_000  # only the bytes after the last checkpoint
    else:
        assert stats.rehashed == 1_200_000  # no saved state: the whole partial, once


def test_a_partial_of_another_version_is_not_continued(origin: Origin, tmp_path: Path):
    dest = tmp_path / FILE
    _partial(dest, origin.body, on_disk=1_000_000, hashed=1_000_000, with_state=True)
    changed = Sidecar.load(sidecar_path(dest))
    assert changed is not None
    changed.sha256 = "0" * 64  # the Hub's sha256 for this file has changed since
    changed.save(sidecar_path(dest))
    stats = download_file(remote(origin.body), dest, options=FAST)
    assert stats.resumed_from == 0 and origin.requests[0]["Range"] is None
    assert dest.read_bytes() == origin.body


def test_pause_stops_a_read_from_a_stalled_server_at_once(origin: Origin, tmp_path: Path):
    from deskllm.downloads import Control, Interrupted

    dest = tmp_path / FILE
    origin.hang_after = 500_000  # then silence, far shorter than the stall timeout
    control = Control()
    threading.Timer(0.5, control.pause).start()
    started = time.monotonic()
    with pytest.raises(Interrupted):
        download_file(remote(origin.body), dest, control=control,
                      options=TransferOptions(stall_timeout_s=30))  # fmt: skip
    assert time.monotonic() - started < 5
    assert part_path(dest).stat().st_size == 500_000
    assert Sidecar.load(sidecar_path(dest)).bytes_done == 500_000  # checkpointed on pause
    origin.release.set()
    assert download_file(remote(origin.body), dest, options=FAST).resumed_from == 500_000
    assert dest.read_bytes() == origin.body


def test_cancel_removes_the_partial(origin: Origin, tmp_path: Path):
    from deskllm.downloads import Control, Interrupted

    dest = tmp_path / FILE
    origin.hang_after = 500_000
    control = Control()
    threading.Timer(0.5, control.cancel).start()
    with pytest.raises(Interrupted):
        download_file(remote(origin.body), dest, control=control, options=FAST)
    assert not any(p.exists() for p in (dest, part_path(dest), sidecar_path(dest), lock_path(dest)))


def test_progress_shows_the_last_bytes_even_when_a_transfer_beats_the_throttle(
    origin: Origin, tmp_path: Path
):
    """A small file over a fast link finishes inside one 0.1 s throttle interval; the bar must
    still reach the full size before it says 'verifying'."""
    from deskllm.downloads.item import download_item

    item = DownloadItem(REPO, (remote(origin.body),))
    events = []
    download_item(item, tmp_path, on_progress=events.append, options=FAST)
    downloading = [e for e in events if e.state == DownloadState.DOWNLOADING]
    assert downloading[-1].bytes_done == len(origin.body)
    states = [e.state for e in events]
    assert states.index(DownloadState.VERIFYING) > states.index(DownloadState.DOWNLOADING)
    assert all(a.bytes_done <= b.bytes_done for a, b in itertools.pairwise(events))
