"""What a million generated tokens cost in electricity (and, if given, the hardware's share).
Pure arithmetic: never a figure made up where the energy is unknown."""

from __future__ import annotations

from dataclasses import dataclass

JOULES_PER_KWH = 3.6e6


def cost_per_million_tokens(
    joules_per_token: float | None,
    tariff_per_kwh: float,
    hardware_cost: float | None = None,
    hours: float | None = None,
    tokens_per_s: float | None = None,
) -> float | None:
    """Cost of 1,000,000 tokens in the tariff's currency; None when the energy per token or
    the tariff (0 = unknown) is not known.

    `hardware_cost` spread over `hours` of use adds the machine's share for the time the
    tokens take at `tokens_per_s`; it is left out unless all three are known. Whether the
    result is measured or estimated is the energy figure's label (Metrics.energy_source)."""
    if joules_per_token is None or joules_per_token < 0 or not tariff_per_kwh > 0:
        return None
    cost = joules_per_token * 1e6 / JOULES_PER_KWH * tariff_per_kwh
    if hardware_cost and hours and tokens_per_s:
        cost += hardware_cost / hours * (1e6 / tokens_per_s / 3600)
    return cost


@dataclass(frozen=True)
class LocalCostRates:
    """What a local reply costs the user, from the settings (handed in: core code never reads
    them). 0 means not set for each."""

    tariff_per_kwh: float = 0.0
    estimated_watts: float = 0.0  # for replies that carry no joules (no sensor)
    hardware_per_hour: float = 0.0  # the machine's price spread over its hours of use


def local_reply_cost(
    joules: float | None, energy_source: str | None, seconds: float | None, rates: LocalCostRates
) -> tuple[float | None, str]:
    """A local reply's cost and where it comes from: "measured" (joules from a counter),
    "estimated" (joules from a watts figure: the engine's at the time, or the user's watts ×
    the reply's measured seconds) or "none" (no tariff, or neither figure: cost None).

    The hardware's share (per hour × the reply's seconds) is added only to a known energy
    cost, so a cost is never the hardware alone."""
    if not rates.tariff_per_kwh > 0:
        return None, "none"
    if joules is not None and joules >= 0 and energy_source:
        source = "estimated" if energy_source == "estimated" else "measured"
    elif rates.estimated_watts > 0 and seconds is not None and seconds > 0:
        joules, source = rates.estimated_watts * seconds, "estimated"
    else:
        return None, "none"
    cost = joules / JOULES_PER_KWH * rates.tariff_per_kwh
    if rates.hardware_per_hour > 0 and seconds:
        cost += rates.hardware_per_hour * seconds / 3600
    return cost, source


def bench_cost_per_mtok(
    joules_per_token: float | None,
    energy_source: str | None,
    tg_tps: float | None,
    rates: LocalCostRates | None,
) -> tuple[float | None, str]:
    """A benchmarked configuration's cost of a million generated tokens and where it comes
    from: "measured" (decode joules per token from a counter), "estimated" (the engine's
    estimate, or the user's watts × the measured seconds per token, 1 / `tg_tps`) or "none"
    (no tariff, or neither figure: cost None). The hardware's share per hour is added to a
    known energy cost only."""
    if rates is None or not rates.tariff_per_kwh > 0:
        return None, "none"
    if joules_per_token is not None and joules_per_token >= 0:
        source = "estimated" if energy_source in (None, "estimated") else "measured"
    elif rates.estimated_watts > 0 and tg_tps:
        joules_per_token, source = rates.estimated_watts / tg_tps, "estimated"
    else:
        return None, "none"
    cost = cost_per_million_tokens(
        joules_per_token, rates.tariff_per_kwh, rates.hardware_per_hour or None, 1.0, tg_tps
    )
    return cost, source
