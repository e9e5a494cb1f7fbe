"""A conversation to a file and back: Markdown for people (each reply with its figures) and
JSON that keeps everything (settings, statuses, per-message figures) and can be imported again.

An import is untrusted input: every field is checked, nothing is written unless the whole file
is valid, and it always becomes a new conversation (never overwrites one)."""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from deskllm.store.conversations import STATUSES, Conversation, ConversationStore, Message

FORMAT = "deskllm.conversation"
VERSION = 1
MAX_IMPORT_BYTES = 64 * 2**20  # far above any chat; a larger file is not an export of ours
ROLES = ("system", "user", "assistant", "tool")
_TITLES = {"system": "System", "user": "You", "assistant": "Assistant", "tool": "Tool"}


class ExportError(ValueError):
    """A file that cannot be imported, or a conversation that cannot be written (the message
    names the file and what is wrong)."""


# Writing --------------------------------------------------------------------------------------
def conversation_dict(store: ConversationStore, conversation_id: str) -> dict[str, Any]:
    """The JSON export of a conversation, as a dict."""
    conversation = store.get(conversation_id)
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": time.time(),
        "conversation": {
            "title": conversation.title,
            "system_prompt": conversation.system_prompt,
            "model": conversation.model,
            "sampling": conversation.sampling,
            "created_at": conversation.created_at,
            "updated_at": conversation.updated_at,
        },
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                **({"reasoning": m.reasoning} if m.reasoning else {}),
                **({"tool_calls": m.tool_calls} if m.tool_calls else {}),
                **({"tool_call_id": m.tool_call_id} if m.tool_call_id else {}),
                "status": m.status,
                "model": m.model,
                "sampling": m.sampling,
                "metrics": m.metrics,
                "created_at": m.created_at,
            }
            for m in store.messages(conversation_id)
        ],
    }


def conversation_markdown(store: ConversationStore, conversation_id: str) -> str:
    """The conversation as Markdown: a heading per message, each reply's figures under it."""
    conversation = store.get(conversation_id)
    lines = [f"# {conversation.title}", ""]
    if conversation.model:
        lines.append(f"- Model: `{Path(conversation.model).name}`")
    lines.append(f"- Started: {_when(conversation.created_at)}")
    if conversation.system_prompt:
        lines += ["", "## System prompt", "", conversation.system_prompt]
    for message in store.messages(conversation_id):
        lines += ["", f"## {_TITLES.get(message.role, message.role)}", ""]
        if message.reasoning:  # folded where Markdown renders HTML (GitHub), plain elsewhere
            lines += ["<details><summary>Thinking</summary>", "", message.reasoning, "",
                      "</details>", ""]  # fmt: skip
        if message.role == "tool":
            lines += [f"*{_result_line(message.metrics)}*", "", "```text", message.content,
                      "```"]  # fmt: skip
        else:
            lines.append(message.content)
        for call in message.tool_calls:
            where = f" on {call['server']}" if call.get("server") else ""
            lines += ["", f"Tool call: `{call['name']}`{where}", "", "```json",
                      json.dumps(call.get("arguments", {}), indent=2, ensure_ascii=False),
                      "```"]  # fmt: skip
        if sources := message.metrics.get("sources"):
            lines += ["", "Sources:", ""]
            lines += [f"{s['number']}. {_source_where(s)}" for s in sources]
        if message.status != "complete":
            lines += ["", f"*({message.status})*"]
        if figures := figures_line(message):
            lines += ["", f"*{figures}*"]
    return "\n".join(lines).rstrip() + "\n"


# What the user decided about a tool call (a tool result's stored `decision`), in words: the
# window's result cards and the exports say it alike.
DECISION_WORDS = {
    "once": "allowed once",
    "always": "always allowed from now on",
    "allowed": "always allowed",
    "deny": "denied by the user",
}


def _result_line(metrics: dict) -> str:
    parts = [f"Result of {metrics.get('tool', 'a tool')}"]
    if decision := DECISION_WORDS.get(metrics.get("decision") or ""):
        parts.append(decision)
    if metrics.get("is_error") and metrics.get("decision") != "deny":
        parts.append("failed")
    if metrics.get("truncated"):
        parts.append("output cut")
    return ", ".join(parts)


def _source_where(source: dict) -> str:
    where = f"`{source['path']}`"
    if source.get("page") is not None:
        where += f", p. {source['page']}"
    if source.get("heading"):
        where += f" — {source['heading']}"
    return where


def figures_line(message: Message) -> str:
    """One line of a reply's figures ("" for a message without any)."""
    m = message.metrics
    parts = []
    if m.get("generated_tokens"):
        parts.append(f"{m['generated_tokens']} tokens")
    if m.get("tg_tps"):
        parts.append(f"{m['tg_tps']:.1f} tok/s")
    if m.get("ttft_s") is not None:
        parts.append(f"TTFT {m['ttft_s'] * 1000:.0f} ms")
    if m.get("prompt_tokens"):
        parts.append(f"prompt {m['prompt_tokens']} tokens ({m.get('cached_tokens', 0)} cached)")
    if m.get("n_ctx"):
        parts.append(f"context {m.get('n_past', 0)}/{m['n_ctx']}")
    if m.get("device"):
        parts.append(str(m["device"]))
    if message.model and parts:
        parts.append(Path(message.model).name)
    return " · ".join(parts)


def export_markdown(store: ConversationStore, conversation_id: str, path: Path | str) -> None:
    _write(Path(path), conversation_markdown(store, conversation_id))


