"""SHA-256 whose running state can be saved to disk, so a resumed download does not hash again.

hashlib objects can be copied but not serialized, so after an app restart the hash of the bytes
already on disk would have to be computed again: a second full read of the partial file
(0.7-2 s per GB from a warm page cache on the 2-core dev VM, more from a cold disk: see
rehash_full_s_per_gb in bench/downloads.py). Instead we drive OpenSSL's SHA256_Init/Update/
Final through ctypes: its SHA256_CTX is a plain 112-byte struct (8 state words, a 64-bit bit
count, one 64-byte block, counters), stable since OpenSSL 0.9, which we save as bytes next to
the partial file. Those functions are deprecated in OpenSSL 3 but still exported (the same
code EVP uses). Where libcrypto cannot be found or fails the self-test, `new_sha256()` returns
the hashlib fallback, whose `state()` is None: a resume then re-hashes the partial file once
(honestly a second pass over those bytes). Even with the saved state, the bytes written after
the last checkpoint (at most 1 s or 32 MiB of download) are read back once after a crash;
they are never fetched again.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import hashlib
import logging
import queue
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

log = logging.getLogger("deskllm.downloads")

STATE_KIND = "openssl-SHA256_CTX-v1"
_CTX_SIZE = 112  # sizeof(SHA256_CTX): h[8], Nl, Nh, data[16], num, md_len (all 32-bit)
# Offsets in SHA256_CTX of Nl/Nh (the bit count) and of num/md_len (bytes waiting in the block
# buffer, digest length). OpenSSL trusts them blindly: a `num` past the 64-byte block makes
# SHA256_Update copy out of bounds, so each one is checked before the struct is handed over.
_COUNT_AT, _NUM_AT = 32, 104
_BLOCK = 64
_DIGEST_LEN = 32
_MAX_BYTES = (1 << 61) - 1  # the bit count is a 64-bit field


class Sha256(Protocol):
    def update(self, data: bytes | bytearray | memoryview) -> None: ...
    def hexdigest(self) -> str: ...
    def state(self) -> str | None: ...


class _HashlibSha256:
    """The fallback: fast, but its state cannot be saved."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()

    def state(self) -> str | None:
        return None


class _OpenSslSha256:
    def __init__(self, lib: ctypes.CDLL, ctx: bytes | None = None) -> None:
        self._lib = lib
        self._ctx = ctypes.create_string_buffer(_CTX_SIZE)
        if ctx is None:
            if lib.SHA256_Init(self._ctx) != 1:
                raise OSError("SHA256_Init failed")
        else:
            ctypes.memmove(self._ctx, ctx, _CTX_SIZE)

    def update(self, data: bytes | bytearray | memoryview) -> None:
        # ctypes releases the GIL for the call, like hashlib does for large buffers.
        if isinstance(data, bytes):
            self._lib.SHA256_Update(self._ctx, data, len(data))
            return
        view = memoryview(data)
        if view.readonly:  # a slice of bytes: rare (short writes), so a copy is fine
            self.update(view.tobytes())
        elif view.nbytes:
            buf = (ctypes.c_char * view.nbytes).from_buffer(view)
            self._lib.SHA256_Update(self._ctx, buf, view.nbytes)

    def hexdigest(self) -> str:
        ctx = ctypes.create_string_buffer(self._ctx.raw, _CTX_SIZE)  # Final clears its context
        out = ctypes.create_string_buffer(32)
        self._lib.SHA256_Final(out, ctx)
        return out.raw.hex()

    def state(self) -> str | None:
        return base64.b64encode(self._ctx.raw).decode("ascii")


def _libcrypto_candidates() -> Iterator[str]:
    """Library names to try, cheapest first (find_library may run ldconfig or a compiler)."""
    if sys.platform.startswith("linux"):
        # The exact library this Python's _hashlib already loaded, when there is one.
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
                found = {line[line.index("/") :].strip() for line in maps
                         if "libcrypto" in line and "/" in line}  # fmt: skip
            yield from sorted(found)
        except OSError:
            pass
    yield from ("libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.3.dylib")
    for stem in ("crypto", "libcrypto-3-x64", "libcrypto-3", "libcrypto-1_1-x64", "libcrypto-1_1"):
        found_lib = ctypes.util.find_library(stem)
        if found_lib:
            yield found_lib


def _load_libcrypto() -> ctypes.CDLL | None:
    tried: set[str] = set()
    for name in _libcrypto_candidates():
        if name in tried:
            continue
        tried.add(name)
        try:
            lib = ctypes.CDLL(name)
            for fn in ("SHA256_Init", "SHA256_Update", "SHA256_Final"):
                getattr(lib, fn).restype = ctypes.c_int
            lib.SHA256_Init.argtypes = [ctypes.c_void_p]
            lib.SHA256_Update.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            lib.SHA256_Final.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        except (OSError, AttributeError):
            continue
        if _self_test(lib):
            return lib
    log.info("OpenSSL SHA256_CTX not usable here: resumed downloads re-hash their partial file")
    return None


