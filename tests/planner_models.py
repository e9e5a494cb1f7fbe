"""Model headers for planner tests.

`write_tiny_gguf` writes real (tiny) GGUF files with gguf.GGUFWriter: sliding-window layers,
per-layer KV head counts, tied or separate output, MoE experts. `llama3_8b_header` builds the
header of a Llama-3-8B-shaped model in one of several quantizations (the tensor table as a
remote-header read gives it: names, shapes, types; no tensor data), for fit tests that need
real sizes without gigabytes on disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import gguf
import numpy as np

from deskllm.gguf.header import GgufHeader, TensorInfo

FILE_TYPES = {"F16": 1, "Q8_0": 7, "Q6_K": 18, "Q5_K_M": 17, "Q4_K_M": 15, "Q3_K_M": 12,
              "Q2_K": 10}  # fmt: skip


def write_tiny_gguf(
    path: Path,
    arch: str = "llama",
    *,
    blocks: int = 4,
    n_embd: int = 64,
    heads: int | Sequence[int] = 4,
    heads_kv: int | Sequence[int] | None = 2,
    vocab: int = 256,
    ff: int = 128,
    key_length: int | None = None,
    value_length: int | None = None,
    sliding_window: int | None = None,
    swa_pattern: int | Sequence[bool] | None = None,
    tied: bool = True,
    experts: int = 0,
    experts_used: int = 0,
    context: int = 2048,
) -> Path:
    """A valid GGUF with F32 tensors of the shapes llama.cpp expects for `arch`."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(blocks)
    w.add_context_length(context)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads if isinstance(heads, int) else list(heads))
    if heads_kv is not None:
        w.add_head_count_kv(heads_kv if isinstance(heads_kv, int) else list(heads_kv))
    if key_length is not None:
        w.add_key_length(key_length)
    if value_length is not None:
        w.add_value_length(value_length)
    if sliding_window is not None:
        w.add_sliding_window(sliding_window)
    if swa_pattern is not None:
        key = f"{arch}.attention.sliding_window_pattern"
        if isinstance(swa_pattern, int):
            w.add_uint32(key, swa_pattern)
        else:
            w.add_array(key, [bool(v) for v in swa_pattern])
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(experts_used)
        w.add_expert_feed_forward_length(ff)
    w.add_file_type(0)

    def per_layer(value: int | Sequence[int] | None, il: int, default: int) -> int:
        if value is None:
            return default
        return value if isinstance(value, int) else value[il]

    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, np.zeros(tuple(reversed(shape)), dtype=np.float32))

    t("token_embd.weight", n_embd, vocab)
    for il in range(blocks):
        h = per_layer(heads, il, 4)
        hkv = per_layer(heads_kv, il, h)
        k = key_length or n_embd // h
        v = value_length or n_embd // h
        t(f"blk.{il}.attn_norm.weight", n_embd)
        t(f"blk.{il}.attn_q.weight", n_embd, h * k)
        if hkv:
            t(f"blk.{il}.attn_k.weight", n_embd, hkv * k)
            t(f"blk.{il}.attn_v.weight", n_embd, hkv * v)
        t(f"blk.{il}.attn_output.weight", h * v, n_embd)
        t(f"blk.{il}.ffn_norm.weight", n_embd)
        if experts:
            t(f"blk.{il}.ffn_gate_inp.weight", n_embd, experts)
            t(f"blk.{il}.ffn_gate_exps.weight", n_embd, ff, experts)
            t(f"blk.{il}.ffn_up_exps.weight", n_embd, ff, experts)
            t(f"blk.{il}.ffn_down_exps.weight", ff, n_embd, experts)
        else:
            t(f"blk.{il}.ffn_gate.weight", n_embd, ff)
            t(f"blk.{il}.ffn_up.weight", n_embd, ff)
            t(f"blk.{il}.ffn_down.weight", ff, n_embd)
    t("output_norm.weight", n_embd)
    if not tied:
        t("output.weight", n_embd, vocab)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ggml type ids used below
