"""Which measured configuration wins, and when a configuration is hopeless.

Pure functions of the figures (tokens/s), so every rule is tested with given numbers: the
benchmark suite (deskllm.measure.suite) abandons with `abandon_reason` and chooses with
`choose`; the loader (deskllm.loader) takes `choose`'s answer for an automatic load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# A configuration this many times slower than the best so far, after a brief measurement,
# is not measured in full: no later figure could make it the choice.
HOPELESS_FACTOR = 10.0
# The backstop that needs no brief figure to be right (under load from other work the brief
# figures come closer together: lavapipe's was 5x the CPU's, not 90x): a full measurement
# still running this many times later than the best finished configuration had finished the
# same shape (BUDGET_FLOOR_S at least) is stopped there. One that slow cannot be the fastest.
BUDGET_FACTOR = 4.0
BUDGET_FLOOR_S = 3.0
METRICS = ("decode", "prompt")  # what "fastest" means: decode (default) or prompt speed


@dataclass(frozen=True)
class ConfigFigures:
    """One configuration's measured speeds (None: not measured); `status` is "measured" or
    "abandoned" (a brief measurement only)."""

    id: str
    label: str  # in words: "CPU 2 threads", "Vulkan0 llvmpipe, 31 layers"
    tg_tps: float | None
    pp_tps: float | None
    status: str = "measured"
    bound: bool = False  # the speed is an upper bound (a brief measurement cut off early)
    ttft_s: float | None = None  # the brief measurement's time to first token
    # Seconds into its full measurement (the load apart) at which each shape was done.
    shape_ends_s: tuple[float, ...] = ()

    def speed(self, metric: str) -> float | None:
        return self.pp_tps if metric == "prompt" else self.tg_tps


def abandon_reason(
    candidate: ConfigFigures, best: ConfigFigures | None, metric: str = "decode"
) -> str | None:
    """Why `candidate`'s brief figure makes it hopeless against `best` so far, or None to
    measure it in full ("abandoned: 1.6 tok/s, 90× slower than cpu-2t")."""
    if best is None or best.id == candidate.id:
        return None
    fast, slow = best.speed(metric), candidate.speed(metric)
    if not fast:
        return None
    if not slow:
        return f"abandoned: no {_words(metric)} figure, while {best.id} ran at {fast:.1f} tok/s"
    ratio = fast / slow
    if ratio < HOPELESS_FACTOR:
        return None
    under = "under " if candidate.bound else ""
    return f"abandoned: {under}{slow:.1f} tok/s, {ratio:.0f}× slower than {best.id}"


def first_token_reason(seconds: float, best: ConfigFigures | None) -> str:
    """Why a configuration whose brief prompt gave no token in `seconds` was abandoned."""
    if best is None or not best.ttft_s:
        return f"abandoned: no token after {seconds:.1f} s"
    return (
        f"abandoned: no token after {seconds:.1f} s, {seconds / best.ttft_s:.0f}× the "
        f"{best.ttft_s:.2f} s {best.id} took"
    )


def shape_deadlines(
    best: ConfigFigures | None, factor: float = BUDGET_FACTOR, floor_s: float = BUDGET_FLOOR_S
) -> tuple[float, ...]:
    """Seconds into its full measurement by which a configuration must be done with each
    shape: `factor` times when `best` was, `floor_s` at least (empty: no budget, as for the
    first configuration measured)."""
    if best is None:
        return ()
    return tuple(max(floor_s, factor * end) for end in best.shape_ends_s)


def over_budget_reason(shape: int, deadline_s: float, best: ConfigFigures) -> str:
    """Why a configuration not done with shape `shape` (0-based) by `deadline_s` was stopped."""
    took = best.shape_ends_s[shape]
    return (
        f"abandoned: shape {shape + 1} of {len(best.shape_ends_s)} not done after "
        f"{deadline_s:.1f} s, {deadline_s / took:.0f}× the {took:.1f} s {best.id} took"
    )


def best_of(configs: Sequence[ConfigFigures], metric: str = "decode") -> ConfigFigures | None:
    """The fastest configuration with a figure, abandoned ones included (a brief figure is
    still a figure: the best so far is what abandonment compares with)."""
    timed = [c for c in configs if c.speed(metric)]
    return max(timed, key=lambda c: c.speed(metric) or 0.0, default=None)


def choose(
    configs: Sequence[ConfigFigures],
    metric: str = "decode",
    fits: Callable[[ConfigFigures], bool] = lambda _c: True,
) -> tuple[ConfigFigures, str] | None:
    """The fastest fully measured configuration that `fits`, with the reason in words; None
    when none was measured or none fits."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")
    ranked = sorted(
        (c for c in configs if c.status == "measured" and c.speed(metric)),
        key=lambda c: c.speed(metric) or 0.0,
        reverse=True,
    )
    skipped: list[str] = []
    for config in ranked:
        if not fits(config):
            skipped.append(config.id)
            continue
        speed = config.speed(metric) or 0.0
        reason = f"fastest measured {_words(metric)}: {config.label} at {speed:.1f} tok/s"
        others = [c for c in ranked if c is not config and c.id not in skipped]
        if others:
            runner = others[0]
            reason += f", {speed / (runner.speed(metric) or 1.0):.2f}× the next ({runner.id})"
        if skipped:
            reason += f" ({', '.join(skipped)} faster but does not fit now)"
        return config, reason
    return None


def _words(metric: str) -> str:
    return "prompt speed" if metric == "prompt" else "decode speed"
