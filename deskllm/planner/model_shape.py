"""What the memory estimate needs to know about a model, read from its GGUF header.

The rules follow the llama.cpp build deskllm ships (llama-cpp-python 0.3.36):
- per-layer arrays (`head_count`, `head_count_kv`, `feed_forward_length`) are allowed anywhere a
  number is; `head_count_kv` defaults to `head_count`, key/value length to embedding / heads;
- a layer uses sliding-window attention (SWA) when `attention.sliding_window` is set and the
  layer is marked by `attention.sliding_window_pattern` (a per-layer bool array, or a period
  N: every Nth layer is global) or, without that key, by the architecture's built-in period
  (llama_model_base::load_swa_pattern and each model's load_arch_hparams).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deskllm.gguf.header import GgufHeader, TensorInfo, validate_metadata

# Architecture -> (period, dense_first, default window): every `period`-th layer is global
# (the last of each period, or the first with dense_first). Default window where llama.cpp
# assumes one without metadata, else None (no window in the file: no SWA).
SWA_DEFAULTS: dict[str, tuple[int, bool, int | None]] = {
    "gemma2": (2, False, 4096),
    "gemma3": (6, False, None),
    "gemma-embedding": (6, False, None),
    "gemma3n": (5, False, None),
    "cohere2": (4, False, None),
    "exaone4": (4, False, None),
    "olmo2": (4, False, None),
    "gpt-oss": (2, False, None),
    "afmoe": (4, False, None),
    "smallthinker": (4, True, None),
    "plamo3": (8, False, None),
}
_BLOCK = re.compile(r"^blk\.(\d+)\.")
# Input-layer tensors: llama.cpp always keeps these on the CPU.
_INPUT_PREFIXES = ("token_embd", "position_embd", "token_types")


@dataclass(frozen=True)
class ModelShape:
    """Sizes in bytes, counts per layer. Lists are indexed by block (layer) number.

    Attributes:
        input_bytes: token embeddings and other input-layer tensors (always on the CPU).
        layer_bytes: weight bytes of each block.
        layer_expert_bytes: the part of layer_bytes in MoE expert tensors (`*_exps`).
        output_bytes: output head, final norm and other non-block tensors; with tied
            embeddings it excludes token_embd (see tied_embeddings).
        tied_embeddings: no `output.weight`: the output layer reuses token_embd, which llama.cpp
            copies to the output layer's device when that is not the CPU.
    """

    architecture: str
    block_count: int
    n_embd: int
    n_vocab: int
    head_count: tuple[int, ...]
    head_count_kv: tuple[int, ...]
    key_length: tuple[int, ...]
    value_length: tuple[int, ...]
    swa_layers: tuple[bool, ...]
    sliding_window: int
    feed_forward_length: int
    expert_count: int
    expert_used_count: int
    input_bytes: int
    layer_bytes: tuple[int, ...]
    layer_expert_bytes: tuple[int, ...]
    output_bytes: int
    tied_embeddings: bool
    token_embd_bytes: int
    context_length: int | None
    # Matrix bytes by ggml type, per block and for the output head: what the CPU backend may
    # repack into its own layout (an extra copy, "CPU_REPACK") when it runs on the CPU.
    layer_matrix_bytes: tuple[tuple[tuple[int, int], ...], ...] = ()
    output_matrix_bytes: tuple[tuple[int, int], ...] = ()
    # (slot, offset, bytes) of every tensor in the file: slot -1 input, 0.. blocks,
    # block_count output. Empty for a split model (offsets are per part there).
    tensor_spans: tuple[tuple[int, int, int], ...] = ()

    def mapped_bytes(self, cpu_slot: Callable[[int], bool]) -> int:
        """What llama.cpp keeps mapped of the file for the tensors in CPU slots: one range from
        the first to the last of them (its "CPU_Mapped model buffer"); GPU tensors inside it
        stay mapped too. Without offsets: the CPU tensors' bytes."""
        spans = [(o, o + b) for slot, o, b in self.tensor_spans if cpu_slot(slot)]
        if not spans:
            return 0
        return max(end for _, end in spans) - min(start for start, _ in spans)

    @property
    def total_weight_bytes(self) -> int:
        return self.input_bytes + sum(self.layer_bytes) + self.output_bytes

    @property
    def max_head_count(self) -> int:
        return max(self.head_count, default=0)


def _per_layer(value: Any, n: int, default: int) -> tuple[int, ...]:
    if value is None:
        return (default,) * n
    if isinstance(value, list):
        items = [int(v) for v in value[:n]]
        return tuple(items + [items[-1] if items else default] * (n - len(items)))
    return (int(value),) * n


