"""Every event and figure the engine gives a reply, at one slot and at four: one slot is the
same scheduler with N=1, not separate code, so each row of this table holds for both."""

from __future__ import annotations

import threading
import uuid

import pytest
from engine_helpers import collect, wait_for

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Done, Metrics, Sampling
from deskllm.engine.errors import ErrorKind

GREEDY = Sampling(temperature=0, max_tokens=24, repeat_penalty=1.0)


def ask(text: str) -> list[ChatMessage]:
    return [ChatMessage("user", text)]


@pytest.fixture(scope="module", params=[1, 4], ids=["1-slot", "4-slots"])
def one_engine(request, tmp_path_factory, starter_model, extra_bufts):
    from deskllm.engine.domain import LoadParams

    client = EngineClient(request.param)
    client.load(LoadParams(str(starter_model), n_ctx=1024, n_threads=2,
                           use_extra_bufts=extra_bufts, energy_watts=15.0,
                           kv_disk_dir=str(tmp_path_factory.mktemp("kv"))))  # fmt: skip
    yield client
    client.close()


def _reply_figures(client: EngineClient) -> None:
    got = collect(client.chat(uuid.uuid4().hex, ask("Name a colour of the sea."), GREEDY))
    m = got.done.metrics
    assert got.deltas and got.text == got.done.text
    assert m.ttft_s and m.pp_tps and m.tg_tps and m.itl_p50_ms is not None
    assert m.itl_p95_ms is not None and m.itl_p95_ms >= m.itl_p50_ms
    assert m.prompt_tokens == m.cached_tokens + m.evaluated_tokens
    assert m.prompt_tokens < m.n_past <= m.prompt_tokens + m.generated_tokens
    assert m.n_ctx == client.conversation_ctx == 1024 * client.n_slots  # the slots' pool
    assert m.rss_bytes > 0 and m.device == "CPU"
    assert m.vram_bytes is None  # no layer offloaded: no GPU memory to read


def _live_metrics(client: EngineClient) -> None:
    sampling = Sampling(temperature=0, max_tokens=200, ignore_eos=True)
    got = collect(client.chat(uuid.uuid4().hex, ask("Tell a long story."), sampling))
    assert got.metrics, "no live Metrics while the reply streamed"
    assert all(m.generated_tokens <= got.done.metrics.generated_tokens for m in got.metrics)


def _energy(client: EngineClient) -> None:
    m = collect(client.chat(uuid.uuid4().hex, ask("Hello."), GREEDY)).done.metrics
    assert m.energy_source is not None and m.joules and m.joules > 0
    assert m.watts_prompt is not None and m.watts_decode is not None
    assert m.joules_per_token and m.joules_per_token > 0


def _router_logprobs(client: EngineClient) -> None:
    """Sampling.logprobs: the first N tokens' raw log-probabilities, in a Metrics event
    before the text that follows them (the router decides on them), and in Done."""
    sampling = Sampling(temperature=0, max_tokens=12, logprobs=3)
    events = list(client.chat(uuid.uuid4().hex, ask("What is 2 + 2?"), sampling).events())
    first = next(i for i, e in enumerate(events) if isinstance(e, Metrics) and e.token_logprobs)
    assert len(events[first].token_logprobs) == 3
    assert all(lp <= 0 for lp in events[first].token_logprobs)
    done = events[-1]
    assert isinstance(done, Done) and done.metrics.token_logprobs == events[first].token_logprobs


def _token_logprobs(client: EngineClient) -> None:
    sampling = Sampling(temperature=0, max_tokens=8, token_logprobs=True, top_logprobs=2)
    reply = client.chat(uuid.uuid4().hex, ask("Say hi."), sampling)
    entries = [entry for event in reply.events() if hasattr(event, "logprobs")
               for entry in event.logprobs]  # fmt: skip
    assert entries and all(len(e.top) == 2 and e.logprob <= 0 for e in entries)
    assert "".join(e.token for e in entries) == reply.done.text


