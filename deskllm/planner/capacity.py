"""What this machine can run, in one line: the largest of a ladder of reference models (real
dense instruct models from 0.5B to 70B parameters, by their config.json shapes) that fits
wholly in VRAM or wholly in RAM at Q4_K_M and a given context, and reaches a usable decode
speed. The first-run card shows it, with the curated catalog's pick (catalog_pick_line);
Discover lists actual models."""

from __future__ import annotations

from dataclasses import dataclass

from deskllm.catalog.synthetic_header import ShapeFacts, parameter_count, synthetic_header
from deskllm.hardware.report import HardwareReport
from deskllm.planner.catalog_plan import CatalogPlan
from deskllm.planner.fit import USABLE_TPS, FitPlan, FitPlanner

# Smallest first. Shapes of Qwen2.5 0.5B / 1.5B, Llama 3.2 1B / 3B, Llama 3.1 8B, Mistral Nemo
# 12B, Qwen2.5 14B, Mistral Small 24B, Qwen2.5 32B and Llama 3.1 70B (their config.json).
REFERENCE_SHAPES: tuple[ShapeFacts, ...] = (
    ShapeFacts("qwen2", 24, 896, 4864, 14, 2, 151936, 32768, tied_embeddings=True),
    ShapeFacts("llama", 16, 2048, 8192, 32, 8, 128256, 131072, tied_embeddings=True),
    ShapeFacts("qwen2", 28, 1536, 8960, 12, 2, 151936, 32768, tied_embeddings=True),
    ShapeFacts("llama", 28, 3072, 8192, 24, 8, 128256, 131072, tied_embeddings=True),
    ShapeFacts("llama", 32, 4096, 14336, 32, 8, 128256, 131072, tied_embeddings=False),
    ShapeFacts("llama", 40, 5120, 14336, 32, 8, 131072, 131072, tied_embeddings=False,
               head_dim=128),  # fmt: skip
    ShapeFacts("qwen2", 48, 5120, 13824, 40, 8, 152064, 32768, tied_embeddings=False),
    ShapeFacts("llama", 40, 5120, 32768, 32, 8, 131072, 32768, tied_embeddings=False,
               head_dim=128),  # fmt: skip
    ShapeFacts("qwen2", 64, 5120, 27648, 40, 8, 152064, 32768, tied_embeddings=False),
    ShapeFacts("llama", 80, 8192, 28672, 64, 8, 128256, 131072, tied_embeddings=False),
)
QUANT = "Q4_K_M"


@dataclass(frozen=True)
class Capacity:
    """The largest reference model that runs well here, or None.

    Attributes:
        parameters: its parameter count (None: not even the smallest runs well here).
        on_gpu: it fits wholly in the GPU's memory (else wholly in RAM, on the CPU).
        tps_ceiling: its decode speed's upper bound, tokens/s (None: unknown, a full fit on a
            discrete GPU, which counts as fast enough).
        plan: the planner's plan for it (None with parameters).
        line: the sentence for the user.
    """

    parameters: int | None
    on_gpu: bool
    tps_ceiling: float | None
    quant: str
    n_ctx: int
    plan: FitPlan | None
    line: str


def params_text(n: int) -> str:
    """0.5B, 1.5B, 8B, 70B: as models are named."""
    billions = n / 1e9
    return f"{billions:.1f}B" if billions < 9.95 and round(billions, 1) % 1 else f"{billions:.0f}B"


def machine_capacity(
    hardware: HardwareReport,
    n_ctx: int = 4096,
    usable_tps: float = USABLE_TPS,
    quant: str = QUANT,
) -> Capacity:
    """The largest reference model at `quant` whose plan is a full fit (all on the GPU, or all
    in RAM) at `n_ctx` tokens that the planner counts fast enough (see FitPlanner.fast_enough:
    its decode ceiling reaches `usable_tps`, or a full fit on a discrete GPU)."""
    planner = FitPlanner(hardware)
    best: tuple[ShapeFacts, FitPlan] | None = None
    for shape in REFERENCE_SHAPES:
        plan = planner.plan(synthetic_header(shape, quant), n_ctx)
        if plan.fit in ("gpu", "cpu") and planner.fast_enough(plan, usable_tps):
            best = (shape, plan)
    ctx = f"{n_ctx:,}-token context"
    if best is None:
        line = (
            f"Even a 0.5B model at {quant} would run slower than {usable_tps:g} tokens/s or not "
            f"fit in memory here with a {ctx}: small models like the starter suit this machine."
        )
        return Capacity(None, False, None, quant, n_ctx, None, line)
    shape, plan = best
    n = parameter_count(shape)
    on_gpu = plan.fit == "gpu"
    where = f"wholly on {plan.target}" if on_gpu else "in RAM on the CPU"
    speed = f", at up to ~{plan.tps_ceiling:.0f} tokens/s" if plan.tps_ceiling else ""
    line = (
        f"This computer runs models of up to about {params_text(n)} parameters at {quant} "
        f"{where}{speed}, with a {ctx}."
    )
    return Capacity(n, on_gpu, plan.tps_ceiling, quant, n_ctx, plan, line)


def catalog_pick_line(planned: CatalogPlan) -> str | None:
    """The curated catalog's recommendation for this machine in one sentence, as Discover and
    `deskllm recommend` pick it (None when nothing in the catalog fits). It may be larger than
    the capacity line's dense model: a mixture of experts reads only its active experts per
    token, so the sentence says so rather than seem to contradict it."""
    best, quant = planned.recommended, planned.recommended_quant
    if best is None or quant is None:
        return None
    speed = quant.plan.tps_ceiling
    expected = f", ~{speed:.0f} tokens/s expected" if speed else ""
    moe = (
        f"; a mixture of experts, it reads only part of its {params_text(best.model.params)} "
        "parameters per token, so it runs faster than its size suggests"
        if best.model.is_moe
        else ""
    )
    # The repo's own name: what Discover lists and the user looks for there.
    return f"Recommended from the catalog: {best.model.repo_id} at {quant.quant}{expected}{moe}."
