"""Wall-clock timing shared by the probes."""

from __future__ import annotations

import time


def elapsed_ms(start: float) -> float:
    """Milliseconds since `start` (a time.perf_counter() value), rounded to 0.01 ms."""
    return round((time.perf_counter() - start) * 1000.0, 2)
