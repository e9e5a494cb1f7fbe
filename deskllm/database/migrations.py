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


@migration
def m003_catalog_cache(db: Database) -> None:
    # Hub answers kept for offline use: search results, repo details, remote GGUF headers.
    db["catalog_cache"].create(
        {
            "kind": str,  # search | repo | header
            "key": str,  # endpoint-qualified, see deskllm.catalog.cache
            "payload": str,  # JSON
            "fetched_at": float,  # unix seconds
        },
        pk=("kind", "key"),
        not_null={"payload", "fetched_at"},
    )


@migration
def m004_downloads(db: Database) -> None:
    # The download queue (deskllm.downloads.manager): survives an app restart. The bytes live in
    # <file>.part + its sidecar; a row says what to fetch and where it stands.
    db["downloads"].create(
        {
            "id": int,
            "repo_id": str,
            "name": str,  # the model file (first part) path in the repo
            "quant": str,
            "parts": str,  # JSON: [{repo_id, path, size, sha256, revision}, ...]
            "total_bytes": int,
            "bytes_done": int,
            "state": str,  # queued | downloading | paused | verifying | done | failed | cancelled
            "error": str,
            "path": str,  # the final file once done
            "model_id": int,  # its row in models once done
            "created_at": float,
            "updated_at": float,
        },
        pk="id",
        not_null={"repo_id", "name", "parts", "state"},
        defaults={"bytes_done": 0, "state": "queued"},
    )
    db["downloads"].create_index(["repo_id", "name"])


@migration
def m005_calibration(db: Database) -> None:
    # Memory estimates vs what llama.cpp and the OS reported after each load (deskllm.planner
    # .calibration): later estimates on the same machine are corrected with them.
    db["calibration"].create(
        {
            "id": int,
            "machine": str,  # deskllm.planner.calibration.machine_id: machine and engine build
            "architecture": str,
            "model": str,  # file name
            "n_ctx": int,
            "kv_type": str,
            "flash_attn": int,
            "n_gpu_layers": int,
            "predicted": str,  # JSON: {model, kv, compute, rss} in bytes, uncorrected
            "measured": str,  # JSON: the same keys as llama.cpp and psutil reported them
            "compute_ratio": float,  # measured / predicted compute buffers
            "rss_offset": int,  # measured - predicted engine RSS, bytes
            "total_error": float,  # (measured - predicted) / predicted, model + KV + compute
            "created_at": float,
        },
        pk="id",
        not_null={"machine", "architecture", "created_at"},
    )
    db["calibration"].create_index(["machine", "architecture", "id"])


@migration
def m006_remote_endpoints(db: Database) -> None:
    # Remote OpenAI-compatible engines (deskllm.remote). Never their API keys: those live in
    # the OS keyring or a private file (deskllm.remote.keys).
    db["remote_endpoints"].create(
        {
            "name": str,
            "base_url": str,  # up to and including /v1, as OpenAI's SDKs take it
            "preset": str,  # deskllm.remote.presets: llama-server | vllm | ollama | ...
            "allow_routing": int,  # 0/1: the router may send requests here (opt-in)
            "prices": str,  # JSON: {model: {"input": price per 1M tokens, "output": ...}}
            "connect_timeout_s": float,
            "read_timeout_s": float,
            "created_at": float,
        },
        pk="name",
        not_null={"base_url", "preset", "allow_routing", "created_at"},
        defaults={"allow_routing": 0, "prices": "{}", "preset": "openai"},
    )


@migration
def m008_quality_results(db: Database) -> None:
    # `deskllm quality` results (deskllm.store.quality_results): KL divergence of a model file
    # against a reference file on one text, so a check is not run again for nothing.
    db["quality_results"].create(
        {
            "id": int,
            "model": str,  # the model file's path
            "reference": str,  # the reference file's path
            "text_sha256": str,
            "n_ctx": int,
            "tokens": int,  # scored tokens
            "mean_kld": float,
            "median_kld": float,
            "kld_p99": float,
            "same_top_pct": float,
            "ppl": float,
            "ppl_reference": float,
            "ppl_ratio": float,
            "delta_p": str,  # JSON: {mean, rms, p01, p05, p50, p95, p99}
            "seconds": float,
            "created_at": float,
        },
        pk="id",
        not_null={"model", "reference", "text_sha256", "n_ctx", "created_at"},
    )
    db["quality_results"].create_index(
        ["model", "reference", "text_sha256", "n_ctx"], unique=True
    )


