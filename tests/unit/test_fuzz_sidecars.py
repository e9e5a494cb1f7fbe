"""Property tests: a download sidecar damaged in any way (bit flips, truncation, fields of the
wrong type, a hostile hash state behind a good checksum, a huge file) is refused or used, never
trusted into a crash, a hang, an unbounded allocation or an error other than DownloadError.

The sidecars start as real ones: written by a real download, paused half-way, against a small
HTTP server of our own that honours Range and If-Range."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import struct
import tempfile
import threading
import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deskllm.downloads import (
    Control,
    DownloadError,
    Interrupted,
    RemoteFile,
    TransferOptions,
    download_file,
)
from deskllm.downloads.partfile import Sidecar, part_path, sidecar_path
from deskllm.downloads.sha256_state import new_sha256, restore_sha256

REPO, FILE = "owner/name", "model.gguf"
BODY = os.urandom(200_017)
OPTIONS = TransferOptions(
    chunk_bytes=1000,  # not a multiple of 64: the saved hash state has bytes in its block
    connect_timeout_s=2.0,
    stall_timeout_s=2.0,
    max_retries=1,
    backoff_base_s=0.01,
    disk_margin_bytes=0,
)
LOAD_PEAK_BYTES = 8 << 20  # what reading any sidecar may allocate, however large the file


class _Origin(ThreadingHTTPServer):
    daemon_threads = True
    etag = '"v1"'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path != f"/{REPO}/resolve/main/{FILE}":
            self.send_error(404)
            return
        start, rng = 0, self.headers.get("Range")
        if rng and self.headers.get("If-Range") in (None, _Origin.etag):
            start = min(int(rng.removeprefix("bytes=").split("-")[0]), len(BODY))
        body = BODY[start:]
        self.send_response(206 if start else 200)
        self.send_header("ETag", _Origin.etag)
        self.send_header("Content-Length", str(len(body)))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(BODY) - 1}/{len(BODY)}")
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def origin():
    server = _Origin(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    saved = {k: os.environ.get(k) for k in ("HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_TOKEN")}
    os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{server.server_address[1]}"
    os.environ.pop("HF_HUB_OFFLINE", None)
    os.environ.pop("HF_TOKEN", None)
    yield server
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.shutdown()
    server.server_close()


REMOTE = RemoteFile(REPO, FILE, len(BODY), hashlib.sha256(BODY).hexdigest())


@pytest.fixture(scope="module")
def paused(origin, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real partial download, paused at about 40%: its .part and .part.json files."""
    dest = tmp_path_factory.mktemp("paused") / FILE
    control = Control()

    def progress(done: int, state) -> None:
        if done >= len(BODY) * 2 // 5:
            control.pause()

    with pytest.raises(Interrupted):
        download_file(REMOTE, dest, control=control, on_progress=progress, options=OPTIONS)
    sidecar = Sidecar.load(sidecar_path(dest))
    assert sidecar is not None and 0 < sidecar.bytes_done < len(BODY)
    if new_sha256().state() is not None:
        assert sidecar.hash_state and sidecar.bytes_done % 64  # a block partly filled
    return dest


# -- mutations -----------------------------------------------------------------------------

Mutation = Callable[[Path], None]
_FIELDS = [f.name for f in dataclasses.fields(Sidecar)] + ["check", "other"]
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
_UINT32 = st.integers(0, 2**32 - 1) | st.sampled_from([63, 64, 65, 28, 32, 0xFFFFFFFF])


def _bit_flips(flips: list[tuple[int, int]]) -> Mutation:
    def apply(path: Path) -> None:
        data = bytearray(path.read_bytes())
        for at, bit in flips:
            data[at % len(data)] ^= 1 << bit
        path.write_bytes(bytes(data))

    return apply


def _truncate(keep: float) -> Mutation:
    def apply(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * keep)])

    return apply


def _swap_field(name: str, value: object) -> Mutation:
    def apply(path: Path) -> None:
        raw = json.loads(path.read_text())
        raw[name] = value
        path.write_text(json.dumps(raw))

    return apply


