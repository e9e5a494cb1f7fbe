"""The saved OpenSSL SHA256_CTX: a damaged one is refused field by field, never handed to
OpenSSL (which trusts it blindly and writes out of bounds)."""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deskllm.downloads.sha256_state import (
    STATE_KIND,
    HashStateError,
    load_sha256,
    new_sha256,
    restore_sha256,
)

REPO = Path(__file__).resolve().parents[2]
HASHED = 1000  # bytes: 15 blocks and 40 bytes waiting in the block buffer


def saved_state(n: int = HASHED) -> bytearray:
    h = new_sha256()
    h.update(b"x" * n)
    state = h.state()
    if state is None:
        pytest.skip("OpenSSL's SHA256_CTX is not usable here; the fallback re-hashes")
    return bytearray(base64.b64decode(state))


def encoded(raw: bytes | bytearray) -> str:
    return base64.b64encode(bytes(raw)).decode("ascii")


def with_field(offset: int, value: int) -> str:
    raw = saved_state()
    struct.pack_into("<I", raw, offset, value)
    return encoded(raw)


def test_a_block_count_past_the_buffer_does_not_crash_the_process():
    # The report: num >= 64 made SHA256_Update copy past its 64-byte buffer (SIGSEGV), at
    # every start, from the download thread. Run it where a crash cannot take pytest down.
    saved_state()
    child = textwrap.dedent(
        f"""
        import base64, struct
        from deskllm.downloads.sha256_state import STATE_KIND, new_sha256, restore_sha256
        h = new_sha256()
        h.update(b"x" * {HASHED})
        raw = bytearray(base64.b64decode(h.state()))
        struct.pack_into("<I", raw, 104, 10**6)  # num: bytes waiting in the block buffer
        restored = restore_sha256(STATE_KIND, base64.b64encode(raw).decode(), {HASHED})
        if restored is not None:
            restored.update(b"y" * (4 << 20))
            print(restored.hexdigest())
        print("refused" if restored is None else "used")
        """
    )
    env = os.environ | {"PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, env=env, timeout=60
    )
    assert run.returncode == 0, f"the child died ({run.returncode}): {run.stderr[-2000:]}"
    assert run.stdout.split()[-1] == "refused"


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (lambda: with_field(104, 64), "in its block"),  # num: one past the buffer
        (lambda: with_field(104, HASHED % 64 + 1), "in its block"),  # in bounds but wrong
        (lambda: with_field(104, 0xFFFFFFFF), "in its block"),
        (lambda: with_field(108, 28), "digest length"),  # md_len of SHA-224
        (lambda: with_field(108, 0xFFFFFFFF), "digest length"),
        (lambda: with_field(32, HASHED * 8 + 8), "counts 1001 bytes"),  # Nl
        (lambda: with_field(36, 1), "counts"),  # Nh: 2**32 bits more
        (lambda: encoded(saved_state()[:-1]), "111 bytes"),
        (lambda: encoded(saved_state() + b"\0"), "113 bytes"),
        (lambda: encoded(saved_state())[:-3], "not base64"),  # truncated text
        (lambda: "!" * 152, "not base64"),
        (lambda: "A" * 100_000, "short text"),
        (lambda: 12345, "short text"),
        (lambda: None, "short text"),
    ],
)
def test_every_field_of_a_saved_state_is_checked(state, reason):
    value = state()
    assert restore_sha256(STATE_KIND, value, HASHED) is None
    with pytest.raises(HashStateError, match=reason):
        load_sha256(STATE_KIND, value, HASHED)


@pytest.mark.parametrize("bytes_hashed", [-1000, True, "1000", 1000.0, None, 1 << 80])
def test_the_byte_count_it_is_checked_against_must_be_a_sane_integer(bytes_hashed):
    state = encoded(saved_state())
    with pytest.raises(HashStateError):
        load_sha256(STATE_KIND, state, bytes_hashed)


def test_an_unknown_kind_is_refused():
    with pytest.raises(HashStateError, match="unknown kind"):
        load_sha256("openssl-SHA512_CTX-v1", encoded(saved_state()), HASHED)


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1000, 70_001])
def test_a_good_state_continues_to_the_right_digest(n: int):
    data = os.urandom(n + 5000)
    h = new_sha256()
    h.update(data[:n])
    saved_state()
    restored = load_sha256(STATE_KIND, h.state(), n)
    restored.update(data[n:])
    assert restored.hexdigest() == hashlib.sha256(data).hexdigest()
