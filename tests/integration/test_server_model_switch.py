"""`deskllm serve` loads the installed model a request names beside the served one (its own
engine), with one slot and with `--parallel`, while the served model keeps answering; one the
planner says cannot fit is refused with its numbers; under a memory budget idle models are
unloaded least recently used first (the starter, its Q8_0 copy and Gemma 3 270M) and a busy
one never; a killed engine of one model leaves the other streaming; an unknown model is 404.
Driven by the `openai` SDK."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx2
import openai
import psutil
import pytest
from planner_models import write_sparse_gguf
from server_helpers import API_KEY, running_server

from deskllm.database import open_database
from deskllm.store import ModelLibrary

STARTER = "smollm2-135m-instruct-q4_1"  # the API's ids: the library names as ids
SECOND_NAME, SECOND = "SmolLM2 requantized (Q8_0)", "smollm2-requantized-q8_0"
HUGE_NAME, HUGE = "Huge F16", "huge-f16"
ASK = [{"role": "user", "content": "What colour is the sky?"}]


def library_home(home: Path, second: Path, huge: Path | None = None) -> Path:
    """A deskllm home whose library holds `second` (and `huge`) besides the starter model."""
    home.mkdir(exist_ok=True)
    db = open_database(home / "deskllm.sqlite3")
    try:
        ModelLibrary(db).add(second, name=SECOND_NAME)
        if huge is not None:
            ModelLibrary(db).add(huge, name=HUGE_NAME)
    finally:
        db.close()
    return home


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (sparse) GGUF twice this machine's memory: no fake profile involved."""
    path = tmp_path_factory.mktemp("huge") / "huge-F16.gguf"
    return write_sparse_gguf(path, 2 * psutil.virtual_memory().total)


@pytest.fixture(scope="module")
def server(tmp_path_factory, session_home, extra_bufts, quant_ladder, huge):
    home = library_home(tmp_path_factory.mktemp("serve-home"), quant_ladder["Q8_0"], huge)
    with running_server(home, session_home, "--api-key", API_KEY) as srv:
        yield srv


def sdk(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0, timeout=300)


def loaded_flags(client: openai.OpenAI) -> dict[str, bool]:
    return {card.id: card.model_extra["loaded"] for card in client.models.list().data}


def health(server) -> int:
    return httpx2.get(server.url + "/health", timeout=10).status_code


def test_models_lists_every_installed_model_and_marks_the_loaded_one(server):
    client = sdk(server)
    cards = client.models.list().data
    assert cards[0].id == STARTER  # the served model first
    assert loaded_flags(client) == {STARTER: True, SECOND: False, HUGE: False, "auto": True}
    second = next(c for c in cards if c.id == SECOND)
    assert second.model_extra["context_length"] > 0 and second.owned_by == "deskllm"


