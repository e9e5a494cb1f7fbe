"""How each model file already on disk would run here: the fit class shown next to installed
models (the chat header's model menu), planned from each file's own header."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from deskllm.engine.load_defaults import DEFAULT_CTX_CAP
from deskllm.gguf.header import read_header
from deskllm.hardware.report import HardwareReport
from deskllm.planner.fit import FitPlan, FitPlanner

log = logging.getLogger("deskllm.planner")


def load_context(n_ctx: int, n_ctx_train: int | None) -> int:
    """The context a load with `n_ctx` gets (0: the training context capped, as the engine
    fills it; never more than the model was trained for)."""
    if n_ctx <= 0:
        return min(n_ctx_train or DEFAULT_CTX_CAP, DEFAULT_CTX_CAP)
    return min(n_ctx, n_ctx_train) if n_ctx_train else n_ctx


def plan_installed(
    paths: Iterable[str],
    hardware: HardwareReport,
    n_ctx: int = 0,
    kv_type: str = "f16",
) -> dict[str, FitPlan | None]:
    """A plan per file at the context and KV type a load would use; None for a file whose
    header cannot be read (missing, damaged). Uncorrected by calibration: a badge, not a
    load check (the loader checks again, corrected, when the model is loaded)."""
    planner = FitPlanner(hardware)
    plans: dict[str, FitPlan | None] = {}
    for path in paths:
        try:
            header = read_header(Path(path))
            plans[path] = planner.plan(header, load_context(n_ctx, header.context_length), kv_type)
        except (OSError, ValueError) as exc:  # GgufError is a ValueError
            log.info("no fit for %s: %s", path, exc)
            plans[path] = None
    return plans