_F32, _F16, _Q8_0, _Q2_K, _Q3_K, _Q4_K, _Q5_K, _Q6_K = 0, 1, 8, 10, 11, 12, 13, 14
# quant -> (most block weights, attn_v and ffn_down, token_embd, output)
_MIX = {
    "F16": (_F16, _F16, _F16, _F16),
    "Q8_0": (_Q8_0, _Q8_0, _Q8_0, _Q8_0),
    "Q6_K": (_Q6_K, _Q6_K, _Q6_K, _Q6_K),
    "Q5_K_M": (_Q5_K, _Q6_K, _Q5_K, _Q6_K),
    "Q4_K_M": (_Q4_K, _Q6_K, _Q4_K, _Q6_K),
    "Q3_K_M": (_Q3_K, _Q4_K, _Q3_K, _Q6_K),
    "Q2_K": (_Q2_K, _Q3_K, _Q2_K, _Q6_K),
}


def llama3_8b_header(quant: str) -> GgufHeader:
    """Llama-3-8B's shapes (32 blocks, 4096 wide, 32 heads, 8 KV heads, 128k vocab) with the
    tensor types of llama.cpp's `quant` mix (simplified: one type per tensor kind)."""
    main, sensitive, embd, out = _MIX[quant]
    n, d, ff, vocab, kv = 32, 4096, 14336, 128256, 1024
    tensors = [TensorInfo("token_embd.weight", (d, vocab), embd, 0)]
    for il in range(n):
        for name, shape, kind in [
            ("attn_norm.weight", (d,), _F32),
            ("attn_q.weight", (d, d), main),
            ("attn_k.weight", (d, kv), main),
            ("attn_v.weight", (d, kv), sensitive),
            ("attn_output.weight", (d, d), main),
            ("ffn_norm.weight", (d,), _F32),
            ("ffn_gate.weight", (d, ff), main),
            ("ffn_up.weight", (d, ff), main),
            ("ffn_down.weight", (ff, d), sensitive),
        ]:
            tensors.append(TensorInfo(f"blk.{il}.{name}", shape, kind, 0))
    tensors += [
        TensorInfo("output_norm.weight", (d,), _F32, 0),
        TensorInfo("output.weight", (d, vocab), out, 0),
    ]
    laid_out, offset = [], 0
    for t in tensors:  # one after another, 32-byte aligned, as a GGUF file stores them
        laid_out.append(TensorInfo(t.name, t.shape, t.type_id, offset))
        offset += -(-t.n_bytes // 32) * 32
    metadata = {
        "general.architecture": "llama",
        "general.file_type": FILE_TYPES[quant],
        "llama.block_count": n,
        "llama.context_length": 8192,
        "llama.embedding_length": d,
        "llama.feed_forward_length": ff,
        "llama.attention.head_count": 32,
        "llama.attention.head_count_kv": 8,
        "llama.vocab_size": vocab,
    }
    return GgufHeader(3, metadata, tuple(laid_out), 0)


def write_sparse_gguf(path: Path, weight_bytes: int) -> Path:
    """A valid GGUF whose F16 weights total about `weight_bytes`: the header is real, the
    tensor data a hole in a sparse file (no disk space, no time), so a model far bigger than
    this machine's memory can be offered to the engine."""
    from deskllm.gguf.header import parse_header

    n, d = 4, 8192
    rows = weight_bytes // n // (d * 2) // 256 * 256
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(n)
    w.add_context_length(4096)
    w.add_embedding_length(d)
    w.add_feed_forward_length(4 * d)
    w.add_head_count(64)
    w.add_head_count_kv(8)
    f16 = gguf.GGMLQuantizationType.F16
    w.add_tensor_info("token_embd.weight", (32000, d), np.float16, 32000 * d * 2, raw_dtype=f16)
    for il in range(n):
        name = f"blk.{il}.ffn_up.weight"
        w.add_tensor_info(name, (rows, d), np.float16, rows * d * 2, raw_dtype=f16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    head = path.read_bytes()
    header = parse_header(head, 1 << 62)  # where the data would start, and how long it is
    end = max(t.offset + t.n_bytes for t in header.tensors)
    with path.open("r+b") as fh:
        fh.truncate(header.data_offset + end)
    return path
