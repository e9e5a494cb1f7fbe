"""A real reply's energy figures, on the real engine with the starter model: the source the
machine's counters give (none in most VMs), and with a watts figure entered, joules = watts x
seconds labelled estimated, stored with the message."""

from __future__ import annotations

import time
import uuid

import pytest
from engine_helpers import collect

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Sampling
from deskllm.hardware.energy import energy_report
from deskllm.store import ConversationStore, open_database
from deskllm.store.chat_session import ChatSession

LONG = Sampling(temperature=0.0, max_tokens=24, ignore_eos=True)


def cpu_source() -> str | None:
    """What this machine's CPU counters give (the engine runs on the CPU here)."""
    counted = [s for s in energy_report(nvml=lambda: ([], [], None))["sensors"] if s["counted"]]
    return "rapl" if counted else None


@pytest.fixture(scope="module")
def client():
    client = EngineClient()
    yield client
    client.close()


def test_a_reply_carries_the_machines_energy_source(client, load_params):
    client.load(load_params())
    started = time.perf_counter()
    m = collect(client.chat(uuid.uuid4().hex, [ChatMessage("user", "Hi")], LONG)).done.metrics
    wall = time.perf_counter() - started
    assert m.energy_source == cpu_source()
    if m.energy_source is None:  # no readable counter and no watts figure: nothing made up
        assert (m.joules, m.joules_per_token, m.watts_decode) == (None, None, None)
    else:
        assert m.joules > 0 and m.joules_per_token * m.generated_tokens <= m.joules
        assert m.watts_decode > 0 and m.joules / m.watts_decode <= wall


def test_with_a_watts_figure_joules_are_watts_times_seconds_and_are_stored(client, load_params):
    if cpu_source() is not None:
        pytest.skip("this machine measures its energy: the watts figure is not used")
    client.load(load_params(energy_watts=40.0))
    store = ConversationStore(open_database())
    conversation = store.create("energy")
    started = time.perf_counter()
    reply = ChatSession(client, store).send(conversation.id, "Tell me about the sea.", LONG)
    m = collect(reply).done.metrics
    wall = time.perf_counter() - started
    assert m.energy_source == "estimated" and m.generated_tokens == 24
    assert m.watts_prompt == pytest.approx(40.0) and m.watts_decode == pytest.approx(40.0)
    # The decode phase's joules over its tokens; the prompt's joules are the rest.
    decode_j = m.joules_per_token * m.generated_tokens
    prompt_s, decode_s = (m.joules - decode_j) / 40.0, decode_j / 40.0
    assert prompt_s > 0 and decode_s > 0 and prompt_s + decode_s <= wall

    stored = store.messages(conversation.id)[-1].metrics
    assert stored["energy_source"] == "estimated"
    assert stored["joules"] == pytest.approx(m.joules)
    assert stored["joules_per_token"] == pytest.approx(m.joules_per_token)
