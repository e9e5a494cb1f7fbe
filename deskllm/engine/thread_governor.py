"""Automatic threads: the engine's compute thread count follows how busy the machine is.

llama.cpp's threads meet at a barrier after every graph operation, so one thread that loses
its core to another program stalls all the others: on a 2-core machine with one busy process
per core, 2 threads decoded at 4 tok/s where 1 thread got 30. The governor times every decode
step at the count it ran with and, between steps, tries another count: the one the CPU figures
suggest (the cores other programs keep busy, from the system's CPU times less this process's
own), else now and then a neighbour. It keeps whichever steps faster. A try that is clearly
slower ends after one step; a count that keeps losing is tried less and less often (up to
every two minutes), and a change in the other programs' load tries again at once. So the
count falls when cores are taken and returns to all of them when they are free.

Spinning: the engine's llama.cpp is built with OpenMP, whose wait policy is fixed when the
process starts (libgomp spins a short while at a barrier, then sleeps); with fewer threads than
free cores, no thread waits on one that lost its core, which is what the spinning cost.
Measured on 2 cores with Gemma 3 270M: under one or two busy processes Automatic ran 1 thread
and decoded at the same speed with OMP_WAIT_POLICY=passive as with the default (46.0 and
44.7 tok/s; 30.4 and 30.8), while passive cost the idle machine 38% (64.6 → 40.0). So the
default stays. Qt-free; the clock and the CPU figures are injectable.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FIXED_THREADS = "fixed"  # the reason where the user chose the count (Settings, --threads)
SMALL_STEP = 16  # tokens: a step up to this costs one read of the weights; above, per token
WINDOW = 8  # the last steps a count's cost is the mean of
TRY_STEPS = 5  # steps a tried count runs before it is judged
CLEARLY_SLOWER = 1.5  # a try's first step this much slower than the base's ends the try
# A tried count is kept when its mean step costs under this × the base's: the count the CPU
# figures suggest may be a little slower in the mean (one busy core stalls all threads only
# now and then, but for long); any other must be faster.
KEEP_SUGGESTED, KEEP_OTHER = 1.1, 0.85
LOAD_EVERY_S = 0.5  # how often the CPU figures are read
NEIGHBOUR_EVERY_S = 30.0  # a neighbour is tried this often when the figures suggest nothing
CHECK_JUMP_S = 5.0  # after following the figures, the count left is tried this soon
RETRY_S, RETRY_MAX_S = 2.0, 120.0  # a losing count waits this long, doubled per loss


@dataclass(frozen=True)
class ThreadChoice:
    """How many compute threads run, of how many, and why (for the readouts)."""

    n_threads: int
    max_threads: int
    reason: str


def threads_text(n_threads: int, max_threads: int, reason: str) -> str:
    """The readouts' words: "threads 2/2", and why where fewer run than could."""
    if not n_threads:
        return ""
    text = f"threads {n_threads}/{max_threads or n_threads}"
    return f"{text} ({reason})" if reason and n_threads < max_threads else text


PROC = Path("/proc")
RUNNABLE_LOOKS = 3  # snapshots of the runnable threads, RUNNABLE_GAP_S apart
RUNNABLE_GAP_S = 0.001


def _own_runnable(proc: Path) -> int:
    count = 0
    for task in (proc / "self" / "task").iterdir():
        try:
            # The state follows the parenthesised name, which may itself hold ") ".
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread ended
        count += state == "R"
    return count


def others_runnable(proc: Path = PROC) -> int | None:
    """Other programs' threads running or waiting for a core now: the fewest of a few
    snapshots, as a thread that is runnable for a moment (a reply being read) loads no core;
    None where the system does not say (not Linux)."""
    fewest = None
    for look in range(RUNNABLE_LOOKS):
        if look:
            time.sleep(RUNNABLE_GAP_S)
        try:
            text = (proc / "stat").read_text()
            line = next(line for line in text.splitlines() if line.startswith("procs_running"))
            others = int(line.split()[1]) - _own_runnable(proc)
        except (OSError, StopIteration, ValueError, IndexError):
            return None
        fewest = others if fewest is None else min(fewest, others)
    return fewest