def test_a_request_naming_another_installed_model_loads_it_beside(server):
    client = sdk(server)
    running: dict = {}

    def long_reply() -> None:  # on the starter while the second model loads: never cut
        text = []
        for chunk in client.chat.completions.create(
            model=STARTER, messages=ASK, stream=True, temperature=0, max_tokens=96,
            extra_body={"ignore_eos": True},
        ):  # fmt: skip
            running.setdefault("first", time.monotonic())
            running["model"] = chunk.model
            text.extend(c.delta.content or "" for c in chunk.choices)
        running["text"] = "".join(text)

    def load_second() -> None:
        running["second"] = client.chat.completions.create(  # by its library name
            model=SECOND_NAME, messages=ASK, temperature=0, max_tokens=8
        )

    first = threading.Thread(target=long_reply)
    first.start()
    while "first" not in running and first.is_alive():
        time.sleep(0.01)
    second = threading.Thread(target=load_second)
    second.start()
    statuses, during = set(), []
    while second.is_alive():
        statuses.add(health(server))
        if not during:  # the served model answers while the other loads
            during.append(client.chat.completions.create(model=STARTER, messages=ASK,
                                                         max_tokens=4))  # fmt: skip
        time.sleep(0.02)
    first.join(60)
    assert statuses == {200}, "/health must stay ok: the served model never stopped"
    assert during[0].model == STARTER and during[0].choices[0].message.content is not None
    assert running["model"] == STARTER and running["text"]  # the running reply was not cut
    reply = running["second"]
    assert reply.model == SECOND and reply.choices[0].message.content.strip()
    flags = loaded_flags(client)
    assert flags[SECOND] is True and flags[STARTER] is True
    cards = {c.id: c.model_extra for c in client.models.list().data}
    assert cards[STARTER]["pinned"] is True and cards[STARTER]["keep_alive_left_s"] is None
    assert cards[SECOND]["pinned"] is False and 590 < cards[SECOND]["keep_alive_left_s"] <= 600
    assert cards[SECOND]["memory_bytes"] > 100_000_000 and cards[SECOND]["slots"] >= 1
    # Both answer without a reload, the served one also by its file name.
    back = client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1.gguf",
                                          messages=ASK, max_tokens=4)  # fmt: skip
    assert back.model == STARTER
    assert client.chat.completions.create(model=SECOND, messages=ASK, max_tokens=4).model == SECOND
    # LM Studio's ttl: this request's keep-alive, in seconds.
    client.chat.completions.create(model=SECOND, messages=ASK, max_tokens=2, extra_body={"ttl": 30})
    left = {c.id: c.model_extra for c in client.models.list().data}[SECOND]["keep_alive_left_s"]
    assert 25 < left <= 30


def test_killing_one_models_engine_leaves_the_other_streaming(server):
    client = sdk(server)
    client.chat.completions.create(model=SECOND, messages=ASK, max_tokens=2)  # loaded
    engines = {p.pid: p for p in psutil.Process(server.process.pid).children(recursive=True)}
    assert len(engines) >= 2, "one engine process per loaded model"
    text = []
    stream = client.chat.completions.create(model=STARTER, messages=ASK, stream=True,
                                            temperature=0, max_tokens=64,
                                            extra_body={"ignore_eos": True})  # fmt: skip
    for i, chunk in enumerate(stream):
        text.extend(c.delta.content or "" for c in chunk.choices)
        if i == 2:  # mid-stream: kill the second model's engine
            second_pid = _engine_of(server, SECOND)
            psutil.Process(second_pid).kill()
    assert len("".join(text)) > 20  # the starter's stream went on to its end
    again = client.chat.completions.create(model=SECOND, messages=ASK, max_tokens=4)
    assert again.model == SECOND and again.choices[0].message.content is not None


def _engine_of(server, model_id: str) -> int:
    """The engine process that holds `model_id`'s file mapped."""
    for child in psutil.Process(server.process.pid).children(recursive=True):
        paths = {m.path for m in child.memory_maps()}
        if any("Q8_0" in p for p in paths) == (model_id == SECOND):
            return child.pid
    raise AssertionError(f"no engine holds {model_id}")


def test_a_model_that_cannot_fit_is_refused_with_the_planners_numbers(server):
    client = sdk(server)
    before = loaded_flags(client)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=HUGE, messages=ASK, max_tokens=4)
    error = refused.value
    assert error.code == "model_does_not_fit" and error.param == "model"
    message = error.body["message"]
    assert HUGE in message and "huge-F16.gguf needs" in message
    assert "GiB of RAM" in message and "is available" in message
    assert loaded_flags(client) == before  # nothing was unloaded
    served = next(m for m, loaded in before.items() if loaded)
    reply = client.chat.completions.create(model=served, messages=ASK, max_tokens=4)
    assert reply.choices[0].message.content is not None and health(server) == 200


