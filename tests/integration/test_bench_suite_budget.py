"""The suite's backstop on the real engine: a configuration not done with a shape by its
deadline (here made tiny, so that the second CPU configuration misses it) is stopped
mid-shape, its engine ended, and abandoned with the reason; the suite goes on in a fresh
engine and still measures the winner's depth curve."""

from __future__ import annotations

import re

import pytest

from deskllm.measure.suite import BenchSuite

# Shape 1 is a 128-token prompt: on the CPU it takes longer than this, so the engine is ended
# in the middle of it.
BUDGET_FLOOR_S = 0.05


def test_a_full_measurement_past_its_budget_is_stopped_and_abandoned(starter_model):
    lines: list[str] = []
    suite = BenchSuite(str(starter_model), quick=True, budget_factor=0.01,
                       budget_floor_s=BUDGET_FLOOR_S, on_progress=lines.append)  # fmt: skip
    result = suite.run()
    first, *others = result["configs"]
    assert first["id"].startswith("cpu-") and first["status"] == "measured", lines
    assert others, "this test needs two CPU configurations (two cores)"
    for config in others:
        assert config["status"] == "abandoned", config
        assert re.fullmatch(
            rf"abandoned: shape 1 of 3 not done after [\d.]+ s, \d+× the [\d.]+ s "
            rf"{first['id']} took",
            config["abandoned"],
        ), config["abandoned"]
        assert config["score"] is None and not config["shapes"]
        assert config["tg_tps"] > 0  # the brief figures stay
        # load and measuring split the time; measuring is the brief check (a 1.5 s decode
        # window at most after its first token) plus the budget, and the kill's latency
        total = config["load_seconds"] + config["measure_seconds"]
        assert total == pytest.approx(config["seconds"], abs=0.02)
        assert config["measure_seconds"] < 15, config
        assert f": load {config['load_seconds']:.1f} s, measuring " in "\n".join(lines)
    assert result["chosen"]["id"] == first["id"]
    assert len(result["depth_tps"]) >= 3  # a fresh engine after the ended one
