"""ConversationStore and ReplyWriter against a real SQLite file."""

import json
import time
from pathlib import Path

import pytest
from sqlite_utils.db import NotFoundError

from deskllm.database.connection import open_database, sqlite
from deskllm.store.conversations import ConversationStore, Message, ReplyWriter

TICK = 0.02  # between writes whose order matters (coarse clocks)


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "store.sqlite3"


@pytest.fixture
def store(db_path):
    db = open_database(db_path)
    yield ConversationStore(db)
    db.close()


def other_connection(path: Path) -> sqlite.Connection:
    """What another process (or the app after a restart) would read: only committed data."""
    conn = sqlite.connect(path)
    conn.row_factory = sqlite.Row
    return conn


def committed_message(path: Path, message_id: int) -> sqlite.Row | None:
    conn = other_connection(path)
    try:
        return conn.execute("select * from messages where id = ?", [message_id]).fetchone()
    finally:
        conn.close()


# Conversations -------------------------------------------------------------------------------
def test_create_and_get(store):
    conv = store.create(
        title="Trip", system_prompt="You plan trips.", model="m.gguf", sampling={"top_p": 0.9}
    )
    assert len(conv.id) == 32
    assert conv.created_at == conv.updated_at > 0
    got = store.get(conv.id)
    assert got == conv
    assert got.sampling == {"top_p": 0.9}
    assert got.system_prompt == "You plan trips."


def test_create_with_defaults(store):
    conv = store.create()
    assert (conv.title, conv.system_prompt, conv.model, conv.sampling) == ("New chat", "", None, {})
    assert store.get(conv.id) == conv


def test_create_is_committed(store, db_path):
    conv = store.create(title="durable")
    with other_connection(db_path) as conn:
        assert (
            conn.execute("select title from conversations where id = ?", [conv.id]).fetchone()[0]
            == "durable"
        )


def test_get_unknown_raises(store):
    with pytest.raises(NotFoundError):
        store.get("nope")


def test_list_orders_by_last_activity(store):
    a = store.create(title="a")
    time.sleep(TICK)
    b = store.create(title="b")
    time.sleep(TICK)
    c = store.create(title="c")
    assert [x.title for x in store.list()] == ["c", "b", "a"]
    time.sleep(TICK)
    store.add_message(a.id, "user", "hello again")  # a message makes it the most recent
    assert [x.title for x in store.list()] == ["a", "c", "b"]
    time.sleep(TICK)
    store.update(b.id, system_prompt="Be brief.")  # and so does a change of settings
    assert [x.title for x in store.list()] == ["b", "a", "c"]
    assert [x.id for x in store.list(limit=2)] == [b.id, a.id]
    assert store.get(c.id).updated_at < store.get(a.id).updated_at


def test_a_rename_keeps_the_conversations_place(store):
    a = store.create(title="a")
    time.sleep(TICK)
    b = store.create(title="b")
    time.sleep(TICK)
    renamed = store.update(a.id, title="a renamed")  # housekeeping, not activity
    assert renamed.title == "a renamed" and renamed.updated_at == a.updated_at
    assert [x.id for x in store.list()] == [b.id, a.id]


def test_update_fields(store):
    conv = store.create(title="old")
    time.sleep(TICK)
    updated = store.update(
        conv.id, title="new", system_prompt="sys", model="x.gguf", sampling={"temperature": 0.1}
    )
    assert updated.title == "new"
    assert updated.system_prompt == "sys"
    assert updated.model == "x.gguf"
    assert updated.sampling == {"temperature": 0.1}
    assert updated.created_at == conv.created_at
    assert updated.updated_at > conv.updated_at
    assert store.get(conv.id) == updated


def test_update_refuses_unknown_fields(store):
    conv = store.create(title="t")
    with pytest.raises(ValueError, match="created_at"):
        store.update(conv.id, created_at=0)
    with pytest.raises(ValueError, match="id"):
        store.update(conv.id, id="other")
    assert store.get(conv.id) == conv


