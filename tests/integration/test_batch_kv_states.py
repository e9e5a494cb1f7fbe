"""The engine keeps a conversation's KV cells in the conversation state cache (RAM, then disk)
when another conversation takes its slot, and restores them on its next turn; the files are
kept as one stream, so an engine with one slot and one with several restore each other's.

Two slots, the starter model, greedy replies. Conversation A is answered, then two other
conversations take the slots (the starter model's template starts every prompt with the same
system prompt, so each takes the slot holding the longest match: A's first)."""

from __future__ import annotations

import shutil
import threading
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from engine_helpers import collect, system_and_user, wait_for

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Done, LoadParams, Sampling

GREEDY = Sampling(temperature=0, max_tokens=24)
QUESTION = "Name three colours of the sea."
FOLLOW_UP = "Which one of them is the darkest?"


@dataclass(frozen=True)
class PushedOut:
    """A's first turn, A's second turn after two other conversations took the slots, and the
    folder of the state files left when that engine was closed."""

    params: LoadParams
    key: str
    first: Done
    second: Done
    turn_two: list[ChatMessage]


def params_for(model: Path, extra_bufts: bool, kv_dir: Path, **more) -> LoadParams:
    return LoadParams(str(model), n_ctx=2048, n_threads=2, use_extra_bufts=extra_bufts,
                      kv_disk_dir=str(kv_dir), **more)  # fmt: skip


def ask(client, key: str, messages: list[ChatMessage], sampling: Sampling = GREEDY) -> Done:
    reply = client.chat(key, messages, sampling).wait()
    assert reply.ok, reply.error
    return reply.done


def state_files(kv_dir: Path, key: str) -> list[Path]:
    return sorted(kv_dir.glob(f"{key}.*.kv"))


@pytest.fixture(scope="module")
def pushed_out(tmp_path_factory, starter_model: Path, extra_bufts: bool) -> PushedOut:
    params = params_for(starter_model, extra_bufts, tmp_path_factory.mktemp("kv"))
    key = uuid.uuid4().hex
    with EngineClient(2) as client:
        client.load(params)
        first = ask(client, key, [ChatMessage("user", QUESTION)])
        # Its reply is read again for the state cache while no request runs (the work gives
        # way to any request that comes): once done, the whole turn is kept.
        assert wait_for(lambda: client.status().unread_tokens == 0)
        for text in ("Tell me about cats.", "What is the capital of Peru?"):
            ask(client, uuid.uuid4().hex, [ChatMessage("user", text)])
        turn_two = [ChatMessage("user", QUESTION), ChatMessage("assistant", first.text),
                    ChatMessage("user", FOLLOW_UP)]  # fmt: skip
        second = ask(client, key, turn_two)
    return PushedOut(params, key, first, second, turn_two)


@pytest.fixture(scope="module")
def cold(pushed_out: PushedOut, tmp_path_factory) -> Done:
    """A's second turn read whole by a fresh engine that keeps no states."""
    params = replace(pushed_out.params, kv_disk_dir=str(tmp_path_factory.mktemp("kv-none")),
                     kv_ram_budget_mb=0, kv_disk_budget_mb=0)  # fmt: skip
    with EngineClient(2) as client:
        client.load(params)
        return ask(client, uuid.uuid4().hex, pushed_out.turn_two)


def copy_dir(pushed_out: PushedOut, to: Path) -> LoadParams:
    shutil.copytree(pushed_out.params.kv_disk_dir, to)
    return replace(pushed_out.params, kv_disk_dir=str(to))


def test_a_conversation_pushed_out_of_its_slot_is_restored_not_read_again(pushed_out, cold):
    first, second = pushed_out.first.metrics, pushed_out.second.metrics
    assert second.restored_from == "ram"
    # Its first prompt and reply came back: only the new question (and the reply's last
    # token, never decoded, plus a token or two where the reply is tokenized again) is read.
    assert second.cached_tokens > first.prompt_tokens
    assert second.cached_tokens >= first.prompt_tokens + first.generated_tokens - 4
    assert second.evaluated_tokens == second.prompt_tokens - second.cached_tokens
    assert cold.metrics.cached_tokens < first.prompt_tokens  # it did read the history
    assert pushed_out.second.text == cold.text and cold.text


def test_a_conversation_continued_in_its_slot_reuses_its_reply_and_answers_as_a_cold_read(
    pushed_out, cold, tmp_path
):
    # No state cache: the slot alone. Its reply, decoded a token a step, was read again
    # batched before the next turn, so the turn reuses it and still equals a cold read.
    params = replace(pushed_out.params, kv_disk_dir=str(tmp_path),
                     kv_ram_budget_mb=0, kv_disk_budget_mb=0)  # fmt: skip
    key = uuid.uuid4().hex
    with EngineClient(2) as client:
        client.load(params)
        first = ask(client, key, [ChatMessage("user", QUESTION)])
        second = ask(client, key, pushed_out.turn_two)
    assert first.text == pushed_out.first.text
    assert second.metrics.restored_from is None
    assert second.metrics.cached_tokens >= (
        first.metrics.prompt_tokens + first.metrics.generated_tokens - 4
    )
    assert second.text == cold.text


def test_the_state_file_written_at_close_is_restored_by_a_fresh_engine(pushed_out, cold, tmp_path):
    params = copy_dir(pushed_out, tmp_path / "kv")
    assert len(state_files(tmp_path / "kv", pushed_out.key)) == 1
    with EngineClient(2) as client:
        client.load(params)
        again = ask(client, pushed_out.key, pushed_out.turn_two)
    # The file was written at close, after the second turn: it holds that whole prompt.
    assert again.metrics.restored_from == "disk"
    assert again.metrics.cached_tokens == again.metrics.prompt_tokens - 1
    assert again.text == cold.text


