"""SQLite cache of Hub answers (table `catalog_cache`, migration m003) for offline use.

Rows are (kind, key) -> JSON payload + fetched_at. Keys start with the Hub endpoint, so a
mirror (HF_ENDPOINT) and huggingface.co never answer for each other. Remote headers are
keyed by the file's sha256: a file's bytes, hence its header, never change.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

TABLE = "catalog_cache"


@dataclass(frozen=True)
class CacheEntry:
    key: str
    payload: dict[str, Any]
    fetched_at: float

    @property
    def age(self) -> float:
        return max(0.0, time.time() - self.fetched_at)


class CatalogCache:
    def __init__(self, db: Database | None = None) -> None:
        if db is None:
            from deskllm.database import open_database

            db = open_database()
        self.db = db

    def get(self, kind: str, key: str) -> CacheEntry | None:
        row = self.db.execute(
            f"select payload, fetched_at from {TABLE} where kind = ? and key = ?", [kind, key]
        ).fetchone()
        if row is None:
            return None
        return CacheEntry(key, json.loads(row[0]), row[1])

    def with_prefix(self, kind: str, prefix: str) -> list[CacheEntry]:
        """Entries whose key starts with `prefix`, newest first."""
        rows = self.db.execute(
            f"select key, payload, fetched_at from {TABLE} "
            "where kind = ? and substr(key, 1, ?) = ? order by fetched_at desc",
            [kind, len(prefix), prefix],
        ).fetchall()
        return [CacheEntry(k, json.loads(p), t) for k, p, t in rows]

    def put(self, kind: str, key: str, payload: dict[str, Any]) -> float:
        now = time.time()
        with self.db.conn:  # one short transaction per answer
            self.db.execute(
                f"insert or replace into {TABLE} (kind, key, payload, fetched_at) "
                "values (?, ?, ?, ?)",
                [kind, key, json.dumps(payload), now],
            )
        return now
