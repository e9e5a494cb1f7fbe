"""Prompt caching with the real engine: prefix reuse, switching conversations, restart."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

from engine_helpers import collect, wait_for

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Sampling

SHORT = Sampling(temperature=0.0, max_tokens=12, seed=1)
PARAGRAPH = "The keeper logged wind, sea colour, passing ships and resting birds each evening. "


def conversation(tag: str, turns: int = 4) -> list[ChatMessage]:
    messages = [ChatMessage("system", f"You are helpful. ({tag})")]
    for i in range(turns):
        messages += [
            ChatMessage("user", f"Part {i} please ({tag})."),
            ChatMessage("assistant", PARAGRAPH * 3),
        ]
    return messages + [ChatMessage("user", "Go on.")]


def turn(engine, cid: str, messages: list[ChatMessage]):
    return collect(engine.chat(cid, messages, SHORT)).done


def test_next_turn_evaluates_only_new_tokens(engine):
    cid = uuid.uuid4().hex
    history = conversation("prefix")
    first = turn(engine, cid, history)
    assert first.metrics.cached_tokens == 0 or first.metrics.restored_from is None
    assert first.metrics.evaluated_tokens == first.metrics.prompt_tokens > 250
    follow = history + [ChatMessage("assistant", first.text), ChatMessage("user", "Thanks!")]
    second = turn(engine, cid, follow)
    m = second.metrics
    # All but the prompt's last token: it and the reply were decoded one by one (see
    # Scheduler's prompt reading) and are read again with the new turn.
    assert m.cached_tokens >= first.metrics.prompt_tokens - 1
    assert m.evaluated_tokens < 40
    assert m.cached_tokens + m.evaluated_tokens == m.prompt_tokens


def test_switching_back_restores_the_state_from_ram(engine):
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    hist_a, hist_b = conversation("A"), conversation("B")
    first_a = turn(engine, a, hist_a)
    turn(engine, b, hist_b)
    back = turn(engine, a, hist_a + [ChatMessage("assistant", first_a.text),
                                     ChatMessage("user", "More.")])
    assert back.metrics.restored_from == "ram"
    assert back.metrics.cached_tokens >= first_a.metrics.prompt_tokens - 1
    assert back.metrics.evaluated_tokens < 40


def test_states_survive_a_restart_on_disk(load_params):
    params = load_params()
    cid = uuid.uuid4().hex
    history = conversation("disk")
    with EngineClient() as client:
        client.load(params)
        first = turn(client, cid, history)
    # close() wrote the state of the conversation in use to the disk cache.
    with EngineClient() as client:
        client.load(params)
        again = turn(client, cid, history + [ChatMessage("assistant", first.text),
                                             ChatMessage("user", "Continue.")])
    assert again.metrics.restored_from == "disk"
    assert again.metrics.cached_tokens >= first.metrics.prompt_tokens - 1
    assert again.metrics.evaluated_tokens < 40


def test_a_stale_state_is_never_used(load_params):
    params = load_params()
    cid = uuid.uuid4().hex
    history = conversation("stale")
    with EngineClient() as client:
        client.load(params)
        turn(client, cid, history)
    # Another attention kernel: the state's guard no longer matches. (Another context length
    # does: a sequence's state does not depend on the pool it was saved from.)
    with EngineClient() as client:
        client.load(replace(params, n_ctx=1024))
        assert turn(client, cid, history).metrics.restored_from in ("ram", "disk")
    with EngineClient() as client:
        client.load(replace(params, flash_attn=not params.flash_attn))
        again = turn(client, cid, history)
    assert again.metrics.restored_from is None
    assert again.metrics.cached_tokens == 0


def test_ram_budget_zero_spills_to_disk(load_params):
    params = load_params(kv_ram_budget_mb=0)
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    with EngineClient() as client:
        client.load(params)
        first = turn(client, a, conversation("spill-A"))
        turn(client, b, conversation("spill-B"))
        # A's state went to the disk writer when B took over: until its file is written it
        # would be restored from memory.
        assert wait_for(lambda: list(Path(params.kv_disk_dir).glob(f"{a}.*.kv")), 30)
        back = turn(client, a, conversation("spill-A"))
    assert back.metrics.restored_from == "disk"
    assert back.metrics.cached_tokens >= first.metrics.prompt_tokens - 1


def test_context_overflow_drops_oldest_turns_but_keeps_the_system_prompt(load_params):
    params = load_params(n_ctx=512)
    system = "You are Ada, the keeper of the northern lighthouse, who answers in short sentences. "
    long_history = [ChatMessage("system", system * 2)]
    for i in range(12):
        long_history += [
            ChatMessage("user", f"Question {i}: tell me more."),
            ChatMessage("assistant", PARAGRAPH * 2),
        ]
    long_history.append(ChatMessage("user", "What is your name?"))
    with EngineClient() as client:
        client.load(params)
        cid = uuid.uuid4().hex
        done = collect(client.chat(cid, long_history, SHORT)).done
        assert done.dropped_messages >= 2 and done.dropped_messages % 2 == 0
        assert any("left out" in w for w in done.warnings)
        assert done.metrics.prompt_tokens + SHORT.max_tokens <= 512
        # The system prompt was kept: the KV cache now starts with it, so a prompt of just
        # the system prompt and a question shares those ~40 tokens with it.
        follow = collect(client.chat(cid, [long_history[0], long_history[-1]], SHORT)).done
        assert follow.metrics.cached_tokens >= 35
        # A single message that cannot fit is a clear error, and the engine keeps working.
        huge = collect(client.chat(uuid.uuid4().hex, [ChatMessage("user", PARAGRAPH * 60)],
                                   SHORT))
        assert huge.final.kind == "context" and "does not fit" in huge.final.reason
        assert collect(client.chat(uuid.uuid4().hex, [long_history[-1]], SHORT)).done.text


def test_quantized_kv_cache_with_flash_attention(load_params):
    params = load_params(kv_type="q8_0", flash_attn=True, n_ctx=1024)
    cid = uuid.uuid4().hex
    with EngineClient() as client:
        loaded = client.load(params)
        assert loaded.n_ctx == 1024
        # llama.cpp's own report: the KV buffer of a q8_0 cache is about half of f16's.
        kv = sum(v for k, v in loaded.buffers.items() if k.endswith(" KV"))
        assert kv > 0
        first = turn(client, cid, conversation("q8"))
        second = turn(client, cid, conversation("q8") + [
            ChatMessage("assistant", first.text), ChatMessage("user", "And then?")])
    assert first.text and second.metrics.cached_tokens >= first.metrics.prompt_tokens - 1
    with EngineClient() as client:
        f16 = client.load(load_params(n_ctx=1024))
    kv_f16 = sum(v for k, v in f16.buffers.items() if k.endswith(" KV"))
    assert 0.4 < kv / kv_f16 < 0.65


def test_itl_percentiles_are_reported(engine):
    s = Sampling(temperature=0.0, max_tokens=30, ignore_eos=True)
    done = collect(engine.chat(uuid.uuid4().hex, [ChatMessage("user", "Count.")], s)).done
    m = done.metrics
    assert m.itl_p50_ms and m.itl_p95_ms and 0 < m.itl_p50_ms <= m.itl_p95_ms
    # Milliseconds, and the same decode as tg_tps: at least half the gaps are >= p50, so the
    # mean gap (1 / tg_tps) is >= p50 / 2. A loaded machine skews the gaps, so no tighter
    # bound holds; a unit slip (seconds, or tokens/ms) is off by 1000x and fails either way.
    assert m.tg_tps and m.tg_tps <= 2000 / m.itl_p50_ms * 1.01
    assert m.tg_tps >= 1000 / m.itl_p95_ms / 20


# A cached reply is the reply: warm equals cold, token for token --------------------------------
# Greedy, and long enough that the conversation passes 256 positions, where llama.cpp's CPU
# one-token decode starts to round differently from a batched one.
GREEDY = Sampling(temperature=0.0, top_k=1, max_tokens=48, ignore_eos=True)


def greedy(client: EngineClient, cid: str, messages: list[ChatMessage]):
    return collect(client.chat(cid, messages, GREEDY)).done


def cold_reply(params, messages: list[ChatMessage]) -> str:
    """The reply of a fresh engine with nothing cached: the reference."""
    with EngineClient() as client:
        client.load(params)
        done = greedy(client, uuid.uuid4().hex, messages)
    assert done.metrics.cached_tokens == 0 and done.metrics.restored_from is None
    return done.text


def away_and_back(params) -> tuple[list[ChatMessage], object]:
    """A turn in conversation A, one in B, then A's next turn (its state restored)."""
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    history = conversation("A")
    with EngineClient() as client:
        client.load(params)
        first = greedy(client, a, history)
        greedy(client, b, conversation("B"))
        follow = history + [ChatMessage("assistant", first.text), ChatMessage("user", "Thanks!")]
        back = greedy(client, a, follow)
    return follow, back


