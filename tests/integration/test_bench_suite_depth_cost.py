"""`deskllm bench --suite --quick --json` on the real engine and the starter model: decode
speed against context depth for the chosen configuration, and each configuration's cost per
million tokens from the user's tariff and watts (no energy sensor here: estimated), stored
with the result. The path without a tariff is in tests/gui/test_bench_dialog.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from deskllm.measure.suite import QUICK_DEPTH_TOKENS, QUICK_DEPTHS, QUICK_N_CTX, depth_points
from deskllm.planner.measured_configs import current_keys, stored_suite
from deskllm.store import open_database

pytestmark = pytest.mark.driver

TARIFF = 0.30
WATTS = 15


def test_depth_curve_and_estimated_cost_per_million_tokens(deskllm_home, starter_model):
    (deskllm_home / "settings.json").write_text(
        json.dumps({"electricity_price_per_kwh": TARIFF, "energy_watts": WATTS})
    )
    run = subprocess.run(
        [sys.executable, "-m", "deskllm", "bench", "--suite", "--quick", "--json"],
        capture_output=True, text=True, env=os.environ.copy(), timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    # Every key of before is still there.
    assert set(result) >= {"model", "configs", "chosen", "ceiling_tps", "machine",
                           "engine_build", "depth_tps"}  # fmt: skip
    chosen = result["chosen"]["id"]
    assert chosen is not None, run.stderr

    points = result["depth_tps"]
    expected = depth_points(QUICK_DEPTHS, QUICK_N_CTX, QUICK_DEPTH_TOKENS)
    assert len(points) == len(expected) >= 3, run.stderr
    depths = [p["depth"] for p in points]
    # Depth 0 holds the chat template's own tokens and the note that makes the prompt fresh
    # (66 with the starter model here).
    assert depths == sorted(depths) and depths[0] < 100
    for point, target in zip(points[1:], expected[1:], strict=True):
        assert abs(point["depth"] - target) <= 0.2 * target + 40, (depths, expected)
    assert all(p["tg_tps"] and p["tg_tps"] > 0 for p in points)
    assert f"decode speed against context depth, {chosen}" in run.stderr

    for config in result["configs"]:
        assert {"cost_per_mtok", "cost_source"} <= set(config)
        if config["status"] != "measured":
            assert (config["cost_per_mtok"], config["cost_source"]) == (None, "none")
            continue
        assert config["joules_per_token"] is None  # no sensor on this machine
        assert config["cost_source"] == "estimated"
        # WATTS / tok/s joules per token, a million of them at TARIFF per kWh
        expected_cost = WATTS / config["tg_tps"] * 1e6 / 3.6e6 * TARIFF
        assert config["cost_per_mtok"] == pytest.approx(expected_cost, rel=0.01)

    stored = stored_suite(open_database(), current_keys(), str(starter_model))
    assert stored == result
