"""kill -9 in the middle of writes: the database stays intact and keeps every committed row."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from deskllm import paths
from deskllm.database.connection import open_database
from deskllm.store.conversations import ConversationStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

REPO = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import sys
    from deskllm.store.conversations import ConversationStore
    from deskllm.database.connection import open_database

    store = ConversationStore(open_database())
    conv = store.create(title="kill9 " + sys.argv[1])
    print("conversation", conv.id, flush=True)
    i = 0
    while True:
        content = f"round {sys.argv[1]} message {i} " + "payload " * (i % 200)
        message = store.add_message(conv.id, "user" if i % 2 else "assistant", content)
        # only after the commit returned: this id must survive whatever happens next
        print("committed", i, message.id, flush=True)
        i += 1
    """
)

STREAMER = textwrap.dedent(
    """
    from deskllm.store.conversations import ConversationStore, ReplyWriter
    from deskllm.database.connection import open_database

    class Reporting(ReplyWriter):
        def flush(self):
            super().flush()
            # after the write returned: this much of the reply is in the database
            print("flushed", len(self.text), flush=True)

    store = ConversationStore(open_database())
    conv = store.create(title="streaming")
    store.add_message(conv.id, "user", "tell me a long story")
    message_id = store.begin_reply(conv.id, "model.gguf").message_id
    print("message", message_id, flush=True)
    writer = Reporting(store, message_id, flush_interval_s=0.01)
    i = 0
    while True:
        writer.append(f"tok{i} ")
        i += 1
    """
)


def parse_committed(line: str) -> list[str]:
    fields = line.split()
    assert len(fields) == 3 and fields[0] == "committed", f"unexpected line {line!r}"
    return fields


def expected_content(round_name: str, i: int) -> str:
    return f"round {round_name} message {i} " + "payload " * (i % 200)


def spawn(script: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ)  # carries DESKLLM_HOME from the autouse fixture
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(proc: subprocess.Popen) -> list[str]:
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=10)
        pytest.fail(f"the child exited ({proc.returncode}) early: {proc.stderr.read()}")
    return line.split()


def kill9(proc: subprocess.Popen) -> list[str]:
    """SIGKILL the child; returns the complete lines it printed that were not read yet. A last
    line without its newline was cut by the kill (print writes its parts separately when
    stdout is unbuffered): the child never finished reporting it."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    *complete, _cut = proc.stdout.read().split("\n")
    proc.stdout.close()
    proc.stderr.close()
    return complete


def check_integrity(db_path: Path) -> None:
    db = open_database(db_path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        # the full-text index agrees with the table it indexes
        db.execute("insert into messages_fts(messages_fts) values ('integrity-check')")
    finally:
        db.close()


def test_kill9_while_writing_messages_loses_nothing_committed():
    rng = random.Random(1234)
    db_path = paths.database_path()
    reported: dict[str, dict[int, int]] = {}  # round -> {i: message id}
    for round_no in range(3):
        name = str(round_no)
        proc = spawn(WRITER, name)
        try:
            kind, conversation_id = read_line(proc)
            assert kind == "conversation"
            committed: dict[int, int] = {}
            target = rng.randint(50, 300)
            while len(committed) < target:
                kind, i, message_id = read_line(proc)
                assert kind == "committed"
                committed[int(i)] = int(message_id)
            time.sleep(rng.random() * 0.05)  # land somewhere inside a later write
            for line in kill9(proc):
                kind, i, message_id = parse_committed(line)
                committed[int(i)] = int(message_id)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reported[name] = committed

        check_integrity(db_path)
        db = open_database(db_path)
        try:
            store = ConversationStore(db)
            messages = {m.id: m for m in store.messages(conversation_id)}
            for i, message_id in committed.items():
                assert message_id in messages, f"committed message {i} (id {message_id}) lost"
                assert messages[message_id].content == expected_content(name, i)
                assert messages[message_id].status == "complete"
            # nothing but whole messages: at most one more than reported (committed, not printed)
            assert len(messages) - len(committed) in (0, 1)
            for message in messages.values():
                assert message.content.startswith(f"round {name} message ")
        finally:
            db.close()

    # every round's rows are still there after the later rounds' kills
    db = open_database(db_path)
    try:
        for name, committed in reported.items():
            rows = {r["id"]: r["content"] for r in db["messages"].rows}
            for i, message_id in committed.items():
                assert rows[message_id] == expected_content(name, i)
    finally:
        db.close()


def test_kill9_while_streaming_a_reply_keeps_the_last_flush():
    db_path = paths.database_path()
    proc = spawn(STREAMER)
    try:
        kind, message_id = read_line(proc)
        assert kind == "message"
        message_id = int(message_id)
        flushed = 0
        flushes = 0
        while flushes < 5 or flushed < 2000:
            kind, length = read_line(proc)
            assert kind == "flushed"
            assert int(length) >= flushed
            flushed = int(length)
            flushes += 1
        for line in kill9(proc):
            kind, length = line.split()
            flushed = max(flushed, int(length))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    check_integrity(db_path)
    db = open_database(db_path)
    try:
        store = ConversationStore(db)
        message = store.get_message(message_id)
        assert message.status == "streaming"  # nobody finished it
        # everything up to the last reported flush is there, and it is the start of the reply
        assert len(message.content) >= flushed
        assert message.content.startswith("tok0 tok1 tok2 ")
        tokens = message.content.split()
        assert tokens == [f"tok{i}" for i in range(len(tokens))]
        assert message.content.endswith(" ")  # whole deltas only

        # next start of the app: the reply left mid-stream is marked interrupted, text kept
        assert store.mark_streaming_interrupted() == 1
        after = store.get_message(message_id)
        assert after.status == "interrupted"
        assert after.content == message.content
    finally:
        db.close()

    db = open_database(db_path)  # and that is committed
    try:
        assert ConversationStore(db).get_message(message_id).status == "interrupted"
    finally:
        db.close()