def _self_test(lib: ctypes.CDLL) -> bool:
    """The saved-state round trip must give hashlib's answer, and every field we check on a
    restore must sit where we read it; otherwise the struct is not what we think and we do not
    use it."""
    try:
        data = bytes(range(256)) * 41  # 10,496 bytes: several blocks plus a partial one
        first = _OpenSslSha256(lib)
        first.update(data[:5000])
        saved = base64.b64decode(first.state() or "")
        _check_ctx(saved, 5000)
        restored = _OpenSslSha256(lib, saved)
        restored.update(bytearray(data[5000:]))
        return restored.hexdigest() == hashlib.sha256(data).hexdigest()
    except Exception:  # noqa: BLE001 - any failure means: use the fallback
        return False


_LIB: ctypes.CDLL | None | bool = False  # False: not probed yet


def _lib() -> ctypes.CDLL | None:
    global _LIB
    if _LIB is False:
        _LIB = _load_libcrypto()
    return _LIB  # type: ignore[return-value]


def new_sha256() -> Sha256:
    lib = _lib()
    return _OpenSslSha256(lib) if lib is not None else _HashlibSha256()


class HashStateError(ValueError):
    """A saved hash state that cannot be continued; the message says why (re-hash instead)."""


def load_sha256(kind: object, state: object, bytes_hashed: object) -> Sha256:
    """The hash continued from a saved state. Raises HashStateError when it cannot be (then
    re-hash): each field of the struct must agree with `bytes_hashed`, so a damaged or foreign
    sidecar can never hand OpenSSL a context it would read or write out of bounds."""
    lib = _lib()
    if kind != STATE_KIND:
        raise HashStateError("the hash state is of an unknown kind")
    if lib is None:
        raise HashStateError("OpenSSL's SHA256_CTX is not usable here")
    if not isinstance(state, str) or len(state) > 4 * _CTX_SIZE:
        raise HashStateError("the hash state is not a short text")
    if isinstance(bytes_hashed, bool) or not isinstance(bytes_hashed, int):
        raise HashStateError("the hashed byte count is not a number")
    if not 0 <= bytes_hashed <= _MAX_BYTES:
        raise HashStateError(f"the hashed byte count {bytes_hashed} is out of range")
    try:
        raw = base64.b64decode(state, validate=True)
    except ValueError:
        raise HashStateError("the hash state is not base64") from None
    _check_ctx(raw, bytes_hashed)
    return _OpenSslSha256(lib, raw)


def _check_ctx(raw: bytes, bytes_hashed: int) -> None:
    if len(raw) != _CTX_SIZE:
        raise HashStateError(f"the hash state has {len(raw)} bytes, not {_CTX_SIZE}")
    low, high = struct.unpack_from("<II", raw, _COUNT_AT)
    num, md_len = struct.unpack_from("<II", raw, _NUM_AT)
    counted = ((high << 32) | low) // 8
    # The saved count must match the bytes the sidecar says were hashed: this also catches a
    # sidecar from another file or a layout we do not know.
    if (high << 32) | low != bytes_hashed * 8:
        raise HashStateError(f"the hash state counts {counted} bytes, the sidecar {bytes_hashed}")
    if num != bytes_hashed % _BLOCK:
        raise HashStateError(f"the hash state has {num} bytes in its block, not {counted % _BLOCK}")
    if md_len != _DIGEST_LEN:
        raise HashStateError(f"the hash state has digest length {md_len}, not {_DIGEST_LEN}")


def restore_sha256(kind: object, state: object, bytes_hashed: object) -> Sha256 | None:
    """load_sha256, or None when the state cannot be continued (then re-hash)."""
    try:
        return load_sha256(kind, state, bytes_hashed)
    except HashStateError:
        return None


# What the hashing thread is given: data to hash, a callback to run in order, None to stop.
_Item = bytes | bytearray | memoryview | Callable[[], None] | None


class HashThread:
    """A Sha256 fed on its own thread, so hashing overlaps the next network read instead of
    adding to it (ctypes and hashlib both release the GIL while they hash). update() only
    queues, in order; state() and hexdigest() first wait until everything queued is hashed,
    so a checkpoint's state always matches its byte count."""

    def __init__(self, inner: Sha256, depth: int = 8) -> None:
        self._inner = inner
        self._queue: queue.Queue[_Item] = queue.Queue(depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="download-sha256", daemon=True)
        self._thread.start()

    def update(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            raise RuntimeError("hashing failed") from self._error
        self._queue.put(data)

    def after(self, callback: Callable[[], None]) -> None:
        """Call `callback` on the hashing thread once everything queued so far is hashed (to
        hand a reused buffer back)."""
        self._queue.put(callback)

    def sync(self) -> None:
        self._queue.join()
        if self._error is not None:
            raise RuntimeError("hashing failed") from self._error

    def hexdigest(self) -> str:
        self.sync()
        return self._inner.hexdigest()

    def state(self) -> str | None:
        self.sync()
        return self._inner.state()

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _loop(self) -> None:
        while True:
            data = self._queue.get()
            try:
                if data is None:
                    return
                if callable(data):
                    data()
                elif self._error is None:
                    self._inner.update(data)
            except BaseException as exc:  # noqa: BLE001 - reported to the download thread
                self._error = exc
            finally:
                self._queue.task_done()
