"""The benchmark suite's rules with given figures: which configuration is hopeless, which one
wins, which configurations a machine offers, and what an automatic load takes from a stored
result (the real suite: tests/integration/test_bench_suite.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from deskllm.database.connection import open_database
from deskllm.engine.device_env import device_env
from deskllm.engine.domain import LoadParams
from deskllm.gguf.header import read_header
from deskllm.hardware import HardwareReport, report_from_dict
from deskllm.hardware.report import EngineDevice, OffloadTarget
from deskllm.loader import ModelLoader
from deskllm.measure.suite import score, suite_configs
from deskllm.planner.bench_choice import (
    ConfigFigures,
    abandon_reason,
    best_of,
    choose,
    first_token_reason,
    over_budget_reason,
    shape_deadlines,
)
from deskllm.planner.fit import FitPlanner
from deskllm.planner.measured_configs import (
    MachineKeys,
    current_keys,
    diagnosis_lines,
    save_suite,
    stored_suite,
)

PROFILES = Path(__file__).parent.parent / "data" / "hardware"
GIB = 1 << 30

CPU2 = ConfigFigures("cpu-2t", "CPU 2 threads", 147.0, 300.0)
CPU1 = ConfigFigures("cpu-1t", "CPU 1 thread", 90.0, 160.0)
LAVAPIPE = ConfigFigures("vulkan0-31l", "Vulkan0 llvmpipe, 31 layers", 1.6, 40.0)


def test_a_config_ten_times_slower_than_the_best_so_far_is_abandoned_with_its_figures():
    assert abandon_reason(LAVAPIPE, CPU2) == "abandoned: 1.6 tok/s, 92× slower than cpu-2t"
    assert abandon_reason(LAVAPIPE, None) is None  # the first one is always measured
    nine_times = dataclasses.replace(LAVAPIPE, tg_tps=147.0 / 9)
    assert abandon_reason(nine_times, CPU2) is None
    assert abandon_reason(dataclasses.replace(LAVAPIPE, tg_tps=14.7), CPU2) is not None
    # by prompt speed lavapipe is 7.5x slower here: not hopeless
    assert abandon_reason(LAVAPIPE, CPU2, "prompt") is None
    cut_off = dataclasses.replace(LAVAPIPE, tg_tps=0.33, bound=True)  # no 2nd token in 3 s
    assert abandon_reason(cut_off, CPU2) == "abandoned: under 0.3 tok/s, 445× slower than cpu-2t"
    no_token = dataclasses.replace(LAVAPIPE, tg_tps=None)
    assert abandon_reason(no_token, CPU2).startswith("abandoned: no decode speed figure")


def test_a_prompt_ten_times_slower_to_a_first_token_is_abandoned_with_its_times():
    best = dataclasses.replace(CPU2, ttft_s=0.3)
    assert first_token_reason(4.5, best) == (
        "abandoned: no token after 4.5 s, 15× the 0.30 s cpu-2t took"
    )
    assert first_token_reason(4.5, None) == "abandoned: no token after 4.5 s"


def test_each_shape_must_be_done_by_four_times_when_the_best_finished_one_was():
    assert shape_deadlines(None) == ()  # the first one measured has nothing to compare with
    assert shape_deadlines(CPU2) == ()  # a brief figure only: no full times to go by
    finished = dataclasses.replace(CPU2, shape_ends_s=(0.5, 2.5, 8.5))
    assert shape_deadlines(finished) == (3.0, 10.0, 34.0)  # 3 s at least
    assert shape_deadlines(finished, factor=0.1, floor_s=0.2) == pytest.approx((0.2, 0.25, 0.85))
    assert over_budget_reason(1, 10.0, finished) == (
        "abandoned: shape 2 of 3 not done after 10.0 s, 4× the 2.5 s cpu-2t took"
    )


def test_the_best_so_far_counts_brief_figures_of_every_config():
    assert best_of([CPU1, LAVAPIPE, CPU2]) is CPU2
    assert best_of([LAVAPIPE, CPU1], "prompt") is CPU1
    assert best_of([]) is None


def test_the_choice_is_the_fastest_fully_measured_config_that_fits():
    abandoned = dataclasses.replace(LAVAPIPE, tg_tps=500.0, status="abandoned")
    chosen, reason = choose([CPU1, abandoned, CPU2])
    assert chosen is CPU2
    assert reason == (
        "fastest measured decode speed: CPU 2 threads at 147.0 tok/s, 1.63× the next (cpu-1t)"
    )
    chosen, reason = choose([CPU1, CPU2], fits=lambda c: c.id != "cpu-2t")
    assert chosen is CPU1 and "cpu-2t faster but does not fit now" in reason
    lavapipe_wins = dataclasses.replace(LAVAPIPE, tg_tps=160.0)
    assert choose([CPU2, lavapipe_wins])[0] is lavapipe_wins  # the earlier VM of this kind
    prompt_first = dataclasses.replace(CPU1, pp_tps=400.0)
    assert choose([prompt_first, CPU2], "prompt")[0] is prompt_first
    assert choose([abandoned]) is None
    assert choose([CPU1], fits=lambda _c: False) is None
    with pytest.raises(ValueError, match="metric"):
        choose([CPU1], "speed")


def test_score_is_a_geometric_mean_of_prompt_decode_and_ttft():
    assert score(1000.0, 100.0, 0.1) == pytest.approx(10 * (1000 * 100 * 10) ** (1 / 3), 0.01)
    assert score(None, 100.0, 0.1) is None


@pytest.fixture(scope="module")
def desktop_with_llvmpipe() -> HardwareReport:
    """A 2-core desktop profile whose Vulkan build sees Mesa's llvmpipe (a CPU-type device)."""
    report = report_from_dict(json.loads((PROFILES / "desktop_cpu_16gb.json").read_text()))
    target = OffloadTarget("llvmpipe (LLVM 15.0.6, 256 bits)", "cpu", ("vulkan",), 2 * GIB,
                           None, automatic=False, shares_system_memory=True,
                           engine_device="Vulkan0")  # fmt: skip
    engine = dataclasses.replace(report.engine, devices=report.engine.devices + (
        EngineDevice("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", "gpu", 8 * GIB, 8 * GIB,
                     "Vulkan"),))  # fmt: skip
    cpu = dataclasses.replace(report.cpu, cores_physical=2)
    return dataclasses.replace(report, cpu=cpu, engine=engine, offload_targets=(target,))