def test_forget_removes_the_conversations_states(pushed_out, tmp_path):
    kv_dir = tmp_path / "kv"
    params = copy_dir(pushed_out, kv_dir)
    key = pushed_out.key
    with EngineClient(2) as client:
        client.load(params)
        kept = ask(client, key, pushed_out.turn_two)  # now also in a slot and in RAM
        assert kept.metrics.restored_from == "disk"
        client.forget(key)
        assert wait_for(lambda: not state_files(kv_dir, key), 30)
        # Neither the cache nor the slot it left holds it: the whole prompt is read again,
        # but for the system prompt another conversation's slot still shares.
        other = ask(client, uuid.uuid4().hex, [ChatMessage("user", "Count to three.")])
        assert other.metrics.restored_from is None
        forgotten = ask(client, key, pushed_out.turn_two)
        assert forgotten.metrics.restored_from is None
        assert forgotten.metrics.cached_tokens < pushed_out.first.metrics.prompt_tokens
    # Closing saved its new cells again; with no engine running, forget deletes the files.
    assert state_files(kv_dir, key)
    client.params = params
    client.forget(key)
    assert not state_files(kv_dir, key)


def test_one_slot_and_two_slots_restore_each_others_states(
    pushed_out, cold, tmp_path
):
    # The two-slot engine's file, restored by a one-slot engine.
    params = copy_dir(pushed_out, tmp_path / "kv")
    with EngineClient() as single:
        single.load(params)
        reply = collect(single.chat(pushed_out.key, pushed_out.turn_two, GREEDY)).done
    assert reply.metrics.restored_from == "disk"
    assert reply.metrics.cached_tokens == reply.metrics.prompt_tokens - 1
    # A lone greedy reply is the same with one slot or two, restored or read cold.
    assert reply.text == cold.text
    # The one-slot engine's file (written when it closed), restored by the two-slot one.
    key = uuid.uuid4().hex
    kv_dir = tmp_path / "kv-single"
    params = replace(params, kv_disk_dir=str(kv_dir))
    with EngineClient() as single:
        single.load(params)
        first = collect(single.chat(key, [ChatMessage("user", QUESTION)], GREEDY)).done
    assert len(state_files(kv_dir, key)) == 1
    turn_two = [ChatMessage("user", QUESTION), ChatMessage("assistant", first.text),
                ChatMessage("user", FOLLOW_UP)]  # fmt: skip
    with EngineClient(2) as client:
        client.load(params)
        second = ask(client, key, turn_two)
    # The file holds the cells of the first prompt but its last token (decoded alone), and
    # of the reply if the engine read them again before it closed.
    assert second.metrics.restored_from == "disk"
    assert second.metrics.cached_tokens >= first.metrics.prompt_tokens - 1
    assert first.text == pushed_out.first.text
    assert second.text == cold.text


def test_with_flash_attention_a_conversation_restored_where_others_ran_at_once_answers_as_kept(
    starter_model: Path, extra_bufts: bool, tmp_path
):
    """Without flash attention llama.cpp's attention sums run over the whole pool in vector
    lanes set by where the cells sit, so a conversation restored into cells that concurrent
    requests used may answer slightly otherwise (docs/server.md, "Where the cells sit"; this
    test fails without it). With it, the masked cells are skipped and the sums run over the
    conversation's own cells in order: the restored reply is the one the conversation gets
    when it keeps its slot, token for token."""

    # Replies of a fixed length: the pool's layout then does not hang on where a reply ends
    # (which another CPU's rounding may move).
    fixed = replace(GREEDY, ignore_eos=True)

    def others(client: EngineClient) -> None:
        """Another conversation, then two at once: both slots are used."""
        chat = system_and_user("You answer in one line.", "Tell me about cats.")
        ask(client, uuid.uuid4().hex, chat, fixed)
        answered: list[Done] = []

        def one(system: str, question: str) -> None:
            answered.append(ask(client, uuid.uuid4().hex, system_and_user(system, question), fixed))

        pair = [threading.Thread(target=one, args=chat)
                for chat in (("Geography teacher here.", "Capital of Peru?"),
                             ("Be brief.", "Name a river."))]  # fmt: skip
        for t in pair:
            t.start()
        for t in pair:
            t.join(300)
        assert len(answered) == 2  # a failed ask raises on its own thread

    def second_turn(busy: bool, kv_dir: Path) -> Done:
        params = params_for(starter_model, extra_bufts, kv_dir, flash_attn=True)
        key = uuid.uuid4().hex
        with EngineClient(2) as client:
            client.load(params)
            first = ask(client, key, [ChatMessage("user", QUESTION)], fixed)
            assert wait_for(lambda: client.status().unread_tokens == 0)
            if busy:
                others(client)
                assert wait_for(lambda: client.status().unread_tokens == 0)
            turn_two = [ChatMessage("user", QUESTION), ChatMessage("assistant", first.text),
                        ChatMessage("user", FOLLOW_UP)]  # fmt: skip
            return ask(client, key, turn_two, fixed)

    kept = second_turn(False, tmp_path / "kept")
    restored = second_turn(True, tmp_path / "restored")
    assert kept.metrics.restored_from is None
    assert restored.metrics.restored_from == "ram"
    assert restored.metrics.cached_tokens == kept.metrics.cached_tokens
    assert restored.text == kept.text and kept.text