def _swa_layers(header: GgufHeader, n: int) -> tuple[tuple[bool, ...], int]:
    arch = header.architecture
    period, dense_first, default_window = SWA_DEFAULTS.get(arch, (0, False, None))
    window = int(header.arch_value("attention.sliding_window", 0) or 0) or default_window or 0
    pattern = header.arch_value("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        flags = [bool(v) for v in pattern[:n]] + [False] * max(0, n - len(pattern))
        return (tuple(flags), window) if window else ((False,) * n, 0)
    if pattern is not None:
        period = int(pattern)
    if not window or (period == 0 and pattern is None):
        # Unknown architecture with a window key: count full-size KV, never less than real.
        return (False,) * n, 0
    if dense_first:
        flags = [period == 0 or il % period != 0 for il in range(n)]
    else:
        flags = [period == 0 or il % period < period - 1 for il in range(n)]
    return tuple(flags), window


def _n_vocab(header: GgufHeader, tensors: dict[str, TensorInfo]) -> int:
    for name in ("output.weight", "token_embd.weight"):
        if name in tensors and len(tensors[name].shape) >= 2:
            return int(tensors[name].shape[1])
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    if tokens is not None:
        return len(tokens)
    return int(
        header.array_lengths.get("tokenizer.ggml.tokens") or header.arch_value("vocab_size", 0)
    )


def model_shape(header: GgufHeader) -> ModelShape:
    """The shape of the model a header describes (local file or remote header alike).

    Raises GgufError for metadata of the wrong type: parsed headers were checked already, but
    one can also come from a cache file or be put together from the parts of a split model."""
    validate_metadata(header.metadata, header.array_lengths)
    n = int(header.arch_value("block_count", 0) or 0)
    n_embd = int(header.arch_value("embedding_length", 0) or 0)
    heads = _per_layer(header.arch_value("attention.head_count"), n, 0)
    heads_kv = _per_layer(header.arch_value("attention.head_count_kv"), n, 0)
    if header.arch_value("attention.head_count_kv") is None:
        heads_kv = heads
    first_heads = next((h for h in heads if h), 0)
    head_dim = n_embd // first_heads if first_heads else 0
    k_len = int(header.arch_value("attention.key_length", head_dim) or 0)
    v_len = int(header.arch_value("attention.value_length", head_dim) or 0)
    swa, window = _swa_layers(header, n)
    k_swa = int(header.arch_value("attention.key_length_swa", k_len) or 0)
    v_swa = int(header.arch_value("attention.value_length_swa", v_len) or 0)
    key_length = tuple(k_swa if s else k_len for s in swa)
    value_length = tuple(v_swa if s else v_len for s in swa)

    tensors = {t.name: t for t in header.tensors}
    layer_bytes = [0] * n
    expert_bytes = [0] * n
    matrices: list[dict[int, int]] = [{} for _ in range(n)]
    output_matrices: dict[int, int] = {}
    input_bytes = output_bytes = 0
    spans: list[tuple[int, int, int]] = []
    for t in header.tensors:
        m = _BLOCK.match(t.name)
        slot = int(m.group(1)) if m and int(m.group(1)) < n else n
        if t.name.startswith(_INPUT_PREFIXES):
            slot = -1
        spans.append((slot, t.offset, t.n_bytes))
        # ggml repacks matrices (2-D, or 3-D expert stacks) whose rows come in groups of 8.
        matrix = len(t.shape) >= 2 and t.shape[1] % 8 == 0
        if m and int(m.group(1)) < n:
            il = int(m.group(1))
            layer_bytes[il] += t.n_bytes
            if "_exps" in t.name:
                expert_bytes[il] += t.n_bytes
            if matrix:
                matrices[il][t.type_id] = matrices[il].get(t.type_id, 0) + t.n_bytes
        elif t.name.startswith(_INPUT_PREFIXES):
            input_bytes += t.n_bytes
        else:
            output_bytes += t.n_bytes
            if matrix:
                output_matrices[t.type_id] = output_matrices.get(t.type_id, 0) + t.n_bytes
    embd = tensors.get("token_embd.weight")
    ff = _per_layer(header.arch_value("feed_forward_length"), n, 0)
    ff_exp = int(header.arch_value("expert_feed_forward_length", 0) or 0)
    n_used = max(_per_layer(header.arch_value("expert_used_count"), n, 0), default=0)
    return ModelShape(
        architecture=header.architecture,
        block_count=n,
        n_embd=n_embd,
        n_vocab=_n_vocab(header, tensors),
        head_count=heads,
        head_count_kv=heads_kv,
        key_length=key_length,
        value_length=value_length,
        swa_layers=swa,
        sliding_window=window,
        # Widest FFN activation: a MoE layer runs n_used experts side by side.
        feed_forward_length=max(max(ff, default=0), ff_exp * n_used),
        expert_count=int(header.arch_value("expert_count", 0) or 0),
        expert_used_count=n_used,
        input_bytes=input_bytes,
        layer_bytes=tuple(layer_bytes),
        layer_expert_bytes=tuple(expert_bytes),
        output_bytes=output_bytes,
        tied_embeddings="output.weight" not in tensors and embd is not None,
        token_embd_bytes=embd.n_bytes if embd else 0,
        context_length=header.context_length,
        layer_matrix_bytes=tuple(tuple(sorted(d.items())) for d in matrices),
        output_matrix_bytes=tuple(sorted(output_matrices.items())),
        tensor_spans=() if int(header.metadata.get("split.count", 1) or 1) > 1 else tuple(spans),
    )