def test_the_suite_offers_every_thread_count_and_cpu_type_devices_only_when_allowed(
    desktop_with_llvmpipe, starter_model
):
    header = read_header(starter_model)

    def planner_for(device):
        return FitPlanner(desktop_with_llvmpipe, target=device)

    configs, skipped = suite_configs(desktop_with_llvmpipe, planner_for, header, 1024)
    assert [c.id for c in configs] == ["cpu-2t", "cpu-1t"]
    assert "--allow-cpu-devices" in skipped[0] and "llvmpipe" in skipped[0]
    configs, skipped = suite_configs(desktop_with_llvmpipe, planner_for, header, 1024, True)
    # the CPU baseline first (all threads and half of them), then the device fully and half
    # offloaded
    assert [c.id for c in configs] == ["cpu-2t", "cpu-1t", "vulkan0-31l", "vulkan0-15l"]
    assert not skipped
    eight_cores = dataclasses.replace(
        desktop_with_llvmpipe,
        cpu=dataclasses.replace(desktop_with_llvmpipe.cpu, cores_physical=8),
    )
    configs, _ = suite_configs(eight_cores, planner_for, header, 1024, True)
    assert [c.id for c in configs] == ["cpu-8t", "cpu-4t", "vulkan0-31l", "vulkan0-15l",
                                       "cpu-7t", "cpu-6t", "cpu-5t", "cpu-3t", "cpu-2t",
                                       "cpu-1t"]  # fmt: skip
    full = configs[2]
    assert (full.backend, full.device, full.n_threads) == ("Vulkan", "Vulkan0", 8)


