"""The planner against the real engine: its estimate vs what llama.cpp allocated, the refusal
before loading, and calibration records from a real load."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import psutil
import pytest
from planner_models import write_sparse_gguf

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import LoadParams
from deskllm.engine.errors import EngineError
from deskllm.gguf.header import read_header
from deskllm.hardware.report import MemoryInfo
from deskllm.loader import ModelLoader
from deskllm.planner import FitPlanner
from deskllm.planner.calibration import corrections_for, measured_sizes, record_load
from deskllm.planner.machine import current_hardware
from deskllm.store import open_database

MIB = 1 << 20


@pytest.fixture(scope="module")
def hardware():
    report = current_hardware()
    assert report is not None and report.memory.available_bytes > 0
    return report


@pytest.mark.parametrize(("n_ctx", "kv"), [(2048, "f16"), (4096, "q8_0")])
def test_estimate_matches_what_llama_cpp_allocates(
    hardware, starter_model: Path, extra_bufts: bool, tmp_path: Path, n_ctx: int, kv: str
):
    header = read_header(starter_model)
    plan = FitPlanner(hardware, use_extra_bufts=extra_bufts).plan(header, n_ctx, kv)
    assert plan.fit in ("gpu", "partial", "cpu")
    params = LoadParams(
        str(starter_model),
        n_ctx=plan.load.n_ctx,
        n_gpu_layers=plan.load.n_gpu_layers,
        kv_type=plan.load.kv_type,
        flash_attn=plan.load.flash_attn,
        n_threads=2,
        use_extra_bufts=extra_bufts,
        kv_disk_dir=str(tmp_path / "kv"),
    )
    with EngineClient() as client:
        loaded = ModelLoader(client, hardware=hardware).load(params)
    measured = measured_sizes(loaded)
    est = plan.estimate
    for kind, part in (("model", "weights"), ("kv", "kv"), ("compute", "compute")):
        assert est.part(part) == pytest.approx(measured[kind], rel=0.10), kind
    total = est.part("weights") + est.part("kv") + est.part("compute")
    assert total == pytest.approx(measured["model"] + measured["kv"] + measured["compute"],
                                  rel=0.10)  # fmt: skip
    assert est.rss_at_load_bytes == pytest.approx(loaded.rss_bytes, rel=0.10)


def test_a_model_that_cannot_fit_is_refused_before_loading(
    hardware, starter_model: Path, extra_bufts: bool
):
    tiny = dataclasses.replace(hardware, memory=MemoryInfo(64 * MIB, 50 * MIB))
    client = EngineClient()
    try:
        with pytest.raises(EngineError) as caught:
            ModelLoader(client, hardware=tiny).load(
                LoadParams(str(starter_model), n_ctx=2048, use_extra_bufts=extra_bufts)
            )
        assert client.pid is None  # no engine process was started for it
    finally:
        client.close()
    error = caught.value
    assert error.kind == "too_big"
    message = str(error)
    assert starter_model.name in message and "needs" in message
    assert f"{50 * MIB} bytes" in message and "MiB" in message and "KV cache" in message


def test_a_model_twice_this_machines_memory_is_refused_with_numbers(tmp_path: Path):
    """A real (sparse) 2x-RAM file on the real machine: no fake profile involved."""
    huge = write_sparse_gguf(tmp_path / "huge-F16.gguf", 2 * psutil.virtual_memory().total)
    client = EngineClient()
    try:
        with pytest.raises(EngineError) as caught:
            ModelLoader(client).load(LoadParams(str(huge), n_ctx=2048))
        assert client.pid is None
    finally:
        client.close()
    assert caught.value.kind == "too_big"
    message = str(caught.value)
    assert "huge-F16.gguf needs" in message and "GiB of RAM" in message
    assert "is available" in message and "weights" in message


def test_a_real_load_calibrates_later_estimates(
    hardware, starter_model: Path, extra_bufts: bool, tmp_path: Path
):
    db = open_database(tmp_path / "cal.sqlite3")
    params = LoadParams(
        str(starter_model), n_ctx=1024, n_threads=2, use_extra_bufts=extra_bufts,
        kv_disk_dir=str(tmp_path / "kv"),
    )  # fmt: skip
    with EngineClient() as client:
        loaded = ModelLoader(client, hardware=hardware).load(params)
        resolved = client.params
    m = record_load(db, read_header(starter_model), resolved, loaded, machine="here")
    assert abs(m.total_error) < 0.10
    c = corrections_for(db, "here", "llama")
    assert c.samples == 1 and 0.9 < c.compute_factor < 1.1
    assert abs(c.overhead_bytes) < 0.1 * loaded.rss_bytes


def test_auto_gpu_offload_asks_the_planner(load_params, tmp_path: Path):
    """With "auto" the client takes the planner's layers: here no automatic GPU target
    exists (llvmpipe is CPU-type), so the model runs on the CPU and no GPU is touched."""
    with EngineClient() as client:
        loaded = ModelLoader(client).load(load_params(gpu_auto=True))
        assert client.params.n_gpu_layers == 0 and not client.params.gpu_auto
    assert loaded.n_gpu_layers == 0 and loaded.devices == ("CPU",)


def test_auto_gpu_offload_on_a_machine_with_a_gpu_takes_every_layer(load_params):
    """The same load planned for a laptop with an 8 GB NVIDIA GPU (a recorded profile: no
    such GPU here): all 30 blocks and the output layer go to the GPU."""
    from deskllm.hardware import report_from_dict

    data = Path(__file__).parent.parent / "data" / "hardware" / "laptop_rtx4070_8gb.json"
    laptop = report_from_dict(json.loads(data.read_text()))
    with EngineClient() as client:
        ModelLoader(client, hardware=laptop).load(load_params(gpu_auto=True))
        assert client.params.n_gpu_layers == 31  # this CPU-only build keeps them on the CPU
