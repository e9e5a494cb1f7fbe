"""How many slots "automatic" serves: as many as fit beside the model (each slot's KV cache
counted by the planner), up to the cap; never one that pushes layers off the GPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from deskllm.engine.domain import LoadParams
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.gguf.header import read_header
from deskllm.hardware import report_from_dict
from deskllm.loader import ModelLoader
from deskllm.planner import FitPlanner

PROFILES = Path(__file__).parent.parent / "data" / "hardware"


def report_with_ram(name: str, available: int):
    report = report_from_dict(json.loads((PROFILES / name).read_text(encoding="utf-8")))
    memory = dataclasses.replace(report.memory, available_bytes=available)
    return dataclasses.replace(report, memory=memory)


def params(model: Path) -> LoadParams:
    return LoadParams(model_path=str(model), n_ctx=2048, n_threads=2, gpu_auto=False,
                      n_gpu_layers=0, use_extra_bufts=False)  # fmt: skip


def ram_needed(model: Path, slots: int) -> int:
    """The least available RAM the planner accepts `slots` slots of 2048 tokens with."""
    header = read_header(model)
    report = report_with_ram("desktop_cpu_16gb.json", 1)
    planner = FitPlanner(report, use_extra_bufts=False)
    low, high = 1, 1 << 34
    while low < high:
        mid = (low + high) // 2
        planner.hardware = dataclasses.replace(
            report, memory=dataclasses.replace(report.memory, available_bytes=mid)
        )
        load = dataclasses.replace(params(model), n_ctx=2048 * slots)
        if planner.refusal(header, load) is None:
            high = mid
        else:
            low = mid + 1
    return low


def test_automatic_slots_are_as_many_as_fit(starter_model):
    one, two, three = (ram_needed(starter_model, n) for n in (1, 2, 3))
    assert one < two < three  # each slot's KV cache is counted
    for available, expected in ((one, 1), (two, 2), (three - 1, 2), (three, 3)):
        loader = ModelLoader(None, hardware=report_with_ram("desktop_cpu_16gb.json", available))
        assert loader.slots_that_fit(params(starter_model), 8) == expected, available
    roomy = ModelLoader(None, hardware=report_with_ram("desktop_cpu_16gb.json", 1 << 34))
    assert roomy.slots_that_fit(params(starter_model), 4) == 4  # the cap


def test_the_loader_plans_every_slot_s_kv(starter_model):
    """A load with N slots is refused where one slot would fit: the check counts N × n_ctx."""
    two = ram_needed(starter_model, 2)
    report = report_with_ram("desktop_cpu_16gb.json", two - 1)
    ModelLoader(None, hardware=report, slots=1).check(params(starter_model))
    with pytest.raises(EngineError, match="RAM") as refused:
        ModelLoader(None, hardware=report, slots=2).check(params(starter_model))
    assert refused.value.kind == ErrorKind.TOO_BIG


def test_a_draft_model_is_counted_and_refused_with_numbers_where_it_does_not_fit(
        starter_model, gemma_model):  # fmt: skip
    """The draft loads beside the model: a machine that holds the model alone is refused the
    pair, naming the draft; one that does not hold the draft names its numbers."""
    alone = ram_needed(starter_model, 1)
    with_draft = dataclasses.replace(params(starter_model), draft_model_path=str(gemma_model))
    ModelLoader(None, hardware=report_with_ram("desktop_cpu_16gb.json", alone)).check(
        params(starter_model))
    with pytest.raises(EngineError) as refused:
        ModelLoader(None, hardware=report_with_ram("desktop_cpu_16gb.json", alone)).check(
            with_draft)
    assert refused.value.kind == ErrorKind.TOO_BIG
    assert str(refused.value).startswith(f"the draft model {gemma_model.name} needs ")
    assert "of RAM" in str(refused.value)
    roomy = ModelLoader(None, hardware=report_with_ram("desktop_cpu_16gb.json", 1 << 34))
    assert roomy.check(with_draft).params.draft_model_path == str(gemma_model)