def suite_result(model: Path, keys: MachineKeys, winner: str = "cpu-2t") -> dict:
    def config(id, backend, device, threads, layers, tg, pp, status="measured"):
        return dict(id=id, backend=backend, device=device, description="llvmpipe"
                    if device != "CPU" else "CPU", n_threads=threads, n_gpu_layers=layers,
                    tg_tps=tg, pp_tps=pp, ttft_s=0.1, score=None, joules_per_token=None,
                    status=status)  # fmt: skip

    lavapipe_tg = 160.0 if winner == "vulkan0-31l" else 1.6
    lavapipe_status = "measured" if winner == "vulkan0-31l" else "abandoned"
    return dict(
        model=str(model),
        configs=[
            config("cpu-2t", "CPU", "CPU", 2, 0, 147.0, 300.0),
            config("vulkan0-31l", "Vulkan", "Vulkan0", 2, 31, lavapipe_tg, 40.0, lavapipe_status)
            | {"abandoned": "abandoned: 92× slower than cpu-2t" if lavapipe_tg < 2 else None},
            config("cpu-1t", "CPU", "CPU", 1, 0, 90.0, 400.0),
        ],
        chosen={"id": winner, "reason": "given"},
        ceiling_tps=240.0,
        machine=keys.machine,
        engine_build=keys.engine_build,
    )


def test_results_are_stored_per_machine_build_and_model_file(tmp_path, starter_model):
    db = open_database(tmp_path / "store.sqlite3")
    keys = current_keys()
    result = suite_result(starter_model, keys)
    save_suite(db, result)
    save_suite(db, result)  # a second run replaces the first
    assert db["bench_suites"].count == 1
    assert stored_suite(db, keys, str(starter_model)) == result
    assert stored_suite(db, MachineKeys(keys.machine, "another-build"), str(starter_model)) is None
    other_file = tmp_path / starter_model.name
    other_file.write_bytes(b"GGUF")  # same name, another size: another file
    assert stored_suite(db, keys, str(other_file)) is None
    [line] = diagnosis_lines(db, keys)
    assert line == (
        f"{starter_model.name}, measured by deskllm bench --suite: CPU 2 threads 147.0 tok/s "
        "(61% of the 240 tok/s ceiling), Vulkan0 llvmpipe, 31 layers 1.6 tok/s (abandoned: "
        "92× slower than cpu-2t), CPU 1 thread 90.0 tok/s; the suite chose cpu-2t."
    )


def test_an_automatic_load_takes_the_measured_winner_that_fits(
    tmp_path, starter_model, desktop_with_llvmpipe
):
    db = open_database(tmp_path / "store.sqlite3")
    loader = ModelLoader(None, db=db, hardware=desktop_with_llvmpipe)  # check() only
    auto = LoadParams(str(starter_model), n_ctx=1024, gpu_auto=True, use_extra_bufts=False)
    unmeasured = loader.check(auto)
    assert unmeasured.measured is None and unmeasured.params.n_gpu_layers == 0

    save_suite(db, suite_result(starter_model, current_keys()))
    check = loader.check(auto)
    assert (check.params.n_threads, check.params.n_gpu_layers) == (2, 0)
    assert check.params.vulkan_devices is None and not check.params.gpu_auto
    assert check.measured.startswith("fastest measured decode speed: CPU 2 threads")
    by_prompt = loader.check(dataclasses.replace(auto, auto_metric="prompt"))
    assert by_prompt.params.n_threads == 1
    chosen_threads = dataclasses.replace(auto, n_threads=2, auto_metric="prompt")
    assert loader.check(chosen_threads).params.n_threads == 2  # the user's threads stay
    manual = loader.check(dataclasses.replace(auto, gpu_auto=False))
    assert manual.measured is None

    # Where lavapipe measured fastest (an earlier VM of this kind), it is loaded, named.
    save_suite(db, suite_result(starter_model, current_keys(), winner="vulkan0-31l"))
    check = loader.check(auto)
    assert (check.params.vulkan_devices, check.params.n_gpu_layers) == ("0", 31)
    assert "Vulkan0 llvmpipe" in check.measured


