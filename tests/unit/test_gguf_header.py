import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from deskllm.gguf.header import (
    GGML_TYPES,
    GgufError,
    NeedMoreData,
    parse_header,
    read_header,
)
from deskllm.planner.model_shape import model_shape


def write_tiny(path: Path, n_tensors: int = 2) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_embedding_length(32)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_string("tokenizer.chat_template", "{{ messages[0]['content'] }}")
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(5000)])
    for i in range(n_tensors):
        writer.add_tensor(f"blk.0.w{i}", np.ones((8, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def header_prefix(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def test_reads_a_file_written_by_gguf(tmp_path):
    h = read_header(write_tiny(tmp_path / "tiny.gguf"))
    assert h.architecture == "llama"
    assert h.arch_value("block_count") == 1
    assert h.context_length == 128
    assert h.chat_template == "{{ messages[0]['content'] }}"
    assert h.array_lengths["tokenizer.ggml.tokens"] == 5000  # long arrays keep their length
    assert [t.name for t in h.tensors] == ["blk.0.w0", "blk.0.w1"]
    assert h.tensors[0].shape == (32, 8) and h.tensors[0].n_bytes == 8 * 32 * 4
    assert h.n_params == 2 * 8 * 32


def test_reads_the_real_starter_model(starter_model):
    h = read_header(starter_model)
    assert h.architecture == "llama"
    assert h.arch_value("block_count") == 30
    assert h.metadata["general.file_type"] == 3  # Q4_1
    assert "<|im_start|>" in h.chat_template
    assert h.tensor_bytes <= starter_model.stat().st_size


def test_type_table_matches_gguf_package():
    for type_id, (name, block, size) in GGML_TYPES.items():
        quant = gguf.GGMLQuantizationType(type_id)
        assert quant.name == name
        assert gguf.GGML_QUANT_SIZES[quant] == (block, size)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"GGML" + b"\0" * 40, "not a GGUF file"),
        (b"GGUF" + struct.pack("<IQQ", 7, 0, 0), "unsupported GGUF version 7"),
        (header_prefix(2**63, 0), "tensors"),
        (header_prefix(0, 2**63), "metadata entries"),
        # a key whose length is 2^60 with 3 bytes left
        (header_prefix(0, 1) + struct.pack("<Q", 2**60) + b"abc", "claims"),
        # an array of 2^40 uint32 items
        (
            header_prefix(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 4, 2**40),
            "array items",
        ),
        # a tensor with 100 dimensions
        (header_prefix(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 100) + b"\0" * 64,
         "100 dimensions"),
        (b"GGUF", "too small"),
    ],
)
def test_rejects_hostile_headers(data, message):
    with pytest.raises(GgufError, match=message):
        parse_header(data, len(data))


def test_tensor_offset_past_the_end(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf")
    raw = bytearray(path.read_bytes())
    h = read_header(path)
    # Point the second tensor's offset far past the file's end.
    name = b"blk.0.w1"
    at = raw.index(name) + len(name) + 4 + 2 * 8 + 4
    raw[at : at + 8] = struct.pack("<Q", 10**9)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(raw)
    with pytest.raises(GgufError, match="past the end"):
        read_header(bad)
    assert h.tensors[1].offset != 10**9


def test_truncated_file_with_a_valid_header(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf")
    h = read_header(path)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(path.read_bytes()[: h.data_offset + 100])
    with pytest.raises(GgufError, match="truncated.gguf: tensor .* past the end"):
        read_header(truncated)


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_text("hello, this is not a model at all" * 10)
    with pytest.raises(GgufError, match="notes.gguf: not a GGUF file"):
        read_header(path)


def test_a_prefix_asks_for_more_bytes(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf")
    raw = path.read_bytes()
    with pytest.raises(NeedMoreData) as more:
        parse_header(raw[:1000], len(raw))
    assert more.value.needed > 1000
    assert parse_header(raw[: more.value.needed * 100], len(raw)).architecture == "llama"


def test_read_grows_the_read_until_it_parses(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf")
    assert read_header(path, first_read=64).architecture == "llama"


# A tiny valid llama model's metadata, as (GGUFWriter method, value) per key.
BASE_KEYS = {
    "llama.block_count": ("add_uint32", 1),
    "llama.context_length": ("add_uint32", 128),
    "llama.embedding_length": ("add_uint32", 32),
    "llama.attention.head_count": ("add_uint32", 4),
    "llama.attention.head_count_kv": ("add_uint32", 2),
    "tokenizer.ggml.tokens": ("add_array", ["a", "b", "c"]),
    "tokenizer.chat_template": ("add_string", "{{ messages[0]['content'] }}"),
}


def write_with(path: Path, key: str, method: str, value) -> Path:
    """The tiny model, with `key` written by GGUFWriter.`method` as `value`."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, (add, default) in (BASE_KEYS | {key: (method, value)}).items():
        getattr(writer, add)(name, default)
    writer.add_tensor("blk.0.w", np.ones((8, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


WRONG_TYPES = [
    ("general.alignment", "add_string", "abc"),
    ("general.alignment", "add_bool", True),
    ("general.alignment", "add_float32", 32.0),
    ("general.alignment", "add_uint32", 0),
    ("general.alignment", "add_array", [32]),
    ("general.file_type", "add_string", "Q4_1"),
    ("split.count", "add_string", "two"),
    ("llama.context_length", "add_array", [1, 2]),
    ("llama.context_length", "add_array", list(range(5000))),  # kept only as a length
    ("llama.context_length", "add_string", "4k"),
    ("llama.context_length", "add_int32", -1),
    ("llama.block_count", "add_float32", 12.5),
    ("llama.block_count", "add_bool", True),
    ("llama.block_count", "add_int64", -3),
    ("llama.block_count", "add_uint64", 2**40),
    ("llama.embedding_length", "add_string", "wide"),
    ("llama.attention.head_count", "add_array", ["a", "b"]),
    ("llama.attention.head_count_kv", "add_float32", 2.0),
    ("llama.attention.key_length", "add_int32", -64),
    ("llama.attention.sliding_window_pattern", "add_string", "every 6th"),
    ("llama.feed_forward_length", "add_array", [1.5, 2.5]),
    ("llama.expert_used_count", "add_string", "2"),
    ("tokenizer.ggml.tokens", "add_string", "abc"),
    ("tokenizer.chat_template", "add_array", [1, 2]),
]


@pytest.mark.parametrize(("key", "method", "value"), WRONG_TYPES)
def test_a_metadata_value_of_the_wrong_type_is_a_gguf_error_naming_key_and_file(
    tmp_path, key, method, value
):
    path = write_with(tmp_path / "odd-model.gguf", key, method, value)
    with pytest.raises(GgufError) as raised:
        header = read_header(path)
        # Had the header been accepted, what its readers do with it must not fail otherwise.
        model_shape(header)
        assert header.context_length
    assert "odd-model.gguf" in str(raised.value) and repr(key) in str(raised.value)


def test_metadata_of_the_right_types_still_reads(tmp_path):
    header = read_header(write_with(tmp_path / "ok.gguf", "general.alignment", "add_uint32", 64))
    assert header.data_offset % 64 == 0 and header.context_length == 128
    per_layer = write_with(
        tmp_path / "ok2.gguf", "llama.attention.head_count_kv", "add_array", [2]
    )
    assert model_shape(read_header(per_layer)).head_count_kv == (2,)


def test_a_cached_remote_header_with_a_wrong_type_is_a_gguf_error_naming_key_and_file(tmp_path):
    from deskllm.catalog.remote_header import header_from_json, header_to_json

    path = write_with(tmp_path / "m-Q4_1.gguf", "llama.context_length", "add_uint32", 64)
    cached = header_to_json(_remote(read_header(path)))
    assert header_from_json(cached).header.context_length == 64
    cached["metadata"]["llama.context_length"] = "64k"  # an old or damaged cache file
    with pytest.raises(GgufError, match="m-Q4_1.gguf.*'llama.context_length'"):
        header_from_json(cached)


def _remote(header):
    from deskllm.catalog.remote_header import RemoteHeader

    return RemoteHeader("org/repo", "m-Q4_1.gguf", "main", None, 1 << 20, 0, header, None)
