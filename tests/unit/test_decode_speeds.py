"""Decode speeds measured in chats, per model file, as recommendations read them."""

from __future__ import annotations

from deskllm.store import ConversationStore, open_database
from deskllm.store.decode_speeds import RECENT, measured_decode_speeds


def test_the_median_of_recent_complete_replies_per_file_name():
    db = open_database()
    store = ConversationStore(db)
    conv = store.create()

    def reply(model, tps, status="complete"):
        metrics = {"tg_tps": tps} if tps is not None else {}
        store.add_message(conv.id, "assistant", "x", model=model, status=status, metrics=metrics)

    for tps in (10.0, 12.0, 30.0):
        reply("/models/a/Model-Q4_K_M.gguf", tps)
    reply("/elsewhere/Model-Q4_K_M.gguf", 11.0)  # the same file name in another folder
    reply("/models/Model-Q8_0.gguf", 5.0, status="error")  # failed replies do not count
    reply("/models/Model-Q8_0.gguf", None)  # nor replies without a speed
    reply("openai/gpt-4o", 80.0)  # a remote model is not a file here
    store.add_message(conv.id, "user", "hi", model="/models/Model-Q2_K.gguf",
                      metrics={"tg_tps": 3.0})  # fmt: skip
    assert measured_decode_speeds(db) == {"Model-Q4_K_M.gguf": 11.5}


def test_only_the_recent_replies_count():
    db = open_database()
    store = ConversationStore(db)
    conv = store.create()
    for tps in [1.0] * RECENT + [50.0] * RECENT:  # older slow replies, then fast ones
        store.add_message(conv.id, "assistant", "x", model="/m/M.gguf", metrics={"tg_tps": tps})
    assert measured_decode_speeds(db) == {"M.gguf": 50.0}
