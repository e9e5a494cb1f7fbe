"""Quantization names and their quality order (llama.cpp KL-divergence vs F16, LLaMA-3-8B)."""

from __future__ import annotations

# llama_ftype ids (general.file_type) -> name, from llama.h.
FILE_TYPES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4",
}


def file_type_name(file_type: int | None) -> str:
    if file_type is None:
        return "?"
    return FILE_TYPES.get(int(file_type), f"type {file_type}")


# Quality order, best first: KL-divergence vs F16 on LLaMA-3-8B from llama.cpp's perplexity
# scoreboard. Lower is better; the figures rank quants of one model, they do not transfer
# between models. F32/BF16 are as good as F16 for this purpose.
KL_DIVERGENCE: dict[str, float] = {
    "F32": 0.0,
    "BF16": 0.0,
    "F16": 0.0,
    "Q8_0": 0.0014,
    "Q6_K": 0.0055,
    "Q5_K_M": 0.0108,
    "Q5_K_S": 0.0166,
    "Q5_1": 0.018,
    "Q5_0": 0.022,
    "Q4_K_M": 0.031,
    "IQ4_XS": 0.036,
    "IQ4_NL": 0.036,
    "Q4_K_S": 0.043,
    "Q4_1": 0.072,
    "Q4_0": 0.072,
    "Q3_K_L": 0.087,
    "Q3_K_M": 0.102,
    "IQ3_M": 0.103,
    "IQ3_S": 0.111,
    "IQ3_XS": 0.139,
    "IQ3_XXS": 0.184,
    "Q3_K_S": 0.228,
    "IQ2_M": 0.326,
    "Q2_K_S": 0.403,
    "IQ2_S": 0.44,
    "Q2_K": 0.445,
    "IQ2_XS": 0.55,
    "IQ2_XXS": 0.81,
    "IQ1_M": 1.39,
    "IQ1_S": 2.2,
}
QUALITY_ORDER: tuple[str, ...] = tuple(sorted(KL_DIVERGENCE, key=KL_DIVERGENCE.__getitem__))


def normalize_label(label: str) -> str:
    """'q4_k_m', 'Q4_K_M' and 'q4-k-m' all name Q4_K_M."""
    return label.strip().upper().replace("-", "_")


def kl_divergence(label: str) -> float | None:
    """KL-divergence vs F16 of a quant (lower is better); None for a quant not on the table."""
    return KL_DIVERGENCE.get(normalize_label(label))


def quality_rank(label: str) -> int:
    """0 for the best quant; unknown quants rank after every known one."""
    name = normalize_label(label)
    return QUALITY_ORDER.index(name) if name in KL_DIVERGENCE else len(QUALITY_ORDER)


QUALITY_TIERS = ("near-lossless", "good", "fair", "low", "unknown")


def quality_tier(label: str) -> str:
    """A word for how close a quant stays to F16 (by KL-divergence): near-lossless (Q6_K and
    up), good (Q4_K_S to Q5_K_M), fair (3-bit), low (2-bit and below), or unknown."""
    kl = kl_divergence(label)
    if kl is None:
        return "unknown"
    return "near-lossless" if kl < 0.01 else "good" if kl < 0.05 else "fair" if kl < 0.2 else "low"
