"""Requests whose prompts start the same way share that prefix's KV cells: a request takes the
prefix another slot holds by reference (llama_memory_seq_cp), and requests that arrive while
one reads a long shared prefix wait for it and take it, instead of each reading it again.
The starter model, greedy replies."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest
from engine_helpers import system_and_user

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import Done, LoadParams, Sampling, TextDelta

REPLY = Sampling(temperature=0, max_tokens=16, ignore_eos=True)
TOPICS = ["keys", "doors", "lamps", "desks", "cups", "maps", "pens", "bags"]
QUESTIONS = [f"Question {i}: what does rule {i} say about {t}?" for i, t in enumerate(TOPICS)]


def system_prompt(rules: int) -> str:
    return "You answer questions about the house rules. " + " ".join(
        f"Rule {i}: the item number {i} stays in room {i % 7} unless moved." for i in range(rules)
    )


def params(model: Path, extra_bufts: bool, kv_dir: Path, n_ctx: int = 2048) -> LoadParams:
    return LoadParams(str(model), n_ctx=n_ctx, n_threads=2, use_extra_bufts=extra_bufts,
                      kv_disk_dir=str(kv_dir))  # fmt: skip


def wave(client: EngineClient, system: str, questions: list[str]) -> list[Done]:
    """Every question at once, each with the system prompt (sent together: each reply is
    read on its own thread, and a reply is sent when first read)."""
    replies = [client.chat(f"wave-{i}", system_and_user(system, q), REPLY)
               for i, q in enumerate(questions)]  # fmt: skip
    threads = [threading.Thread(target=r.wait) for r in replies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for r in replies:
        assert r.ok, r.error
    return [r.done for r in replies]


@pytest.fixture(scope="module")
def eight(tmp_path_factory, starter_model: Path, extra_bufts: bool):
    with EngineClient(8) as client:
        client.load(params(starter_model, extra_bufts, tmp_path_factory.mktemp("kv")))
        yield client


def test_eight_requests_with_one_long_system_prompt_read_and_store_it_once(eight):
    system = system_prompt(75)
    done = wave(eight, system, QUESTIONS)
    prompts = [d.metrics.prompt_tokens for d in done]
    assert min(prompts) > 1300  # a long shared prefix
    evaluated = sum(d.metrics.evaluated_tokens for d in done)
    # The prefix is read once; the rest is each question and its chat-template tags (< 40).
    prefix = min(prompts) - 40
    suffixes = sum(p - prefix for p in prompts)
    assert evaluated <= 1.15 * (prefix + suffixes)
    assert sorted(d.metrics.cached_tokens > prefix for d in done) == [False] + [True] * 7
    status = eight.status()
    assert status.prefix_hits >= 7 and status.prefix_tokens >= 7 * prefix
    # Stored once too: the pool holds the prefix, the eight questions and their replies.
    replies = sum(d.metrics.generated_tokens for d in done)
    assert status.kv_cells_used <= 1.2 * (prefix + suffixes + replies)


def test_a_prompt_takes_the_prefix_a_finished_slot_holds(eight):
    system = system_prompt(30)
    first = wave(eight, system, QUESTIONS[:1])[0]
    later = wave(eight, system, QUESTIONS[1:2])[0]  # another conversation, another slot
    assert later.metrics.cached_tokens >= first.metrics.prompt_tokens - 40
    assert later.metrics.evaluated_tokens < 40


@pytest.mark.parametrize("n_slots", [1, 4])
def test_replies_after_a_shared_prefix_are_the_replies_of_a_cold_read(
    n_slots, tmp_path, starter_model: Path, extra_bufts: bool
):
    """One slot: each question in turn, the slot's own prefix reused: the replies are a cold
    read's token for token. Four: all at once, the prefix taken by reference from the slot
    that read it; batching moves log-probabilities a little (docs/server.md, "Replies"), so
    the first token, computed from the shared cells and the question's own, must be the cold
    read's with its log-probability within 0.05 nats, and the first two tokens the same."""
    system = system_prompt(20)
    questions = QUESTIONS[:3]
    sampling = replace(REPLY, token_logprobs=True)
    with EngineClient(n_slots) as client:
        client.load(params(starter_model, extra_bufts, tmp_path / "kv"))
        if n_slots == 1:
            shared = [first_tokens(client, f"s{i}", system, q, sampling)
                      for i, q in enumerate(questions)]  # fmt: skip
        else:
            shared: list = [None] * len(questions)

            def one(i: int) -> None:
                shared[i] = first_tokens(client, f"s{i}", system, questions[i], sampling)

            threads = [threading.Thread(target=one, args=(i,)) for i in range(len(questions))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(600)
        assert client.status().prefix_hits >= (0 if n_slots == 1 else 2)
    assert sum(done.metrics.cached_tokens > 100 for done, _lp in shared) >= 2  # shared
    no_states = replace(params(starter_model, extra_bufts, tmp_path / "cold"),
                        kv_ram_budget_mb=0, kv_disk_budget_mb=0)  # fmt: skip
    with EngineClient(1) as cold:
        alone = []
        for q in questions:
            cold.load(no_states)  # a fresh context: every reply is a cold read
            alone.append(first_tokens(cold, "cold", system, q, sampling))
    for (done, logprobs), (cold_done, cold_logprobs) in zip(shared, alone, strict=True):
        if n_slots == 1:
            assert done.text == cold_done.text
            continue
        assert [t.token for t in logprobs[:2]] == [t.token for t in cold_logprobs[:2]]
        assert abs(logprobs[0].logprob - cold_logprobs[0].logprob) < 0.05


def first_tokens(client: EngineClient, key: str, system: str, question: str,
                 sampling: Sampling) -> tuple[Done, list]:  # fmt: skip
    """The reply and its tokens' log-probabilities."""
    logprobs: list = []
    reply = client.chat(key, system_and_user(system, question), sampling)
    for event in reply.events():
        if isinstance(event, TextDelta):
            logprobs.extend(event.logprobs)
    assert reply.ok, reply.error
    return reply.done, logprobs