def _stop_string(client: EngineClient) -> None:
    sampling = Sampling(temperature=0, max_tokens=40, stop=("5",))
    prompt = ask("Count from 1 to 10, comma separated.")
    done = collect(client.chat(uuid.uuid4().hex, prompt, sampling)).done
    assert done.finish_reason == "stop" and done.stop_string == "5" and "5" not in done.text


def _context_trimmed(client: EngineClient) -> None:
    times = 120 * client.n_slots  # past the longest conversation: the slots' pool
    long = [ChatMessage("user", "Tell me about boxes. " * times),
            ChatMessage("assistant", "Boxes are containers. " * times),
            ChatMessage("user", "Summarise.")]  # fmt: skip
    refused = client.chat(uuid.uuid4().hex, long, GREEDY, drop_old_turns=False).wait()
    assert refused.error is not None and refused.error.kind == ErrorKind.CONTEXT
    done = client.chat(uuid.uuid4().hex, long, GREEDY).wait().done
    assert done.dropped_messages == 2
    assert any("left out" in w for w in done.warnings)


def _continue(client: EngineClient) -> None:
    cid = uuid.uuid4().hex
    messages = [*ask("Name three fruits."), ChatMessage("assistant", "Apples,")]
    done = client.chat(cid, messages, GREEDY, continue_reply=True).wait().done
    assert done.text and not done.text.startswith("Apples")
    bad = client.chat(cid, ask("Hi"), GREEDY, continue_reply=True).wait()
    assert bad.error is not None


def _cancel(client: EngineClient) -> None:
    reply = client.chat(uuid.uuid4().hex, ask("Tell a very long story."),
                        Sampling(temperature=0, max_tokens=2000, ignore_eos=True))  # fmt: skip
    for n, _event in enumerate(reply.events(), start=1):
        if n == 3:
            client.cancel()
    assert reply.done.finish_reason == "cancelled"
    assert reply.done.metrics.generated_tokens < 2000


def _restore(client: EngineClient) -> None:
    """A conversation whose slot another took is restored from the state cache."""
    cid = uuid.uuid4().hex
    first = client.chat(cid, ask("Tell me about rivers."), GREEDY).wait().done
    # Its reply is read again for the state cache while no request runs; then it is kept.
    assert wait_for(lambda: client.status().unread_tokens == 0)
    history = [*ask("Tell me about rivers."), ChatMessage("assistant", first.text)]
    # Every slot taken by other conversations: rivers' cells are saved, then overwritten.
    others = [client.chat(uuid.uuid4().hex, ask(f"Say the number {i} in words."), GREEDY)
              for i in range(client.n_slots)]  # fmt: skip
    threads = [threading.Thread(target=r.wait) for r in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert cid in client.status().cached_conversations
    again = client.chat(cid, [*history, *ask("And lakes?")], GREEDY).wait().done
    assert again.metrics.restored_from in ("ram", "disk")
    assert again.metrics.cached_tokens >= first.metrics.prompt_tokens


def _status(client: EngineClient) -> None:
    status = client.status()
    assert status is not None and status.loaded and status.n_ctx == 1024 * client.n_slots
    assert status.kv_cells == 1024 * client.n_slots and status.kv_cells_used > 0
    assert status.model_path == client.params.model_path and status.rss_bytes > 0


ROWS = [_reply_figures, _live_metrics, _energy, _router_logprobs, _token_logprobs,
        _stop_string, _context_trimmed, _continue, _cancel, _restore, _status]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[r.__name__.strip("_") for r in ROWS])
def test_the_engine_gives_every_event_and_figure(one_engine, row):
    row(one_engine)


def test_unload_frees_the_model_and_a_reply_then_says_so(one_engine):
    """Last in the module: the shared engine is unloaded."""
    pid = one_engine.pid
    one_engine.unload()
    assert one_engine.pid == pid  # the process stays; the model is gone
    status = one_engine.status()
    assert status is not None and not status.loaded
    failed = one_engine.chat("after", ask("Hi"), GREEDY).wait()
    assert failed.error is not None and failed.error.kind == ErrorKind.NO_MODEL
    assert wait_for(lambda: one_engine.loaded is None)
