"""The load settings that depend on the model and the machine, filled in one place: by the
loader before it plans a load, and by the worker for a client used on its own."""

from __future__ import annotations

from dataclasses import replace

from deskllm import paths
from deskllm.engine.domain import LoadParams

DEFAULT_CTX_CAP = 4096


def resolve_params(params: LoadParams, n_ctx_train: int | None) -> LoadParams:
    """n_ctx 0 → the training context capped at DEFAULT_CTX_CAP; a larger n_ctx than the
    model was trained for → the training context; n_threads 0 → physical cores, adapted by the
    engine (adapt_threads); no KV disk folder → the per-user one. Idempotent."""
    changes: dict = {}
    if params.n_ctx <= 0:
        changes["n_ctx"] = min(n_ctx_train or DEFAULT_CTX_CAP, DEFAULT_CTX_CAP)
    elif n_ctx_train and params.n_ctx > n_ctx_train:
        changes["n_ctx"] = n_ctx_train
    if params.n_threads <= 0:
        import psutil

        changes["n_threads"] = psutil.cpu_count(logical=False) or 1
        changes["adapt_threads"] = True
    if not params.kv_disk_dir:
        changes["kv_disk_dir"] = str(paths.kv_cache_dir())
    return replace(params, **changes) if changes else params
