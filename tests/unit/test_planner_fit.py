"""FitPlanner: fit classes against saved hardware profiles, GPU layers, recommendation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from planner_models import FILE_TYPES, llama3_8b_header

from deskllm.engine.domain import LoadParams
from deskllm.gguf.header import read_header
from deskllm.hardware import HardwareReport, report_from_dict
from deskllm.hardware.report import EngineDevice, MemoryInfo, OffloadTarget
from deskllm.planner import FitPlanner, QuantPlan
from deskllm.planner.fit import VRAM_MARGIN, engine_gpu

PROFILES = Path(__file__).parent.parent / "data" / "hardware"
GIB = 1 << 30
MIB = 1 << 20
QUANTS = list(FILE_TYPES)  # best quality first


def profile(name: str) -> HardwareReport:
    return report_from_dict(json.loads((PROFILES / name).read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def laptop() -> HardwareReport:
    return profile("laptop_rtx4070_8gb.json")


@pytest.fixture(scope="module")
def desktop() -> HardwareReport:
    return profile("desktop_cpu_16gb.json")


@pytest.fixture(scope="module")
def ladder():
    return {q: llama3_8b_header(q) for q in QUANTS}


def plans_for(planner: FitPlanner, ladder, n_ctx: int = 8192) -> list[QuantPlan]:
    return [
        QuantPlan(f"llama-8b-{q}.gguf", q, h.tensor_bytes, planner.plan(h, n_ctx))
        for q, h in ladder.items()
    ]


def test_laptop_profile_uses_the_recorded_nvidia_gpu(laptop):
    planner = FitPlanner(laptop)
    assert planner.gpu.name == "NVIDIA GeForce RTX 4070 Laptop GPU"
    assert planner.gpu.engine_device == "CUDA0"
    assert planner.gpu.free_bytes == 8334082048  # NVML memory_free of the recording
    assert planner.vram_budget == 8334082048 - VRAM_MARGIN


def test_8b_on_an_8gb_laptop(laptop, ladder):
    planner = FitPlanner(laptop)
    fits = {q: planner.plan(h, 4096) for q, h in ladder.items()}
    assert fits["Q4_K_M"].fit == "gpu" and fits["Q4_K_M"].n_gpu_layers == 33
    assert fits["Q4_K_M"].layer_slots == 33
    assert fits["Q8_0"].fit == "partial" and 0 < fits["Q8_0"].n_gpu_layers < 33
    assert fits["Q2_K"].fit == "gpu"
    # a longer context leaves room for fewer layers
    assert planner.plan(ladder["Q8_0"], 8192).n_gpu_layers < fits["Q8_0"].n_gpu_layers
    assert planner.plan(ladder["F16"], 8192).fit == "too_big"


def test_8b_on_a_16gb_cpu_desktop(desktop, ladder):
    planner = FitPlanner(desktop)
    assert planner.gpu is None
    fits = {q: planner.plan(h, 8192) for q, h in ladder.items()}
    assert fits["F16"].fit == "too_big"
    assert all(fits[q].fit == "cpu" and fits[q].n_gpu_layers == 0 for q in QUANTS[1:])
    assert "no GPU" in fits["Q4_K_M"].reason


@pytest.mark.parametrize("name", ["laptop_rtx4070_8gb.json", "desktop_cpu_16gb.json"])
@pytest.mark.parametrize("n_ctx", [2048, 8192, 32768])
def test_a_fit_class_is_never_given_to_what_does_not_fit(name, n_ctx, ladder):
    planner = FitPlanner(profile(name))
    for q, h in ladder.items():
        plan = planner.plan(h, n_ctx)
        est = plan.estimate
        if plan.fit == "too_big":
            assert est.ram_bytes > planner.ram_budget
            continue
        assert est.ram_bytes <= planner.ram_budget, q
        if plan.fit in ("gpu", "partial"):
            assert est.vram_bytes <= planner.vram_budget, q
            # the most layers that fit: one more slot would not
            if plan.n_gpu_layers < plan.layer_slots:
                more = planner.estimate(h, n_ctx, "f16", plan.n_gpu_layers + 1)
                assert more.vram_bytes > planner.vram_budget, q
        else:
            assert plan.fit == "cpu" and est.vram_bytes == 0


@pytest.fixture(scope="module")
def cloud_vm() -> HardwareReport:
    return profile("cloud_vm_2core_24gb.json")


def test_a_slow_machine_trades_quality_for_a_usable_speed(cloud_vm, ladder):
    # 2 cores, ~35 GB/s: an 8B Q8_0 decodes at ~4 tok/s at most, Q4_K_M at ~7.
    planner = FitPlanner(cloud_vm)
    plans = [p for p in plans_for(planner, ladder, 4096) if p.quant in ("Q8_0", "Q4_K_M")]
    assert {p.plan.fit for p in plans} == {"cpu"}  # both fit: speed decides
    best = planner.recommend(plans, usable_tps=5.0)
    assert best.quant == "Q4_K_M"
    assert best.reason.startswith("Q4_K_M: best quality reaching 5 tok/s (~7 tok/s expected)")


@pytest.mark.parametrize("name", ["cloud_vm_2core_24gb.json", "desktop_cpu_16gb.json"])
def test_the_best_quality_that_reaches_the_floor_is_taken(name, ladder):
    planner = FitPlanner(profile(name))
    plans = plans_for(planner, ladder, 4096)  # best quality first
    best = planner.recommend(plans, usable_tps=5.0)
    at = [p.quant for p in plans].index(best.quant)
    assert best.plan.tps_ceiling >= 5.0
    assert all(p.plan.tps_ceiling < 5.0 for p in plans[:at])  # every better one is too slow
    assert best.quant in ("Q6_K", "Q5_K_M", "Q4_K_M")
    # a lower floor lets the best that fits through
    fitting = [p.quant for p in plans if p.plan.fit != "too_big"]
    assert planner.recommend(plans, usable_tps=1.0).quant == fitting[0]


def test_when_nothing_reaches_the_floor_the_fastest_that_fits_is_taken(desktop, ladder):
    planner = FitPlanner(desktop)
    best = planner.recommend(plans_for(planner, ladder, 4096), usable_tps=50.0)
    assert best.quant == "Q2_K"
    assert best.reason.startswith("Q2_K: none reaches 50 tok/s; fastest that fits")


def test_a_measured_speed_wins_over_the_ceiling(desktop, ladder):
    planner = FitPlanner(desktop)
    plans = plans_for(planner, ladder, 4096)
    q6 = next(p for p in plans if p.quant == "Q6_K")
    assert planner.recommend(plans).quant == "Q6_K"
    best = planner.recommend(plans, measured_tps={q6.file: 3.1})
    assert best.quant == "Q5_K_M"
    q8 = next(p for p in plans if p.quant == "Q8_0")
    best = planner.recommend(plans, measured_tps={q8.file: 6.2})
    assert best.quant == "Q8_0" and "(~6 tok/s measured)" in best.reason


def unknown_gpu_speed(report: HardwareReport) -> HardwareReport:
    """The report as it was before NVML's bus width and memory clock were read."""
    targets = tuple(dataclasses.replace(t, bandwidth_gbps=None) for t in report.offload_targets)
    return dataclasses.replace(report, offload_targets=targets)


