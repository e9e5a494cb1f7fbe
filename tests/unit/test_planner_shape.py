"""model_shape(): what the planner reads from real GGUF headers."""

from __future__ import annotations

import re

import pytest
from planner_models import write_tiny_gguf

from deskllm.gguf.header import GgufError, GgufHeader, read_header
from deskllm.planner.model_shape import model_shape


def test_starter_model_shape(starter_model):
    header = read_header(starter_model)
    s = model_shape(header)
    assert (s.architecture, s.block_count, s.n_embd, s.n_vocab) == ("llama", 30, 576, 49152)
    assert set(s.head_count) == {9} and set(s.head_count_kv) == {3}
    assert set(s.key_length) == {64} and set(s.value_length) == {64}
    assert not any(s.swa_layers) and s.sliding_window == 0
    assert s.tied_embeddings  # SmolLM2 has no output.weight
    assert s.total_weight_bytes == header.tensor_bytes


def test_gemma3_every_sixth_layer_is_global(tmp_path):
    # llama.cpp's gemma3 loader: load_swa_pattern(ml, 6) -> il % 6 < 5 is sliding.
    path = write_tiny_gguf(tmp_path / "g.gguf", "gemma3", blocks=12, sliding_window=512)
    s = model_shape(read_header(path))
    assert [il for il, swa in enumerate(s.swa_layers) if not swa] == [5, 11]
    assert s.sliding_window == 512


def test_gemma3_without_a_window_has_no_sliding_layers(tmp_path):
    path = write_tiny_gguf(tmp_path / "g.gguf", "gemma3", blocks=6)
    assert not any(model_shape(read_header(path)).swa_layers)


def test_pattern_period_in_the_file_overrides_the_architecture(tmp_path):
    path = write_tiny_gguf(
        tmp_path / "g.gguf", "gemma3", blocks=8, sliding_window=256, swa_pattern=4
    )
    assert [il for il, swa in enumerate(model_shape(read_header(path)).swa_layers) if not swa] == [
        3,
        7,
    ]


def test_per_layer_pattern_array(tmp_path):
    flags = [True, False, True, True, False, True]
    path = write_tiny_gguf(
        tmp_path / "g.gguf", "gemma4", blocks=6, sliding_window=128, swa_pattern=flags
    )
    assert list(model_shape(read_header(path)).swa_layers) == flags


def test_unknown_architecture_with_a_window_counts_full_attention(tmp_path):
    # Old Mistral files carry sliding_window but llama.cpp ignores it for llama: full KV.
    path = write_tiny_gguf(tmp_path / "m.gguf", "llama", sliding_window=4096)
    s = model_shape(read_header(path))
    assert not any(s.swa_layers) and s.sliding_window == 0


def test_per_layer_kv_heads_and_explicit_head_lengths(tmp_path):
    path = write_tiny_gguf(
        tmp_path / "p.gguf", blocks=4, heads=[4, 4, 8, 8], heads_kv=[2, 0, 4, 1],
        key_length=32, value_length=16,
    )  # fmt: skip
    s = model_shape(read_header(path))
    assert s.head_count == (4, 4, 8, 8) and s.head_count_kv == (2, 0, 4, 1)
    assert set(s.key_length) == {32} and set(s.value_length) == {16}


def test_kv_heads_default_to_heads(tmp_path):
    path = write_tiny_gguf(tmp_path / "p.gguf", heads=4, heads_kv=None)
    assert set(model_shape(read_header(path)).head_count_kv) == {4}


@pytest.mark.parametrize("tied", [True, False])
def test_output_layer_bytes(tmp_path, tied):
    path = write_tiny_gguf(tmp_path / "t.gguf", tied=tied, n_embd=64, vocab=256)
    header = read_header(path)
    s = model_shape(header)
    assert s.tied_embeddings is tied
    assert s.token_embd_bytes == 64 * 256 * 4 == s.input_bytes
    norm = 64 * 4
    assert s.output_bytes == norm + (0 if tied else 64 * 256 * 4)
    assert s.total_weight_bytes == header.tensor_bytes


def test_moe_expert_tensors_are_counted_apart(tmp_path):
    path = write_tiny_gguf(
        tmp_path / "moe.gguf", "qwen3moe", blocks=2, experts=8, experts_used=2, ff=32
    )
    s = model_shape(read_header(path))
    assert (s.expert_count, s.expert_used_count) == (8, 2)
    assert all(e == 3 * 64 * 32 * 8 * 4 for e in s.layer_expert_bytes)
    assert all(b > e for b, e in zip(s.layer_bytes, s.layer_expert_bytes, strict=True))
    assert s.feed_forward_length == 32 * 2  # two experts' activations side by side


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("llama.block_count", "twelve"),
        ("llama.block_count", 10**12),
        ("llama.attention.head_count", [4, "x"]),
        ("llama.attention.sliding_window_pattern", "6"),
        ("llama.feed_forward_length", {"a": 1}),
        ("split.count", "2"),
    ],
)
def test_a_header_built_by_hand_with_a_wrong_type_is_a_gguf_error(key, value):
    # Headers also come from the catalog's JSON cache and from combined split parts.
    metadata = {"general.architecture": "llama", "llama.block_count": 2, key: value}
    with pytest.raises(GgufError, match=re.escape(repr(key))):
        model_shape(GgufHeader(3, metadata, (), 0))
