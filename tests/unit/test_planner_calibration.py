"""Calibration records in SQLite and the corrections they give later estimates."""

from __future__ import annotations

import dataclasses

import pytest

from deskllm.catalog.quants import QUALITY_ORDER, kl_divergence, quality_rank
from deskllm.engine.domain import Loaded, LoadParams
from deskllm.gguf.header import read_header
from deskllm.planner.calibration import (
    COMPUTE_FACTOR_BOUNDS,
    corrections_for,
    is_host_buffer,
    measured_sizes,
    record_load,
)
from deskllm.planner.memory import EstimateParams, estimate_memory
from deskllm.planner.model_shape import model_shape
from deskllm.store import open_database

MIB = 1 << 20


def loaded_like_llama_cpp(path: str, **changes) -> Loaded:
    """What the engine reported loading the starter model at n_ctx 2048, f16 KV, CPU build
    (buffers as llama.cpp logged them, RSS as psutil read it in the worker)."""
    base = Loaded(
        model_path=path, n_ctx=2048, n_ctx_train=8192, n_gpu_layers=0, use_extra_bufts=False,
        chat_template_source="model", warnings=(), load_s=0.3,
        rss_bytes=int(207.0 * MIB),
        buffers={"CPU_Mapped model": 92.10 * MIB, "CPU KV": 45.00 * MIB,
                 "CPU compute": 99.38 * MIB},
        devices=("CPU",),
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


@pytest.fixture
def db(tmp_path):
    return open_database(tmp_path / "cal.sqlite3")


def test_migration_creates_the_table(db):
    assert {"machine", "architecture", "predicted", "measured", "compute_ratio",
            "rss_offset", "total_error"} <= set(db["calibration"].columns_dict)  # fmt: skip


def test_a_load_is_recorded_with_small_errors(db, starter_model):
    header = read_header(starter_model)
    params = LoadParams(str(starter_model), n_ctx=2048)
    m = record_load(db, header, params, loaded_like_llama_cpp(str(starter_model)), machine="m1")
    assert abs(m.total_error) < 0.01
    assert m.compute_ratio == pytest.approx(1.0, abs=0.01)
    assert abs(m.rss_offset) < 2 * MIB
    [row] = list(db["calibration"].rows)
    assert (row["machine"], row["architecture"], row["n_ctx"]) == ("m1", "llama", 2048)
    c = corrections_for(db, "m1", "llama")
    assert c.samples == 1 and c.compute_factor == pytest.approx(1.0, abs=0.01)


def test_corrections_follow_measurements_within_bounds(db, starter_model):
    header = read_header(starter_model)
    params = LoadParams(str(starter_model), n_ctx=2048)
    bigger = loaded_like_llama_cpp(
        str(starter_model),
        buffers={"CPU_Mapped model": 92.10 * MIB, "CPU KV": 45.0 * MIB,
                 "CPU compute": 130.0 * MIB},
        rss_bytes=int(400 * MIB),
    )  # fmt: skip
    for _ in range(3):
        record_load(db, header, params, bigger, machine="m1")
    c = corrections_for(db, "m1", "llama")
    assert c.compute_factor == pytest.approx(130.0 / 99.38, rel=0.02)
    assert c.overhead_bytes == pytest.approx(193 * MIB, abs=3 * MIB)
    shape = model_shape(header)
    fixed = estimate_memory(shape, EstimateParams(2048), c)
    assert fixed.part("compute") / MIB == pytest.approx(130.0, rel=0.02)
    assert fixed.rss_at_load_bytes / MIB == pytest.approx(400, rel=0.01)
    # records keep the uncorrected estimate: learning does not feed on itself
    again = record_load(db, header, params, bigger, machine="m1")
    assert again.compute_ratio == pytest.approx(130.0 / 99.38, rel=0.02)

    absurd = loaded_like_llama_cpp(
        str(starter_model), buffers={"CPU_Mapped model": 92.1 * MIB, "CPU compute": 5000 * MIB}
    )
    for _ in range(10):
        record_load(db, header, params, absurd, machine="m2")
    assert corrections_for(db, "m2", "llama").compute_factor == COMPUTE_FACTOR_BOUNDS[1]


def test_corrections_are_per_machine_and_architecture(db, starter_model):
    header = read_header(starter_model)
    params = LoadParams(str(starter_model), n_ctx=2048)
    loaded = loaded_like_llama_cpp(
        str(starter_model),
        buffers={"CPU_Mapped model": 92.1 * MIB, "CPU compute": 150 * MIB},
    )
    record_load(db, header, params, loaded, machine="m1")
    assert corrections_for(db, "m1", "gemma3").compute_factor == 1.0
    assert corrections_for(db, "other", "llama").samples == 0
    assert corrections_for(db, "m1", "llama").compute_factor > 1.4


def test_buffers_are_split_by_device():
    assert is_host_buffer("CPU_Mapped model") and is_host_buffer("CUDA_Host compute")
    assert not is_host_buffer("CUDA0 model") and not is_host_buffer("Vulkan0 KV")
    loaded = loaded_like_llama_cpp(
        "x.gguf",
        buffers={"CPU_Mapped model": 10.0, "Vulkan0 model": 90.0, "Vulkan0 KV": 8.0,
                 "Vulkan0 compute": 50.0, "Vulkan_Host compute": 5.0},
    )  # fmt: skip
    m = measured_sizes(loaded)
    assert (m["model"], m["model_gpu"], m["kv_gpu"], m["compute"], m["compute_gpu"]) == (
        100,
        90,
        8,
        55,
        50,
    )


def test_quality_table():
    assert QUALITY_ORDER[:4] == ("F32", "BF16", "F16", "Q8_0")
    assert QUALITY_ORDER.index("Q4_K_M") < QUALITY_ORDER.index("Q3_K_M")
    assert QUALITY_ORDER[-1] == "IQ1_S"
    assert kl_divergence("q4_k_m") == kl_divergence("Q4-K-M") == 0.031
    assert kl_divergence("UD-Q4_K_XL") is None
    assert quality_rank("UD-Q4_K_XL") == len(QUALITY_ORDER)