def test_an_unknown_model_is_404_naming_the_installed_ones(server):
    with pytest.raises(openai.NotFoundError) as missing:
        sdk(server).chat.completions.create(model="no-such-model", messages=ASK)
    assert missing.value.code == "model_not_found"
    assert SECOND in missing.value.body["message"]


def test_parallel_slots_load_another_model_too(tmp_path, session_home, extra_bufts,
                                               quant_ladder):  # fmt: skip
    home = library_home(tmp_path / "parallel-home", quant_ladder["Q8_0"])
    with running_server(home, session_home, "--api-key", API_KEY, "--parallel", "2") as srv:
        client = sdk(srv)
        replies: list = [None, None]

        def ask(i: int) -> None:
            replies[i] = client.chat.completions.create(
                model=SECOND, messages=ASK, temperature=0, max_tokens=8
            )

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        # One request loads it; the other waits for that load and is answered by it.
        assert all(r is not None and r.model == SECOND for r in replies)
        assert loaded_flags(client) == {SECOND: True, STARTER: True, "auto": True}
        cards = {c.id: c.model_extra for c in client.models.list().data}
        assert cards[SECOND]["slots"] == 2


def test_a_memory_budget_unloads_idle_models_least_recently_used_first(
        tmp_path, session_home, extra_bufts, quant_ladder, gemma_model):  # fmt: skip
    """Three models of two architectures (the starter served, its Q8_0 copy, Gemma 3 270M)
    under a budget that holds the served one and one more: each load unloads the idle one
    used longest ago; a busy model is never unloaded (the load is refused with the planner's
    numbers and the budget)."""
    home = tmp_path / "budget-home"
    library_home(home, quant_ladder["Q8_0"])
    db = open_database(home / "deskllm.sqlite3")
    try:
        ModelLibrary(db).add(gemma_model, name="Gemma 3 270M")
    finally:
        db.close()
    third = "gemma-3-270m"
    # What each needs here, as the planner counts it: all three loaded without a budget.
    with running_server(home, session_home, "--api-key", API_KEY) as srv:
        for model in (SECOND, third):
            assert sdk(srv).chat.completions.create(model=model, messages=ASK,
                                                    max_tokens=1).model == model
        sizes = {c.id: c.model_extra["memory_bytes"] for c in sdk(srv).models.list().data
                 if c.model_extra["loaded"]}  # fmt: skip
    assert sizes[STARTER] and sizes[SECOND] and sizes[third]
    # Room for the served model and either other one, never both.
    budget = sizes[STARTER] + 1.1 * max(sizes[SECOND], sizes[third])
    assert budget < sizes[STARTER] + sizes[SECOND] + sizes[third]
    with running_server(home, session_home, "--api-key", API_KEY,
                        "--memory-budget", f"{budget / (1 << 30):.4f}") as srv:  # fmt: skip
        client = sdk(srv)
        order = []
        for model in (SECOND, third, SECOND):
            reply = client.chat.completions.create(model=model, messages=ASK, max_tokens=4)
            assert reply.model == model
            flags = loaded_flags(client)
            order.append(sorted(m for m in (SECOND, third) if flags[m]))
            assert flags[STARTER] is True  # pinned
        assert order == [[SECOND], [third], [SECOND]]  # one at a time: each evicted the other
        metrics = httpx2.get(srv.url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"})
        assert "deskllm_model_evictions_total 2" in metrics.text
        assert "deskllm_models_loaded 2" in metrics.text
        # Busy: the second model streams, so the third cannot evict it and is refused.
        stream = client.chat.completions.create(model=SECOND, messages=ASK, stream=True,
                                                max_tokens=200,
                                                extra_body={"ignore_eos": True})  # fmt: skip
        next(iter(stream))
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=third, messages=ASK, max_tokens=4)
        assert refused.value.code == "model_does_not_fit"
        assert "memory budget" in refused.value.body["message"]
        assert sum(len(c.choices[0].delta.content or "") for c in stream if c.choices) > 0
        assert loaded_flags(client)[SECOND] is True