def test_delete_removes_the_conversation_and_its_messages(store, db_path):
    keep = store.create(title="keep")
    store.add_message(keep.id, "user", "keep this zebra")
    gone = store.create(title="gone")
    m1 = store.add_message(gone.id, "user", "delete this zebra")
    m2 = store.add_message(gone.id, "assistant", "ok")
    store.delete(gone.id)

    assert [c.id for c in store.list()] == [keep.id]
    with pytest.raises(NotFoundError):
        store.get(gone.id)
    assert store.messages(gone.id) == []
    for m in (m1, m2):
        with pytest.raises(NotFoundError):
            store.get_message(m.id)
    # the search index forgot them too
    assert [c.id for c in store.search("zebra")] == [keep.id]
    assert committed_message(db_path, m1.id) is None
    assert len(store.messages(keep.id)) == 1


# Messages ------------------------------------------------------------------------------------
def test_add_message_and_read_back(store, db_path):
    conv = store.create()
    m = store.add_message(
        conv.id,
        "assistant",
        "Hi ✓",
        model="m.gguf",
        sampling={"temperature": 0.7},
        metrics={"tokens_per_s": 41.5},
    )
    assert isinstance(m, Message)
    assert (m.conversation_id, m.role, m.content, m.status) == (
        conv.id,
        "assistant",
        "Hi ✓",
        "complete",
    )
    assert store.get_message(m.id) == m
    assert store.messages(conv.id) == [m]
    row = committed_message(db_path, m.id)
    assert row["content"] == "Hi ✓"
    assert row["metrics"] == '{"tokens_per_s": 41.5}'


def test_messages_are_in_order_and_per_conversation(store):
    a, b = store.create(), store.create()
    ids = []
    for i in range(5):
        ids.append(store.add_message(a.id, "user" if i % 2 == 0 else "assistant", f"a{i}").id)
        store.add_message(b.id, "user", f"b{i}")
    msgs = store.messages(a.id)
    assert [m.id for m in msgs] == ids
    assert [m.content for m in msgs] == [f"a{i}" for i in range(5)]
    assert ids == sorted(ids)


def test_add_message_rejects_an_unknown_status(store):
    conv = store.create()
    with pytest.raises(ValueError, match="unknown status"):
        store.add_message(conv.id, "user", "x", status="done")
    assert store.messages(conv.id) == []


def test_add_message_to_a_missing_conversation_fails_and_writes_nothing(store):
    with pytest.raises(sqlite.IntegrityError):
        store.add_message("missing", "user", "orphan")
    assert store.db["messages"].count == 0


def test_delete_messages_from(store):
    conv = store.create()
    other = store.create()
    msgs = [store.add_message(conv.id, "user", f"m{i}") for i in range(5)]
    other_msg = store.add_message(other.id, "user", "untouched")
    store.delete_messages_from(conv.id, msgs[2].id)
    assert [m.content for m in store.messages(conv.id)] == ["m0", "m1"]
    assert store.messages(other.id) == [other_msg]
    # deleting from the first message empties the conversation but keeps it
    store.delete_messages_from(conv.id, msgs[0].id)
    assert store.messages(conv.id) == []
    assert store.get(conv.id).id == conv.id


def test_delete_messages_from_only_touches_that_conversation(store):
    a, b = store.create(), store.create()
    first_b = store.add_message(b.id, "user", "b0")
    later_a = store.add_message(a.id, "user", "a0")
    later_b = store.add_message(b.id, "user", "b1")
    store.delete_messages_from(a.id, first_b.id)  # an id below a's messages
    assert store.messages(a.id) == []
    assert store.messages(b.id) == [first_b, later_b]
    assert later_a.id > first_b.id


def test_finish_message(store):
    conv = store.create()
    m = store.add_message(conv.id, "assistant", "", status="streaming")
    store.finish_message(m.id, "done text", "complete", {"n_tokens": 3})
    got = store.get_message(m.id)
    assert (got.content, got.status, got.metrics) == ("done text", "complete", {"n_tokens": 3})
    with pytest.raises(ValueError):
        store.finish_message(m.id, "x", "bogus")
    assert store.get_message(m.id).content == "done text"


