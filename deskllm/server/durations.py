"""Keep-alive durations as Ollama writes them: a Go duration ("5m", "1h30m", "250ms"), a
number of seconds, or a numeric string; negative means "keep"."""

from __future__ import annotations

import contextlib
import re

_DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: str | float | int | None) -> float | None:
    """Seconds; -1.0 for any negative value (keep); None for None or "". Raises ValueError
    for anything else."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return -1.0 if value < 0 else float(value)
    text = value.strip()
    with contextlib.suppress(ValueError):
        return parse_duration(float(text))
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        raise ValueError(f"{value!r} is not a duration (e.g. 5m, 1h, 30s, 0, -1)")
    seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    return -1.0 if seconds < 0 else seconds
