"""Export a conversation to Markdown and JSON (with the per-message figures) and import a JSON
export: a faithful round trip, and a damaged or hostile file refused whole with its reason."""

from __future__ import annotations

import json

import pytest

from deskllm.database.connection import open_database
from deskllm.store.conversations import ConversationStore
from deskllm.store.export import (
    FORMAT,
    MAX_IMPORT_BYTES,
    ExportError,
    conversation_dict,
    export_json,
    export_markdown,
    import_json,
)

FIGURES = {"generated_tokens": 42, "tg_tps": 95.25, "ttft_s": 0.125, "prompt_tokens": 310,
           "cached_tokens": 300, "evaluated_tokens": 10, "n_ctx": 2048, "n_past": 352,
           "device": "CPU", "finish_reason": "stop", "warnings": ["w"]}  # fmt: skip


@pytest.fixture
def store(tmp_path):
    db = open_database(tmp_path / "store.sqlite3")
    yield ConversationStore(db)
    db.close()


@pytest.fixture
def chat(store) -> str:
    conversation = store.create(
        "Lighthouse *story*",
        system_prompt="Be brief.",
        model="/models/SmolLM2-135M-Instruct.Q4_1.gguf",
        sampling={"temperature": 0.2, "max_tokens": 64},
    )
    cid = conversation.id
    store.add_message(cid, "user", "Tell me about lighthouses.\n\n```py\nprint('light')\n```")
    store.add_message(cid, "assistant", "They guide ships. 🚢", model=conversation.model,
                      sampling={"temperature": 0.2}, metrics=FIGURES)  # fmt: skip
    store.add_message(cid, "user", "More?")
    store.add_message(cid, "assistant", "Cut off he", status="interrupted",
                      metrics={"finish_reason": "cancelled", "generated_tokens": 3})  # fmt: skip
    return cid


def _comparable(store: ConversationStore, cid: str) -> dict:
    data = conversation_dict(store, cid)
    del data["exported_at"]
    return data