# Search --------------------------------------------------------------------------------------
@pytest.fixture
def corpus(store):
    """Three conversations, the most recent last."""
    travel = store.create(title="Trip to Lisbon")
    store.add_message(travel.id, "user", "Which trams go to Belém? I love pastéis de nata.")
    store.add_message(travel.id, "assistant", "Tram 15 goes there.")
    time.sleep(TICK)
    code = store.create(title="Python_help 100%")
    store.add_message(
        code.id, "user", 'Why does "x AND y" or a*b NOT work? SELECT * FROM t WHERE a = "b";'
    )
    time.sleep(TICK)
    cooking = store.create(title="Dinner")
    store.add_message(cooking.id, "user", "The dogs were running around the kitchen")
    return {"travel": travel.id, "code": code.id, "cooking": cooking.id}


def found(store, text):
    return [c.id for c in store.search(text)]


def test_search_by_title_substring_case_insensitive(store, corpus):
    assert found(store, "lisbon") == [corpus["travel"]]
    assert found(store, "Trip to") == [corpus["travel"]]
    assert found(store, "inne") == [corpus["cooking"]]  # substring of a title


def test_search_by_message_content(store, corpus):
    assert found(store, "tram") == [corpus["travel"]]
    assert found(store, "Belém") == [corpus["travel"]]
    assert found(store, "kitchen") == [corpus["cooking"]]
    assert found(store, "run") == [corpus["cooking"]]  # porter stemming: running -> run
    assert found(store, "dog kitchen") == [corpus["cooking"]]  # every word must be there
    assert found(store, "dog tram") == []
    assert found(store, "nothing-like-this") == []


def test_search_returns_each_conversation_once_most_recent_first(store, corpus):
    store.add_message(corpus["travel"], "user", "Dinner in Lisbon, a kitchen with a view")
    # travel: title? no; messages: yes (twice). cooking: title and message.
    assert found(store, "kitchen") == [corpus["travel"], corpus["cooking"]]
    assert found(store, "dinner") == [corpus["travel"], corpus["cooking"]]


def test_search_limit(store, corpus):
    assert found(store, "") == [corpus["cooking"], corpus["code"], corpus["travel"]]
    assert [c.id for c in store.search("", limit=2)] == [corpus["cooking"], corpus["code"]]
    assert [c.id for c in store.search("o", limit=1)] == [corpus["code"]]


@pytest.mark.parametrize(
    "text",
    [
        '"',
        '""',
        '"""',
        '"x AND y',
        'x AND y"',
        "*",
        "a*",
        "AND",
        "OR",
        "NOT",
        "NEAR",
        "AND OR NOT",
        "(",
        "())",
        "-",
        "^a",
        "col:value",
        "messages_fts:x",
        "{content} : a",
        "'; drop table messages; --",
        'SELECT * FROM t WHERE a = "b";',
        '\n\t"multi\nline"',
        '+"()\n{',
        '"a%\n😀:%-',
        "😀",
        "\\",
        "%",
        "_",
    ],
)
def test_search_never_fails_on_awkward_input(store, corpus, text):
    results = store.search(text)
    assert isinstance(results, list)
    assert store.db["messages"].count == 4  # and never changes anything
    assert len(store.list()) == 3


def test_search_operators_are_plain_words(store, corpus):
    assert found(store, "AND") == [corpus["code"]]  # the word "AND" in the message
    assert found(store, "NOT work") == [corpus["code"]]
    assert found(store, "x AND y") == [corpus["code"]]
    assert found(store, '"x AND y"') == [corpus["code"]]
    assert found(store, '"x AND') == [corpus["code"]]  # an unbalanced quote
    assert found(store, "a*b") == [corpus["code"]]
    assert found(store, "Tram*") == [corpus["travel"]]


