"""`usage()` over real SQLite rows: a local reply's cost from measured joules, from a watts
figure (always labelled estimated) or none at all; remote rows at their price; the period,
the router's local share, the per-model totals and the chart's days."""

from __future__ import annotations

import datetime
import itertools

import pytest
from usage_helpers import MODEL, TARIFF, WATTS, kwh_cost, seed

from deskllm.database import open_database
from deskllm.hardware.energy_cost import LocalCostRates, local_reply_cost
from deskllm.loader.params import cost_rates_from_settings
from deskllm.settings import Settings
from deskllm.store.usage import DayTokens, per_model, reply_seconds, tokens_per_day, usage

RATES = LocalCostRates(tariff_per_kwh=TARIFF, estimated_watts=WATTS)


@pytest.fixture
def db(tmp_path):
    db = open_database(tmp_path / "store.sqlite3")
    yield db
    db.close()


def by_key(report):
    return {(r.day, r.engine, r.cost_source): r for r in report.rows}


def test_each_local_reply_is_priced_from_what_measured_it(db):
    days = seed(db)
    report = usage(db, days.first, RATES)
    rows = by_key(report)
    assert sorted(rows) == [
        (days.first, "local", "estimated"),
        (days.first, "local", "measured"),
        (days.first, "local", "none"),
        (days.second, "desk", "price"),
        (days.second, "local", "measured"),
    ]
    measured = rows[days.first, "local", "measured"]
    assert (measured.model, measured.requests) == (MODEL, 2)
    assert (measured.prompt_tokens, measured.completion_tokens) == (150, 75)
    assert measured.cost == pytest.approx(kwh_cost(7200 + 3600))
    assert measured.cost_per_mtok == pytest.approx(kwh_cost(10800) * 1e6 / 225)
    # The engine's estimated joules, and the watts × (3 s + 20 tokens at 2 tok/s) of the
    # reply that carries no joules: both estimated, never mixed into the measured row.
    estimated = rows[days.first, "local", "estimated"]
    assert estimated.requests == 2
    assert estimated.cost == pytest.approx(kwh_cost(1800 + WATTS * 13))
    none = rows[days.first, "local", "none"]  # no joules and no time: not priced
    assert (none.requests, none.cost, none.cost_per_mtok) == (1, None, None)
    remote = rows[days.second, "desk", "price"]
    assert remote.model == "big" and remote.cost == pytest.approx((1000 * 2.5 + 100 * 10) / 1e6)
    assert remote.cost_per_mtok == pytest.approx(remote.cost * 1e6 / 1100)
    assert report.local_share == pytest.approx(0.5)  # of the two replies the router placed


def test_without_a_tariff_no_local_reply_has_a_cost(db):
    days = seed(db)
    for rates in (None, LocalCostRates(estimated_watts=WATTS)):
        rows = by_key(usage(db, days.first, rates))
        assert sorted(rows) == [(days.first, "local", "none"), (days.second, "desk", "price"),
                                (days.second, "local", "none")]  # fmt: skip
        assert rows[days.first, "local", "none"].requests == 5
        assert all(r.cost is None for r in rows.values() if r.engine == "local")


def test_without_watts_only_replies_with_joules_are_priced(db):
    days = seed(db)
    rows = by_key(usage(db, days.first, LocalCostRates(tariff_per_kwh=TARIFF)))
    assert rows[days.first, "local", "estimated"].requests == 1  # the engine's own estimate
    assert rows[days.first, "local", "estimated"].cost == pytest.approx(kwh_cost(1800))
    assert rows[days.first, "local", "none"].requests == 2


def test_since_counts_from_that_day_on(db):
    days = seed(db)
    everything = usage(db, None, RATES)
    assert everything.rows[0].day == days.old and everything.since is None
    assert everything.rows[0].cost == pytest.approx(kwh_cost(36))
    assert {r.day for r in usage(db, days.second, RATES).rows} == {days.second}
    assert usage(db, "2999-01-01", RATES).as_json() == {
        "since": "2999-01-01", "rows": [], "local_share": None}  # fmt: skip


def test_per_model_totals_and_the_chart_days(db):
    days = seed(db)
    report = usage(db, None, RATES)
    totals = {(r.engine, r.cost_source): r for r in per_model(report.rows)}
    measured = totals["local", "measured"]  # 40 days ago, yesterday (2) and today
    assert measured.requests == 4 and measured.day == days.old
    assert measured.cost == pytest.approx(kwh_cost(36 + 10800 + 360))
    assert measured.cost_per_mtok == pytest.approx(measured.cost * 1e6 / measured.tokens)
    assert totals["local", "none"].cost is None
    assert tokens_per_day(report.rows) == [
        DayTokens(days.old, 14, 0),
        DayTokens(days.first, 150 + 75 + 40 + 31 + 5, 0),
        DayTokens(days.second, 40, 1100),
    ]
    # A period's chart keeps its time axis: every day from its start to its end, idle ones 0.
    padded = tokens_per_day(report.rows, None, days.second)
    dates = [datetime.date.fromisoformat(d.day) for d in padded]
    assert dates[0] == datetime.date.fromisoformat(days.old) and padded[-1].day == days.second
    assert all(b - a == datetime.timedelta(days=1) for a, b in itertools.pairwise(dates))
    assert len(padded) == (dates[-1] - dates[0]).days + 1 > 3
    assert sum(d.local + d.remote for d in padded) == sum(
        d.local + d.remote for d in tokens_per_day(report.rows)
    )
    assert tokens_per_day([], "2026-01-01", "2026-01-31") == []  # nothing: no bars at all


def test_reply_cost_labels_and_the_hardware_share():
    rates = LocalCostRates(tariff_per_kwh=0.36, estimated_watts=100, hardware_per_hour=3.6)
    # 3.6e6 J = 1 kWh at 0.36, plus 3.6 per hour for 10 s; 100 W for 36 s = 0.001 kWh
    assert local_reply_cost(3.6e6, "rapl", 10.0, rates) == (pytest.approx(0.36 + 0.01),
                                                           "measured")  # fmt: skip
    assert local_reply_cost(3.6e6, "nvml", None, rates) == (pytest.approx(0.36), "measured")
    assert local_reply_cost(None, None, 36.0, rates) == (pytest.approx(0.00036 + 0.036),
                                                        "estimated")  # fmt: skip
    assert local_reply_cost(None, None, None, rates) == (None, "none")
    no_tariff = LocalCostRates(hardware_per_hour=3.6)  # not even the hardware share alone
    assert local_reply_cost(3.6e6, "rapl", 10.0, no_tariff) == (None, "none")


def test_reply_seconds_from_the_measured_figures():
    assert reply_seconds(3.0, 21, 2.0) == pytest.approx(13.0)
    assert reply_seconds(0.5, 1, None) == pytest.approx(0.5)
    assert reply_seconds(None, 10, 5.0) is None


def test_rates_come_from_the_settings_and_flags_win():
    settings = Settings(electricity_price_per_kwh=0.25, energy_watts=30, hardware_cost=1000.0,
                        hardware_hours=5000)  # fmt: skip
    assert cost_rates_from_settings(settings) == LocalCostRates(0.25, 30.0, 0.2)
    assert cost_rates_from_settings(settings, tariff_per_kwh=0.5, estimated_watts=None) == (
        LocalCostRates(0.5, 30.0, 0.2))  # fmt: skip
    assert cost_rates_from_settings(Settings(hardware_cost=1000.0)).hardware_per_hour == 0
    assert Settings(hardware_cost=-1.0).validate() == [
        "the hardware price must be 0 (left out) or more"]  # fmt: skip