class OtherLoad:
    """Cores other programs keep busy: the system's busy CPU time (steal included: a VM's
    host took it; niced work not) less this process's own, over the last `every` seconds.
    A thread samples it, so a step after an idle minute sees the load of now, not the
    minute's mean.

    The busy time says what other programs got over the window, not what they ask for now:
    a burst that has just ended (another model's reply) would put the next steps on fewer
    threads for nothing. So a figure is taken as at most the threads of other programs that
    are runnable at this instant; a sustained load (a build, a busy loop) is runnable
    whether or not it holds a core.
    """

    def __init__(self, every: float = 0.5,
                 runnable: Callable[[], int | None] = others_runnable) -> None:  # fmt: skip
        import psutil

        self._psutil = psutil
        self._process = psutil.Process()
        self._every = every
        self._runnable = runnable
        self._figure: float | None = None
        self._stop = threading.Event()
        threading.Thread(target=self._sample, name="engine-load", daemon=True).start()

    def _read(self) -> tuple[float, float, float]:
        t = self._psutil.cpu_times()
        # Niced work is left out: it gives its cores up to the engine's threads.
        busy = sum(getattr(t, name, 0.0) for name in
                   ("user", "system", "irq", "softirq", "steal"))  # fmt: skip
        own = self._process.cpu_times()
        return time.monotonic(), busy, own.user + own.system

    def _sample(self) -> None:
        last = self._read()
        while not self._stop.wait(self._every):
            now = self._read()
            seconds = now[0] - last[0]
            self._figure = max(0.0, ((now[1] - last[1]) - (now[2] - last[2])) / seconds)
            last = now

    def __call__(self) -> float | None:
        figure, self._figure = self._figure, None
        if figure is not None and figure >= 0.5:
            runnable = self._runnable()
            if runnable is not None:
                figure = min(figure, float(runnable))
        return figure

    def close(self) -> None:
        self._stop.set()


@dataclass
class _Try:
    n_threads: int
    base: int  # the count it is tried against, and goes back to when it loses
    keep_below: float  # the ratio of mean step costs (tried / base) under which it is kept
    ratios: list[float] = field(default_factory=list)  # its step costs over the base's mean
    steps: int = 0


