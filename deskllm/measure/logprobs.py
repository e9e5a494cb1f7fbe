"""The reference's log-probabilities on disk and the per-token comparison with a candidate,
exactly as llama.cpp's llama-perplexity defines them (tools/perplexity/perplexity.cpp:
`log_softmax` with a uint16 output, `kl_divergence`), in numpy.

File layout (llama-perplexity's --kl-divergence-base file, so either tool reads the other's):
  b"_logits_", uint32 n_ctx, int32 n_vocab, int32 n_chunk, int32 tokens[n_chunk * n_ctx],
  then per chunk, for each scored position (n_ctx/2 … n_ctx-2), one row of `row_width(n_vocab)`
  uint16: float32 scale and float32 min_log_prob in the first four, then per token
  round((logit - min_logit) / scale) with min_logit clamped to max_logit - 16 (0 below it).
A row costs 2 bytes a token of the vocabulary instead of 4: ~98 KB for a 49k vocabulary.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

MAGIC = b"_logits_"
_HEADER = struct.Struct("<8sIii")
LOG_PROB_FLOOR = 16.0  # log-probabilities more than this below the top one are not kept
_SLICE_ROWS = 64  # rows scored at once: bounds the temporaries to a few × 64 × n_vocab floats


def row_width(n_vocab: int) -> int:
    """uint16 values per row: the 4 of the two floats, then the vocabulary padded to even."""
    return 2 * ((n_vocab + 1) // 2) + 4


def first_scored(n_ctx: int) -> int:
    """The first position of a chunk whose next-token prediction is scored."""
    return n_ctx // 2


def scored_per_chunk(n_ctx: int) -> int:
    return n_ctx - 1 - first_scored(n_ctx)


@dataclass(frozen=True)
class BaseHeader:
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray  # int32, n_chunk * n_ctx
    data_offset: int  # where the first chunk's rows start


def write_header(out: BinaryIO, n_ctx: int, n_vocab: int, tokens: np.ndarray) -> None:
    n_chunk = len(tokens) // n_ctx
    out.write(_HEADER.pack(MAGIC, n_ctx, n_vocab, n_chunk))
    out.write(np.asarray(tokens[: n_chunk * n_ctx], dtype="<i4").tobytes())


def read_header(path: Path) -> BaseHeader:
    with open(path, "rb") as f:
        raw = f.read(_HEADER.size)
        if len(raw) < _HEADER.size:
            raise ValueError(f"{path} is too short for a log-probability file")
        magic, n_ctx, n_vocab, n_chunk = _HEADER.unpack(raw)
        if magic != MAGIC or n_ctx < 4 or n_vocab < 1 or n_chunk < 0:
            raise ValueError(f"{path} is not a log-probability file")
        tokens = np.fromfile(f, dtype="<i4", count=n_chunk * n_ctx)
    if len(tokens) != n_chunk * n_ctx:
        raise ValueError(f"{path} is truncated")
    return BaseHeader(n_ctx, n_vocab, n_chunk, tokens, _HEADER.size + tokens.nbytes)


def chunk_rows(path: Path, header: BaseHeader, chunk: int) -> np.ndarray:
    """The stored rows of one chunk, (scored_per_chunk, row_width) uint16, read from disk."""
    rows = scored_per_chunk(header.n_ctx)
    width = row_width(header.n_vocab)
    offset = header.data_offset + chunk * rows * width * 2
    data = np.fromfile(path, dtype="<u2", count=rows * width, offset=offset)
    if len(data) != rows * width:
        raise ValueError(f"{path} is truncated at chunk {chunk + 1}")
    return data.reshape(rows, width)


def compact_log_probs(logits: np.ndarray) -> np.ndarray:
    """Rows of logits (n, n_vocab) float32 → the stored uint16 rows (n, row_width)."""
    logits = np.asarray(logits, dtype=np.float32)
    n, n_vocab = logits.shape
    out = np.zeros((n, row_width(n_vocab)), dtype=np.uint16)
    for lo in range(0, n, _SLICE_ROWS):
        part = logits[lo : lo + _SLICE_ROWS]
        top = part.max(axis=1)
        low = np.maximum(part.min(axis=1), top - np.float32(LOG_PROB_FLOOR))
        log_sum = np.log(np.exp(part - top[:, None]).sum(axis=1, dtype=np.float64))
        min_log_prob = (low - top - log_sum.astype(np.float32)).astype(np.float32)
        scale = ((top - low) / np.float32(65535)).astype(np.float32)
        heads = out[lo : lo + len(part), :4].view(np.float32)  # two floats in four uint16
        heads[:, 0] = scale
        heads[:, 1] = min_log_prob
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = np.where(scale > 0, np.float32(1) / scale, np.float32(0)).astype(np.float32)
            q = np.rint(inv[:, None] * (part - low[:, None]))
        # nearest_int() of llama.cpp rounds half to even, as rint does; at or below the floor: 0
        q = np.where(part > low[:, None], q, 0)
        out[lo : lo + len(part), 4 : 4 + n_vocab] = np.clip(q, 0, 65535).astype(np.uint16)
    return out


@dataclass(frozen=True)
class TokenScores:
    """Per scored token, all float64 except same_top: KL(ref || cand) in nats, the
    candidate's and the reference's negative log-likelihood of the true next token, Δp =
    p_cand(true) − p_ref(true), and whether both put the same token on top."""

    kld: np.ndarray
    nll: np.ndarray
    nll_reference: np.ndarray
    delta_p: np.ndarray
    same_top: np.ndarray  # bool

    @staticmethod
    def concat(parts: list[TokenScores]) -> TokenScores:
        def join(name: str) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in parts]) if parts else np.zeros(0)

        return TokenScores(
            join("kld"), join("nll"), join("nll_reference"), join("delta_p"),
            join("same_top").astype(bool),
        )  # fmt: skip


def score_rows(logits: np.ndarray, base_rows: np.ndarray, next_tokens: np.ndarray) -> TokenScores:
    """Compare the candidate's logits (n, n_vocab) with the reference's stored rows (n,
    row_width) at the same positions; `next_tokens` (n,) are the true next tokens."""
    logits = np.asarray(logits, dtype=np.float32)
    n, n_vocab = logits.shape
    parts = []
    for lo in range(0, n, _SLICE_ROWS):
        part = logits[lo : lo + _SLICE_ROWS]
        rows = base_rows[lo : lo + len(part)]
        tok = np.asarray(next_tokens[lo : lo + len(part)], dtype=np.int64)
        idx = np.arange(len(part))
        top = part.max(axis=1)
        log_sum = np.log(np.exp(part - top[:, None]).sum(axis=1, dtype=np.float64))
        log_norm = (top + log_sum.astype(np.float32)).astype(np.float32)
        log_p = part - log_norm[:, None]
        nll = (log_norm - part[idx, tok]).astype(np.float64)

        heads = np.ascontiguousarray(rows[:, :4]).view(np.float32)
        q = rows[:, 4 : 4 + n_vocab].astype(np.float32)
        log_p_base = heads[:, 0:1] * q + heads[:, 1:2]
        nll_base = -log_p_base[idx, tok].astype(np.float64)
        kept = log_p_base > -np.float32(LOG_PROB_FLOOR)
        terms = np.where(kept, np.exp(log_p_base) * (log_p_base - log_p), np.float32(0))
        kld = terms.sum(axis=1, dtype=np.float64)
        # argmax keeps the first of equals, as the C loops do
        same = part.argmax(axis=1) == log_p_base.argmax(axis=1)
        delta_p = np.exp(-nll.astype(np.float32)).astype(np.float64) - np.exp(
            -nll_base.astype(np.float32)
        ).astype(np.float64)
        parts.append(TokenScores(kld, nll, nll_base, delta_p, same))
    return TokenScores.concat(parts)