def test_search_like_wildcards_are_literal(store, corpus):
    assert found(store, "%") == [corpus["code"]]  # only the title with a "%" in it
    assert found(store, "_") == [corpus["code"]]  # only the title with a "_" in it
    assert found(store, "100%") == [corpus["code"]]
    assert found(store, "n_h") == [corpus["code"]]
    assert found(store, "T%p") == []  # not "Trip"
    assert found(store, "D_nner") == []  # not "Dinner"


def test_search_quotes_and_punctuation_only(store, corpus):
    assert found(store, '"') == []  # no title has a quote, and a quote is no word
    assert found(store, "*") == []
    assert found(store, "   ") == []


def test_search_empty_string_lists_everything(store, corpus):
    # every title contains the empty string: all conversations, most recent first
    assert found(store, "") == [corpus["cooking"], corpus["code"], corpus["travel"]]


def test_search_sees_updated_and_deleted_content(store, corpus):
    conv = corpus["cooking"]
    m = store.add_message(conv, "assistant", "")
    assert found(store, "marmalade") == []
    store.finish_message(m.id, "Try marmalade", "complete")
    assert found(store, "marmalade") == [conv]
    store.delete_messages_from(conv, m.id)
    assert found(store, "marmalade") == []


# Streaming replies ---------------------------------------------------------------------------
def test_begin_reply_commits_a_streaming_message_first(store, db_path):
    conv = store.create()
    store.add_message(conv.id, "user", "question")
    writer = store.begin_reply(conv.id, "m.gguf", {"temperature": 0.5})
    assert isinstance(writer, ReplyWriter)
    row = committed_message(db_path, writer.message_id)
    assert (row["role"], row["status"], row["content"], row["model"]) == (
        "assistant",
        "streaming",
        "",
        "m.gguf",
    )
    assert store.get_message(writer.message_id).sampling == {"temperature": 0.5}


def test_reply_writer_flush_and_finish(store, db_path):
    conv = store.create()
    writer = store.begin_reply(conv.id, None)
    writer.flush_interval_s = 3600  # no flush from append
    writer.append("Hel")
    writer.append("lo")
    assert writer.text == "Hello"
    assert committed_message(db_path, writer.message_id)["content"] == ""
    writer.flush()
    assert committed_message(db_path, writer.message_id)["content"] == "Hello"
    writer.append(", world")
    writer.finish("complete", {"n_tokens": 4})
    row = committed_message(db_path, writer.message_id)
    assert (row["content"], row["status"], row["metrics"]) == (
        "Hello, world",
        "complete",
        '{"n_tokens": 4}',
    )


def test_a_resumed_reply_grows_the_same_message(store, db_path):
    conv = store.create()
    store.add_message(conv.id, "user", "question")
    first = store.begin_reply(conv.id, "m.gguf")
    first.append("Once upon")
    first.finish("interrupted", {"generated_tokens": 2})
    writer = store.resume_reply(first.message_id)
    assert writer.message_id == first.message_id and writer.text == "Once upon"
    assert committed_message(db_path, writer.message_id)["status"] == "streaming"
    writer.append(" a time")
    writer.flush()
    assert committed_message(db_path, writer.message_id)["content"] == "Once upon a time"
    writer.finish("complete")
    shown = [(m.role, m.content, m.status) for m in store.messages(conv.id)]
    assert shown == [("user", "question", "complete"),
                     ("assistant", "Once upon a time", "complete")]  # fmt: skip
    with pytest.raises(ValueError):
        store.resume_reply(store.messages(conv.id)[0].id)  # a user message is not a reply


def test_has_messages_once_anything_was_said(store):
    assert not store.has_messages()
    conv = store.create()  # an empty conversation is not a chat yet
    assert not store.has_messages()
    store.add_message(conv.id, "user", "hello")
    assert store.has_messages()