def test_markdown_has_every_message_and_each_replys_figures(store, chat, tmp_path):
    path = tmp_path / "chat.md"
    export_markdown(store, chat, path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# Lighthouse *story*\n")
    assert "- Model: `SmolLM2-135M-Instruct.Q4_1.gguf`" in text
    assert "## System prompt\n\nBe brief." in text
    assert text.count("## You") == 2 and text.count("## Assistant") == 2
    assert "```py\nprint('light')\n```" in text  # a reply's own Markdown is kept as written
    assert (
        "*42 tokens · 95.2 tok/s · TTFT 125 ms · prompt 310 tokens (300 cached) · "
        "context 352/2048 · CPU · SmolLM2-135M-Instruct.Q4_1.gguf*"
    ) in text
    assert "Cut off he\n\n*(interrupted)*\n\n*3 tokens*" in text
    assert text.index("Tell me about") < text.index("They guide") < text.index("More?")


def test_json_round_trip_keeps_everything_as_a_new_conversation(store, chat, tmp_path):
    path = tmp_path / "chat.json"
    export_json(store, chat, path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == FORMAT and data["version"] == 1
    assert data["messages"][1]["metrics"] == FIGURES
    assert "🚢" in path.read_text(encoding="utf-8")  # readable, not \\u-escaped

    imported = import_json(store, path)
    assert imported.id != chat and len(store.list()) == 2
    assert _comparable(store, imported.id) == _comparable(store, chat)
    found = {c.id for c in store.search("lighthouses")}
    assert found == {chat, imported.id}  # the imported messages are searchable too


def test_importing_twice_makes_two_conversations(store, chat, tmp_path):
    path = tmp_path / "chat.json"
    export_json(store, chat, path)
    first, second = import_json(store, path), import_json(store, path)
    assert len({chat, first.id, second.id}) == 3
    assert len(store.messages(first.id)) == len(store.messages(second.id)) == 4


def test_a_streaming_reply_imports_as_interrupted(store, chat, tmp_path):
    path = tmp_path / "chat.json"
    data = conversation_dict(store, chat)
    data["messages"][-1]["status"] = "streaming"
    path.write_text(json.dumps(data), encoding="utf-8")
    imported = import_json(store, path)
    assert store.messages(imported.id)[-1].status == "interrupted"


def _damage(data: dict, how: str) -> object:
    if how == "not an object":
        return [data]
    if how == "other format":
        return data | {"format": "something.else"}
    if how == "newer version":
        return data | {"version": 2}
    if how == "no messages":
        return {k: v for k, v in data.items() if k != "messages"}
    if how == "messages not a list":
        return data | {"messages": {"0": data["messages"][0]}}
    if how == "unknown role":
        data["messages"][0]["role"] = "function"
    elif how == "unknown status":
        data["messages"][0]["status"] = "done"
    elif how == "content not text":
        data["messages"][0]["content"] = 42
    elif how == "metrics not an object":
        data["messages"][1]["metrics"] = [1, 2]
    elif how == "title missing":
        del data["conversation"]["title"]
    elif how == "time not a number":
        data["messages"][0]["created_at"] = "yesterday"
    elif how == "time a boolean":
        data["conversation"]["created_at"] = True
    elif how == "huge time":
        data["messages"][0]["created_at"] = 10**400
    elif how == "message not an object":
        data["messages"][2] = "More?"
    elif how == "NUL in a title":
        data["conversation"]["title"] = "a\x00b"
    elif how == "integer past 64 bits":
        data["messages"][1]["metrics"]["generated_tokens"] = 2**70
    elif how == "lone surrogate":
        data["messages"][0]["content"] = "\ud800"
    return data


DAMAGES = ["not an object", "other format", "newer version", "no messages",
           "messages not a list", "unknown role", "unknown status", "content not text",
           "metrics not an object", "title missing", "time not a number", "time a boolean",
           "huge time", "message not an object", "NUL in a title", "lone surrogate"]  # fmt: skip


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_export_is_refused_whole_with_its_reason(store, chat, tmp_path, how):
    path = tmp_path / "bad.json"
    text = json.dumps(_damage(conversation_dict(store, chat), how))
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    with pytest.raises(ExportError, match="bad.json"):
        import_json(store, path)
    assert [c.id for c in store.list()] == [chat]  # nothing was written
    assert store.db["messages"].count == 4


def test_big_integers_in_figures_survive_or_are_refused_never_crash(store, chat, tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(_damage(conversation_dict(store, chat), "integer past 64 bits")))
    try:
        imported = import_json(store, path)
    except ExportError:
        assert len(store.list()) == 1
    else:  # the figures are stored as JSON text: any integer fits
        assert store.messages(imported.id)[1].metrics["generated_tokens"] == 2**70


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"\xff\xfe{}", b"null", b'{"format": NaN}', b"[" * 100_000 + b"]" * 100_000,
     b'{"format": "deskllm.conversation", "version": 1, "conversation": {"title": "t"}, '
     b'"messages": [{"role": "user", "content": "x", "created_at": Infinity}]}'],
)  # fmt: skip
def test_what_is_not_json_or_not_ours_is_refused(store, tmp_path, raw):
    path = tmp_path / "x.json"
    path.write_bytes(raw)
    with pytest.raises(ExportError, match="x.json"):
        import_json(store, path)
    assert store.list() == []


def test_a_file_too_large_is_refused_before_it_is_parsed(store, tmp_path):
    path = tmp_path / "huge.json"
    with path.open("wb") as file:
        file.truncate(MAX_IMPORT_BYTES + 1)
    with pytest.raises(ExportError, match="over 64 MiB"):
        import_json(store, path)


