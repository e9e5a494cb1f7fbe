"""Collections, files, chunks and vectors in the app's own database file.

The tables come from migration m012 (the regular ones and BM25's FTS5); the vectors are a
sqlite-vec `vec0` table per dimension (`doc_vectors_384`), partitioned by collection. Loading
sqlite-vec needs `enable_load_extension`, which many Python builds leave out of the standard
`sqlite3` (pyenv's and python.org's among them): every connection of the app is made with
`sqlean` (see deskllm.database.connection). This one is plain DB-API with its own
transactions, and loads the extension.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from deskllm import paths
from deskllm.documents.chunking import Chunk


@dataclass(frozen=True)
class Collection:
    id: int
    name: str
    embedding_model: str
    dims: int
    folders: tuple[str, ...]
    files: int = 0
    skipped: int = 0
    chunks: int = 0


@dataclass(frozen=True)
class FileState:
    size: int
    mtime_ns: int
    status: str  # "indexed" or "skipped"
    reason: str


@dataclass(frozen=True)
class StoredChunk:
    id: int
    path: str
    text: str
    page: int | None
    heading: str
    start: int
    end: int
    collection: str


class CollectionError(ValueError):
    """A collection that does not exist, or one that exists already."""


# The files attached to one chat are a collection of their own, named after the conversation
# and left out of the collections a user manages.
ATTACHED = "chat:"


def attachments_name(conversation_id: str) -> str:
    return ATTACHED + conversation_id


def _vector(values: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


# Words too common to say what a question is about: left out of the BM25 query (BM25 weighs
# them low, but any passage with "the" would still be a candidate).
STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "do", "does", "did",
        "for", "from", "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its",
        "me", "my", "no", "not", "of", "on", "or", "our", "so", "than", "that", "the", "their",
        "them", "then", "there", "these", "they", "this", "to", "was", "we", "were", "what", "when",
        "where", "which", "who", "why", "will", "with", "would", "you", "your"
    }
)
# A passage found only by vectors must be at least this near (cosine distance; all-MiniLM
# puts unrelated English texts at 0.85 to 1.1, and a paraphrase below 0.5).
MAX_DISTANCE = 0.8


def fts_query(text: str) -> str | None:
    """The user's words as an FTS5 query that cannot be a syntax error: each word quoted,
    any of them may match (BM25 ranks the passages that have more, and rarer, ones)."""
    words = [w for w in re.findall(r"\w+", text.lower()) if w not in STOPWORDS]
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(words)) or None


class DocumentStore:
    def __init__(self, path: Path | str | None = None) -> None:
        import sqlite_vec

        from deskllm.database.connection import open_database, sqlite

        self.path = Path(path) if path else paths.database_path()
        open_database(self.path).close()  # creates the file and applies the migrations
        # Used by one thread at a time; another may close it (the app at exit).
        conn = sqlite.connect(
            str(self.path), timeout=5.0, isolation_level=None, check_same_thread=False
        )
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = NORMAL")
        self.conn = conn
        self._tables: set[str] = set()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> DocumentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tx(self):
        return _Transaction(self.conn)

    # Collections ------------------------------------------------------------------------------
    def create(
        self,
        name: str,
        folders: Sequence[Path],
        embedding_model: str,
        dims: int,
        attached: bool = False,
    ) -> None:
        if not name.strip():
            raise CollectionError("a collection needs a name")
        if name.startswith(ATTACHED) != attached:
            raise CollectionError(f"a collection's name cannot start with {ATTACHED!r}")
        with self._tx():
            if self._row("select 1 from doc_collections where name = ?", name):
                raise CollectionError(f"a collection named {name!r} exists already")
            cur = self.conn.execute(
                "insert into doc_collections(name, embedding_model, dims, created_at) "
                "values (?, ?, ?, ?)",
                (name, embedding_model, dims, time.time()),
            )
            for folder in folders:
                self.conn.execute(
                    "insert or ignore into doc_folders(collection_id, path) values (?, ?)",
                    (cur.lastrowid, str(folder)),
                )
        self._vectors_table(dims)

    def add_folders(self, name: str, folders: Sequence[Path]) -> None:
        collection = self.get(name)
        with self._tx():
            for folder in folders:
                self.conn.execute(
                    "insert or ignore into doc_folders(collection_id, path) values (?, ?)",
                    (collection.id, str(folder)),
                )

    def get(self, name: str) -> Collection:
        row = self._row(
            "select id, name, embedding_model, dims from doc_collections where name = ?", name
        )
        if row is None:
            known = ", ".join(c.name for c in self.collections()) or "none yet"
            raise CollectionError(f"no collection named {name!r} (collections: {known})")
        return self._collection(row)

    def collections(self) -> list[Collection]:
        """The user's collections (not the chats' attachments)."""
        rows = self.conn.execute(
            "select id, name, embedding_model, dims from doc_collections "
            "where name not like ? order by name",
            (ATTACHED + "%",),
        ).fetchall()
        return [self._collection(row) for row in rows]

    def _collection(self, row) -> Collection:
        cid = row[0]
        folders = tuple(
            r[0]
            for r in self.conn.execute(
                "select path from doc_folders where collection_id = ? order by path", (cid,)
            )
        )
        files, skipped, chunks = self._row(
            "select coalesce(sum(status = 'indexed'), 0), coalesce(sum(status = 'skipped'), 0),"
            " coalesce(sum(n_chunks), 0) from doc_files where collection_id = ?",
            cid,
        )
        return Collection(cid, row[1], row[2], row[3], folders, files, skipped, chunks)

    def remove(self, name: str) -> None:
        """The collection and its whole index (the files on disk are not touched)."""
        collection = self.get(name)
        with self._tx():
            self.conn.execute(
                f"delete from {self._vectors_table(collection.dims)} where collection_id = ?",
                (collection.id,),
            )
            self.conn.execute("delete from doc_collections where id = ?", (collection.id,))

    def attachments(self, conversation_id: str) -> Collection | None:
        """The files attached to a chat, or None."""
        row = self._row(
            "select id, name, embedding_model, dims from doc_collections where name = ?",
            attachments_name(conversation_id),
        )
        return self._collection(row) if row else None

    def conversation_collections(self, conversation_id: str) -> list[Collection]:
        """The collections a conversation may search (its attachments apart)."""
        rows = self.conn.execute(
            "select k.id, k.name, k.embedding_model, k.dims from doc_collections k "
            "join doc_conversation_collections c on c.collection_id = k.id "
            "where c.conversation_id = ? order by k.name",
            (conversation_id,),
        ).fetchall()
        return [self._collection(row) for row in rows]

    def set_conversation_collections(self, conversation_id: str, names: Sequence[str]) -> None:
        ids = [self.get(name).id for name in names]
        with self._tx():
            self.conn.execute(
                "delete from doc_conversation_collections where conversation_id = ?",
                (conversation_id,),
            )
            for cid in ids:
                self.conn.execute(
                    "insert into doc_conversation_collections(conversation_id, collection_id) "
                    "values (?, ?)",
                    (conversation_id, cid),
                )

    # Files ------------------------------------------------------------------------------------
    def file_states(self, collection: Collection) -> dict[str, FileState]:
        rows = self.conn.execute(
            "select path, size, mtime_ns, status, reason from doc_files where collection_id = ?",
            (collection.id,),
        )
        return {r[0]: FileState(r[1], r[2], r[3], r[4]) for r in rows}

    def skipped(self, collection: Collection) -> list[tuple[str, str]]:
        rows = self.conn.execute(
            "select path, reason from doc_files where collection_id = ? and status = 'skipped' "
            "order by path",
            (collection.id,),
        )
        return [(r[0], r[1]) for r in rows]

    def put_file(
        self,
        collection: Collection,
        path: str,
        size: int,
        mtime_ns: int,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
    ) -> None:
        """A file's chunks and vectors, replacing what was there, in one transaction: a crash
        leaves either the old index of the file or the new one."""
        table = self._vectors_table(collection.dims)
        with self._tx():
            file_id = self._replace_file(collection, path, size, mtime_ns, "indexed", "",
                                         len(chunks))  # fmt: skip
            for ordinal, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True)):
                cur = self.conn.execute(
                    "insert into doc_chunks(file_id, ordinal, text, page, heading, start, end) "
                    "values (?, ?, ?, ?, ?, ?, ?)",
                    (file_id, ordinal, chunk.text, chunk.page, chunk.heading, chunk.start,
                     chunk.end),  # fmt: skip
                )
                self.conn.execute(
                    f"insert into {table}(chunk_id, collection_id, embedding) values (?, ?, ?)",
                    (cur.lastrowid, collection.id, _vector(vector)),
                )

    def skip_file(
        self, collection: Collection, path: str, size: int, mtime_ns: int, reason: str
    ) -> None:
        with self._tx():
            self._replace_file(collection, path, size, mtime_ns, "skipped", reason, 0)

    def remove_file(self, collection: Collection, path: str) -> None:
        with self._tx():
            self._drop_file(collection, path)

    def _replace_file(self, collection, path, size, mtime_ns, status, reason, n_chunks) -> int:
        self._drop_file(collection, path)
        cur = self.conn.execute(
            "insert into doc_files(collection_id, path, size, mtime_ns, status, reason, "
            "n_chunks, indexed_at) values (?, ?, ?, ?, ?, ?, ?, ?)",
            (collection.id, path, size, mtime_ns, status, reason, n_chunks, time.time()),
        )
        return cur.lastrowid

    def _drop_file(self, collection: Collection, path: str) -> None:
        row = self._row(
            "select id from doc_files where collection_id = ? and path = ?", collection.id, path
        )
        if row is None:
            return
        self.conn.execute(
            f"delete from {self._vectors_table(collection.dims)} where chunk_id in "
            "(select id from doc_chunks where file_id = ?)",
            (row[0],),
        )
        self.conn.execute("delete from doc_files where id = ?", (row[0],))  # chunks cascade

    # Search -----------------------------------------------------------------------------------
    def bm25(self, collections: Sequence[Collection], query: str, k: int) -> list[int]:
        """Chunk ids, best first, by BM25 over the chunks' text and headings."""
        match = fts_query(query)
        if match is None or not collections:
            return []
        marks = ",".join("?" * len(collections))
        rows = self.conn.execute(
            "select f.rowid from doc_chunks_fts f join doc_chunks c on c.id = f.rowid "
            "join doc_files d on d.id = c.file_id "
            f"where doc_chunks_fts match ? and d.collection_id in ({marks}) "
            "order by f.rank limit ?",
            (match, *[c.id for c in collections], k),
        )
        return [r[0] for r in rows]

    def nearest(
        self, collections: Sequence[Collection], vector: Sequence[float], k: int
    ) -> list[int]:
        """Chunk ids, nearest first, by cosine distance (sqlite-vec's KNN per collection)."""
        found: list[tuple[float, int]] = []
        for collection in collections:
            rows = self.conn.execute(
                f"select chunk_id, distance from {self._vectors_table(collection.dims)} "
                "where embedding match ? and k = ? and collection_id = ?",
                (_vector(vector), k, collection.id),
            )
            found.extend((r[1], r[0]) for r in rows if r[1] <= MAX_DISTANCE)
        return [chunk_id for _, chunk_id in sorted(found)[:k]]

    def chunks(self, ids: Sequence[int]) -> dict[int, StoredChunk]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self.conn.execute(
            "select c.id, d.path, c.text, c.page, c.heading, c.start, c.end, k.name "
            "from doc_chunks c join doc_files d on d.id = c.file_id "
            f"join doc_collections k on k.id = d.collection_id where c.id in ({marks})",
            tuple(ids),
        )
        return {r[0]: StoredChunk(*r) for r in rows}

    # ------------------------------------------------------------------------------------------
    def _row(self, sql: str, *args):
        return self.conn.execute(sql, args).fetchone()

    def _vectors_table(self, dims: int) -> str:
        table = f"doc_vectors_{int(dims)}"
        if table in self._tables:
            return table
        self._tables.add(table)
        self.conn.execute(
            f"create virtual table if not exists {table} using vec0("
            "chunk_id integer primary key, collection_id integer partition key, "
            f"embedding float[{int(dims)}] distance_metric=cosine)"
        )
        return table


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT (or ROLLBACK on an exception) on an autocommit connection."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("begin immediate")

    def __exit__(self, exc_type, *exc: object) -> None:
        self.conn.execute("commit" if exc_type is None else "rollback")