def export_json(store: ConversationStore, conversation_id: str, path: Path | str) -> None:
    text = json.dumps(conversation_dict(store, conversation_id), ensure_ascii=False, indent=2)
    _write(Path(path), text + "\n")


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a crash or a full disk never leaves half an export under `path`."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    except OSError as error:
        raise ExportError(f"Cannot write {path}: {error.strerror or error}") from error
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as file:
            file.write(text)
        os.replace(tmp, path)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        raise ExportError(f"Cannot write {path}: {error.strerror or error}") from error


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


# Reading --------------------------------------------------------------------------------------
def import_json(store: ConversationStore, path: Path | str) -> Conversation:
    """Add the conversation in a JSON export as a new one (new id, same title, settings,
    messages and figures). Raises ExportError naming the file and the problem; then nothing
    was written."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_IMPORT_BYTES + 1)
    except OSError as error:
        raise ExportError(f"Cannot read {path}: {error.strerror or error}") from error
    if len(raw) > MAX_IMPORT_BYTES:
        raise ExportError(f"{path} is over {MAX_IMPORT_BYTES // 2**20} MiB: not a conversation")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        conversation, messages = _checked(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, _Invalid) as error:
        raise ExportError(f"{path} is not a deskllm conversation export: {error}") from error
    try:
        return _insert(store, conversation, messages)
    # What JSON holds but SQLite does not (a figure too large or too deep to store as text).
    except (TypeError, ValueError, OverflowError, RecursionError) as error:
        raise ExportError(f"{path} cannot be stored: {error}") from error


class _Invalid(ValueError):
    pass


def _no_constant(name: str) -> None:
    raise _Invalid(f"{name} is not a number JSON allows")


def _checked(data: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _Invalid(f'"format" is not "{FORMAT}"')
    if data.get("version") != VERSION:
        raise _Invalid(f"version {data.get('version')!r} (this deskllm reads {VERSION})")
    head = _field(data, "conversation", dict, "the file")
    conversation = {
        "title": _field(head, "title", str, "conversation").strip() or "Imported chat",
        "system_prompt": _field(head, "system_prompt", str, "conversation", ""),
        "model": _field(head, "model", (str, type(None)), "conversation", None),
        "sampling": _field(head, "sampling", dict, "conversation", {}),
        "created_at": _time(head, "created_at", "conversation"),
        "updated_at": _time(head, "updated_at", "conversation"),
    }
    messages = []
    for i, item in enumerate(_field(data, "messages", list, "the file")):
        where = f"message {i + 1}"
        if not isinstance(item, dict):
            raise _Invalid(f"{where} is not an object")
        role = _field(item, "role", str, where)
        if role not in ROLES:
            raise _Invalid(f"{where} has role {role!r} (one of {', '.join(ROLES)})")
        status = _field(item, "status", str, where, "complete")
        if status not in STATUSES:
            raise _Invalid(f"{where} has status {status!r} (one of {', '.join(STATUSES)})")
        messages.append(
            {
                "role": role,
                "content": _field(item, "content", str, where),
                "reasoning": _field(item, "reasoning", str, where, ""),
                "tool_calls": json.dumps(_tool_calls(item, where)),
                "tool_call_id": _field(item, "tool_call_id", str, where, ""),
                # Nothing is writing it any more: a reply cut off mid-stream is interrupted.
                "status": "interrupted" if status == "streaming" else status,
                "model": _field(item, "model", (str, type(None)), where, None),
                "sampling": _field(item, "sampling", dict, where, {}),
                "metrics": _field(item, "metrics", dict, where, {}),
                "created_at": _time(item, "created_at", where),
            }
        )
    return conversation, messages


_MISSING = object()


def _tool_calls(item: dict, where: str) -> list[dict]:
    calls = _field(item, "tool_calls", list, where, [])
    for call in calls:
        if not (isinstance(call, dict) and isinstance(call.get("id"), str)
                and isinstance(call.get("name"), str)
                and isinstance(call.get("arguments", {}), dict)):  # fmt: skip
            raise _Invalid(f"a tool call of {where} needs an id, a name and object arguments")
    return calls


def _field(obj: dict, key: str, kind, where: str, default: Any = _MISSING) -> Any:
    value = obj.get(key, default)
    if value is _MISSING:
        raise _Invalid(f'{where} has no "{key}"')
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise _Invalid(f'"{key}" of {where} is a {type(value).__name__}')
    if isinstance(value, str):
        if "\x00" in value:
            raise _Invalid(f'"{key}" of {where} contains a NUL character')
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate, from a "\ud800" escape
            raise _Invalid(f'"{key}" of {where} is not valid text: {error.reason}') from None
    return value


def _time(obj: dict, key: str, where: str) -> float:
    value = obj.get(key, time.time())
    try:
        seconds = float(value) if isinstance(value, int | float) and value is not True else None
    except OverflowError:
        seconds = None
    if seconds is None or value is False or not math.isfinite(seconds):
        raise _Invalid(f'"{key}" of {where} is not a time in seconds')
    return seconds


def _insert(store: ConversationStore, head: dict[str, Any], messages: list[dict]) -> Conversation:
    """One transaction: the whole conversation or nothing. Its messages are one branch (an
    export holds the branch that was shown), each following the one before."""
    conversation_id = uuid.uuid4().hex
    db = store.db
    with db.atomic():
        db["conversations"].insert(
            {**head, "id": conversation_id, "sampling": json.dumps(head["sampling"])}
        )
        parent = None
        for message in messages:
            parent = db["messages"].insert(
                {
                    **message,
                    "conversation_id": conversation_id,
                    "sampling": json.dumps(message["sampling"]),
                    "metrics": json.dumps(message["metrics"]),
                    "updated_at": message["created_at"],
                    "parent_id": parent,
                }
            ).last_pk
        db["conversations"].update(conversation_id, {"leaf_id": parent})
    return store.get(conversation_id)