def trace_updates(store: ConversationStore, into: list[str]) -> None:
    """Record the UPDATE statements the store runs. SQLite reports a statement again for each
    trigger it fires (the search index), so count distinct ones: each write has its own text."""
    store.db.conn.set_trace_callback(
        lambda sql: into.append(sql) if sql.lstrip().upper().startswith("UPDATE") else None
    )


def test_reply_writer_writes_at_least_once_per_interval_while_streaming(store, db_path):
    conv = store.create()
    message_id = store.add_message(conv.id, "assistant", "", status="streaming").id
    interval = 0.05
    writer = ReplyWriter(store, message_id, flush_interval_s=interval)

    updates = []
    trace_updates(store, updates)
    history = []  # (time appended, text so far)
    seen = []  # (time checked, text committed)
    started = time.monotonic()
    i = 0
    while time.monotonic() - started < 0.6:
        writer.append(f"t{i} ")
        history.append((time.monotonic(), writer.text))
        now = time.monotonic()
        seen.append((now, committed_message(db_path, message_id)["content"]))
        time.sleep(0.005)
        i += 1
    store.db.conn.set_trace_callback(None)
    duration = time.monotonic() - started

    contents = [c for _, c in seen]
    assert all(writer.text.startswith(c) for c in contents)  # always a prefix of the reply
    # written while streaming, not only at the end ...
    assert len(set(contents)) >= 4
    # ... and throttled: far fewer writes than deltas
    assert len(set(updates)) < i / 2
    assert len(set(updates)) <= duration / interval + 2
    # never more than about one interval behind (generous slack for a slow machine)
    lag_allowed = 4 * interval
    for checked_at, content in seen:
        due = [text for t, text in history if t <= checked_at - lag_allowed]
        if due:
            assert len(content) >= len(due[-1])


def test_reply_writer_does_not_write_when_nothing_changed(store):
    conv = store.create()
    writer = ReplyWriter(store, store.add_message(conv.id, "assistant", "").id, 0.0)
    updates = []
    trace_updates(store, updates)
    writer.append("x")
    writer.flush()
    writer.flush()
    writer.append("")
    store.db.conn.set_trace_callback(None)
    assert len(set(updates)) == 1


def test_mark_streaming_interrupted(store, db_path):
    conv = store.create()
    done = store.add_message(conv.id, "assistant", "complete reply")
    failed = store.add_message(conv.id, "assistant", "bad", status="error")
    w1 = store.begin_reply(conv.id, None)
    w1.append("partial one")
    w1.flush()
    w2 = store.begin_reply(conv.id, None)

    assert store.mark_streaming_interrupted() == 2
    with other_connection(db_path) as conn:  # committed
        statuses = dict(conn.execute("select id, status from messages").fetchall())
    assert statuses == {
        done.id: "complete",
        failed.id: "error",
        w1.message_id: "interrupted",
        w2.message_id: "interrupted",
    }
    assert store.get_message(w1.message_id).content == "partial one"
    assert store.mark_streaming_interrupted() == 0


# Versions and branches -----------------------------------------------------------------------
def contents(store, cid) -> list[str]:
    return [m.content for m in store.messages(cid)]


def test_a_regenerated_reply_keeps_the_old_one_as_a_version(store):
    conv = store.create()
    store.add_message(conv.id, "user", "q")
    first = store.add_message(conv.id, "assistant", "a1")
    store.branch_before(first.id)
    second = store.add_message(conv.id, "assistant", "a2")
    assert contents(store, conv.id) == ["q", "a2"]
    assert store.versions(conv.id)[first.id] == [first.id, second.id]
    store.show_version(first.id)
    assert contents(store, conv.id) == ["q", "a1"]
    # A reply that holds nothing (failed before any text) is not kept as a version.
    empty = store.add_message(conv.id, "user", "q2")
    failed = store.add_message(conv.id, "assistant", "", status="error")
    store.branch_before(failed.id)
    again = store.add_message(conv.id, "assistant", "ok")
    assert store.versions(conv.id)[again.id] == [again.id]
    assert contents(store, conv.id) == ["q", "a1", "q2", "ok"] and empty.parent_id == first.id