def test_a_missing_or_unreadable_file_is_an_export_error(store, tmp_path):
    with pytest.raises(ExportError, match="Cannot read .*nothing.json"):
        import_json(store, tmp_path / "nothing.json")
    with pytest.raises(ExportError, match="Cannot read"):
        import_json(store, tmp_path)  # a folder


def test_an_export_that_cannot_be_written_is_an_export_error(store, chat, tmp_path):
    # A parent that is a file cannot hold the export, for root too (a read-only folder
    # would not stop root).
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("x")
    with pytest.raises(ExportError, match="Cannot write"):
        export_json(store, chat, not_a_folder / "chat.json")
    assert not_a_folder.read_text() == "x"


def test_an_export_replaces_a_file_whole_and_leaves_no_temporary_file(store, chat, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "chat.md"
    path.write_text("old content that is much longer than nothing " * 100)
    export_markdown(store, chat, path)
    assert path.read_text(encoding="utf-8").startswith("# Lighthouse")
    assert [p.name for p in folder.iterdir()] == ["chat.md"]
    with pytest.raises(ExportError, match="Cannot write"):
        export_markdown(store, chat, folder / "no such folder" / "x.md")
    assert [p.name for p in folder.iterdir()] == ["chat.md"]


def test_a_replys_thinking_is_exported_folded_and_comes_back(store, tmp_path):
    cid = store.create("Sky").id
    store.add_message(cid, "user", "What colour is the sky?")
    reply = store.begin_reply(cid, "/models/r1.gguf")
    reply.append_reasoning("Rayleigh scattering favours ")
    reply.append_reasoning("short wavelengths.")
    reply.append("Blue.")
    reply.finish("complete", {"reasoning_tokens": 9, "reasoning_s": 0.4})
    stored = store.messages(cid)[-1]
    assert (stored.content, stored.reasoning) == ("Blue.", "Rayleigh scattering favours short "
                                                           "wavelengths.")  # fmt: skip
    markdown = tmp_path / "sky.md"
    export_markdown(store, cid, markdown)
    assert ("<details><summary>Thinking</summary>\n\nRayleigh scattering favours short "
            "wavelengths.\n\n</details>\n\nBlue.") in markdown.read_text(encoding="utf-8")
    path = tmp_path / "sky.json"
    export_json(store, cid, path)
    again = import_json(store, path)
    assert store.messages(again.id)[-1].reasoning == stored.reasoning
    assert store.messages(again.id)[0].reasoning == ""  # none for a user message


def test_tool_calls_and_results_are_exported_and_read_back(tmp_path):
    from deskllm.database.connection import open_database
    from deskllm.store.conversations import ConversationStore
    from deskllm.store.export import conversation_markdown, export_json, import_json

    store = ConversationStore(open_database(tmp_path / "db.sqlite3"))
    c = store.create(title="Tools")
    store.add_message(c.id, "user", "Count")
    store.add_message(c.id, "assistant", "", tool_calls=[
        {"id": "call_1", "name": "count", "server": "counter", "arguments": {"label": "a"}}])
    store.add_message(c.id, "tool", "a: call number 1", tool_call_id="call_1", metrics={
        "tool": "count", "decision": "deny", "is_error": True})  # fmt: skip
    markdown = conversation_markdown(store, c.id)
    assert "Tool call: `count` on counter" in markdown and '"label": "a"' in markdown
    assert "*Result of count, denied by the user*" in markdown
    export_json(store, c.id, tmp_path / "c.json")
    copy = import_json(store, tmp_path / "c.json")
    assert [(m.role, m.tool_calls, m.tool_call_id) for m in store.messages(copy.id)] == [
        (m.role, m.tool_calls, m.tool_call_id) for m in store.messages(c.id)]
    bad = json.loads((tmp_path / "c.json").read_text())
    bad["messages"][1]["tool_calls"] = [{"name": "count"}]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ExportError, match="tool call of message 2"):
        import_json(store, tmp_path / "bad.json")
