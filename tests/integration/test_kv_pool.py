"""The slots share one KV pool (n_slots × n_ctx cells): a conversation grows past its share
while short ones run beside it; when the pool is short of room, a finished conversation's cells
go to the state cache and come back on its next turn; a request waits for cells rather than
cut a running reply. The starter model, greedy replies, a small pool so that it fills."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Done, LoadParams, Sampling, TextDelta

N_CTX = 256  # per slot: the pool is n_slots × this


def params(model: Path, extra_bufts: bool, kv_dir: Path, n_ctx: int = N_CTX) -> LoadParams:
    return LoadParams(str(model), n_ctx=n_ctx, n_threads=2, use_extra_bufts=extra_bufts,
                      kv_disk_dir=str(kv_dir))  # fmt: skip


def long_text(words: int) -> str:
    return "Summarise these notes. " + " ".join(f"note{i % 50} is fine" for i in range(words))


def ask(client: EngineClient, key: str, messages: list[ChatMessage], sampling: Sampling) -> Done:
    reply = client.chat(key, messages, sampling).wait()
    assert reply.ok, reply.error
    return reply.done


@pytest.fixture(scope="module")
def four(tmp_path_factory, starter_model: Path, extra_bufts: bool):
    with EngineClient(4) as client:
        loaded = client.load(params(starter_model, extra_bufts, tmp_path_factory.mktemp("kv")))
        assert loaded.n_ctx == 4 * N_CTX and client.conversation_ctx == 4 * N_CTX
        yield client


def test_one_conversation_grows_to_90_percent_of_the_pool_while_three_short_ones_run(four):
    pool = four.loaded.n_ctx
    text = long_text(120)
    probe = ask(four, "probe", [ChatMessage("user", text)], Sampling(temperature=0, max_tokens=1))
    n_prompt = probe.metrics.prompt_tokens
    assert N_CTX < n_prompt < 0.8 * pool  # past one slot's share already
    long_sampling = Sampling(temperature=0, max_tokens=int(0.9 * pool) - n_prompt,
                             ignore_eos=True)  # fmt: skip
    short = Sampling(temperature=0, max_tokens=12, ignore_eos=True)
    results: dict[str, Done] = {}
    order: list[str] = []

    def run(key: str, messages: list[ChatMessage], sampling: Sampling) -> None:
        results[key] = ask(four, key, messages, sampling)
        order.append(key)

    threads = [threading.Thread(target=run, args=("long", [ChatMessage("user", text)],
                                                  long_sampling))]  # fmt: skip
    threads += [threading.Thread(target=run, args=(f"short{i}", [ChatMessage(
        "user", f"Name a fruit, number {i}.")], short)) for i in range(3)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    long = results["long"]
    assert long.finish_reason == "length"
    assert long.metrics.generated_tokens == long_sampling.max_tokens
    assert long.metrics.n_past >= 0.89 * pool  # fixed slots capped it at a quarter
    for i in range(3):
        done = results[f"short{i}"]
        assert done.finish_reason == "length" and done.metrics.generated_tokens == 12
    assert order[-1] == "long"  # the short ones ran beside it, not after it
    status = four.status()
    assert status.kv_cells == pool and 0 < status.kv_cells_used <= pool


@pytest.fixture
def two(tmp_path, starter_model: Path, extra_bufts: bool):
    with EngineClient(2) as client:
        client.load(params(starter_model, extra_bufts, tmp_path / "kv"))
        yield client


def test_a_full_pool_frees_the_least_recently_used_finished_conversation_and_restores_it(
    two, tmp_path, starter_model: Path, extra_bufts: bool
):
    greedy = Sampling(temperature=0, max_tokens=10)
    a_key, b_key, c_key = (uuid.uuid4().hex for _ in range(3))
    a_turn = [ChatMessage("user", long_text(30))]
    b_turn = [ChatMessage("user", "Translate these notes. " + long_text(30))]
    # A and B at once: each in a slot, and each keeps its cells when it ends.
    a_reply = two.chat(a_key, a_turn, Sampling(temperature=0, max_tokens=40))
    a_events = a_reply.events()
    while not isinstance(next(a_events), TextDelta):
        pass
    b_reply = two.chat(b_key, b_turn, greedy)  # A runs: B takes the other slot
    b_thread = threading.Thread(target=b_reply.wait)  # a reply is sent when first read
    b_thread.start()
    for _ in a_events:
        pass
    first = a_reply.done
    b_thread.join(120)
    assert b_reply.ok and b_reply.done.metrics.cached_tokens < 50  # not A's slot
    assert first.finish_reason == "length"
    assert two.status().kv_cells_used > two.loaded.n_ctx // 2
    # C needs more than the pool has left: the other finished conversation's cells are freed.
    ask(two, c_key, [ChatMessage("user", "Sort these notes. " + long_text(75))], greedy)
    status = two.status()
    assert status.kv_evictions >= 1
    assert {a_key, b_key} <= set(status.cached_conversations)  # kept in the state cache
    a_again = [*a_turn, ChatMessage("assistant", first.text), ChatMessage("user", "Thanks!")]
    second = ask(two, a_key, a_again, greedy)
    assert second.metrics.restored_from == "ram"
    assert second.metrics.cached_tokens >= first.metrics.prompt_tokens - 1  # less its last
    # The restored cells answer as a cold read of the whole conversation does.
    cold_params = params(starter_model, extra_bufts, tmp_path / "cold", n_ctx=1024)
    with EngineClient(1) as cold:
        cold.load(cold_params)
        assert ask(cold, "cold", a_again, greedy).text == second.text


def test_a_request_waits_for_cells_rather_than_cut_a_running_reply(two):
    pool = two.loaded.n_ctx
    sampling = Sampling(temperature=0, max_tokens=pool // 2, ignore_eos=True)
    running = two.chat("first", [ChatMessage("user", long_text(20))], sampling)
    events = running.events()
    while not isinstance(next(events), TextDelta):
        pass  # it runs: its prompt and whole reply are promised
    second = two.chat("second", [ChatMessage("user", long_text(22))], sampling)
    thread = threading.Thread(target=second.wait)  # a reply is sent when first read
    thread.start()
    for _ in events:
        pass
    thread.join(300)
    assert running.ok and running.done.finish_reason == "length"
    assert running.done.metrics.generated_tokens == pool // 2
    assert second.ok and second.done.finish_reason == "length"
    assert second.done.metrics.generated_tokens == pool // 2
    # It could not start beside the first (the two do not fit the pool together) though a
    # slot was free: it waited, then took the first's slot, whose cells share its prefix (the
    # free slot held nothing).
    assert second.done.metrics.cached_tokens > 100


def test_finished_conversations_leave_the_pool_for_the_cache_and_their_prompts_serve_others(two):
    """Without flash attention every step reads the pool's whole used span: a finished
    conversation's cells go to the state cache once they outnumber the running request's
    (llama-server's --cache-idle-slots), and another conversation whose prompt begins as a
    saved one's takes its cells from there (a prompt cache keyed by tokens)."""
    greedy = Sampling(temperature=0, max_tokens=12, ignore_eos=True)
    a_key, b_key, c_key = (uuid.uuid4().hex for _ in range(3))
    a_turn = [ChatMessage("user", long_text(40))]  # too long for B to take A's slot
    first = ask(two, a_key, a_turn, greedy)
    assert first.metrics.prompt_tokens - 1 <= two.status().kv_cells_used <= first.metrics.n_past
    before = two.status().kv_evictions
    b = ask(two, b_key, [ChatMessage("user", "Name three rivers of Europe.")], greedy)
    status = two.status()
    assert status.kv_evictions == before + 1  # A's cells outnumbered B's prompt
    assert status.kv_cells_used <= b.metrics.n_past  # only B's stay
    assert a_key in status.cached_conversations
    # C asks A's question: A's saved state gives it the prompt (all but its last token).
    c = ask(two, c_key, a_turn, greedy)
    assert c.metrics.restored_from == "ram"
    assert c.metrics.cached_tokens == c.metrics.prompt_tokens - 1
    assert c.metrics.evaluated_tokens == 1
