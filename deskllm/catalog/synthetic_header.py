"""The GGUF header a model file would have, built from the model's shape (its config.json
facts) and a quantization, without the file: what the planner plans from when only the
shape is known (the curated catalog offline), and where the file's size estimate comes from.

The tensor table follows llama.cpp's layout (names, shapes) and its quantization mixes
(llama-quant.cpp, simplified): most matrices take the quant's main type; attn_v and ffn_down
take more bits in the `_M` and `_L` mixes on the layers llama.cpp's use_more_bits picks; the
output head is Q6_K below Q8_0; rows that are not whole 256-element K-quant blocks fall back
to the type llama.cpp falls back to. Norms are F32. Small tensors some architectures add
(biases, extra norms) are left out: they weigh well under 0.1% of a model.
"""

from __future__ import annotations

from dataclasses import dataclass

from deskllm.gguf.header import GGML_TYPES, GgufHeader, TensorInfo

F32, Q4_0, Q5_0, Q5_1, Q8_0 = 0, 2, 6, 7, 8
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS = 10, 11, 12, 13, 14, 20, 23
QK_K = 256
# What llama.cpp quantizes a row of a length that is not a multiple of QK_K to instead.
_FALLBACK = {Q2_K: IQ4_NL, Q3_K: IQ4_NL, IQ4_XS: IQ4_NL, Q4_K: Q5_0, Q5_K: Q5_1, Q6_K: Q8_0}
# Tokenizer and other metadata, per vocabulary token (text, score, type, BPE merges): rough.
METADATA_BYTES_PER_TOKEN = 40


@dataclass(frozen=True)
class QuantMix:
    """ggml types of one llama.cpp quantization: general.file_type, most matrices, attn_v and
    ffn_down (on ordinary and on use_more_bits layers), token embeddings, output head."""

    file_type: int
    main: int
    sensitive: int
    more_bits: int
    embeddings: int
    output: int


QUANT_MIXES: dict[str, QuantMix] = {
    "Q8_0": QuantMix(7, Q8_0, Q8_0, Q8_0, Q8_0, Q8_0),
    "Q6_K": QuantMix(18, Q6_K, Q6_K, Q6_K, Q6_K, Q6_K),
    "Q5_K_M": QuantMix(17, Q5_K, Q5_K, Q6_K, Q5_K, Q6_K),
    "Q5_K_S": QuantMix(16, Q5_K, Q5_K, Q5_K, Q5_K, Q6_K),
    "Q4_K_M": QuantMix(15, Q4_K, Q4_K, Q6_K, Q4_K, Q6_K),
    "Q4_K_S": QuantMix(14, Q4_K, Q4_K, Q5_K, Q4_K, Q6_K),
    "IQ4_XS": QuantMix(30, IQ4_XS, IQ4_XS, IQ4_XS, IQ4_XS, Q6_K),
    "Q3_K_L": QuantMix(13, Q3_K, Q5_K, Q5_K, Q3_K, Q6_K),
    "Q3_K_M": QuantMix(12, Q3_K, Q4_K, Q5_K, Q3_K, Q6_K),
    "Q3_K_S": QuantMix(11, Q3_K, Q3_K, Q3_K, Q3_K, Q6_K),
    "Q2_K": QuantMix(10, Q2_K, Q3_K, Q4_K, Q2_K, Q6_K),
}


@dataclass(frozen=True)
class ShapeFacts:
    """A model's shape as its config.json gives it.

    Attributes:
        feed_forward: the dense FFN width (0 when every layer is MoE).
        head_dim: per-head key/value width where it is not embedding / heads.
        sliding_window_pattern: every Nth layer is global (None: the architecture's default).
        expert_feed_forward: one expert's FFN width (MoE only).
    """

    architecture: str
    layers: int
    embedding: int
    feed_forward: int
    heads: int
    kv_heads: int
    vocab: int
    context: int
    tied_embeddings: bool
    head_dim: int | None = None
    sliding_window: int | None = None
    sliding_window_pattern: int | None = None
    experts: int = 0
    experts_used: int = 0
    expert_feed_forward: int | None = None


def use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's pick of the layers whose attn_v / ffn_down get more bits."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def _type_for(type_id: int, row: int) -> int:
    block = GGML_TYPES[type_id][1]
    return _FALLBACK.get(type_id, Q8_0) if row % block else type_id


