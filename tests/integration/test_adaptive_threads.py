"""Automatic threads in the real engine under a real busy load: one busy process per logical
core (a pure Python loop), the way a build or a video call loads a laptop."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Sampling
from deskllm.engine.thread_governor import FIXED_THREADS, OtherLoad, others_runnable

CORES = psutil.cpu_count(logical=False) or 1
pytestmark = pytest.mark.skipif(CORES < 2, reason="one core: there is no count to change")
GREEDY = Sampling(temperature=0, max_tokens=48, ignore_eos=True)


class BusyLoad:
    def __enter__(self) -> BusyLoad:
        self.processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                          for _ in range(os.cpu_count() or 1)]  # fmt: skip
        time.sleep(1.5)  # the engine reads the CPU figures every 0.5 s
        return self

    def __exit__(self, *exc) -> None:
        for process in self.processes:
            process.kill()
            process.wait()
        time.sleep(1.5)


def ask(client: EngineClient, text: str):
    return client.chat("threads", [ChatMessage("user", text)], GREEDY).wait().metrics


def test_automatic_threads_drop_while_the_machine_is_busy_and_come_back(load_params):
    with EngineClient() as client:
        client.load(load_params(n_threads=CORES, adapt_threads=True))
        idle = ask(client, "Name three rivers.")
        assert (idle.n_threads, idle.max_threads) == (CORES, CORES)
        assert idle.threads_reason == "all cores are free"
        with BusyLoad():
            busy = ask(client, "Name three mountains.")
            status = client.status()
        assert busy.n_threads < CORES and busy.max_threads == CORES
        assert busy.threads_reason.startswith("other programs keep"), busy.threads_reason
        assert (status.n_threads, status.max_threads) == (busy.n_threads, CORES)
        after = ask(client, "Name three lakes.")
        assert after.n_threads == CORES and after.threads_reason == "all cores are free"


def test_a_fixed_count_stays_fixed_under_load(engine):
    with BusyLoad():
        metrics = engine.chat("fixed", [ChatMessage("user", "Hi")], GREEDY).wait().metrics
    assert (metrics.n_threads, metrics.max_threads, metrics.threads_reason) == (2, 2, FIXED_THREADS)


def figure_of(load: OtherLoad) -> float:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.06)
        figure = load()
        if figure is not None:
            return figure
    raise AssertionError("no CPU figure in 5 s")


@pytest.mark.skipif(others_runnable() is None, reason="the system does not count runnable threads")
def test_a_load_that_goes_on_is_runnable_and_one_that_ended_is_not():
    with BusyLoad() as busy:
        assert others_runnable() >= len(busy.processes)
        load = OtherLoad(every=0.05)
        try:
            assert figure_of(load) >= 1.0  # the busy time, capped by what is runnable
        finally:
            load.close()
    # Another program's burst that has just ended (the figure's window still holds it)
    # counts for nothing: it is no longer runnable.
    ended = OtherLoad(every=0.05, runnable=lambda: 0)
    try:
        with BusyLoad():
            assert figure_of(ended) == 0.0
    finally:
        ended.close()
