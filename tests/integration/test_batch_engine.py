"""The engine's client with several slots on its own (no server): replies read on several threads at
once, per-request cancel of a waiting request, and every open reply ending with Exited when
the engine process dies, then a fresh engine for the next request."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from engine_helpers import wait_for

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Done, Exited, LoadParams, Sampling, TextDelta
from deskllm.loader import ModelLoader
from deskllm.planner.machine import current_hardware

ENDLESS = Sampling(temperature=0, max_tokens=1500, ignore_eos=True)


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory, starter_model: Path, extra_bufts: bool):
    client = EngineClient(2)
    loaded = client.load(LoadParams(str(starter_model), n_ctx=2048, n_threads=2,
                                    use_extra_bufts=extra_bufts))  # fmt: skip
    assert loaded.n_ctx == 2 * 2048 and client.conversation_ctx == 2 * 2048  # one pool
    yield client
    client.close()


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage("user", text)]


def read_in_thread(reply) -> tuple[threading.Thread, list]:
    events: list = []
    thread = threading.Thread(target=lambda: events.extend(reply.events()))
    thread.start()
    return thread, events


def first_text(events: list) -> bool:
    return any(isinstance(e, TextDelta) for e in events)


def test_a_request_cancelled_while_it_waits_for_a_slot_ends_at_once(batch):
    running = [batch.chat("a", user(q), ENDLESS) for q in ("Tell a story.", "Count to 100.")]
    readers = [read_in_thread(r) for r in running]
    try:
        assert wait_for(lambda: all(first_text(ev) for _t, ev in readers), 120)
        waiting = batch.chat("b", user("What is 2 + 2?"), ENDLESS)
        thread, events = read_in_thread(waiting)
        waiting.cancel()
        thread.join(60)
        assert not thread.is_alive()
        done = events[-1]
        assert isinstance(done, Done) and done.finish_reason == "cancelled"
        assert done.metrics.generated_tokens == 0 and done.text == ""
        assert all(t.is_alive() for t, _ev in readers)  # the two running replies go on
    finally:
        for reply in running:
            reply.cancel()
        for t, _ev in readers:
            t.join(60)
    assert all(r.finish_reason == "cancelled" and r.metrics.generated_tokens > 0
               for r in running)  # fmt: skip


def test_a_killed_engine_ends_every_open_reply_and_the_next_starts_afresh(batch):
    replies = [batch.chat("k", user(q), ENDLESS) for q in ("Tell a story.", "Name colours.")]
    readers = [read_in_thread(r) for r in replies]
    assert wait_for(lambda: all(first_text(ev) for _t, ev in readers), 120)
    old_pid = batch.pid
    batch.kill()
    for t, _ev in readers:
        t.join(60)
    for reply, (_t, events) in zip(replies, readers, strict=True):
        assert isinstance(events[-1], Exited) and "SIGKILL" in events[-1].reason
        assert reply.error is not None and reply.error.kind == "exited"
    again = batch.chat("k", user("What is 2 + 2?"), Sampling(temperature=0, max_tokens=8)).wait()
    assert again.ok and again.text and batch.pid not in (None, old_pid)


def test_a_conversation_that_does_not_fit_the_pool_fails_or_loses_old_turns(batch):
    long = [ChatMessage("user", "Tell me about boxes. " * 600),
            ChatMessage("assistant", "Boxes are containers. " * 600),
            ChatMessage("user", "Summarise.")]  # fmt: skip
    sampling = Sampling(temperature=0, max_tokens=4)
    refused = batch.chat("fit", long, sampling, drop_old_turns=False).wait()
    assert refused.error is not None and refused.error.kind == "context"
    trimmed = batch.chat("fit", long, sampling).wait()
    assert trimmed.ok and trimmed.done.dropped_messages == 2


def test_the_loader_plans_every_slots_kv_cache_as_llama_cpp_allocates_it(
    batch, starter_model: Path, extra_bufts: bool
):
    hardware = current_hardware()
    assert hardware is not None
    params = LoadParams(str(starter_model), n_ctx=2048, n_threads=2, use_extra_bufts=extra_bufts)
    one = ModelLoader(batch, hardware=hardware, slots=1).check(params).plan.estimate.buffer("kv")
    two = ModelLoader(batch, hardware=hardware, slots=2).check(params).plan.estimate.buffer("kv")
    assert two == 2 * one
    # What the batch engine's llama.cpp allocated for its two 2048-token slots.
    real = sum(size for name, size in batch.loaded.buffers.items() if name.endswith(" KV"))
    assert abs(two - real) <= 0.02 * real, (two, real)


def test_one_step_sends_every_running_replys_events_in_one_message(batch, monkeypatch):
    steps: list[tuple] = []
    deliver = EngineClient._deliver_step

    def record(self, events):
        steps.append(events)
        deliver(self, events)

    monkeypatch.setattr(EngineClient, "_deliver_step", record)
    short = Sampling(temperature=0, max_tokens=24, ignore_eos=True)
    replies = [batch.chat("s", user(q), short) for q in ("Tell a story.", "Name colours.")]
    readers = [read_in_thread(r) for r in replies]
    for t, _ev in readers:
        t.join(120)
    assert all(r.finish_reason == "length" for r in replies)
    # Both replies' text in one message: the worker sends a step's events together.
    assert any(len({e.request_id for e in step if isinstance(e, TextDelta)}) == 2
               for step in steps)  # fmt: skip
    texts = ["".join(e.text for e in ev if isinstance(e, TextDelta)) for _t, ev in readers]
    assert [r.text for r in replies] == texts


class Recorder:
    """A start() callback: every call's events and the thread it ran on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list]] = []
        self.ended = threading.Event()

    def __call__(self, events: list) -> None:
        self.calls.append((threading.current_thread().name, list(events)))
        if isinstance(events[-1], Done | Exited):
            self.ended.set()

    @property
    def events(self) -> list:
        return [e for _name, events in self.calls for e in events]


