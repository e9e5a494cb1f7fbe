"""Property-based fuzzing of the GGUF header reader: random damage to a real model's header and
to small GGUFWriter files (bit flips, truncation, integer fields overwritten with huge values)
only ever gives the reader's own errors, within a memory bound and in bounded time."""

from __future__ import annotations

import contextlib
import resource
import struct
import sys
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deskllm.gguf.header import GgufError, NeedMoreData, parse_header, read_header
from deskllm.planner.model_shape import model_shape

REAL_PREFIX = 4 << 20  # the starter model's header is ~1.8 MB: all of it, and some data
MEMORY_BOUND = 512 << 20  # address space one parse may add (bytes)
TIME_BOUND_S = 5.0  # a clean parse of the starter header takes ~0.4 s
HUGE = [2**64 - 1, 2**63, 2**63 - 1, 2**62, 2**40, 2**32 - 1, 2**32, 2**31, 4097, 0, 1]
FUZZ = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure is reproducible
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@contextlib.contextmanager
def address_space_limit(extra: int):
    """Cap this process's address space at what it uses now plus `extra` bytes (Linux): an
    allocation past that fails with MemoryError, which the properties then report."""
    if not sys.platform.startswith("linux"):
        yield
        return
    status = Path("/proc/self/status").read_text()
    vm_line = next(line for line in status.splitlines() if line.startswith("VmSize:"))
    vm_kib = int(vm_line.split()[1])
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_kib * 1024 + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def integer_fields(buf: bytes, max_per_array: int = 40) -> list[tuple[int, int]]:
    """(offset, width) of the counts, lengths and type ids in a valid GGUF header: the fields
    whose damage matters. Long arrays contribute their first few items only."""
    fields = [(8, 8), (16, 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string(pos: int, record: bool = True) -> int:
        if record:
            fields.append((pos, 8))
        return pos + 8 + struct.unpack_from("<Q", buf, pos)[0]

    for _ in range(n_kv):
        pos = string(pos)
        fields.append((pos, 4))
        vtype = struct.unpack_from("<I", buf, pos)[0]
        pos += 4
        if vtype == 8:
            pos = string(pos)
        elif vtype == 9:
            fields += [(pos, 4), (pos + 4, 8)]
            etype, n = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            if etype == 8:
                for i in range(n):
                    pos = string(pos, record=i < max_per_array)
            else:
                pos += n * sizes[etype]
        else:
            pos += sizes[vtype]
    for _ in range(n_tensors):
        pos = string(pos)
        n_dims = struct.unpack_from("<I", buf, pos)[0]
        fields += [(pos, 4)] + [(pos + 4 + 8 * i, 8) for i in range(n_dims)]
        pos += 4 + 8 * n_dims
        fields += [(pos, 4), (pos + 4, 8)]
        pos += 12
    return fields


def write_small(path: Path) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(256)
    writer.add_embedding_length(32)
    writer.add_head_count(4)
    writer.add_head_count_kv([2, 1])
    writer.add_string("tokenizer.chat_template", "{{ messages[0]['content'] }}")
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(300)])
    writer.add_array("tokenizer.ggml.scores", [0.5] * 300)
    for i in range(2):
        writer.add_tensor(f"blk.{i}.attn_q.weight", np.ones((8, 32), dtype=np.float32))
    writer.add_tensor("token_embd.weight", np.ones((300, 32), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def real_header(starter_model) -> tuple[bytes, int, list[tuple[int, int]]]:
    with starter_model.open("rb") as fh:
        buf = fh.read(REAL_PREFIX)
    return buf, starter_model.stat().st_size, integer_fields(buf)


@pytest.fixture(scope="module")
def small_file(tmp_path_factory) -> tuple[bytes, list[tuple[int, int]]]:
    data = write_small(tmp_path_factory.mktemp("fuzz") / "small.gguf").read_bytes()
    assert model_shape(parse_header(data, len(data))).block_count == 2
    return data, integer_fields(data)


@st.composite
def damage(draw, size: int, fields: list[tuple[int, int]]) -> list[tuple[str, int, int]]:
    """A few mutations: ("flip", byte, bit), ("int", field index, value), ("cut", length)."""
    steps = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "flip_header", "int", "int", "cut"]))
        if kind == "flip":
            steps.append(("flip", draw(st.integers(0, size - 1)), draw(st.integers(0, 7))))
        elif kind == "flip_header":  # where the counts, lengths and type ids are
            byte = draw(st.integers(0, min(size, 4096) - 1))
            steps.append(("flip", byte, draw(st.integers(0, 7))))
        elif kind == "int":
            value = draw(st.sampled_from(HUGE) | st.integers(0, 2**64 - 1))
            steps.append(("int", draw(st.integers(0, len(fields) - 1)), value))
        else:
            steps.append(("cut", draw(st.integers(0, size)), 0))
    return steps


