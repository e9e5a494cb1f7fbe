"""Quantization quality on the user's own text: how far a quantized GGUF's next-token
distributions are from a higher-precision reference of the same model.

The definitions are llama.cpp's llama-perplexity `--kl-divergence-base` / `--kl-divergence`:
the text is cut into chunks of n_ctx tokens, each evaluated fresh; positions n_ctx/2 …
n_ctx-2 of each chunk are scored (each predicts the next token, with at least half a chunk
of context). The reference runs first and stores its log-probabilities on disk; it is freed
(its process ends) before the candidate loads, so the two never need memory together.

Result keys (`QualityResult.to_json`):
  model, reference  the two files
  tokens            scored tokens
  mean_kld, median_kld, kld_p99   KL(reference || model) per token, nats
  same_top_pct      % of tokens where both models' most likely next token is the same
  ppl, ppl_reference, ppl_ratio   perplexity of each on the scored tokens, and model/reference
  delta_p           p_model(true next token) − p_reference(it): mean, rms, p01 … p99
  seconds           wall time of both passes
"""

from __future__ import annotations

import hashlib
import multiprocessing
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from deskllm.engine.client import EngineClient, exit_reason
from deskllm.engine.domain import LoadParams
from deskllm.engine.errors import EngineError
from deskllm.loader import ModelLoader
from deskllm.measure.logprobs import TokenScores

DEFAULT_CTX = 512
MAX_BATCH = 512  # tokens per llama_decode; a larger chunk is evaluated in several
_POLL_S = 0.2  # how often a waiting pass looks at the cancel flag


JSON_KEYS = ("model", "reference", "tokens", "mean_kld", "median_kld", "kld_p99",
             "same_top_pct", "ppl", "ppl_reference", "ppl_ratio", "delta_p", "seconds")  # fmt: skip


class QualityError(Exception):
    """The check could not run (the message says why, in words for the user)."""


class QualityCancelled(QualityError):
    pass


@dataclass(frozen=True)
class QualityProgress:
    stage: str  # "reference" | "model"
    chunk: int  # chunks done
    chunks: int


@dataclass(frozen=True)
class DeltaP:
    mean: float
    rms: float
    p01: float
    p05: float
    p50: float
    p95: float
    p99: float


@dataclass(frozen=True)
class QualityResult:
    model: str
    reference: str
    tokens: int
    mean_kld: float
    median_kld: float
    kld_p99: float
    same_top_pct: float
    ppl: float
    ppl_reference: float
    ppl_ratio: float
    delta_p: DeltaP
    seconds: float
    # Not in the JSON: what the result is keyed by, and what the passes cost.
    n_ctx: int = DEFAULT_CTX
    text_sha256: str = ""
    peak_rss_bytes: int = 0  # the larger of the two passes' processes

    def to_json(self) -> dict:
        data = asdict(self)
        return {key: data[key] for key in JSON_KEYS}


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def summarize(scores: TokenScores) -> dict:
    """The result's figures from the per-token scores (percentiles interpolated linearly
    between sorted values, as llama-perplexity's)."""
    n = len(scores.kld)
    if n == 0:
        raise QualityError("no token was scored")
    mean_nll, mean_nll_ref = float(scores.nll.mean()), float(scores.nll_reference.mean())
    dp = scores.delta_p
    q = np.quantile(dp, [0.01, 0.05, 0.5, 0.95, 0.99])
    return dict(
        tokens=n,
        mean_kld=float(scores.kld.mean()),
        median_kld=float(np.median(scores.kld)),
        kld_p99=float(np.quantile(scores.kld, 0.99)),
        same_top_pct=100.0 * float(scores.same_top.mean()),
        ppl=float(np.exp(mean_nll)),
        ppl_reference=float(np.exp(mean_nll_ref)),
        ppl_ratio=float(np.exp(mean_nll - mean_nll_ref)),
        delta_p=DeltaP(
            mean=float(dp.mean()),
            rms=float(np.sqrt((dp * dp).mean())),
            **{k: float(v) for k, v in zip(("p01", "p05", "p50", "p95", "p99"), q, strict=True)},
        ),
    )