def synthetic_header(shape: ShapeFacts, quant: str) -> GgufHeader:
    """The header of `shape` quantized as `quant` (a QUANT_MIXES key); KeyError otherwise."""
    mix = QUANT_MIXES[quant]
    n, d = shape.layers, shape.embedding
    hd = shape.head_dim or d // shape.heads
    q, kv = shape.heads * hd, shape.kv_heads * hd
    specs: list[tuple[str, tuple[int, ...], int]] = [("token_embd.weight", (d, shape.vocab),
                                                      mix.embeddings)]  # fmt: skip
    for il in range(n):
        sensitive = mix.more_bits if use_more_bits(il, n) else mix.sensitive
        specs += [
            (f"blk.{il}.attn_norm.weight", (d,), F32),
            (f"blk.{il}.attn_q.weight", (d, q), mix.main),
            (f"blk.{il}.attn_k.weight", (d, kv), mix.main),
            (f"blk.{il}.attn_v.weight", (d, kv), sensitive),
            (f"blk.{il}.attn_output.weight", (q, d), mix.main),
            (f"blk.{il}.ffn_norm.weight", (d,), F32),
        ]
        if shape.experts:
            ff = shape.expert_feed_forward or shape.feed_forward
            e = shape.experts
            specs += [
                (f"blk.{il}.ffn_gate_inp.weight", (d, e), F32),
                (f"blk.{il}.ffn_gate_exps.weight", (d, ff, e), mix.main),
                (f"blk.{il}.ffn_up_exps.weight", (d, ff, e), mix.main),
                (f"blk.{il}.ffn_down_exps.weight", (ff, d, e), sensitive),
            ]
        else:
            ff = shape.feed_forward
            specs += [
                (f"blk.{il}.ffn_gate.weight", (d, ff), mix.main),
                (f"blk.{il}.ffn_up.weight", (d, ff), mix.main),
                (f"blk.{il}.ffn_down.weight", (ff, d), sensitive),
            ]
    specs.append(("output_norm.weight", (d,), F32))
    if not shape.tied_embeddings:
        specs.append(("output.weight", (d, shape.vocab), mix.output))
    tensors, offset = [], 0
    for name, dims, type_id in specs:  # one after another, 32-byte aligned, as in a file
        t = TensorInfo(name, dims, _type_for(type_id, dims[0]), offset)
        tensors.append(t)
        offset += -(-t.n_bytes // 32) * 32
    return GgufHeader(3, _metadata(shape, mix.file_type), tuple(tensors), 0)


def _metadata(shape: ShapeFacts, file_type: int) -> dict[str, object]:
    a = shape.architecture
    meta: dict[str, object] = {
        "general.architecture": a,
        "general.file_type": file_type,
        f"{a}.block_count": shape.layers,
        f"{a}.context_length": shape.context,
        f"{a}.embedding_length": shape.embedding,
        f"{a}.feed_forward_length": shape.feed_forward,
        f"{a}.attention.head_count": shape.heads,
        f"{a}.attention.head_count_kv": shape.kv_heads,
        f"{a}.vocab_size": shape.vocab,
    }
    if shape.head_dim:
        meta[f"{a}.attention.key_length"] = shape.head_dim
        meta[f"{a}.attention.value_length"] = shape.head_dim
    if shape.sliding_window:
        meta[f"{a}.attention.sliding_window"] = shape.sliding_window
    if shape.sliding_window_pattern:
        meta[f"{a}.attention.sliding_window_pattern"] = shape.sliding_window_pattern
    if shape.experts:
        meta[f"{a}.expert_count"] = shape.experts
        meta[f"{a}.expert_used_count"] = shape.experts_used
        meta[f"{a}.expert_feed_forward_length"] = shape.expert_feed_forward or 0
    return meta


def estimated_file_size(shape: ShapeFacts, quant: str) -> int:
    """Bytes of the .gguf file: its tensors as laid out, plus the metadata (rough)."""
    header = synthetic_header(shape, quant)
    last = header.tensors[-1]
    data = last.offset + last.n_bytes
    return data + shape.vocab * METADATA_BYTES_PER_TOKEN + (64 << 10)


def parameter_count(shape: ShapeFacts) -> int:
    """Weights the shape holds (every expert counted), from the same tensor table."""
    header = synthetic_header(shape, "Q8_0")
    return sum(t.n_elements for t in header.tensors)


def shape_facts(header: GgufHeader) -> ShapeFacts:
    """The inverse: a real file's header -> the shape facts the catalog keeps (what the
    catalog rebuild reads from the Hub by Range requests)."""

    def first(value: object, default: int = 0) -> int:
        if isinstance(value, list):
            return next((int(v) for v in value if v), default)
        return int(value) if value is not None else default

    def widest(value: object) -> int:
        return max((int(v) for v in value), default=0) if isinstance(value, list) else first(value)

    tensors = {t.name: t for t in header.tensors}
    embd = first(header.arch_value("embedding_length"))
    heads = first(header.arch_value("attention.head_count"))
    kv = header.arch_value("attention.head_count_kv")
    key_length = header.arch_value("attention.key_length")
    token_embd = tensors.get("token_embd.weight")
    vocab = int(token_embd.shape[1]) if token_embd is not None and len(token_embd.shape) > 1 else 0
    pattern = header.arch_value("attention.sliding_window_pattern")
    return ShapeFacts(
        architecture=header.architecture,
        layers=first(header.arch_value("block_count")),
        embedding=embd,
        feed_forward=widest(header.arch_value("feed_forward_length")),
        heads=heads,
        kv_heads=widest(kv) if kv is not None else heads,
        vocab=vocab or first(header.arch_value("vocab_size")),
        context=first(header.arch_value("context_length")),
        tied_embeddings="output.weight" not in tensors,
        head_dim=int(key_length) if key_length and heads and key_length != embd // heads else None,
        sliding_window=first(header.arch_value("attention.sliding_window")) or None,
        sliding_window_pattern=int(pattern) if isinstance(pattern, int) and pattern else None,
        experts=first(header.arch_value("expert_count")),
        experts_used=first(header.arch_value("expert_used_count")),
        expert_feed_forward=first(header.arch_value("expert_feed_forward_length")) or None,
    )
