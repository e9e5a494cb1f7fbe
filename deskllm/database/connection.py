"""Open the database: WAL, foreign keys, migrations in transactions, refuse a newer schema."""

from __future__ import annotations

import logging
import time
from pathlib import Path

# Every connection of the process goes through one SQLite library: sqlean's, which is the
# standard module's API over a SQLite that can load extensions (sqlite-vec, for documents);
# many Python builds' own `sqlite3` cannot. Two SQLite copies in one process must never open
# the same file: each keeps its own bookkeeping of the process's POSIX locks, so closing a file
# in one drops the other's locks, and one rebuilds the WAL index the other has mapped (the
# process dies of SIGBUS). sqlite-utils works on the connection it is given.
import sqlean as sqlite
from sqlite_utils import Database

from deskllm import paths
from deskllm.database.migrations import MIGRATIONS, Migration

log = logging.getLogger("deskllm.store")

MIGRATIONS_TABLE = "_migrations"


class DatabaseTooNew(RuntimeError):
    """The file was written by a newer deskllm; opening it could destroy the user's data."""


def open_database(
    path: Path | str | None = None,
    migrations: list[tuple[str, Migration]] | None = None,
    *,
    shared: bool = False,
) -> Database:
    """Open (creating if needed) and migrate the store. Raises DatabaseTooNew for a newer schema.

    `shared`: a connection several threads may use, each under the caller's own lock (the
    download manager's workers); otherwise the connection belongs to the opening thread."""
    path = Path(path) if path else paths.database_path()
    if path.parent.is_dir():
        paths.ensure_private_file(path)  # 0600, and SQLite gives -wal and -shm the same mode
    migrations = MIGRATIONS if migrations is None else migrations
    db = Database(sqlite.connect(str(path), check_same_thread=not shared, timeout=5.0))
    try:
        db.execute("PRAGMA busy_timeout = 5000")  # a second instance waits instead of failing
        db.execute("PRAGMA foreign_keys = ON")
        _applied_or_refuse(db, migrations)  # before anything (even WAL mode) writes to the file
        db.enable_wal()
        # WAL with synchronous=NORMAL keeps committed rows across an app crash (kill -9);
        # only an OS crash can lose the last transactions, never corrupt the file.
        db.execute("PRAGMA synchronous = NORMAL")
        migrate(db, migrations)
    except BaseException:
        db.close()  # a refused or failed file is not left open (and locked, on Windows)
        raise
    return db


def migrate(db: Database, migrations: list[tuple[str, Migration]]) -> list[str]:
    """Apply pending migrations, each atomically with its record. Returns the names applied."""
    applied = _applied_or_refuse(db, migrations)
    if MIGRATIONS_TABLE not in db.table_names():
        db[MIGRATIONS_TABLE].create({"name": str, "applied_at": float}, pk="name")
    done = []
    for index, (name, fn) in enumerate(migrations, start=1):
        if name in applied:
            continue
        with db.atomic():
            fn(db)
            db[MIGRATIONS_TABLE].insert({"name": name, "applied_at": time.time()})
            db.execute(f"PRAGMA user_version = {index}")
        log.info("applied migration %s", name)
        done.append(name)
    return done


def _applied_or_refuse(db: Database, migrations: list[tuple[str, Migration]]) -> list[str]:
    """The names of the migrations the file has; DatabaseTooNew if it has any this version does
    not know. Reads only: the file is not changed."""
    applied = []
    if MIGRATIONS_TABLE in db.table_names():
        applied = [row["name"] for row in db[MIGRATIONS_TABLE].rows_where(order_by="rowid")]
    known = [name for name, _ in migrations]
    unknown = [name for name in applied if name not in known]
    user_version = db.execute("PRAGMA user_version").fetchone()[0]
    if unknown or user_version > len(migrations):
        raise DatabaseTooNew(
            f"{db.conn.execute('PRAGMA database_list').fetchone()[2]} was written by a newer "
            f"deskllm (schema {max(user_version, len(applied))}, this version knows "
            f"{len(migrations)}). Update deskllm to open it; the file was not changed."
        )
    return applied
