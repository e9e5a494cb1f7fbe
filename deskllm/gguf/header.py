"""A strict GGUF header reader.

Written here rather than using the `gguf` package's reader because that reader trusts the file:
it accepts absurd counts and lengths that make it allocate or loop for ever, and never checks
tensor data against the file size. This one bounds every count by the bytes that can exist, so
a hostile or truncated file gives a clear `GgufError` instead of a hang or a crash. It also
parses a prefix of a file (a remote header fetched with Range requests): `NeedMoreData` says
how many bytes to fetch.
"""

from __future__ import annotations

import collections
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAGIC = b"GGUF"
MAX_DIMS = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32
# Arrays longer than this (tokenizer vocabularies) keep only their length, not their values.
KEEP_ARRAY_MAX = 4096

# ggml type id -> (name, elements per block, bytes per block), as in ggml's type_traits table
# (Q8_1 is left out: it is an internal type that never appears in model files).
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}

# GGUF metadata value types: id -> (struct format, size) for fixed-size scalars.
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9
MAX_LAYERS = 512  # LLAMA_MAX_LAYERS: llama.cpp sizes its per-layer tables by it

# What the readers of a header rely on a key holding. A value of another type (a string
# alignment, a list context length, a float block count) is a corrupt header: refused here by
# name, not left to fail as a ValueError or a TypeError, or silently read as something else.
_WHOLE, _WHOLE_OR_LIST, _WHOLE_OR_FLAGS, _TEXT, _TEXT_LIST = range(5)
_EXPECTED = {
    _WHOLE: "a whole number (0 or more)",
    _WHOLE_OR_LIST: "a whole number (0 or more) or a list of them, one per layer",
    _WHOLE_OR_FLAGS: "a whole number (0 or more) or a list of per-layer flags",
    _TEXT: "text",
    _TEXT_LIST: "a list of texts",
}
_GENERAL_KEYS = {
    "general.architecture": _TEXT,
    "general.alignment": _WHOLE,
    "general.file_type": _WHOLE,
    "split.count": _WHOLE,
    "tokenizer.chat_template": _TEXT,
    "tokenizer.ggml.tokens": _TEXT_LIST,
}
_ARCH_KEYS = {  # after "<architecture>."
    "context_length": _WHOLE,
    "block_count": _WHOLE,
    "embedding_length": _WHOLE,
    "vocab_size": _WHOLE,
    "feed_forward_length": _WHOLE_OR_LIST,
    "expert_feed_forward_length": _WHOLE,
    "expert_count": _WHOLE,
    "expert_used_count": _WHOLE_OR_LIST,
    "attention.head_count": _WHOLE_OR_LIST,
    "attention.head_count_kv": _WHOLE_OR_LIST,
    "attention.key_length": _WHOLE,
    "attention.value_length": _WHOLE,
    "attention.key_length_swa": _WHOLE,
    "attention.value_length_swa": _WHOLE,
    "attention.sliding_window": _WHOLE,
    "attention.sliding_window_pattern": _WHOLE_OR_FLAGS,
}


class GgufError(ValueError):
    """The file is not a valid GGUF model; the message says what is wrong in plain words."""


class NeedMoreData(Exception):
    """The buffer ends inside the header; at least `needed` bytes from the start are required."""

    def __init__(self, needed: int) -> None:
        super().__init__(f"need at least {needed} bytes")
        self.needed = needed


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int  # bytes from the start of the data section

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.type_id, (f"type{self.type_id}", 1, 0))[0]

    @property
    def n_bytes(self) -> int:
        _, block, size = GGML_TYPES[self.type_id]
        return self.n_elements // block * size


