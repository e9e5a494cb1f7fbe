"""The suite's context depths and a configuration's cost per million tokens: pure logic."""

from __future__ import annotations

import pytest

from deskllm.hardware.energy_cost import LocalCostRates, bench_cost_per_mtok
from deskllm.measure.suite import (
    DEPTH_TOKENS,
    DEPTHS,
    N_CTX,
    QUICK_DEPTH_TOKENS,
    QUICK_DEPTHS,
    QUICK_N_CTX,
    TEMPLATE_MARGIN,
    depth_points,
)


def test_every_default_depth_fits_its_context():
    assert depth_points(DEPTHS, N_CTX, DEPTH_TOKENS) == list(DEPTHS)
    assert depth_points(QUICK_DEPTHS, QUICK_N_CTX, QUICK_DEPTH_TOKENS) == list(QUICK_DEPTHS)


def test_depths_that_leave_no_room_to_decode_are_left_out():
    assert depth_points((0, 512, 1024, 2048), 1024, 64) == [0, 512]
    edge = 1024 - TEMPLATE_MARGIN - 64
    assert depth_points((edge, edge + 1), 1024, 64) == [edge]
    assert depth_points((0,), 32, 64) == []


def test_a_sensors_joules_are_measured_cost():
    rates = LocalCostRates(tariff_per_kwh=0.36, estimated_watts=15)
    cost, source = bench_cost_per_mtok(0.5, "rapl", 40.0, rates)
    # 0.5 J × 1e6 tokens = 5e5 J = 0.1389 kWh × 0.36 = 0.05; the watts figure is not used
    assert source == "measured"
    assert cost == pytest.approx(0.05)


def test_without_a_sensor_the_users_watts_give_an_estimated_cost():
    rates = LocalCostRates(tariff_per_kwh=0.36, estimated_watts=20)
    cost, source = bench_cost_per_mtok(None, None, 40.0, rates)
    # 20 W / 40 tok/s = 0.5 J per token
    assert source == "estimated"
    assert cost == pytest.approx(0.05)
    assert bench_cost_per_mtok(0.5, "estimated", 40.0, rates)[1] == "estimated"


def test_the_hardware_share_is_added_to_a_known_energy_cost_only():
    rates = LocalCostRates(tariff_per_kwh=0.36, estimated_watts=20, hardware_per_hour=0.9)
    cost, _ = bench_cost_per_mtok(None, None, 250.0, rates)
    # 1e6 tokens at 250 tok/s = 4000 s = 1.111 h × 0.9 = 1.0, plus 20 / 250 J per token
    assert cost == pytest.approx(1.0 + 0.08 * 1e6 / 3.6e6 * 0.36)
    no_energy = LocalCostRates(tariff_per_kwh=0.36, hardware_per_hour=0.9)
    assert bench_cost_per_mtok(None, None, 250.0, no_energy) == (None, "none")


@pytest.mark.parametrize(
    "joules, tg_tps, rates",
    [
        (0.5, 40.0, None),  # no rates handed in
        (0.5, 40.0, LocalCostRates(estimated_watts=20)),  # no tariff
        (None, 40.0, LocalCostRates(tariff_per_kwh=0.36)),  # no sensor, no watts
        (None, None, LocalCostRates(tariff_per_kwh=0.36, estimated_watts=20)),  # no speed
    ],
)
def test_an_unknown_cost_is_none_never_invented(joules, tg_tps, rates):
    assert bench_cost_per_mtok(joules, "rapl", tg_tps, rates) == (None, "none")
