"""Speed and token figures of a remote reply, measured from the stream as it arrives and
completed by what the server reports (`usage`; llama-server's and deskllm's `timings`)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from deskllm.engine.domain import Metrics


@dataclass
class StreamFigures:
    """Times from time.monotonic(); `started` is when the request went out."""

    request_id: int
    engine: str
    started: float = field(default_factory=time.monotonic)
    first_at: float | None = None
    last_at: float | None = None
    chunks: int = 0  # text-bearing chunks: one token each on the servers seen so far
    gaps_s: list[float] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None

    def on_text(self) -> None:
        now = time.monotonic()
        if self.first_at is None:
            self.first_at = now
        elif self.last_at is not None:
            self.gaps_s.append(now - self.last_at)
        self.last_at = now
        self.chunks += 1

    def on_chunk(self, chunk: dict[str, Any]) -> None:
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            self.timings = chunk["timings"]

    def metrics(self) -> Metrics:
        usage, timings = self.usage or {}, self.timings or {}
        generated = _int(usage.get("completion_tokens")) or self.chunks
        prompt = _int(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
        cached = cached or _int(timings.get("cache_n"))
        tg_tps = None
        if self.first_at is not None and self.last_at is not None and generated > 1:
            span = self.last_at - self.first_at
            # Tokens after the first over the time they took: the first one's wait is TTFT.
            tg_tps = (generated - 1) / span if span > 0 else None
        gaps_ms = sorted(g * 1000 for g in self.gaps_s)
        return Metrics(
            self.request_id,
            ttft_s=None if self.first_at is None else self.first_at - self.started,
            prompt_tokens=prompt,
            cached_tokens=cached,
            evaluated_tokens=max(0, prompt - cached),
            pp_tps=_float(timings.get("prompt_per_second")),
            generated_tokens=generated,
            tg_tps=tg_tps,
            itl_p50_ms=statistics.median(gaps_ms) if gaps_ms else None,
            itl_p95_ms=gaps_ms[int(0.95 * (len(gaps_ms) - 1))] if gaps_ms else None,
            n_past=prompt + generated,
            device="remote",
            engine=self.engine,
        )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
