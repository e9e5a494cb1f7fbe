"""`deskllm usage` as a user runs it (a real process on a real database): the JSON keys the
README documents, local costs from the settings' tariff and watts or the flags, never a
made-up number."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from usage_helpers import TARIFF, WATTS, kwh_cost, seed

from deskllm import settings as settings_mod
from deskllm.database import open_database
from deskllm.settings import Settings

KEYS = ["completion_tokens", "cost", "cost_per_mtok", "cost_source", "day", "engine", "model",
        "prompt_tokens", "requests"]  # fmt: skip


@pytest.fixture
def days(deskllm_home: Path):
    db = open_database()
    try:
        return seed(db)
    finally:
        db.close()


def usage(deskllm_home: Path, *args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"DESKLLM_HOME": str(deskllm_home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "deskllm", "usage", *args],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip


def test_json_prices_local_replies_from_the_settings(deskllm_home, days):
    settings_mod.save(Settings(electricity_price_per_kwh=TARIFF, energy_watts=int(WATTS)))
    out = usage(deskllm_home, "--json", "--since", days.first)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert sorted(report) == ["local_share", "rows", "since"] and report["since"] == days.first
    assert all(sorted(row) == KEYS for row in report["rows"])
    rows = {(r["day"], r["engine"], r["cost_source"]): r for r in report["rows"]}
    assert sorted(rows) == [(days.first, "local", "estimated"), (days.first, "local", "measured"),
                            (days.first, "local", "none"), (days.second, "desk", "price"),
                            (days.second, "local", "measured")]  # fmt: skip
    assert rows[days.first, "local", "measured"]["cost"] == pytest.approx(kwh_cost(10800))
    assert rows[days.first, "local", "estimated"]["cost"] == pytest.approx(
        kwh_cost(1800 + WATTS * 13))  # fmt: skip
    assert rows[days.first, "local", "none"]["cost"] is None
    assert rows[days.second, "desk", "price"]["cost_per_mtok"] == pytest.approx(3500 / 1100)
    assert report["local_share"] == pytest.approx(0.5)


def test_flags_override_the_settings_and_no_tariff_prices_nothing_local(deskllm_home, days):
    plain = json.loads(usage(deskllm_home, "--json").stdout)  # default settings: no tariff
    assert {r["cost_source"] for r in plain["rows"] if r["engine"] == "local"} == {"none"}
    assert all(r["cost"] is None for r in plain["rows"] if r["engine"] == "local")
    flagged = json.loads(usage(deskllm_home, "--json", "--tariff", "0.6").stdout)
    measured = [r for r in flagged["rows"] if r["day"] == days.first
                and r["cost_source"] == "measured"]  # fmt: skip
    assert measured[0]["cost"] == pytest.approx(kwh_cost(10800, 0.6))
    # No watts: only the reply whose joules the engine estimated is priced as estimated.
    estimated = [r for r in flagged["rows"] if r["cost_source"] == "estimated"]
    assert [r["requests"] for r in estimated] == [1]
    table = usage(deskllm_home, "--since", days.first)
    assert table.returncode == 0 and "per Mtok" in table.stdout and "desk" in table.stdout
    assert "kept local by the router: 50%" in table.stdout
    assert "set the electricity price per kWh" in table.stdout
    bad = usage(deskllm_home, "--tariff", "-1")
    assert bad.returncode == 2 and "--tariff must be 0 or more" in bad.stderr