def check_quality(
    model: LoadParams,
    reference: LoadParams,
    text: str,
    n_ctx: int = DEFAULT_CTX,
    *,
    on_progress: Callable[[QualityProgress], None] | None = None,
    cancel: threading.Event | None = None,
    loader: ModelLoader | None = None,
    workdir: Path | None = None,
) -> QualityResult:
    """Compare `model` with `reference` on `text` (see the module docstring). Each model
    loads through the loader's checks (a model that cannot fit is refused with the numbers;
    extra buffer types as the crash-safe probe decided). Raises QualityError, or
    QualityCancelled when `cancel` is set; a KeyboardInterrupt ends the running pass too."""
    if n_ctx < 8:
        raise QualityError(f"a context of {n_ctx} tokens is too small to score (8 at least)")
    started = time.perf_counter()
    loader = loader or ModelLoader(EngineClient())
    ref_params = _resolved(loader, reference, n_ctx)
    model_params = _resolved(loader, model, n_ctx)
    with tempfile.TemporaryDirectory(prefix="deskllm-quality-", dir=workdir) as tmp:
        base = Path(tmp) / "reference.logprobs"
        ref_out = _run_pass("reference", ref_params, {"text": text, "n_ctx": n_ctx,
                            "out": str(base)}, on_progress, cancel)  # fmt: skip
        cand_out = _run_pass("model", model_params, {"base": str(base)}, on_progress, cancel)
    return QualityResult(
        model=model_params.model_path,
        reference=ref_params.model_path,
        seconds=time.perf_counter() - started,
        n_ctx=n_ctx,
        text_sha256=text_sha256(text),
        peak_rss_bytes=max(ref_out["peak_rss_bytes"], cand_out["peak_rss_bytes"]),
        **summarize(cand_out["scores"]),
    )


def _resolved(loader: ModelLoader, params: LoadParams, n_ctx: int) -> LoadParams:
    try:
        params = loader.check(replace(params, n_ctx=n_ctx, n_batch=min(n_ctx, MAX_BATCH))).params
    except EngineError as exc:
        raise QualityError(str(exc)) from None
    if params.n_ctx < n_ctx:  # the loader caps a context at what the model was trained for
        raise QualityError(
            f"{Path(params.model_path).name} was trained for {params.n_ctx} tokens of "
            f"context; use --ctx {params.n_ctx} or less"
        )
    return params


def _run_pass(
    stage: str,
    params: LoadParams,
    args: dict,
    on_progress: Callable[[QualityProgress], None] | None,
    cancel: threading.Event | None,
) -> dict:
    """Run one pass in a fresh process and return its payload; the process is always ended."""
    from deskllm.measure.quality_worker import run_pass

    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    kind = "reference" if stage == "reference" else "candidate"
    child = ctx.Process(target=run_pass, args=(send, kind, params, args),
                        name=f"deskllm-quality-{kind}", daemon=True)  # fmt: skip
    child.start()
    send.close()  # the child holds the only sending end: its death reads as EOF here
    finished = False
    try:
        while True:
            if cancel is not None and cancel.is_set():
                raise QualityCancelled("cancelled")
            if not receive.poll(_POLL_S):
                continue
            try:
                message = receive.recv()
            except EOFError:
                child.join(5)
                raise QualityError(
                    f"the {stage} pass ({Path(params.model_path).name}): "
                    f"{exit_reason(child.exitcode)}"
                ) from None
            if message[0] == "progress" and on_progress is not None:
                on_progress(QualityProgress(stage, message[1], message[2]))
            elif message[0] == "error":
                raise QualityError(f"{Path(params.model_path).name}: {message[1]}")
            elif message[0] == "done":
                finished = True
                return message[1]
    finally:
        # After "done" the child is on its way out; otherwise (error, cancel, Ctrl+C) end it.
        child.join(10 if finished else 0)
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()
