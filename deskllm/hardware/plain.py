"""Results of the child-process probes as plain builtins (dicts, lists, str, int).

The children import no dataclasses: on a slow machine importing `dataclasses` and building
the report classes costs ~30 ms per interpreter, a tenth of the probe's budget. The parent
turns these dicts into report dataclasses with `serialize.from_plain`, which rejects any key
the dataclass does not have, so the two sides cannot drift apart silently.
"""

from __future__ import annotations

from typing import Any

Plain = dict[str, Any]


def status(
    api: str,
    available: bool,
    reason: str | None = None,
    library: str | None = None,
    version: str | None = None,
    wall_ms: float | None = None,
) -> Plain:
    """Fields of report.ApiStatus."""
    return {
        "api": api,
        "available": available,
        "reason": reason,
        "library": library,
        "version": version,
        "wall_ms": wall_ms,
    }


def error(api: str, message: str) -> Plain:
    """Fields of report.ProbeError."""
    return {"api": api, "message": message}


def api_probe(
    status: Plain, devices: list[Plain] | None = None, errors: list[Plain] | None = None
) -> Plain:
    """Fields of report.ApiProbe; each device has the fields of report.Device."""
    return {"status": status, "devices": devices or [], "errors": errors or []}
