"""The texts a quality check reads: the bundled sample, a file, or a stored conversation."""

from __future__ import annotations

from pathlib import Path

from sqlite_utils import Database
from sqlite_utils.db import NotFoundError

from deskllm import paths
from deskllm.store import ConversationStore

SAMPLE_NAME = "quality_sample.txt"


class TextNotFound(LookupError):
    pass


def sample_path() -> Path:
    """Neutral English prose on everyday subjects (~3,500 words, ~4,100 tokens for
    SmolLM2), written for deskllm and dedicated to the public domain."""
    return paths.resources_dir() / "text" / SAMPLE_NAME


def sample_text() -> str:
    return sample_path().read_text(encoding="utf-8")


def file_text(path: str | Path) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TextNotFound(f"cannot read {path}: {exc.strerror or exc}") from None


def conversation_text(db: Database, conversation_id: str) -> str:
    """The conversation as the user sees it: its system prompt and every message's text, in
    order, separated by blank lines (no chat template: the check scores the words)."""
    store = ConversationStore(db)
    try:
        conversation = store.get(conversation_id)
    except NotFoundError:
        raise TextNotFound(f"no conversation with id {conversation_id!r}") from None
    parts = [conversation.system_prompt] + [m.content for m in store.messages(conversation_id)]
    return "\n\n".join(p.strip() for p in parts if p and p.strip())