def test_the_laptop_gpu_speed_comes_from_nvml(laptop, ladder):
    planner = FitPlanner(laptop)
    assert planner.gpu.bandwidth_gbps == 256.0  # 128-bit GDDR6 at 8001 MHz
    q4 = planner.plan(ladder["Q4_K_M"], 4096)
    assert q4.fit == "gpu" and 40 < q4.tps_ceiling < 60  # ~4.6 GB read per token


def test_a_fast_gpu_gets_the_best_quality_that_fits(laptop, ladder):
    roomy = dataclasses.replace(laptop, memory=MemoryInfo(64 * GIB, 60 * GIB))
    planner = FitPlanner(roomy)
    plans = plans_for(planner, ladder, 4096)
    best = planner.recommend(plans)
    assert best.quant == "F16"  # partly on the CPU, and still over 5 tok/s there
    assert best.plan.tps_ceiling >= 5.0 and "best quality reaching 5 tok/s" in best.reason
    gpu_only = [p for p in plans if p.plan.fit == "gpu"]
    best = planner.recommend(gpu_only)
    assert best.quant == gpu_only[0].quant and best.plan.tps_ceiling > 30


def test_a_full_fit_on_a_gpu_of_unknown_speed_counts_as_fast(laptop, ladder):
    planner = FitPlanner(unknown_gpu_speed(laptop))
    assert planner.gpu.bandwidth_gbps is None
    plans = [p for p in plans_for(planner, ladder, 4096) if p.plan.fit == "gpu"]
    assert [p.plan.tps_ceiling for p in plans] == [None] * len(plans)
    best = planner.recommend(plans, usable_tps=5.0)
    assert best.quant == plans[0].quant  # the best quality of those fully on the GPU
    assert "speed not known" in best.reason and best.plan.fit == "gpu"


