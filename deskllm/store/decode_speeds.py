"""Decode speeds measured in chats on this machine, per model file: what a recommendation
uses instead of the bandwidth ceiling once a model has been run here."""

from __future__ import annotations

import json
import statistics
from pathlib import PurePath

from sqlite_utils import Database

RECENT = 20  # replies per model the median is taken over


def measured_decode_speeds(db: Database) -> dict[str, float]:
    """File name (no folder) -> median decode speed in tokens/s of its recent complete
    replies. Remote models and replies without a speed are left out."""
    rows = db.execute(
        "select model, metrics from messages where role = 'assistant' and status = 'complete' "
        "and model is not null and metrics like '%tg_tps%' order by id desc"
    ).fetchall()
    speeds: dict[str, list[float]] = {}
    for model, metrics in rows:
        name = PurePath(model).name
        if not name.endswith(".gguf") or len(speeds.get(name, ())) >= RECENT:
            continue
        try:
            tps = json.loads(metrics).get("tg_tps")
        except (ValueError, AttributeError):
            continue
        if isinstance(tps, (int, float)) and tps > 0:
            speeds.setdefault(name, []).append(float(tps))
    return {name: statistics.median(values) for name, values in speeds.items()}
