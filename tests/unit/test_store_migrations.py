"""open_database and migrate: WAL, migrations applied atomically, a newer schema refused."""

import hashlib
from pathlib import Path

import pytest
from sqlite_utils import Database

from deskllm.database.connection import (
    MIGRATIONS_TABLE,
    DatabaseTooNew,
    migrate,
    open_database,
    sqlite,
)
from deskllm.database.migrations import MIGRATIONS
from deskllm.store.conversations import ConversationStore

NAMES = [name for name, _ in MIGRATIONS]


def raw(path: Path) -> sqlite.Connection:
    """A plain connection, independent of the store's own."""
    return sqlite.connect(path)


def schema(path: Path) -> list[tuple]:
    with raw(path) as conn:
        return conn.execute(
            "select type, name, sql from sqlite_master order by type, name"
        ).fetchall()


def user_version(path: Path) -> int:
    conn = raw(path)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def applied(path: Path) -> list[str]:
    conn = raw(path)
    try:
        return [r[0] for r in conn.execute(f"select name from {MIGRATIONS_TABLE} order by rowid")]
    finally:
        conn.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_migrations_are_numbered_and_unique():
    assert len(NAMES) >= 2
    assert len(set(NAMES)) == len(NAMES)
    assert sorted(NAMES) == NAMES
    assert NAMES[0] == "m001_conversations_messages_models"


