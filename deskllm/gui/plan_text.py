"""Words for a planned model file in Discover's tables: fit badge, quality, memory, speed."""

from __future__ import annotations

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


def quality_text(quant: str) -> str:
    kl = kl_divergence(quant)
    if kl is None:
        return "unknown"
    return f"{quality_tier(quant)} (KL {kl:g})"


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
