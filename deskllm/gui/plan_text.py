"""Words for a planned model file in Discover's tables: fit badge, quality, memory, speed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from deskllm.catalog.quants import kl_divergence, quality_tier
from deskllm.downloads.units import human_bytes
from deskllm.planner.fit import QuantPlan


def fit_badge(plan: QuantPlan) -> str:
    fit = plan.plan
    if fit.fit == "gpu":
        return "Full GPU"
    if fit.fit == "partial":
        return f"Partial {fit.n_gpu_layers}/{fit.layer_slots} layers"
    if fit.fit == "cpu":
        return "CPU"
    return "Too large"


def quality_text(quant: str, measured: Mapping[str, Any] | None = None) -> str:
    """The scoreboard's tier for `quant` (KL divergence of an 8B model's quants), then, where
    the user checked this file, what was measured on their own text (a stored `deskllm
    quality` result), labelled as such."""
    kl = kl_divergence(quant)
    tier = "unknown" if kl is None else f"{quality_tier(quant)} (KL {kl:g})"
    return f"{tier} · {measured_quality_text(measured)}" if measured else tier


def measured_quality_text(result: Mapping[str, Any]) -> str:
    reference = PurePath(result["reference"]).name
    return (
        f"measured on your text: KL {result['mean_kld']:.4f}, same top token "
        f"{result['same_top_pct']:.1f}% against {reference}"
    )


def memory_text(plan: QuantPlan) -> str:
    est = plan.plan.estimate
    vram = f" + {human_bytes(est.vram_bytes)} VRAM" if est.vram_bytes else ""
    return f"{human_bytes(est.ram_bytes)} RAM{vram}"


def speed_text(tps: float | None, measured: bool) -> str:
    """"~N tok/s" and where the figure comes from: measured in chats here, or the ceiling
    memory bandwidth allows (an upper bound)."""
    if not tps:
        return "unknown"
    value = f"{tps:.1f}" if tps < 10 else f"{tps:.0f}"
    return f"~{value} tok/s ({'measured' if measured else 'ceiling'})"