def test_without_any_speed_quality_decides(desktop, ladder):
    unmeasured = dataclasses.replace(desktop, bandwidth_gbps=None)
    planner = FitPlanner(unmeasured)
    best = planner.recommend(plans_for(planner, ladder, 4096))
    assert best.quant == "Q8_0" and "speed not known" in best.reason


def test_recommendation_skips_what_does_not_fit(desktop, ladder):
    small = dataclasses.replace(desktop, memory=MemoryInfo(16 * GIB, 7 * GIB))
    planner = FitPlanner(small)
    best = planner.recommend(plans_for(planner, ladder, 4096))
    # Q5_K_M needs 6.3 GiB: more than 7 GiB less the 0.8 GiB margin; Q4_K_M needs 5.7
    assert best.quant == "Q4_K_M"
    assert best.plan.estimate.ram_bytes <= planner.ram_budget


def test_nothing_fits_a_tiny_machine(desktop, ladder):
    tiny = dataclasses.replace(desktop, memory=MemoryInfo(64 * MIB, 50 * MIB))
    planner = FitPlanner(tiny)
    plans = plans_for(planner, ladder)
    assert {p.plan.fit for p in plans} == {"too_big"}
    assert planner.recommend(plans) is None
    assert "too big: needs" in plans[-1].plan.reason and "GiB of RAM" in plans[-1].plan.reason


def test_equal_quality_prefers_the_smaller_file(desktop, ladder):
    planner = FitPlanner(desktop)
    plan = planner.plan(ladder["Q4_K_M"], 4096)
    best = planner.recommend([
        QuantPlan("a-F32.gguf", "F32", 30 * GIB, plan),
        QuantPlan("a-F16.gguf", "F16", 15 * GIB, plan),
    ])  # fmt: skip
    assert best.quant == "F16"


def test_unknown_quant_names_rank_last(desktop, ladder):
    planner = FitPlanner(desktop)
    plan = planner.plan(ladder["Q4_K_M"], 4096)
    best = planner.recommend([
        QuantPlan("a-UD-Q4_K_XL.gguf", "UD-Q4_K_XL", 4 * GIB, plan),
        QuantPlan("a-Q3_K_M.gguf", "Q3_K_M", 3 * GIB, plan),
    ])  # fmt: skip
    assert best.quant == "Q3_K_M"


def llvmpipe(report: HardwareReport) -> HardwareReport:
    """The desktop with a Vulkan build that sees Mesa's llvmpipe (a CPU-type device)."""
    target = OffloadTarget(
        "llvmpipe (LLVM 15.0.6, 256 bits)",
        "cpu",
        ("vulkan",),
        2 * GIB,
        None,
        automatic=False,
        shares_system_memory=True,
        engine_device="Vulkan0",
    )
    engine = dataclasses.replace(report.engine, devices=report.engine.devices + (
        EngineDevice("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", "gpu", 8 * GIB, 8 * GIB,
                     "Vulkan"),))  # fmt: skip
    return dataclasses.replace(report, engine=engine, offload_targets=(target,))


