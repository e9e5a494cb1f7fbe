"""Conversations and messages. The user's message is committed before generation starts; a reply
is written while it streams, so nothing the user saw is lost on a crash."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlite_utils import Database

STATUSES = ("complete", "streaming", "interrupted", "error")
# A search box, not a document: longer text is a paste by mistake, and SQLite refuses LIKE
# patterns over 50,000 bytes anyway.
MAX_SEARCH_CHARS = 1000


class SearchError(ValueError):
    """A search text the store cannot search for (the message says why)."""


@dataclass(frozen=True)
class Conversation:
    id: str
    title: str
    system_prompt: str
    model: str | None
    sampling: dict[str, Any]
    created_at: float
    updated_at: float
    # The MCP tools it may use: {"servers": [names], "choice": "auto" | "required"}; {}: none.
    tools: dict[str, Any] = field(default_factory=dict)

    @property
    def tool_servers(self) -> list[str]:
        return list(self.tools.get("servers", []))


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: str
    role: str  # system | user | assistant | tool
    content: str
    status: str  # one of STATUSES
    model: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    parent_id: int | None = None  # the message it follows (None: the first)
    reasoning: str = ""  # a reasoning model's thinking, apart from the answer (content)
    # An assistant message's tool calls: [{"id", "name", "server", "arguments"}]; a tool
    # message's call (its id) — the figures of its run are in metrics.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_call_id: str = ""


def _conversation(row: dict) -> Conversation:
    return Conversation(
        id=row["id"],
        title=row["title"],
        system_prompt=row["system_prompt"] or "",
        model=row["model"],
        sampling=json.loads(row["sampling"] or "{}"),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        tools=json.loads(row.get("tools") or "{}"),
    )


def _message(row: dict) -> Message:
    return Message(
        id=row["id"],
        conversation_id=row["conversation_id"],
        role=row["role"],
        content=row["content"],
        status=row["status"],
        model=row["model"],
        sampling=json.loads(row["sampling"] or "{}"),
        metrics=json.loads(row["metrics"] or "{}"),
        created_at=row["created_at"],
        parent_id=row.get("parent_id"),
        reasoning=row.get("reasoning") or "",
        tool_calls=json.loads(row.get("tool_calls") or "[]"),
        tool_call_id=row.get("tool_call_id") or "",
    )


def _searchable(text: str) -> str:
    """`text` as SQLite can take it: a lone surrogate (not encodable as UTF-8) becomes U+FFFD,
    and a NUL (where SQLite's LIKE and FTS5 would stop reading) a space."""
    if len(text) > MAX_SEARCH_CHARS:
        raise SearchError(
            f"The search text is too long ({len(text):,} characters; at most {MAX_SEARCH_CHARS:,})."
        )
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text.replace("\x00", " ")


def _fts_query(text: str) -> str:
    """Each word of `text` as a quoted FTS5 string (all must match), so no input is taken as
    query syntax (quotes, `*`, `AND`, `col:`, parentheses, newlines). Words with nothing to index
    (only punctuation) are left out; when none is left the query is the empty phrase, which
    matches nothing (an empty MATCH would be a syntax error)."""
    words = [w for w in text.split() if any(c.isalnum() for c in w)]
    return " ".join('"' + w.replace('"', '""') + '"' for w in words) or '""'


class ConversationStore:
    """Reads and writes conversations; every write is its own committed transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # Conversations ---------------------------------------------------------------------------
    def create(
        self,
        title: str = "New chat",
        system_prompt: str = "",
        model: str | None = None,
        sampling: dict[str, Any] | None = None,
    ) -> Conversation:
        now = time.time()
        row = {
            "id": uuid.uuid4().hex,
            "title": title,
            "system_prompt": system_prompt,
            "model": model,
            "sampling": json.dumps(sampling or {}),
            "created_at": now,
            "updated_at": now,
        }
        self.db["conversations"].insert(row)
        return _conversation(row)

    def get(self, conversation_id: str) -> Conversation:
        return _conversation(self.db["conversations"].get(conversation_id))

    def exists(self, conversation_id: str) -> bool:
        found = self.db.execute("select 1 from conversations where id = ?", [conversation_id])
        return found.fetchone() is not None

    def list(self, limit: int | None = None) -> list[Conversation]:
        """Most recently active first."""
        rows = self.db["conversations"].rows_where(order_by="updated_at desc", limit=limit)
        return [_conversation(r) for r in rows]

    def update(self, conversation_id: str, **changes: Any) -> Conversation:
        """Change title, system_prompt, model, sampling or tools. A new title or tools alone is
        housekeeping, not activity: the conversation keeps its place in the list."""
        allowed = {"title", "system_prompt", "model", "sampling", "tools"}
        if unknown := set(changes) - allowed:
            raise ValueError(f"cannot update {sorted(unknown)}")
        if not changes:
            return self.get(conversation_id)
        for key in ("sampling", "tools"):
            if key in changes:
                changes[key] = json.dumps(changes[key])
        if not set(changes) <= {"title", "tools"}:
            changes["updated_at"] = time.time()
        self.db["conversations"].update(conversation_id, changes)
        return self.get(conversation_id)

    def delete(self, conversation_id: str) -> None:
        with self.db.atomic():
            self.db["messages"].delete_where("conversation_id = ?", [conversation_id])
            self.db["conversations"].delete(conversation_id)

    def search(self, text: str, limit: int = 100) -> list[Conversation]:
        """Conversations whose title or any message contains `text`, most recent first.
        Raises SearchError for a text over MAX_SEARCH_CHARS."""
        text = _searchable(text)
        # `%` and `_` typed by the user are literal characters, not LIKE wildcards.
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        like = f"%{escaped}%"
        sql = """
            select * from conversations where title like :like escape '\\' or id in (
                select conversation_id from messages where rowid in (
                    select rowid from messages_fts where messages_fts match :fts))
            order by updated_at desc limit :limit
        """
        fts = _fts_query(text)
        rows = self.db.query(sql, {"like": like, "fts": fts, "limit": limit})
        return [_conversation(r) for r in rows]

    # Messages --------------------------------------------------------------------------------
    def messages(self, conversation_id: str) -> list[Message]:
        """The branch the conversation shows, first message first: from its leaf up through
        each message's parent (an earlier message always has a smaller id)."""
        rows = self.db.query(
            """with recursive branch(id) as (
                   select leaf_id from conversations where id = :cid
                   union all
                   select m.parent_id from messages m join branch on m.id = branch.id
                   where m.parent_id is not null)
               select * from messages where conversation_id = :cid
                 and id in (select id from branch) order by id""",
            {"cid": conversation_id},
        )
        return [_message(r) for r in rows]

    def versions(self, conversation_id: str) -> dict[int, list[int]]:
        """Every message's versions: the ids of the messages that follow the same one (itself
        included), oldest first. More than one: a regenerated reply or an edited message."""
        siblings: dict[int | None, list[int]] = {}
        for row in self.db.query(
            "select id, parent_id from messages where conversation_id = ? order by id",
            [conversation_id],
        ):
            siblings.setdefault(row["parent_id"], []).append(row["id"])
        return {mid: ids for ids in siblings.values() for mid in ids}

    def show_version(self, message_id: int) -> None:
        """Show the branch through `message_id`: down from it, the newest reply each time."""
        message = self.get_message(message_id)
        leaf = message_id
        while True:
            child = self.db.execute(
                "select max(id) from messages where parent_id = ?", [leaf]
            ).fetchone()[0]
            if child is None:
                break
            leaf = child
        self.db["conversations"].update(message.conversation_id, {"leaf_id": leaf})

    def branch_before(self, message_id: int) -> None:
        """The next message added takes `message_id`'s place as a new version of it (Regenerate,
        an edited message); the old one stays, a version away. A reply that holds nothing
        (failed before any text) is deleted instead."""
        message = self.get_message(message_id)
        with self.db.atomic():
            if message.role == "assistant" and not message.content:
                self._delete_subtree(message_id)
            self.db["conversations"].update(message.conversation_id,
                                            {"leaf_id": message.parent_id})  # fmt: skip

    def delete_message(self, message_id: int) -> None:
        """Delete a message and what follows it on every branch; the conversation shows the
        newest other version in its place, else the branch up to the message before it."""
        message = self.get_message(message_id)
        cid = message.conversation_id
        with self.db.atomic():
            self._delete_subtree(message_id)
            leaf = self.db.execute("select leaf_id from conversations where id = ?",
                                   [cid]).fetchone()[0]  # fmt: skip
            if leaf is not None and self.db["messages"].count_where("id = ?", [leaf]):
                return  # it was on another branch than the one shown
            newest_other = self.db.execute(
                "select max(id) from messages where conversation_id = ? and parent_id is ?",
                [cid, message.parent_id],
            ).fetchone()[0]
            if newest_other is not None:
                self.show_version(newest_other)
            else:
                self.db["conversations"].update(cid, {"leaf_id": message.parent_id})

    def _delete_subtree(self, message_id: int) -> None:
        self.db.execute(
            """with recursive below(id) as (
                   select ? union all
                   select m.id from messages m join below on m.parent_id = below.id)
               delete from messages where id in (select id from below)""",
            [message_id],
        )

    def has_messages(self) -> bool:
        """Whether any conversation holds a message: the user has chatted."""
        return self.db.execute("select 1 from messages limit 1").fetchone() is not None

    def get_message(self, message_id: int) -> Message:
        return _message(self.db["messages"].get(message_id))

    def add_message(
        self,
        conversation_id: str,
        role: str,
        content: str,
        *,
        status: str = "complete",
        model: str | None = None,
        sampling: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str = "",
    ) -> Message:
        """Insert and commit a message; the conversation becomes the most recent."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        now = time.time()
        row = {
            "conversation_id": conversation_id,
            "role": role,
            "content": content,
            "status": status,
            "model": model,
            "sampling": json.dumps(sampling or {}),
            "metrics": json.dumps(metrics or {}),
            "created_at": now,
            "updated_at": now,
            "tool_calls": json.dumps(tool_calls) if tool_calls else "",
            "tool_call_id": tool_call_id,
        }
        with self.db.atomic():
            # It follows the branch shown (its last message), and ends it.
            leaf = self.db.execute(
                "select leaf_id from conversations where id = ?", [conversation_id]
            ).fetchone()
            row["parent_id"] = leaf[0] if leaf else None
            message_id = self.db["messages"].insert(row).last_pk
            self.db["conversations"].update(conversation_id,
                                            {"updated_at": now, "leaf_id": message_id})  # fmt: skip
        return _message({**row, "id": message_id})

    def delete_messages_from(self, conversation_id: str, message_id: int) -> None:
        """Delete a message and every later one of the conversation, on every branch; the
        newest message left ends the branch shown."""
        with self.db.atomic():
            self.db["messages"].delete_where(
                "conversation_id = ? and id >= ?", [conversation_id, message_id]
            )
            self.db.execute(
                """update conversations set leaf_id = (select max(id) from messages
                   where conversation_id = :cid) where id = :cid""",
                {"cid": conversation_id},
            )

    def finish_message(
        self,
        message_id: int,
        content: str,
        status: str,
        metrics: dict[str, Any] | None = None,
        reasoning: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        row = {
            "content": content,
            "status": status,
            "metrics": json.dumps(metrics or {}),
            "updated_at": time.time(),
        }
        if reasoning is not None:
            row["reasoning"] = reasoning
        if tool_calls:
            row["tool_calls"] = json.dumps(tool_calls)
        answered = (metrics or {}).get("model")  # a router's reply names the model that answered
        if isinstance(answered, str):
            row["model"] = answered
        self.db["messages"].update(message_id, row)

    def mark_streaming_interrupted(self) -> int:
        """After a crash of the whole app: replies left mid-stream become `interrupted`."""
        cursor = self.db.execute(
            "update messages set status = 'interrupted' where status = 'streaming'"
        )
        return cursor.rowcount

    def begin_reply(
        self, conversation_id: str, model: str | None, sampling: dict[str, Any] | None = None
    ) -> ReplyWriter:
        message = self.add_message(
            conversation_id, "assistant", "", status="streaming", model=model, sampling=sampling
        )
        return ReplyWriter(self, message.id)

    def resume_reply(self, message_id: int) -> ReplyWriter:
        """Go on writing a stored assistant reply (Continue): it is streaming again, and new
        text is appended to what it holds."""
        message = self.get_message(message_id)
        if message.role != "assistant":
            raise ValueError(f"message {message_id} is not a reply")
        now = time.time()
        with self.db.atomic():
            self.db["messages"].update(message_id, {"status": "streaming", "updated_at": now})
            self.db["conversations"].update(message.conversation_id, {"updated_at": now})
        return ReplyWriter(self, message_id, prefix=message.content)


class ReplyWriter:
    """Writes a streaming reply to the database at most every `flush_interval_s` seconds;
    `prefix`: the text the message already holds (a reply being continued)."""

    def __init__(
        self,
        store: ConversationStore,
        message_id: int,
        flush_interval_s: float = 0.5,
        prefix: str = "",
    ):
        self.store = store
        self.message_id = message_id
        self.flush_interval_s = flush_interval_s
        self._parts: list[str] = [prefix] if prefix else []
        self._thinking: list[str] = []  # a reasoning model's, this time
        self._flushed = (len(prefix), 0)
        self._last_flush = time.monotonic()

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def reasoning(self) -> str:
        return "".join(self._thinking)

    def append(self, delta: str) -> None:
        self._parts.append(delta)
        self._maybe_flush()

    def set_text(self, text: str) -> None:
        """The reply's whole text (a tool-calling reply's, its calls cut out)."""
        self._parts = [text]

    def append_reasoning(self, delta: str) -> None:
        self._thinking.append(delta)
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        text, reasoning = self.text, self.reasoning
        if (len(text), len(reasoning)) != self._flushed:
            row: dict[str, Any] = {"content": text, "updated_at": time.time()}
            if reasoning:
                row["reasoning"] = reasoning
            self.store.db["messages"].update(self.message_id, row)
            self._flushed = (len(text), len(reasoning))
        self._last_flush = time.monotonic()

    def finish(self, status: str, metrics: dict[str, Any] | None = None,
               tool_calls: list[dict[str, Any]] | None = None) -> None:  # fmt: skip
        self.store.finish_message(self.message_id, self.text, status, metrics,
                                  self.reasoning.strip() or None, tool_calls)  # fmt: skip