def test_an_edited_message_starts_a_branch_and_each_branch_keeps_its_replies(store):
    conv = store.create()
    q1 = store.add_message(conv.id, "user", "q1")
    store.add_message(conv.id, "assistant", "a1")
    store.add_message(conv.id, "user", "q2")
    store.add_message(conv.id, "assistant", "a2")
    store.branch_before(q1.id)  # edit the first question
    edited = store.add_message(conv.id, "user", "q1 edited")
    store.add_message(conv.id, "assistant", "b1")
    assert contents(store, conv.id) == ["q1 edited", "b1"]
    assert store.versions(conv.id)[q1.id] == [q1.id, edited.id]
    store.show_version(q1.id)  # back: the old branch whole, to its newest reply
    assert contents(store, conv.id) == ["q1", "a1", "q2", "a2"]
    # Search covers every branch, the one not shown too.
    assert [c.id for c in store.search("edited")] == [conv.id]


def test_deleting_a_message_takes_what_follows_and_shows_another_version(store):
    conv = store.create()
    q = store.add_message(conv.id, "user", "q")
    a1 = store.add_message(conv.id, "assistant", "a1")
    store.add_message(conv.id, "user", "more")
    store.branch_before(a1.id)
    a2 = store.add_message(conv.id, "assistant", "a2")
    store.show_version(a1.id)
    store.delete_message(a1.id)  # the shown one, and "more" after it
    assert contents(store, conv.id) == ["q", "a2"]
    assert store.versions(conv.id)[a2.id] == [a2.id]
    assert store.db["messages"].count_where("content = 'more'") == 0
    store.delete_message(a2.id)  # the last version: the branch ends before it
    assert contents(store, conv.id) == ["q"]
    assert store.add_message(conv.id, "assistant", "again").parent_id == q.id


def test_tool_calls_and_results_are_stored_and_go_back_to_the_model(store):
    from deskllm.store.chat_session import history_messages

    c = store.create(system_prompt="Be brief.")
    store.update(c.id, tools={"servers": ["time"], "choice": "auto"})
    assert store.get(c.id).tool_servers == ["time"]
    store.add_message(c.id, "user", "Time in Tokyo?")
    calls = [{"id": "call_1", "name": "get_current_time", "server": "time",
              "arguments": {"timezone": "Asia/Tokyo"}},
             {"id": "call_2", "name": "get_current_time", "server": "time",
              "arguments": {"timezone": "UTC"}}]  # fmt: skip
    store.add_message(c.id, "assistant", "", tool_calls=calls)
    store.add_message(c.id, "tool", '{"datetime": "12:00"}', tool_call_id="call_1",
                      metrics={"tool": "get_current_time", "decision": "once"})  # fmt: skip
    store.add_message(c.id, "assistant", "It is noon.")
    stored = store.messages(c.id)
    assert stored[1].tool_calls == calls and stored[2].tool_call_id == "call_1"
    history = history_messages("Be brief.", stored)
    assert [m.role for m in history] == ["system", "user", "assistant", "tool", "assistant"]
    said = json.loads(history[2].tool_calls_json)
    # call_2 has no result (a Stop discarded it): the model is not shown a call left open.
    assert [c["id"] for c in said] == ["call_1"]
    assert json.loads(said[0]["function"]["arguments"]) == {"timezone": "Asia/Tokyo"}
    assert history[3].tool_call_id == "call_1" and history[3].name == "get_current_time"


def test_a_reply_whose_calls_all_went_unanswered_and_that_says_nothing_is_left_out(store):
    from deskllm.store.chat_session import history_messages

    c = store.create()
    store.add_message(c.id, "user", "Hi")
    store.add_message(c.id, "assistant", "", status="interrupted",
                      tool_calls=[{"id": "x", "name": "t", "arguments": {}}])  # fmt: skip
    assert [m.role for m in history_messages("", store.messages(c.id))] == ["user"]