def test_the_hardware_diagnosis_cites_the_stored_measurement(starter_model, desktop_with_llvmpipe):
    from deskllm.planner.measured_configs import cite_measurements

    assert cite_measurements(desktop_with_llvmpipe) == desktop_with_llvmpipe  # nothing stored
    db = open_database()  # the app's own database, in this test's DESKLLM_HOME
    save_suite(db, suite_result(starter_model, current_keys()))
    db.close()
    cited = cite_measurements(desktop_with_llvmpipe)
    assert cited.diagnosis[: len(desktop_with_llvmpipe.diagnosis)] == (
        desktop_with_llvmpipe.diagnosis
    )
    assert cited.diagnosis[-1].startswith(f"{starter_model.name}, measured by deskllm bench")


@pytest.fixture(scope="module")
def laptop_with_two_gpus() -> HardwareReport:
    """The RTX 4070 laptop profile with a second, identical GPU added (CUDA1): no recorded
    profile here has two."""
    report = report_from_dict(json.loads((PROFILES / "laptop_rtx4070_8gb.json").read_text()))
    gpu = next(d for d in report.engine.devices if d.name == "CUDA0")
    target = next(t for t in report.offload_targets if t.engine_device == "CUDA0")
    second = dataclasses.replace(target, engine_device="CUDA1", pci_bus_id="0000:02:00.0")
    engine = dataclasses.replace(
        report.engine, devices=report.engine.devices + (dataclasses.replace(gpu, name="CUDA1"),)
    )
    return dataclasses.replace(report, engine=engine,
                               offload_targets=report.offload_targets + (second,))  # fmt: skip


def test_each_cuda_gpu_of_several_is_measured_and_loaded_alone(
    tmp_path, starter_model, laptop_with_two_gpus
):
    header = read_header(starter_model)

    def planner_for(device):
        return FitPlanner(laptop_with_two_gpus, target=device)

    configs, _ = suite_configs(laptop_with_two_gpus, planner_for, header, 1024)
    by_device = {c.device: c for c in configs if c.n_gpu_layers}
    assert set(by_device) == {"CUDA0", "CUDA1"}
    base = LoadParams(str(starter_model), n_ctx=1024)
    # Only that GPU visible to the engine: llama.cpp would otherwise split the layers across
    # both, and the figures would not be that GPU's.
    second = by_device["CUDA1"].params(base)
    assert (second.cuda_devices, second.vulkan_devices) == ("1", None)
    assert device_env(second) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert device_env(by_device["CUDA0"].params(base)) == {"CUDA_VISIBLE_DEVICES": "0"}
    cpu = next(c for c in configs if not c.n_gpu_layers)
    assert device_env(cpu.params(base)) == {}
    lavapipe = dataclasses.replace(base, vulkan_devices="0")
    assert device_env(lavapipe) == {"GGML_VK_VISIBLE_DEVICES": "0"}

    # An automatic load after a suite that found CUDA1 fastest restricts the engine to it.
    winner = by_device["CUDA1"]
    result = suite_result(starter_model, current_keys(), winner="cpu-2t")
    result["configs"].append(winner.as_dict() | dict(
        tg_tps=400.0, pp_tps=4000.0, ttft_s=0.01, score=None, joules_per_token=None,
        status="measured"))  # fmt: skip
    result["chosen"] = {"id": winner.id, "reason": "given"}
    db = open_database(tmp_path / "store.sqlite3")
    save_suite(db, result)
    loader = ModelLoader(None, db=db, hardware=laptop_with_two_gpus)  # check() only
    check = loader.check(dataclasses.replace(base, gpu_auto=True, use_extra_bufts=False))
    assert (check.params.cuda_devices, check.params.n_gpu_layers) == ("1", winner.n_gpu_layers)
    named = loader.check(dataclasses.replace(base, gpu_auto=True, use_extra_bufts=False,
                                             cuda_devices="0"))  # fmt: skip
    assert named.measured is None  # the user named the device: no measured choice
