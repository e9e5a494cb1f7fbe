"""The curated catalog planned for a machine: the rule across repos, its fallbacks, and speeds
measured here taking the ceiling's place."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from deskllm.catalog.curated import load_curated
from deskllm.hardware import report_from_dict
from deskllm.hardware.report import MemoryInfo
from deskllm.planner.catalog_plan import plan_catalog, plan_curated_model

PROFILES = Path(__file__).parent.parent / "data" / "hardware"
MIB = 1 << 20


def profile(name: str):
    return report_from_dict(json.loads((PROFILES / name).read_text()))


def test_nothing_fits_a_tiny_machine():
    tiny = dataclasses.replace(profile("desktop_cpu_16gb.json"),
                               memory=MemoryInfo(256 * MIB, 200 * MIB))  # fmt: skip
    planned = plan_catalog(load_curated(), tiny)
    assert planned.recommended is None and planned.reason is None
    for row in planned.rows:  # each shows its smallest file, as too big
        assert row.chosen.plan.fit == "too_big" and row.recommendation is None
        assert row.chosen.size_bytes == min(f.size_bytes for f in row.model.files)


def test_without_a_usable_speed_the_fastest_that_fits_is_taken():
    planned = plan_catalog(load_curated(), profile("desktop_cpu_16gb.json"), usable_tps=10_000)
    best = planned.recommended_quant
    assert "no model reaches 10000 tok/s here; the fastest that fits" in planned.reason
    fastest = max(r.chosen.plan.tps_ceiling for r in planned.rows if r.fits)
    assert best.plan.tps_ceiling == fastest


def test_a_measured_speed_decides_across_repos():
    desktop = profile("desktop_cpu_16gb.json")
    planned = plan_catalog(load_curated(), desktop)
    best = planned.recommended
    # Chats here found the recommended file slow: the next model down is taken instead.
    slow = {Path(planned.recommended_quant.file).name: 1.0}
    again = plan_catalog(load_curated(), desktop, measured_tps=slow)
    assert again.recommended_quant.file != planned.recommended_quant.file
    assert again.recommended.model.params <= best.model.params
    row = next(r for r in again.rows if r.model.repo_id == best.model.repo_id)
    assert row.measured_tps == {planned.recommended_quant.file: 1.0}


def test_a_curated_repo_plans_like_a_hub_repo():
    model = load_curated().model("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF")
    plan = plan_curated_model(model, profile("cloud_vm_2core_24gb.json"), n_ctx=4096)
    assert plan.model == model.repo_id and plan.n_ctx == 4096
    assert [p.quant for p in plan.plans] == [f.quant for f in model.files]
    assert plan.recommended.quant in ("Q6_K", "Q5_K_M", "Q4_K_M")  # ~35 GB/s: not Q8_0
    long = plan_curated_model(model, profile("cloud_vm_2core_24gb.json"), n_ctx=1 << 20)
    assert long.n_ctx == model.shape.context  # capped by the training context