def test_started_replies_get_their_events_on_the_reader_thread_step_by_step(batch):
    short = Sampling(temperature=0, max_tokens=24, ignore_eos=True)
    questions = ("Tell a story.", "Name colours.")
    recorders = [Recorder() for _ in questions]
    rids = [batch.start("cb", user(q), short, r) for q, r in zip(questions, recorders, strict=True)]
    for recorder in recorders:
        assert recorder.ended.wait(120)
    for rid, recorder in zip(rids, recorders, strict=True):
        assert {name for name, _ev in recorder.calls} == {"deskllm-engine-events"}
        assert all(e.request_id == rid for e in recorder.events)
        done = recorder.events[-1]
        assert isinstance(done, Done) and done.finish_reason == "length"
        assert done.text == "".join(e.text for e in recorder.events if isinstance(e, TextDelta))
        assert rid not in batch._mailboxes  # its last event closed it
    # Each its own reply: as read through chat() (greedy, each alone), up to where batching
    # may flip a near tie (see test_server_parallel.NEAR_TIE).
    alone = [batch.chat("cb", user(q), short).wait().text for q in questions]
    assert alone[0][:12] != alone[1][:12]
    assert [r.events[-1].text[:12] for r in recorders] == [text[:12] for text in alone]


def test_a_started_reply_is_cancelled_by_id_and_ends_with_exited_when_the_engine_dies(batch):
    cancelled, killed = Recorder(), Recorder()
    rid = batch.start("cb", user("Tell a story."), ENDLESS, cancelled)
    batch.start("cb", user("Name colours."), ENDLESS, killed)
    assert wait_for(lambda: first_text(cancelled.events) and first_text(killed.events), 120)
    batch.cancel_request(rid)
    assert cancelled.ended.wait(60)
    done = cancelled.events[-1]
    assert isinstance(done, Done) and done.finish_reason == "cancelled"
    assert not killed.ended.is_set()  # the other reply goes on
    batch.kill()
    assert killed.ended.wait(60)
    assert isinstance(killed.events[-1], Exited) and "SIGKILL" in killed.events[-1].reason
    assert batch.crashes == 1
    again = Recorder()
    batch.start("cb", user("What is 2 + 2?"), Sampling(temperature=0, max_tokens=8), again)
    assert again.ended.wait(120) and isinstance(again.events[-1], Done)  # a fresh engine
    assert batch.crashes == 0  # a finished reply ends the run of crashes, as a read one does
