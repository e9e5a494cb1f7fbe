"""Splitting a reply into blocks: code fences apart, prose one paragraph per block."""

from __future__ import annotations

from deskllm.gui.chat_render import Block, split_blocks


def test_prose_is_split_into_paragraphs_and_code_kept_whole():
    text = "First para.\n\nSecond para\nsame para.\n\n```py\nx = 1\n\ny = 2\n```\nAfter."
    assert split_blocks(text) == [
        Block("prose", "First para."),
        Block("prose", "Second para\nsame para."),
        Block("code", "x = 1\n\ny = 2", "py"),
        Block("prose", "After."),
    ]


def test_a_list_items_indented_continuation_stays_with_it():
    text = "1. Item one\n\n   more about one\n\n2. Item two"
    assert [b.text for b in split_blocks(text)] == [
        "1. Item one\n\n   more about one",
        "2. Item two",
    ]


def test_streaming_changes_only_the_last_block():
    reply = "Intro paragraph.\n\nA second paragraph that is still being written"
    before = split_blocks(reply)
    after = split_blocks(reply + " and grows")
    assert before[:-1] == after[:-1] and before[-1] != after[-1]
    assert split_blocks("```python\nprint(1)")[-1] == Block("code", "print(1)", "python")


def test_a_reply_the_user_stopped_says_stopped_and_a_crash_says_interrupted():
    from deskllm.gui.chat_render import status_note
    from deskllm.store.conversations import Message

    stopped = Message(1, "c", "assistant", "Once", "interrupted",
                      metrics={"finish_reason": "cancelled"})  # fmt: skip
    assert status_note(stopped).startswith("Stopped: you stopped the reply here.")
    early = Message(4, "c", "assistant", "", "interrupted", metrics={"finish_reason": "cancelled"})
    assert status_note(early).startswith("Stopped before the reply began")
    crashed = Message(2, "c", "assistant", "Once", "interrupted",
                      metrics={"error": "the engine was killed (SIGKILL)"})  # fmt: skip
    assert status_note(crashed).startswith("Interrupted (the engine was killed (SIGKILL))")
    assert status_note(Message(3, "c", "assistant", "Done.", "complete")) == ""
