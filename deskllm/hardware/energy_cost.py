"""What a million generated tokens cost in electricity (and, if given, the hardware's share).
Pure arithmetic: never a figure made up where the energy is unknown."""

from __future__ import annotations

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