def test_blank_database_gets_every_migration(tmp_path):
    path = tmp_path / "store.sqlite3"
    db = open_database(path)
    assert {"conversations", "messages", "models", "messages_fts", MIGRATIONS_TABLE} <= set(
        db.table_names()
    )
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    rows = list(db[MIGRATIONS_TABLE].rows_where(order_by="rowid"))
    assert [r["name"] for r in rows] == NAMES
    assert all(r["applied_at"] > 0 for r in rows)
    db.close()
    # committed: another connection sees all of it
    assert user_version(path) == len(MIGRATIONS)
    assert applied(path) == NAMES
    with raw(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent


def test_default_location_is_in_deskllm_home(deskllm_home):
    db = open_database()
    db.close()
    assert (deskllm_home / "deskllm.sqlite3").is_file()
    assert applied(deskllm_home / "deskllm.sqlite3") == NAMES


def test_messages_table_has_the_expected_columns(tmp_path):
    db = open_database(tmp_path / "s.sqlite3")
    columns = set(db["messages"].columns_dict)
    assert {"id", "conversation_id", "role", "content", "status", "metrics", "sampling"} <= columns
    assert {"path", "name", "quant", "source", "sha256"} <= set(db["models"].columns_dict)
    # the unique index on models.path exists
    assert any(i.unique and i.columns == ["path"] for i in db["models"].indexes)


def test_reopening_applies_nothing_and_changes_nothing(tmp_path):
    path = tmp_path / "store.sqlite3"
    open_database(path).close()
    before = schema(path)
    db = open_database(path)
    assert migrate(db, MIGRATIONS) == []
    db.close()
    assert schema(path) == before
    assert applied(path) == NAMES


def test_foreign_keys_are_enforced(tmp_path):
    db = open_database(tmp_path / "store.sqlite3")
    with pytest.raises(sqlite.IntegrityError):
        db["messages"].insert(
            {"conversation_id": "no-such", "role": "user", "content": "x", "status": "complete"}
        )
    assert db["messages"].count == 0


def test_migrating_from_the_previous_schema_keeps_the_data(tmp_path):
    path = tmp_path / "old.sqlite3"
    old = Database(path)
    assert migrate(old, MIGRATIONS[:1]) == NAMES[:1]
    assert "messages_fts" not in old.table_names()
    assert old.execute("PRAGMA user_version").fetchone()[0] == 1
    store = ConversationStore(old)
    conv = store.create(title="Pelicans", system_prompt="be brief", sampling={"temp": 0.3})
    other = store.create(title="Unrelated")
    for cid, text in ((conv.id, "Tell me about migrating albatrosses please"),
                      (other.id, "nothing to see")):  # fmt: skip
        old["messages"].insert({"conversation_id": cid, "role": "user", "content": text,
                                "status": "complete", "created_at": 1.0, "updated_at": 1.0,
                                "sampling": "{}", "metrics": "{}"})  # fmt: skip
    conv = store.get(conv.id)
    old.close()

    db = open_database(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert [r["name"] for r in db[MIGRATIONS_TABLE].rows_where(order_by="rowid")] == NAMES
    store = ConversationStore(db)
    assert store.get(conv.id) == conv
    [msg] = store.messages(conv.id)
    assert msg.content.startswith("Tell me about migrating") and msg.parent_id is None
    # the new full-text index covers rows written before it existed
    assert [c.id for c in store.search("albatross")] == [conv.id]  # porter stemming
    assert [c.id for c in store.search("migrating")] == [conv.id]
    # and rows written after it
    store.add_message(other.id, "assistant", "a zebra appears")
    assert [c.id for c in store.search("zebra")] == [other.id]


def test_partly_migrated_database_gets_only_the_rest(tmp_path):
    path = tmp_path / "old.sqlite3"
    old = Database(path)
    migrate(old, MIGRATIONS[:1])
    old.close()
    db = Database(path)
    assert migrate(db, MIGRATIONS) == NAMES[1:]


def boom(db: Database) -> None:
    db["half_done"].create({"id": int, "x": str}, pk="id")
    db["half_done"].insert({"id": 1, "x": "written before the failure"})
    db.execute("update conversations set title = 'changed by a failing migration'")
    raise RuntimeError("migration failed half way")


def test_a_failing_migration_is_rolled_back_entirely(tmp_path):
    path = tmp_path / "store.sqlite3"
    db = Database(path)
    migrate(db, MIGRATIONS[:1])
    ConversationStore(db).create(title="kept")
    db.close()
    before = schema(path)

    migrations = [MIGRATIONS[0], ("m002_boom", boom), ("m003_never", MIGRATIONS[1][1])]
    with pytest.raises(RuntimeError, match="half way"):
        open_database(path, migrations=migrations)

    assert schema(path) == before  # no half_done table, no FTS table, no trigger
    assert applied(path) == NAMES[:1]
    assert user_version(path) == 1
    with raw(path) as conn:
        assert conn.execute("select title from conversations").fetchall() == [("kept",)]

    # the database still opens and migrates normally afterwards
    db = open_database(path)
    assert "half_done" not in db.table_names()
    assert applied(path) == NAMES
    assert [c.title for c in ConversationStore(db).list()] == ["kept"]


def test_earlier_migrations_stay_applied_when_a_later_one_fails(tmp_path):
    path = tmp_path / "store.sqlite3"
    with pytest.raises(RuntimeError):
        open_database(path, migrations=[MIGRATIONS[0], ("m002_boom", boom)])
    assert applied(path) == NAMES[:1]
    assert user_version(path) == 1
    assert "half_done" not in [row[1] for row in schema(path)]


def make_newer(path: Path, *, unknown_row: bool, version_bump: int) -> None:
    open_database(path).close()
    conn = raw(path)
    with conn:
        if unknown_row:
            conn.execute(
                f"insert into {MIGRATIONS_TABLE} (name, applied_at) values ('m999_future', 1.0)"
            )
            conn.execute("create table future_things (id integer primary key)")
        if version_bump:
            conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + version_bump}")
    conn.close()


@pytest.mark.parametrize(
    ("unknown_row", "version_bump"), [(True, 1), (True, 0), (False, 1), (False, 5)]
)
def test_a_newer_database_is_refused_and_left_unchanged(tmp_path, unknown_row, version_bump):
    path = tmp_path / "newer.sqlite3"
    make_newer(path, unknown_row=unknown_row, version_bump=version_bump)
    before_digest, before_schema = digest(path), schema(path)
    before_version, before_applied = user_version(path), applied(path)

    with pytest.raises(DatabaseTooNew) as info:
        open_database(path)
    message = str(info.value)
    assert str(path) in message
    assert "newer" in message
    assert f"knows {len(MIGRATIONS)}" in message
    assert "not changed" in message

    assert digest(path) == before_digest
    assert schema(path) == before_schema
    assert user_version(path) == before_version
    assert applied(path) == before_applied


def test_a_newer_database_is_refused_by_migrate_too(tmp_path):
    path = tmp_path / "newer.sqlite3"
    make_newer(path, unknown_row=True, version_bump=1)
    db = Database(path)
    with pytest.raises(DatabaseTooNew):
        migrate(db, MIGRATIONS)
    db.close()
    assert applied(path) == [*NAMES, "m999_future"]


def test_a_foreign_file_with_a_higher_user_version_is_left_unchanged(tmp_path):
    """Not a deskllm database at all (another app's file, rollback journal): refused untouched."""
    path = tmp_path / "other.sqlite3"
    conn = raw(path)
    with conn:
        conn.execute("create table notes (id integer primary key, body text)")
        conn.execute("insert into notes (body) values ('precious')")
        conn.execute("PRAGMA user_version = 42")
    conn.close()
    before = digest(path)

    with pytest.raises(DatabaseTooNew, match="schema 42"):
        open_database(path)

    assert digest(path) == before
    assert MIGRATIONS_TABLE not in [row[1] for row in schema(path)]
    with raw(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def open_fds_to(path: Path) -> int:
    fd_dir = Path("/proc/self/fd")
    count = 0
    for fd in fd_dir.iterdir():
        try:
            if Path(fd.readlink()) == path:
                count += 1
        except OSError:
            pass
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_a_refused_database_is_closed(tmp_path):
    """The refused file is not kept open (on Windows an open file cannot be moved or deleted)."""
    path = tmp_path / "newer.sqlite3"
    make_newer(path, unknown_row=False, version_bump=1)
    assert open_fds_to(path) == 0
    with pytest.raises(DatabaseTooNew) as info:
        open_database(path)
    assert info.value is not None  # the traceback (and its frames) are still alive here
    assert open_fds_to(path) == 0


def test_chats_from_before_versions_become_one_branch(tmp_path):
    path = tmp_path / "old.sqlite3"
    old = Database(path)
    before = [m for m in MIGRATIONS if m[0] < "m010"]
    migrate(old, before)
    now = 1.0
    for cid in ("a", "b"):
        old["conversations"].insert({"id": cid, "title": cid, "created_at": now,
                                     "updated_at": now})  # fmt: skip
    for i, cid in enumerate("abab"):  # interleaved ids, as chats written side by side
        old["messages"].insert({"conversation_id": cid, "role": "user",
                                "content": f"{cid}{i}", "status": "complete",
                                "created_at": now, "updated_at": now})  # fmt: skip
    old.close()
    store = ConversationStore(open_database(path))
    assert [m.content for m in store.messages("a")] == ["a0", "a2"]
    assert [m.content for m in store.messages("b")] == ["b1", "b3"]
    a0, a2 = store.messages("a")
    assert (a0.parent_id, a2.parent_id) == (None, a0.id)
    reply = store.add_message("a", "assistant", "next")  # follows the last one
    assert reply.parent_id == a2.id and store.messages("a")[-1] == reply