def test_a_reply_after_prefix_reuse_equals_a_cold_evaluation(load_params):
    params = load_params()
    cid = uuid.uuid4().hex
    history = conversation("A")
    with EngineClient() as client:
        client.load(params)
        first = greedy(client, cid, history)
        follow = history + [ChatMessage("assistant", first.text), ChatMessage("user", "Thanks!")]
        second = greedy(client, cid, follow)
    assert second.metrics.cached_tokens > 250
    assert second.text == cold_reply(params, follow)


def test_a_reply_after_a_ram_restore_equals_a_cold_evaluation(load_params):
    params = load_params()
    follow, back = away_and_back(params)
    assert back.metrics.restored_from == "ram" and back.metrics.cached_tokens > 250
    assert back.text == cold_reply(params, follow)


def test_a_reply_after_a_disk_restore_equals_a_cold_evaluation(load_params):
    params = load_params(kv_ram_budget_mb=0)
    follow, back = away_and_back(params)
    assert back.metrics.restored_from == "disk" and back.metrics.cached_tokens > 250
    assert back.text == cold_reply(params, follow)


def test_quantized_kv_replies_after_reuse_and_restore_equal_cold_ones(load_params):
    # Measured on the CPU with q8_0 K and V and flash attention: one-token and batched decodes
    # give bit-identical logits (flash attention runs the same kernel for both), and a state
    # holds the quantized cells as they were. So the tolerance is zero: the whole greedy reply
    # equals the cold one, as with f16 (where only cells of multi-token decodes are reused).
    params = load_params(kv_type="q8_0", flash_attn=True, kv_ram_budget_mb=0)
    a = uuid.uuid4().hex
    history = conversation("q8")
    with EngineClient() as client:
        client.load(params)
        first = greedy(client, a, history)
        follow = history + [ChatMessage("assistant", first.text), ChatMessage("user", "Thanks!")]
        reused = greedy(client, a, follow)
        greedy(client, uuid.uuid4().hex, conversation("other"))
        more = follow + [ChatMessage("assistant", reused.text), ChatMessage("user", "More.")]
        restored = greedy(client, a, more)
    assert reused.metrics.cached_tokens > 250 and restored.metrics.restored_from == "disk"
    assert reused.text == cold_reply(params, follow)
    assert restored.text == cold_reply(params, more)
