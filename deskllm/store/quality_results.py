"""Results of `deskllm quality`: one row per model file, reference file, text and context.

A result is the command's JSON object (model, reference, tokens, mean_kld, …, delta_p,
seconds); the store adds what it is keyed by (text_sha256, n_ctx) and when it was made.
"""

from __future__ import annotations

import json
import time
from pathlib import PurePath
from typing import Any

from sqlite_utils import Database

_FIGURES = ("tokens", "mean_kld", "median_kld", "kld_p99", "same_top_pct", "ppl",
            "ppl_reference", "ppl_ratio", "seconds")  # fmt: skip


class QualityResults:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, result: dict[str, Any], *, text_sha256: str, n_ctx: int) -> None:
        """Store `result`, replacing an earlier one with the same key."""
        row = {key: result[key] for key in _FIGURES}
        row.update(
            model=result["model"],
            reference=result["reference"],
            text_sha256=text_sha256,
            n_ctx=n_ctx,
            delta_p=json.dumps(result["delta_p"]),
            created_at=time.time(),
        )
        with self.db.atomic():
            self.db["quality_results"].delete_where(
                "model = ? and reference = ? and text_sha256 = ? and n_ctx = ?",
                [row["model"], row["reference"], text_sha256, n_ctx],
            )
            self.db["quality_results"].insert(row)

    def get(
        self, model: str, reference: str, text_sha256: str, n_ctx: int
    ) -> dict[str, Any] | None:
        rows = self._rows(
            "model = ? and reference = ? and text_sha256 = ? and n_ctx = ?",
            [model, reference, text_sha256, n_ctx],
        )
        return rows[0] if rows else None

    def for_model(self, model: str) -> list[dict[str, Any]]:
        """Every stored result of `model`, the newest first."""
        return self._rows("model = ?", [model])

    def latest_by_file(self) -> dict[str, dict[str, Any]]:
        """File name (no folder) -> the newest stored result of that model file: what the
        Installed list and Discover show beside the scoreboard's tier."""
        latest: dict[str, dict[str, Any]] = {}
        for row in self._rows("1 = 1", []):  # newest first
            latest.setdefault(PurePath(row["model"]).name, row)
        return latest

    def _rows(self, where: str, args: list[Any]) -> list[dict[str, Any]]:
        out = []
        for row in self.db["quality_results"].rows_where(where, args, order_by="created_at desc"):
            row = dict(row)
            row.pop("id")
            row["delta_p"] = json.loads(row["delta_p"] or "{}")
            out.append(row)
        return out
