"""machine_capacity: the one line the first-run card shows, against saved hardware profiles."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from deskllm.catalog.curated import load_curated
from deskllm.catalog.synthetic_header import parameter_count, synthetic_header
from deskllm.hardware import HardwareReport, report_from_dict
from deskllm.planner.capacity import (
    REFERENCE_SHAPES,
    catalog_pick_line,
    machine_capacity,
    params_text,
)
from deskllm.planner.catalog_plan import plan_catalog
from deskllm.planner.fit import FitPlanner

PROFILES = Path(__file__).parent.parent / "data" / "hardware"


def profile(name: str) -> HardwareReport:
    return report_from_dict(json.loads((PROFILES / name).read_text(encoding="utf-8")))


def billions(n: int | None) -> float:
    assert n is not None
    return round(n / 1e9)


def test_a_laptop_with_an_8_gb_gpu_runs_an_8b_model_on_it():
    got = machine_capacity(profile("laptop_rtx4070_8gb.json"))
    assert billions(got.parameters) == 8 and got.on_gpu and got.plan.fit == "gpu"
    assert "about 8B parameters at Q4_K_M wholly on NVIDIA GeForce RTX 4070" in got.line
    assert "4,096-token context" in got.line


@pytest.mark.parametrize(
    "name, size", [("desktop_cpu_16gb.json", 12), ("cloud_vm_2core_24gb.json", 8)]
)
def test_a_cpu_machine_is_held_back_by_speed_before_memory(name, size):
    hardware = profile(name)
    got = machine_capacity(hardware)
    assert billions(got.parameters) == size and not got.on_gpu and got.plan.fit == "cpu"
    assert got.tps_ceiling >= 5.0 and f"about {size}B parameters" in got.line
    assert "in RAM on the CPU" in got.line
    # The next larger model fits its RAM too, but would read slower than the usable speed.
    sizes = [parameter_count(shape) for shape in REFERENCE_SHAPES]
    bigger = REFERENCE_SHAPES[sizes.index(got.parameters) + 1]
    plan = FitPlanner(hardware).plan(synthetic_header(bigger, "Q4_K_M"), 4096)
    assert plan.fit == "cpu" and plan.tps_ceiling < 5.0
    slower = machine_capacity(hardware, usable_tps=20.0)
    assert slower.parameters < got.parameters and slower.tps_ceiling >= 20.0


def test_a_longer_context_never_allows_a_larger_model():
    hardware = profile("laptop_rtx4070_8gb.json")
    short, long = machine_capacity(hardware, 4096), machine_capacity(hardware, 65536)
    assert long.parameters <= short.parameters and "65,536-token context" in long.line


def test_a_machine_too_small_for_any_reference_model_says_so():
    hardware = profile("desktop_cpu_16gb.json")
    tiny = dataclasses.replace(
        hardware, memory=dataclasses.replace(hardware.memory, available_bytes=600 << 20)
    )
    got = machine_capacity(tiny)
    assert got.parameters is None and got.plan is None
    assert got.line.startswith("Even a 0.5B model")


def test_parameter_counts_read_as_model_names():
    assert [params_text(n) for n in (494_000_000, 1_540_000_000, 8_030_000_000, 70_600_000_000)
            ] == ["0.5B", "1.5B", "8B", "71B"]  # fmt: skip


@pytest.mark.parametrize(
    "name, pick",
    [
        ("cloud_vm_2core_24gb.json", "bartowski/Qwen_Qwen3-30B-A3B-GGUF at Q5_K_M"),
        ("laptop_rtx4070_8gb.json", "bartowski/Qwen_Qwen3-8B-GGUF at Q6_K"),
    ],
)
def test_the_catalog_pick_names_what_recommend_picks_and_explains_a_larger_moe(name, pick):
    hardware = profile(name)
    planned = plan_catalog(load_curated(), hardware)
    line = catalog_pick_line(planned)
    assert line is not None and line.startswith(f"Recommended from the catalog: {pick}")
    assert planned.recommended_quant.quant == pick.split(" at ")[1]
    # On the VM the dense line says 8B while the pick is a 30B mixture of experts: the
    # sentence says why, instead of seeming to contradict it.
    assert ("mixture of experts" in line) == planned.recommended.model.is_moe
    assert billions(machine_capacity(hardware).parameters) == 8


def test_no_catalog_pick_where_nothing_fits():
    hardware = profile("desktop_cpu_16gb.json")
    tiny = dataclasses.replace(
        hardware, memory=dataclasses.replace(hardware.memory, available_bytes=100 << 20)
    )
    assert catalog_pick_line(plan_catalog(load_curated(), tiny)) is None