def _poke_state(offset: int, value: int, rewrite_whole: bool) -> Mutation:
    """A hash state with one 32-bit field changed; `rewrite_whole`: saved by the real code,
    so the sidecar's checksum is right and only the state's own checks stand in the way."""

    def apply(path: Path) -> None:
        sidecar = Sidecar.load(path)
        assert sidecar is not None
        if not sidecar.hash_state:
            return
        raw = bytearray(base64.b64decode(sidecar.hash_state))
        struct.pack_into("<I", raw, offset % (len(raw) - 3), value)
        state = base64.b64encode(raw).decode("ascii")
        if rewrite_whole:
            dataclasses.replace(sidecar, hash_state=state).save(path)
        else:
            _swap_field("hash_state", state)(path)

    return apply


def _rewrite(**changes: object) -> Mutation:
    """Fields changed and saved by the real code: a well-formed sidecar that lies."""

    def apply(path: Path) -> None:
        sidecar = Sidecar.load(path)
        assert sidecar is not None
        dataclasses.replace(sidecar, **changes).save(path)

    return apply


def _grow(n: int) -> Mutation:
    def apply(path: Path) -> None:
        raw = json.loads(path.read_text())
        raw["other"] = [0] * n
        path.write_text(json.dumps(raw))

    return apply


def _replace(text: str) -> Mutation:
    return lambda path: path.write_text(text)


MUTATIONS = st.one_of(
    st.builds(
        _bit_flips,
        st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), min_size=1, max_size=4),
    ),
    st.builds(_truncate, st.floats(0, 0.999)),
    st.builds(_swap_field, st.sampled_from(_FIELDS), _JSON),
    st.builds(
        _poke_state,
        st.sampled_from([32, 36, 104, 108]) | st.integers(0, 108),
        _UINT32,
        st.booleans(),
    ),
    st.builds(
        _rewrite,
        bytes_done=st.integers(-(2**70), 2**70) | st.integers(0, len(BODY)),
        etag=st.none() | st.text(max_size=30),
    ),
    st.builds(_grow, st.sampled_from([10, 100_000, 2_000_000])),
    st.builds(
        _replace,
        st.sampled_from(
            [
                "",
                "null",
                "[]",
                "1e999",
                "[" * 100_000,
                "{" * 50_000,
                '{"version": true}',
                "\0\0\0",
                "9" * 5000,
            ]
        ),
    ),
)


def _copy_of(dest: Path, into: Path) -> Path:
    copy = into / dest.name
    shutil.copyfile(part_path(dest), part_path(copy))
    shutil.copyfile(sidecar_path(dest), sidecar_path(copy))
    return copy


# -- properties ----------------------------------------------------------------------------

_FAST = settings(
    max_examples=150,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.timeout(60)
@_FAST
@given(mutation=MUTATIONS)
def test_reading_a_mutated_sidecar_never_raises_crashes_or_grows(paused: Path, mutation):
    with tempfile.TemporaryDirectory() as tmp:
        dest = _copy_of(paused, Path(tmp))
        mutation(sidecar_path(dest))
        tracemalloc.start()
        try:
            sidecar = Sidecar.load(sidecar_path(dest))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < LOAD_PEAK_BYTES
        if sidecar is None:
            return
        hasher = restore_sha256(sidecar.hash_kind, sidecar.hash_state, sidecar.bytes_done)
        if hasher is None:
            return
        hasher.update(b"\0" * 100_000)  # what a resume does next: in bounds, or a crash here
        assert len(hasher.hexdigest()) == 64


@pytest.mark.timeout(60)
@settings(_FAST, max_examples=40)
@given(mutation=MUTATIONS)
def test_a_resume_from_a_mutated_sidecar_ends_with_the_right_file_or_a_download_error(
    paused: Path, mutation
):
    with tempfile.TemporaryDirectory() as tmp:
        dest = _copy_of(paused, Path(tmp))
        mutation(sidecar_path(dest))
        try:
            download_file(REMOTE, dest, options=OPTIONS)
        except DownloadError:
            # Only a sidecar that lies well enough to pass every check can get this far
            # (a damaged hash state behind a good checksum): the bytes are refused, not kept.
            assert not dest.exists()
            return
        assert hashlib.sha256(dest.read_bytes()).digest() == hashlib.sha256(BODY).digest()
        assert not part_path(dest).exists() and not sidecar_path(dest).exists()
