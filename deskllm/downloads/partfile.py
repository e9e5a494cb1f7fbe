"""The partial file of a download and its JSON sidecar: what lets a download resume after the
app (or the machine) restarts."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from deskllm.paths import open_private

log = logging.getLogger("deskllm.downloads")


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def sidecar_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part.json")


def lock_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".lock")


@dataclass
class Sidecar:
    """Written after the bytes it describes are on disk (fsync), replaced atomically.

    `bytes_done` and `hash_state` always agree with each other; the partial file may be longer
    (bytes written after the last checkpoint), and those bytes are hashed again on resume: only
    the tail, never the whole file, unless the hash state is unusable. The file also holds a
    sha256 of these fields (`check`), so a damaged sidecar is noticed before it is trusted."""

    url: str
    size: int
    sha256: str | None
    etag: str | None = None
    bytes_done: int = 0
    hash_kind: str | None = None
    hash_state: str | None = None
    version: int = 1

    @classmethod
    def load(cls, path: Path) -> Sidecar | None:
        """None when missing or unusable (a partial without a trusted sidecar is not trusted).
        An unusable one (damaged, edited, of another version) is logged with its reason; it
        never raises: every field is checked here, before the download trusts it."""
        try:
            with open(path, "rb") as f:
                text = f.read(_MAX_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("ignoring the download sidecar %s: %s", path, exc)
            return None
        try:
            return cls._parse(text)
        except _Unusable as exc:
            log.warning("ignoring the download sidecar %s: %s", path, exc)
            return None

    @classmethod
    def _parse(cls, text: bytes) -> Sidecar:
        if len(text) > _MAX_BYTES:
            raise _Unusable(f"it is larger than {_MAX_BYTES} bytes")
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: [[[[... nested deep
            raise _Unusable(f"it is not JSON ({type(exc).__name__})") from None
        if not isinstance(raw, dict):
            raise _Unusable("it is not a JSON object")
        if raw.get("version") != 1 or type(raw.get("version")) is not int:
            raise _Unusable("it is of an unknown version")
        fields = {}
        for field in dataclasses.fields(cls):
            if field.name not in raw:
                if field.default is dataclasses.MISSING:
                    raise _Unusable(f"it has no {field.name!r}")
                continue
            fields[field.name] = _checked(field.name, raw[field.name])
        sidecar = cls(**fields)
        if sidecar.bytes_done > sidecar.size:
            raise _Unusable(f"it counts {sidecar.bytes_done} bytes done of {sidecar.size}")
        # Sidecars from before the checksum have none; their fields are checked all the same.
        check = raw.get("check")
        if check is not None and check != sidecar._digest():
            raise _Unusable("its checksum does not match its contents (it is damaged)")
        return sidecar

    def _digest(self) -> str:
        fields = json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(fields.encode("utf-8")).hexdigest()

    def save(self, path: Path, durable: bool = True) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with open_private(tmp) as f:  # 0600: it says what the user is downloading
            json.dump(dataclasses.asdict(self) | {"check": self._digest()}, f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)


class _Unusable(ValueError):
    """Why a sidecar on disk is not used."""


_MAX_BYTES = 64 << 10  # a real sidecar is about 500 bytes: never read a huge file into memory
_MAX_TEXT = 4096  # characters in any text field (an ETag, a URL, the hash state)
_INTS = ("size", "bytes_done", "version")
_OPTIONAL = ("sha256", "etag", "hash_kind", "hash_state")


def _checked(name: str, value: object) -> object:
    """`value` if it has the type and range field `name` needs; raises _Unusable otherwise."""
    if name in _INTS:
        # bool is an int to Python, and a float could be 1e300: both are refused.
        if type(value) is not int or not 0 <= value < 1 << 62:
            raise _Unusable(f"its {name!r} is not a byte count")
        return value
    if value is None and name in _OPTIONAL:
        return value
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise _Unusable(f"its {name!r} is not a short text")
    if name == "etag" and not (value.isascii() and value.isprintable()):
        # It goes back to the server in an If-Range header: no line breaks, no control bytes.
        raise _Unusable("its 'etag' is not a valid HTTP header value")
    return value


def remove_partial(dest: Path) -> None:
    for path in (part_path(dest), sidecar_path(dest), sidecar_path(dest).with_suffix(".json.tmp")):
        path.unlink(missing_ok=True)
