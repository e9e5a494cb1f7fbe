"""Numbered schema migrations. Append only: never edit or reorder one that has shipped."""

from __future__ import annotations

from collections.abc import Callable

from sqlite_utils import Database

Migration = Callable[[Database], None]
MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append((fn.__name__, fn))
    return fn


@migration
def m001_conversations_messages_models(db: Database) -> None:
    db["conversations"].create(
        {
            "id": str,
            "title": str,
            "system_prompt": str,
            "model": str,
            "sampling": str,  # JSON
            "created_at": float,  # unix seconds
            "updated_at": float,
        },
        pk="id",
        not_null={"title", "created_at", "updated_at"},
        defaults={"title": "New chat", "system_prompt": "", "sampling": "{}"},
    )
    db["messages"].create(
        {
            "id": int,
            "conversation_id": str,
            "role": str,
            "content": str,
            "model": str,
            "sampling": str,  # JSON
            "metrics": str,  # JSON
            "status": str,  # complete | streaming | interrupted | error
            "created_at": float,
            "updated_at": float,
        },
        pk="id",
        foreign_keys=[("conversation_id", "conversations", "id")],
        not_null={"conversation_id", "role", "content", "status"},
        defaults={"content": "", "status": "complete", "metrics": "{}", "sampling": "{}"},
    )
    db["messages"].create_index(["conversation_id", "id"])
    db["models"].create(
        {
            "id": int,
            "path": str,
            "name": str,
            "architecture": str,
            "parameters": int,
            "quant": str,
            "size_bytes": int,
            "context_length": int,
            "has_chat_template": int,
            "license": str,
            "source": str,  # starter | import | download
            "sha256": str,
            "added_at": float,
        },
        pk="id",
        not_null={"path", "name"},
    )
    db["models"].create_index(["path"], unique=True)


@migration
def m002_message_search(db: Database) -> None:
    # Full-text search over message content, kept current by triggers (sidebar search).
    db["messages"].enable_fts(["content"], create_triggers=True, tokenize="porter")
