"""Automatic threads on a simulated machine: step times by thread count and load, a clock, and
the CPU figures the governor reads (the real engine under a real busy load is in
tests/integration/test_adaptive_threads.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from deskllm.engine.thread_governor import (
    NEIGHBOUR_EVERY_S,
    OtherLoad,
    ThreadGovernor,
    threads_text,
)


class Machine:
    """`cores` cores; `others` of them kept busy by other programs (under half a core is lost
    in the noise). A decode step at n threads takes base/n on free cores; each thread past the
    free cores stalls every barrier."""

    def __init__(self, cores: int = 2, base: float = 0.024, others: float = 0.0,
                 visible: bool = True) -> None:  # fmt: skip
        self.cores, self.base, self.others, self.visible = cores, base, others, visible
        self.now = 0.0

    def step_time(self, n: int, tokens: int = 1) -> float:
        free = max(1, self.cores - round(self.others))
        per = self.base / min(n, free) if n <= free else self.base * 6 * (n - free + 1)
        return per if tokens <= 16 else per * tokens / 8

    def load(self) -> float | None:
        return self.others if self.visible else 0.0

    def clock(self) -> float:
        return self.now


def run(governor: ThreadGovernor, machine: Machine, steps: int, tokens: int = 1) -> list[int]:
    """Decode `steps` steps as the scheduler does (a try's step stopped at its limit and run
    again at the base count); the thread count each step ended with."""
    counts = []
    for _ in range(steps):
        governor.before_step(tokens)
        limit = governor.try_limit()
        seconds = machine.step_time(governor.current, tokens)
        if limit is not None and seconds > limit:
            machine.now += limit  # stopped, then again at the count the try left
            governor.abandon()
            seconds = machine.step_time(governor.current, tokens)
        machine.now += seconds
        counts.append(governor.current)
        governor.observe(tokens, seconds)
    return counts


def make(machine: Machine, start: int = 2) -> ThreadGovernor:
    return ThreadGovernor(start, machine.cores, machine.load, machine.clock)


def test_an_idle_machine_keeps_every_core():
    machine = Machine()
    governor = make(machine)
    counts = run(governor, machine, 4000)  # ~50 s, neighbour tries included
    assert governor.current == 2 and governor.choice.reason == "all cores are free"
    assert counts.count(1) <= 4  # a neighbour's try ends after one clearly slower step


def test_a_busy_machine_drops_to_the_free_cores_at_once_and_says_why():
    machine = Machine(others=1.6)
    governor = make(machine)
    counts = run(governor, machine, 200)
    assert counts[0] == 1  # the CPU figures were read before the first step
    assert governor.current == 1
    assert governor.choice.reason.startswith("other programs keep 1.6 of the cores busy")


def test_it_follows_the_load_down_and_back_up():
    machine = Machine(cores=8)
    governor = make(machine, start=8)
    run(governor, machine, 100)
    assert governor.current == 8
    machine.others = 3.2
    run(governor, machine, 100)
    assert governor.current == 5
    machine.others = 0.1
    counts = run(governor, machine, 100)
    assert governor.current == 8 and counts[-90:] == [8] * 90


def test_contention_the_figures_miss_is_found_by_trying_a_neighbour():
    # A VM whose host takes a core without it showing as busy here.
    machine = Machine(others=1.0, visible=False)
    governor = make(machine)
    run(governor, machine, 20)
    assert governor.current == 2  # nothing says the machine is busy yet
    machine.now += NEIGHBOUR_EVERY_S
    run(governor, machine, 50)
    assert governor.current == 1 and governor.speedup > 5
    assert governor.choice.reason.startswith("fewer measured faster")


def test_a_suggested_count_that_measures_slower_is_left_and_tried_less_often():
    # The figures say other programs are busy, but their work gives way (all cores stay fast).
    machine = Machine(others=0.0)
    governor = ThreadGovernor(2, 2, lambda: 1.0, machine.clock)
    counts = run(governor, machine, 400)  # about 10 s
    assert counts[0] == 1  # the figures are followed at once
    assert governor.current == 2  # then judged by the steps
    counts = run(governor, machine, 4000)  # about 100 s
    assert counts[-100:] == [2] * 100
    assert counts.count(1) < 10  # each lost try waits twice as long as the last


def test_prompt_steps_follow_the_figures_and_end_a_try():
    machine = Machine(others=1.6)
    governor = make(machine)
    run(governor, machine, 30, tokens=256)
    assert governor.current == 1  # the figures are followed on prompt steps too
    machine.others = 0.0
    run(governor, machine, 10)
    assert governor.current == 2
    governor._neighbour_at = machine.now  # a neighbour's try starts after the next step
    run(governor, machine, 1)
    assert governor.try_limit() is not None and governor.current == 1
    assert governor.before_step(256) == 2  # a prompt chunk is not run at a tried count
    assert governor.try_limit() is None and governor.current == 2


def test_a_try_costs_at_most_its_limit_however_slow_the_count_is():
    # Two threads on one free core stall for 50 steps' time: a try is stopped at 1.5× a step.
    machine = Machine(others=1.0)
    machine.step_time = lambda n, tokens=1: 0.02 if n == 1 else 1.0  # type: ignore[method-assign]
    governor = make(machine)
    counts = run(governor, machine, 20_000)  # ~400 s of decoding at 1 thread
    assert counts[-1] == 1 and counts.count(2) == 0  # no step ever finished at 2 threads
    tries = governor._losses.get(2, 0)
    assert tries >= 3
    assert machine.now < 20_000 * 0.02 * 1.02  # all the tries together cost under 2%


def test_one_core_never_changes():
    machine = Machine(cores=1, others=1.0)
    governor = make(machine, start=1)
    assert set(run(governor, machine, 100)) == {1}


@settings(max_examples=60, deadline=None)
@given(cores=st.integers(1, 16), start=st.integers(1, 16),
       loads=st.lists(st.floats(0, 16), min_size=1, max_size=6),
       tokens=st.sampled_from([1, 4, 64, 512]))  # fmt: skip
def test_the_count_stays_between_one_and_the_most(cores, start, loads, tokens):
    machine = Machine(cores=cores)
    governor = ThreadGovernor(start, cores, machine.load, machine.clock)
    top = max(cores, start)
    for others in loads:
        machine.others = others
        counts = run(governor, machine, 60, tokens)
        assert all(1 <= n <= top for n in counts)
        machine.now += 5
    assert governor.choice.max_threads == top


def test_the_readout_words():
    assert threads_text(2, 2, "all cores are free") == "threads 2/2"
    assert threads_text(1, 4, "other programs keep 3.0 of the cores busy") == (
        "threads 1/4 (other programs keep 3.0 of the cores busy)"
    )
    assert threads_text(0, 0, "") == ""


def test_the_cpu_figures_of_this_machine():
    load = OtherLoad(every=0.05)
    try:
        import time

        deadline = time.monotonic() + 5
        figure = None
        while figure is None and time.monotonic() < deadline:
            time.sleep(0.06)
            figure = load()
        assert figure is not None and figure >= 0.0
        assert load() is None or load() >= 0.0  # a figure is given once
    finally:
        load.close()
