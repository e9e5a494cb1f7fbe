"""Real GPU offload through llama.cpp's Vulkan backend on Mesa lavapipe.

Uses the release engine build made by packaging/build_release_engine.sh (.ci/run builds it;
CPU variants and the Vulkan backend, loaded at run time), and
the real starter model: full and partial offload, the device memory ggml reports, and the
engine's device list against the hardware report.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from engine_helpers import collect

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Sampling

VULKAN_ENGINE = Path(__file__).resolve().parents[2] / ".engines" / "release"
N_LAYERS = 30  # SmolLM2-135M: llama.block_count

pytestmark = [
    pytest.mark.driver,
    pytest.mark.skipif(
        not (VULKAN_ENGINE / "llama_cpp").is_dir(),
        reason="the release engine is not built (packaging/build_release_engine.sh)",
    ),
]


@pytest.fixture(autouse=True)
def vulkan_engine(monkeypatch):
    monkeypatch.setenv("DESKLLM_ENGINE_DIR", str(VULKAN_ENGINE))


def device_bytes(loaded, prefix: str = "Vulkan0") -> float:
    return sum(v for k, v in loaded.buffers.items() if k.startswith(prefix + " "))


def test_the_engine_and_the_hardware_report_see_the_same_vulkan_device():
    from deskllm.hardware import probe_hardware

    report = probe_hardware(bandwidth=False)
    assert report.engine.gpu_offload
    vulkan = [d for d in report.engine.devices if d.name.startswith("Vulkan")]
    assert vulkan and "llvmpipe" in vulkan[0].description
    target = next(t for t in report.offload_targets if "llvmpipe" in t.name)
    assert target.engine_device == vulkan[0].name
    assert not target.automatic  # CPU-type: only by the user's explicit choice


@pytest.fixture(scope="module")
def vulkan_hardware():
    from deskllm.hardware import probe_hardware

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DESKLLM_ENGINE_DIR", str(VULKAN_ENGINE))
        return probe_hardware(bandwidth=False)


@pytest.mark.parametrize("n_gpu_layers", [N_LAYERS + 1, N_LAYERS // 2])
def test_full_and_partial_offload_match_the_planners_vram_estimate(
    load_params, vulkan_hardware, starter_model, n_gpu_layers
):
    from deskllm.gguf.header import read_header
    from deskllm.planner.fit import FitPlanner

    planner = FitPlanner(vulkan_hardware, target="Vulkan0", use_extra_bufts=False)
    estimate = planner.estimate(read_header(starter_model), 2048, "f16", n_gpu_layers)
    with EngineClient() as client:
        loaded = client.load(load_params(n_gpu_layers=n_gpu_layers, use_extra_bufts=False,
                                         vulkan_devices="0"))
        assert "llvmpipe" in " ".join(loaded.devices)
        on_device = device_bytes(loaded)
        assert on_device > 0
        done = collect(client.chat(uuid.uuid4().hex, [ChatMessage("user", "Hi!")],
                                   Sampling(temperature=0.0, max_tokens=8))).done
        assert done.text and done.metrics.device != "CPU"
    assert estimate.vram_bytes == pytest.approx(on_device, rel=0.10)
    assert estimate.buffer("model", "gpu") == pytest.approx(
        loaded.buffers["Vulkan0 model"], rel=0.10)
    assert estimate.part("kv", "gpu") == pytest.approx(loaded.buffers["Vulkan0 KV"], rel=0.10)


def test_a_cpu_type_device_is_used_only_when_named(load_params):
    """ggml leaves llvmpipe out unless it is named: asking for layers on "the GPU" without
    naming it runs on the CPU, and the device readout says so."""
    with EngineClient() as client:
        loaded = client.load(load_params(n_gpu_layers=N_LAYERS + 1, use_extra_bufts=False))
    assert device_bytes(loaded) == 0
    assert loaded.devices == ("CPU",)