def mutate(buf: bytes, fields: list[tuple[int, int]], steps: list[tuple[str, int, int]]) -> bytes:
    data = bytearray(buf)
    for kind, a, b in steps:
        if kind == "flip" and a < len(data):
            data[a] ^= 1 << b
        elif kind == "int":
            offset, width = fields[a]
            if offset + width <= len(data):
                data[offset : offset + width] = (b % (1 << (8 * width))).to_bytes(width, "little")
        elif kind == "cut":
            del data[a:]
    return bytes(data)


def parse_within_bounds(read):
    """Run `read` under the memory bound and the time bound; what it returns or raises."""
    started = time.monotonic()
    with address_space_limit(MEMORY_BOUND):
        try:
            result = read()
        except (GgufError, NeedMoreData) as exc:
            result = exc
    assert time.monotonic() - started < TIME_BOUND_S
    return result


@pytest.mark.timeout(120)
@FUZZ
@given(data=st.data())
def test_damaged_real_header_gives_only_the_readers_errors(real_header, data):
    buf, file_size, fields = real_header
    steps = data.draw(damage(len(buf), fields))
    damaged = mutate(buf, fields, steps)
    truncated_file = any(kind == "cut" for kind, _, _ in steps)
    # A cut models a truncated file (size = what is left) or a short read of a whole file.
    size = len(damaged) if truncated_file and data.draw(st.booleans()) else file_size

    def read():
        header = parse_header(damaged, size)
        model_shape(header)
        return header

    parse_within_bounds(read)


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_damaged_small_file_gives_only_gguf_errors(small_file, tmp_path_factory, data):
    buf, fields = small_file
    damaged = mutate(buf, fields, data.draw(damage(len(buf), fields)))
    path = tmp_path_factory.mktemp("damaged", numbered=True) / "damaged.gguf"
    path.write_bytes(damaged)

    def read():
        header = read_header(path, first_read=512)  # grows its read as a real file needs
        model_shape(header)
        return header

    result = parse_within_bounds(read)
    assert not isinstance(result, NeedMoreData)  # read_header answers every short read itself


V = gguf.GGUFValueType


def array_of(items: st.SearchStrategy, item_type: gguf.GGUFValueType) -> st.SearchStrategy:
    return st.tuples(st.lists(items, min_size=1, max_size=6), st.just(V.ARRAY), st.just(item_type))


# A value of any GGUF type, as (value, type, item type for arrays).
ANY_VALUE = st.one_of(
    st.tuples(st.integers(0, 2**32 - 1), st.just(V.UINT32), st.none()),
    st.tuples(st.integers(0, 2**64 - 1), st.just(V.UINT64), st.none()),
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.just(V.INT32), st.none()),
    st.tuples(st.integers(-(2**63), -1), st.just(V.INT64), st.none()),
    st.tuples(st.floats(width=32, allow_nan=True), st.just(V.FLOAT32), st.none()),
    st.tuples(st.booleans(), st.just(V.BOOL), st.none()),
    st.tuples(st.text(max_size=12), st.just(V.STRING), st.none()),
    array_of(st.integers(0, 2**32 - 1), V.UINT32),
    array_of(st.booleans(), V.BOOL),
    array_of(st.text(max_size=4), V.STRING),
    array_of(st.floats(width=32), V.FLOAT32),
)
# The keys the header's readers (the planner, the engine, the library) use.
READ_KEYS = [
    "general.alignment", "general.file_type", "split.count", "tokenizer.chat_template",
    "tokenizer.ggml.tokens", "llama.context_length", "llama.block_count",
    "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
    "llama.attention.head_count_kv", "llama.attention.key_length",
    "llama.attention.sliding_window", "llama.attention.sliding_window_pattern",
    "llama.expert_count", "llama.expert_used_count", "llama.vocab_size",
]


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=150)
@given(values=st.dictionaries(st.sampled_from(READ_KEYS), ANY_VALUE, min_size=1, max_size=4))
def test_any_type_for_the_keys_readers_use_gives_a_header_or_a_gguf_error(
    tmp_path_factory, values
):
    path = tmp_path_factory.mktemp("typed", numbered=True) / "typed.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, (value, vtype, item_type) in values.items():
        writer.add_key_value(key, value, vtype, sub_type=item_type)
    writer.add_tensor("blk.0.attn_q.weight", np.ones((8, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    def read():
        header = read_header(path)
        model_shape(header)
        return (header.context_length, header.chat_template, header.architecture)

    result = parse_within_bounds(read)
    if isinstance(result, GgufError):
        assert "typed.gguf" in str(result)


def test_the_field_map_finds_the_real_headers_counts(real_header):
    buf, _size, fields = real_header
    assert (8, 8) in fields and (16, 8) in fields
    assert len(fields) > 100  # kv keys, value types, array counts, tensor dims and offsets