def test_cpu_type_devices_are_used_only_when_named(desktop, ladder):
    hw = llvmpipe(desktop)
    assert FitPlanner(hw).gpu is None
    assert FitPlanner(hw).plan(ladder["Q4_K_M"], 4096).fit == "cpu"
    named = FitPlanner(hw, target="Vulkan0")
    assert named.gpu.name.startswith("llvmpipe") and named.gpu.shares_system_memory
    plan = named.plan(ladder["Q2_K"], 2048)
    # its memory is the system RAM: the RAM check counts what goes to the "GPU" too
    assert plan.fit in ("gpu", "partial")
    assert plan.estimate.ram_bytes + plan.estimate.vram_bytes <= named.ram_budget
    with pytest.raises(ValueError, match="no offload device"):
        FitPlanner(hw, target="Radeon")
    cpu_build = dataclasses.replace(desktop, offload_targets=(
        dataclasses.replace(hw.offload_targets[0], engine_device=None),))  # fmt: skip
    with pytest.raises(ValueError, match="no backend in the installed llama.cpp build"):
        FitPlanner(cpu_build, target="llvmpipe (LLVM 15.0.6, 256 bits)")


def test_tps_ceiling(desktop, laptop, starter_model):
    header = read_header(starter_model)
    cpu_plan = FitPlanner(desktop).plan(header, 2048)
    # 38 GB/s over roughly the model's weights (+ half the KV cache) per token
    assert 38e9 / header.tensor_bytes * 0.7 < cpu_plan.tps_ceiling < 38e9 / header.tensor_bytes
    gpu_plan = FitPlanner(laptop).plan(header, 2048)
    # NVML's 256 GB/s over the same bytes
    assert 256e9 / header.tensor_bytes * 0.7 < gpu_plan.tps_ceiling < 256e9 / header.tensor_bytes
    gpu_plan = FitPlanner(unknown_gpu_speed(laptop)).plan(header, 2048)
    assert gpu_plan.fit == "gpu" and gpu_plan.tps_ceiling is None  # VRAM bandwidth unknown
    no_bw = dataclasses.replace(desktop, bandwidth_gbps=None)
    assert FitPlanner(no_bw).plan(header, 2048).tps_ceiling is None


def test_load_settings_follow_the_plan(laptop, ladder):
    plan = FitPlanner(laptop).plan(ladder["Q8_0"], 8192, "q8_0")
    assert plan.load.n_ctx == 8192 and plan.load.kv_type == "q8_0"
    assert plan.load.flash_attn  # a quantized KV cache needs flash attention
    assert plan.load.n_gpu_layers == plan.n_gpu_layers


def test_refusal_gives_needed_and_available_bytes(desktop, ladder):
    tiny = dataclasses.replace(desktop, memory=MemoryInfo(64 * MIB, 50 * MIB))
    message = FitPlanner(tiny).refusal(ladder["Q4_K_M"], LoadParams("m.gguf", n_ctx=4096))
    assert "needs" in message and "GiB of RAM" in message
    assert f"{50 * MIB} bytes" in message and "weights" in message and "KV cache" in message
    assert FitPlanner(desktop).refusal(ladder["Q4_K_M"], LoadParams("m.gguf", n_ctx=4096)) is None


def test_refusal_for_too_many_gpu_layers(laptop, ladder):
    everything = LoadParams("m.gguf", n_ctx=4096, n_gpu_layers=-1)
    message = FitPlanner(laptop).refusal(ladder["F16"], everything)
    assert "RTX 4070" in message and "fewer layers" in message
    assert FitPlanner(laptop).refusal(ladder["Q4_K_M"], everything) is None


def test_the_engine_skips_cpu_type_devices_unless_named(desktop, laptop):
    hw = llvmpipe(desktop)
    assert engine_gpu(hw) is None  # ggml leaves llvmpipe out unless GGML_VK_VISIBLE_DEVICES
    assert engine_gpu(hw, cpu_type_named=True).engine_device == "Vulkan0"
    assert engine_gpu(laptop).engine_device == "CUDA0"


def test_a_gpu_the_build_cannot_use_is_named(laptop, ladder):
    cpu_build = dataclasses.replace(
        laptop,
        engine=dataclasses.replace(laptop.engine, devices=laptop.engine.devices[:1]),
        offload_targets=tuple(
            dataclasses.replace(t, engine_device=None) for t in laptop.offload_targets
        ),
    )
    plan = FitPlanner(cpu_build).plan(ladder["Q4_K_M"], 4096)
    assert plan.fit == "cpu"
    assert "RTX 4070 Laptop GPU is here, but this llama.cpp build cannot use it" in plan.reason
