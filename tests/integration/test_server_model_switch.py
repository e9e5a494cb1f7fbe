"""`deskllm serve` loads the installed model a request names: with the single engine and with
`--parallel`, while /health says 503; one the planner says cannot fit is refused with its
numbers and the served model stays; an unknown one is 404. Driven by the `openai` SDK."""

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


def test_a_request_naming_another_installed_model_loads_it(server):
    client = sdk(server)
    running: dict = {}

    def long_reply() -> None:  # on the starter, admitted before the switch: it finishes
        text = []
        for chunk in client.chat.completions.create(
            model=STARTER, messages=ASK, stream=True, temperature=0, max_tokens=96,
            extra_body={"ignore_eos": True},
        ):  # fmt: skip
            running.setdefault("first", time.monotonic())
            running["model"] = chunk.model
            text.extend(c.delta.content or "" for c in chunk.choices)
        running["text"] = "".join(text)

    def switch() -> None:
        running["switched"] = client.chat.completions.create(  # by its library name
            model=SECOND_NAME, messages=ASK, temperature=0, max_tokens=8
        )

    first = threading.Thread(target=long_reply)
    first.start()
    while "first" not in running and first.is_alive():
        time.sleep(0.01)
    second = threading.Thread(target=switch)
    second.start()
    statuses = set()
    while second.is_alive():
        statuses.add(health(server))
        if 503 in statuses and "refused" not in running:
            with pytest.raises(openai.InternalServerError) as refused:  # 503 while it loads
                client.chat.completions.create(model=STARTER, messages=ASK, max_tokens=4)
            running["refused"] = refused.value
        time.sleep(0.02)
    first.join(60)
    assert 503 in statuses, "/health never said 503 while the second model loaded"
    assert running["refused"].status_code == 503
    assert running["refused"].body["code"] == "model_loading"
    assert running["model"] == STARTER and running["text"]  # the running reply was not cut
    reply = running["switched"]
    assert reply.model == SECOND and reply.choices[0].message.content.strip()
    assert health(server) == 200
    assert loaded_flags(client)[SECOND] is True and loaded_flags(client)[STARTER] is False
    # And back, by file name this time.
    back = client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1.gguf",
                                          messages=ASK, max_tokens=4)  # fmt: skip
    assert back.model == STARTER


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
            try:
                replies[i] = client.chat.completions.create(
                    model=SECOND, messages=ASK, temperature=0, max_tokens=8
                )
            except openai.InternalServerError as exc:
                replies[i] = exc

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        # One request loads it; the other waits for that load or is told 503 (retry later).
        answered = [r for r in replies if not isinstance(r, openai.APIError)]
        assert answered and all(r.model == SECOND for r in answered)
        assert all(r.status_code == 503 for r in replies if isinstance(r, openai.APIError))
        assert loaded_flags(client) == {SECOND: True, STARTER: False, "auto": True}
        again = client.chat.completions.create(model=SECOND, messages=ASK, max_tokens=4)
        assert again.model == SECOND and again.choices[0].message.content is not None