@migration
def m009_bench_suites(db: Database) -> None:
    # `deskllm bench --suite` results (deskllm.planner.measured_configs): every configuration's
    # speeds for one model file on one machine and engine build; an automatic load takes the
    # fastest measured configuration that fits from them.
    db["bench_suites"].create(
        {
            "id": int,
            "machine": str,  # deskllm.hardware.keys.machine_key
            "engine_build": str,  # deskllm.llamacpp.build.build_id
            "model_name": str,  # the model file's name (no folder) and size
            "model_size": int,
            "result": str,  # JSON: the command's whole object
            "created_at": float,
        },
        pk="id",
        not_null={"machine", "engine_build", "model_name", "model_size", "result", "created_at"},
    )
    db["bench_suites"].create_index(
        ["machine", "engine_build", "model_name", "model_size"], unique=True
    )


@migration
def m010_message_tree(db: Database) -> None:
    # Reply versions and branches (deskllm.store.conversations): each message names the one it
    # follows, and each conversation the last message of the branch it shows. Regenerating a
    # reply adds a sibling of it; editing a message, a sibling of that message. Chats from
    # before are one branch: each message follows the one before it.
    db["messages"].add_column("parent_id", int)
    db["conversations"].add_column("leaf_id", int)
    db.execute(
        """update messages set parent_id = (
               select max(before.id) from messages before
               where before.conversation_id = messages.conversation_id
                 and before.id < messages.id)"""
    )
    db.execute(
        """update conversations set leaf_id = (
               select max(id) from messages where conversation_id = conversations.id)"""
    )
    db["messages"].create_index(["conversation_id", "parent_id"])


@migration
def m011_message_reasoning(db: Database) -> None:
    # A reasoning model's thinking, kept apart from its answer (content), so it can be shown
    # folded and is not sent back as part of the answer.
    db["messages"].add_column("reasoning", str, not_null_default="")


@migration
def m012_documents(db: Database) -> None:
    # Collections of folders indexed for retrieval: files (with what was skipped and why),
    # their chunks, and BM25 over the chunks (kept current by triggers). The vectors live in a
    # sqlite-vec table per dimension, made by deskllm.documents.store (it needs the extension).
    for statement in (
        """
        create table doc_collections (
            id integer primary key,
            name text not null unique,
            embedding_model text not null,
            dims integer not null,
            created_at real not null
        )
        """,
        """
        create table doc_folders (
            id integer primary key,
            collection_id integer not null references doc_collections(id) on delete cascade,
            path text not null,
            unique (collection_id, path)
        )
        """,
        """
        create table doc_files (
            id integer primary key,
            collection_id integer not null references doc_collections(id) on delete cascade,
            path text not null,
            size integer not null,
            mtime_ns integer not null,
            status text not null,  -- 'indexed' or 'skipped'
            reason text not null default '',
            n_chunks integer not null default 0,
            indexed_at real not null,
            unique (collection_id, path)
        )
        """,
        """
        create table doc_chunks (
            id integer primary key,
            file_id integer not null references doc_files(id) on delete cascade,
            ordinal integer not null,
            text text not null,
            page integer,
            heading text not null default '',
            start integer not null,
            end integer not null
        )
        """,
        """
        create index doc_chunks_file on doc_chunks(file_id)
        """,
        """
        create virtual table doc_chunks_fts using fts5(
            text, heading, content='doc_chunks', content_rowid='id', tokenize='porter unicode61'
        )
        """,
        """
        create trigger doc_chunks_ai after insert on doc_chunks begin
            insert into doc_chunks_fts(rowid, text, heading)
            values (new.id, new.text, new.heading);
        end;
        """,
        """
        create table doc_conversation_collections (
            conversation_id text not null references conversations(id) on delete cascade,
            collection_id integer not null references doc_collections(id) on delete cascade,
            primary key (conversation_id, collection_id)
        )
        """,
        """
        create trigger doc_chunks_ad after delete on doc_chunks begin
            insert into doc_chunks_fts(doc_chunks_fts, rowid, text, heading)
            values ('delete', old.id, old.text, old.heading);
        end;
        """,
    ):
        db.execute(statement)


@migration
def m013_tool_messages(db: Database) -> None:
    # A chat with MCP tools: an assistant message's calls (JSON: id, name, server, arguments),
    # a tool message's answer to one call (tool_call_id), and which servers a conversation may
    # use and how (conversations.tools, JSON: servers, choice).
    db["messages"].add_column("tool_calls", str, not_null_default="")
    db["messages"].add_column("tool_call_id", str, not_null_default="")
    db["conversations"].add_column("tools", str, not_null_default="")