class ThreadGovernor:
    """Chooses the thread count between steps. `start`: the count to begin with (the
    measured best); counts from 1 to `max_threads` are tried. `other_load` returns the cores
    other programs keep busy (None: no new figure)."""

    def __init__(
        self,
        start: int,
        max_threads: int,
        other_load: Callable[[], float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_threads = max(max_threads, start, 1)
        self.current = max(1, start)
        self._other_load = other_load
        self._clock = clock
        now = clock()
        # The last steps' costs by (count, small step): seconds a step, or a token if large.
        self._costs: dict[tuple[int, bool], deque[float]] = {}
        self._try: _Try | None = None
        self._losses: dict[int, int] = {}  # tries lost in a row, by count
        self._retry_at: dict[int, float] = {}
        self._neighbour_at = now + NEIGHBOUR_EVERY_S
        self._load_at = now
        self.others = 0.0  # cores other programs keep busy (last figure)
        self.suggested = self.current
        self.speedup = 1.0  # the last kept change's step cost ratio
        self.changes = 0

    @property
    def choice(self) -> ThreadChoice:
        return ThreadChoice(self.current, self.max_threads, self._reason())

    def _reason(self) -> str:
        busy = f"other programs keep {self.others:.1f} of the cores busy"
        if self.current == self.max_threads:
            return "all cores are free" if self.others < 0.5 else f"{busy}; all still fastest"
        faster = f"; {self.speedup:.1f}× faster than more" if self.speedup > 1.05 else ""
        return f"{busy}{faster}" if self.others >= 0.5 else f"fewer measured faster{faster}"

    def before_step(self, n_tokens: int = 1, own_callback: bool = False) -> int | None:
        """Before a step of `n_tokens`: returns the count for it when it changes. A try ends
        (not lost) before a prompt chunk or a step that cannot be stopped (`own_callback`):
        such a step may take seconds at a contended count. Else, where the other programs'
        load changed, the count it suggests."""
        if self.max_threads == 1:
            return None
        now = self._clock()
        if self._try is not None:
            if n_tokens <= SMALL_STEP and not own_callback:
                return None
            t, self._try = self._try, None
            self._retry_at[t.n_threads] = now + RETRY_S
            self.current = t.base
            return t.base
        if not self._read_load(now) or self.suggested == self.current:
            return None
        # Earlier step times no longer say what a count costs. Go where the figures point at
        # once; a neighbour's try checks it soon.
        self._costs.clear()
        self._neighbour_at = now + CHECK_JUMP_S
        self.current = self.suggested
        return self.current

    def try_limit(self) -> float | None:
        """Seconds the coming step may take while a count is tried (None: no try runs); the
        engine stops a slower step and calls `abandon`."""
        if self._try is None:
            return None
        reference = self._mean(self._try.base, True)
        return None if reference is None else CLEARLY_SLOWER * self._try.keep_below * reference

    def abandon(self) -> int:
        """The tried count's step was stopped as clearly slower: it lost. The count to run the
        step again with."""
        assert self._try is not None
        return self._lose(self._try, self._clock())

    def observe(self, n_tokens: int, seconds: float) -> int | None:
        """Record one decode step of `n_tokens` that took `seconds` at the current count.
        Returns the count for the next step when it changes, else None."""
        if self.max_threads == 1 or n_tokens <= 0:
            return None
        small = n_tokens <= SMALL_STEP
        cost = seconds if small else seconds / n_tokens
        now = self._clock()
        if self._try is not None:
            # Judged against the base count's recent steps of the same kind.
            reference = self._mean(self._try.base, small)
            self._costs_of(self.current, small).append(cost)
            return self._judge(cost, reference, now)
        self._costs_of(self.current, small).append(cost)
        if not small:
            return None  # tries run on decode steps, which a stop costs little
        candidate, keep_below = self._candidate(now, small)
        if candidate is None:
            return None
        self._try = _Try(candidate, self.current, keep_below)
        self.current = candidate
        return candidate

    def _costs_of(self, n_threads: int, small: bool) -> deque[float]:
        return self._costs.setdefault((n_threads, small), deque(maxlen=WINDOW))

    def _mean(self, n_threads: int, small: bool) -> float | None:
        costs = self._costs.get((n_threads, small))
        return sum(costs) / len(costs) if costs else None

    def _read_load(self, now: float) -> bool:
        """Read the CPU figures when due; True when the count they suggest changed."""
        if self._other_load is None or now < self._load_at:
            return False
        self._load_at = now + LOAD_EVERY_S
        others = self._other_load()
        if others is None:
            return False
        self.others = others
        suggested = min(self.max_threads, max(1, self.max_threads - round(others)))
        if suggested == self.suggested:
            return False
        self.suggested = suggested
        self._losses.clear()  # counts that lost under the old load may win now
        self._retry_at.clear()
        return True

    def _candidate(self, now: float, small: bool) -> tuple[int | None, float]:
        """The count to try next, if any, and the ratio under which it is kept."""
        if len(self._costs_of(self.current, small)) < TRY_STEPS:
            return None, 0.0  # the current count is not measured yet
        if self.suggested != self.current:
            wanted, keep_below = self.suggested, KEEP_SUGGESTED
        elif now >= self._neighbour_at:
            self._neighbour_at = now + NEIGHBOUR_EVERY_S
            n = self.current
            wanted, keep_below = (n - 1 if n == self.max_threads else n + 1), KEEP_OTHER
        else:
            return None, 0.0
        return (None, 0.0) if now < self._retry_at.get(wanted, 0.0) else (wanted, keep_below)

    def _judge(self, cost: float, reference: float | None, now: float) -> int | None:
        t = self._try
        assert t is not None
        t.steps += 1
        if reference is not None:  # else the base ran no such step: it cannot count
            t.ratios.append(cost / reference)
            if len(t.ratios) == 1 and t.ratios[0] > CLEARLY_SLOWER * t.keep_below:
                return self._lose(t, now)
        if len(t.ratios) < TRY_STEPS:
            return self._lose(t, now) if t.steps >= 4 * TRY_STEPS else None
        ratio = statistics.fmean(t.ratios)
        if ratio >= t.keep_below:
            return self._lose(t, now)
        self._try = None
        self._losses.pop(t.n_threads, None)
        self._retry_at.pop(t.n_threads, None)
        if t.base == self.suggested:  # the figures' count lost: not tried again at once
            self._lost(t.base, now)
        self.speedup = 1 / ratio
        self.changes += 1
        return None  # already running at the tried count: keep it

    def _lose(self, t: _Try, now: float) -> int:
        self._try = None
        self._lost(t.n_threads, now)
        self.current = t.base
        return t.base

    def _lost(self, n_threads: int, now: float) -> None:
        losses = self._losses.get(n_threads, 0) + 1
        self._losses[n_threads] = losses
        self._retry_at[n_threads] = now + min(RETRY_S * 2 ** (losses - 1), RETRY_MAX_S)