@dataclass(frozen=True)
class GgufHeader:
    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    data_offset: int  # where tensor data starts in the file
    array_lengths: dict[str, int] = field(default_factory=dict)  # for arrays not kept whole

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    def arch_value(self, key: str, default: Any = None) -> Any:
        """`{arch}.{key}`, e.g. arch_value('block_count')."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    @property
    def chat_template(self) -> str | None:
        return self.metadata.get("tokenizer.chat_template")

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @property
    def context_length(self) -> int | None:
        value = self.arch_value("context_length")
        return int(value) if value is not None else None


class _Reader:
    def __init__(self, buf: bytes | memoryview, file_size: int) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.file_size = file_size

    def remaining_in_file(self) -> int:
        return self.file_size - self.pos

    def take(self, n: int) -> memoryview:
        if n > self.remaining_in_file():
            raise GgufError(
                f"the file is truncated or corrupt: a field at byte {self.pos} needs {n} bytes "
                f"but only {self.remaining_in_file()} remain"
            )
        end = self.pos + n
        if end > len(self.buf):
            raise NeedMoreData(end)
        view = self.buf[self.pos : end]
        self.pos = end
        return view

    def scalar(self, fmt: str, size: int) -> Any:
        return struct.unpack(fmt, self.take(size))[0]

    def u32(self) -> int:
        return self.scalar("<I", 4)

    def u64(self) -> int:
        return self.scalar("<Q", 8)

    def string(self) -> str:
        length = self.u64()
        if length > self.remaining_in_file():
            raise GgufError(
                f"a string at byte {self.pos} claims {length} bytes but the file has only "
                f"{self.remaining_in_file()} left"
            )
        return bytes(self.take(length)).decode("utf-8", errors="replace")

    def count(self, what: str, n: int, min_item_size: int) -> int:
        # Bound every count by the bytes that could hold it: 2^63 entries cannot fit in a file.
        if n * min_item_size > self.remaining_in_file():
            raise GgufError(
                f"the header claims {n} {what}, more than the file's "
                f"{self.remaining_in_file()} remaining bytes can hold: the file is truncated "
                "or corrupt"
            )
        return n

    def value(self, vtype: int, key: str, lengths: dict[str, int]) -> Any:
        if vtype in _SCALARS:
            return self.scalar(*_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.u32()
            n = self.u64()
            if etype in _SCALARS:
                fmt, size = _SCALARS[etype]
                self.count(f"array items in {key}", n, size)
                raw = self.take(n * size)
                if n > KEEP_ARRAY_MAX:
                    lengths[key] = n
                    return None
                return list(struct.unpack(f"<{n}{fmt[1]}", raw))
            if etype == _STRING:
                self.count(f"array items in {key}", n, 8)
                keep = n <= KEEP_ARRAY_MAX
                items = []
                for _ in range(n):
                    s = self.string()
                    if keep:
                        items.append(s)
                if not keep:
                    lengths[key] = n
                    return None
                return items
            raise GgufError(f"metadata key {key!r} has an array of unsupported type {etype}")
        raise GgufError(f"metadata key {key!r} has an unknown value type {vtype}")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _fits(value: Any, kind: int) -> bool:
    if kind == _TEXT:
        return isinstance(value, str)
    if kind == _TEXT_LIST:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if _whole(value) or kind == _WHOLE or not isinstance(value, list):
        return _whole(value)
    if kind == _WHOLE_OR_FLAGS:
        return all(_whole(v) or isinstance(v, bool) for v in value)
    return all(_whole(v) for v in value)


def _describe(value: Any, length: int | None) -> str:
    if value is None and length is not None:
        return f"a list of {length} items"
    if isinstance(value, bool):
        return f"the flag {value}"
    if isinstance(value, int):
        return f"the {'negative ' if value < 0 else ''}number {value}"
    if isinstance(value, float):
        return f"the decimal number {value}"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    if isinstance(value, list):
        kinds = sorted({type(v).__name__ for v in value})
        return f"a list of {len(value)} items ({', '.join(kinds) or 'empty'})"
    return f"a {type(value).__name__}"


def validate_metadata(metadata: dict[str, Any], array_lengths: dict[str, int]) -> None:
    """Raise GgufError naming the first key whose value is not of the type its readers need,
    or a layer count llama.cpp cannot hold."""
    arch = metadata.get("general.architecture", "unknown")
    keys = dict(_GENERAL_KEYS)
    if isinstance(arch, str):
        keys |= {f"{arch}.{suffix}": kind for suffix, kind in _ARCH_KEYS.items()}
    for key, kind in keys.items():
        if key not in metadata:
            continue
        value, length = metadata[key], array_lengths.get(key)
        if value is None and length is not None and kind != _WHOLE and kind != _TEXT:
            continue  # a long array, kept as its length only: a list where lists are allowed
        if not _fits(value, kind):
            raise GgufError(
                f"metadata key {key!r} should be {_EXPECTED[kind]}, not "
                f"{_describe(value, length)}: the file is corrupt or was written wrongly"
            )
    blocks = metadata.get(f"{arch}.block_count", 0)
    if blocks > MAX_LAYERS:
        raise GgufError(
            f"metadata key '{arch}.block_count' claims {blocks} layers; llama.cpp holds at "
            f"most {MAX_LAYERS}: the file is corrupt"
        )


def parse_header(buf: bytes | memoryview, file_size: int) -> GgufHeader:
    """Parse a GGUF header from the first bytes of a file of `file_size` bytes.

    Raises GgufError for an invalid file and NeedMoreData when `buf` is too short.
    """
    r = _Reader(buf, file_size)
    if file_size < 24:
        raise GgufError(f"the file is only {file_size} bytes: too small to be a GGUF model")
    magic = bytes(r.take(4))
    if magic != MAGIC:
        raise GgufError(f"not a GGUF file (it starts with {magic!r}, not {MAGIC!r})")
    version = r.u32()
    if version not in (2, 3):
        raise GgufError(f"unsupported GGUF version {version} (this app reads versions 2 and 3)")
    n_tensors = r.count("tensors", r.u64(), 32)
    n_kv = r.count("metadata entries", r.u64(), 13)
    metadata: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    for _ in range(n_kv):
        key = r.string()
        metadata[key] = r.value(r.u32(), key, lengths)
    validate_metadata(metadata, lengths)
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.u32()
        if not 1 <= n_dims <= MAX_DIMS:
            raise GgufError(f"tensor {name!r} has {n_dims} dimensions (at most {MAX_DIMS})")
        shape = tuple(r.u64() for _ in range(n_dims))
        type_id = r.u32()
        if type_id not in GGML_TYPES:
            raise GgufError(f"tensor {name!r} has an unknown data type {type_id}")
        offset = r.u64()
        tensors.append(TensorInfo(name, shape, type_id, offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if alignment <= 0 or alignment & (alignment - 1):
        raise GgufError(f"metadata key 'general.alignment' is {alignment}, not a power of two")
    data_offset = -(-r.pos // alignment) * alignment
    data_size = file_size - data_offset
    for t in tensors:
        _, block, _size = GGML_TYPES[t.type_id]
        if t.shape[0] % block:
            raise GgufError(f"tensor {t.name!r} rows ({t.shape[0]}) are not whole blocks")
        if t.offset % alignment or t.offset + t.n_bytes > data_size:
            raise GgufError(
                f"tensor {t.name!r} lies past the end of the file (offset {t.offset}, "
                f"{t.n_bytes} bytes, data section {data_size} bytes): the file is truncated "
                "or corrupt — download it again"
            )
    return GgufHeader(version, metadata, tuple(tensors), data_offset, lengths)


# Headers read lately, by (path, size, modification time): a large vocabulary takes ~0.1–0.4 s
# to walk, and the loader and planner read the same file's header several times per load.
_HEADERS: collections.OrderedDict[tuple[str, int, int], GgufHeader] = collections.OrderedDict()
_HEADERS_KEPT = 16
_headers_lock = threading.Lock()


def read_header(
    path: Path | str, first_read: int = 1 << 20, max_read: int = 256 << 20
) -> GgufHeader:
    """Read and validate the header of a local GGUF file, growing the read until it parses.
    A file read before and unchanged since (same size and modification time) is not read
    again."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as exc:
        raise GgufError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _headers_lock:
        if (header := _HEADERS.get(key)) is not None:
            _HEADERS.move_to_end(key)
            return header
    header = _read_header(path, stat.st_size, first_read, max_read)
    with _headers_lock:
        _HEADERS[key] = header
        while len(_HEADERS) > _HEADERS_KEPT:
            _HEADERS.popitem(last=False)
    return header


def _read_header(path: Path, file_size: int, first_read: int, max_read: int) -> GgufHeader:
    try:
        with path.open("rb") as fh:
            size = first_read
            while True:
                fh.seek(0)
                buf = fh.read(size)
                try:
                    return parse_header(buf, file_size)
                except NeedMoreData as more:
                    if size >= max_read:
                        raise GgufError(f"header larger than {max_read} bytes") from None
                    size = min(max(more.needed, size * 2), max_read)
    except GgufError as exc:
        raise GgufError(f"{path.name}: {exc}") from None
    except OSError as exc:
        raise GgufError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
