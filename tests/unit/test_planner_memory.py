"""estimate_memory(): weights, KV cache, compute buffers per device.

Reference figures are what llama.cpp (llama-cpp-python 0.3.36, CPU build, use_extra_bufts off)
logged as "... buffer size = X MiB" when loading the real files on the project's dev machine.
"""

from __future__ import annotations

import pytest
from planner_models import llama3_8b_header, write_tiny_gguf

from deskllm.gguf.header import read_header
from deskllm.planner.memory import (
    Corrections,
    EstimateParams,
    bytes_read_per_token,
    cpu_repack_types,
    estimate_memory,
    placement_for,
)
from deskllm.planner.model_shape import model_shape

MIB = 1 << 20


@pytest.fixture(scope="module")
def starter(starter_model):
    return model_shape(read_header(starter_model))


@pytest.fixture(scope="module")
def gemma_attention(tmp_path_factory):
    """Gemma 3 270M's attention layout (18 blocks, 1 KV head of 256, window 512) in a tiny
    file: KV sizes depend on nothing else, so they must equal the real model's."""
    path = tmp_path_factory.mktemp("g") / "gemma.gguf"
    write_tiny_gguf(path, "gemma3", blocks=18, heads=4, heads_kv=1, key_length=256,
                    value_length=256, sliding_window=512)  # fmt: skip
    return model_shape(read_header(path))


@pytest.mark.parametrize(
    ("n_ctx", "kv", "mib"),
    [(2048, "f16", 45.00), (8192, "f16", 180.00), (1000, "f16", 22.50), (2048, "q8_0", 23.91),
     (8192, "q8_0", 95.62), (2048, "q4_0", 12.66)],
)  # fmt: skip
def test_starter_kv_cache_matches_llama_cpp(starter, n_ctx, kv, mib):
    est = estimate_memory(starter, EstimateParams(n_ctx, kv))
    assert est.part("kv") / MIB == pytest.approx(mib, abs=0.01)


def test_context_is_padded_to_256_cells(starter):
    assert estimate_memory(starter, EstimateParams(1000)).kv_cells == 1024


@pytest.mark.parametrize(
    ("n_ctx", "kv", "swa_full", "mib"),
    [(2048, "f16", True, 36.0), (8192, "f16", True, 144.0), (2048, "f16", False, 21.0),
     (8192, "f16", False, 39.0), (8192, "q8_0", False, 20.72), (8192, "q8_0", True, 76.5)],
)  # fmt: skip
def test_sliding_window_kv_matches_llama_cpp(gemma_attention, n_ctx, kv, swa_full, mib):
    est = estimate_memory(gemma_attention, EstimateParams(n_ctx, kv, swa_full=swa_full))
    assert est.part("kv") / MIB == pytest.approx(mib, abs=0.01)
    if not swa_full:
        assert est.swa_cells == min(est.kv_cells, 1024)  # window 512 + micro-batch 512


@pytest.mark.parametrize(
    ("n_ctx", "kv", "ubatch", "mib"),
    [(512, "f16", 512, 98.25), (2048, "f16", 512, 99.38), (8192, "f16", 512, 166.38),
     (256, "f16", 512, 49.13), (2048, "f16", 128, 24.84), (2048, "q8_0", 512, 99.38),
     (8192, "q8_0", 512, 99.38)],
)  # fmt: skip
def test_starter_compute_buffer_within_3_percent(starter, n_ctx, kv, ubatch, mib):
    est = estimate_memory(starter, EstimateParams(n_ctx, kv, n_ubatch=ubatch))
    assert est.part("compute", "cpu") / MIB == pytest.approx(mib, rel=0.03)


def test_starter_weights_and_total(starter):
    est = estimate_memory(starter, EstimateParams(2048))
    assert est.part("weights") / MIB == pytest.approx(92.10, abs=0.01)  # CPU_Mapped model
    assert est.vram_bytes == 0
    assert est.ram_bytes == sum(p.bytes for p in est.parts)
    assert est.rss_at_load_bytes == est.ram_bytes - est.part("compute", "cpu")


def test_placement_follows_llama_cpp(starter):
    n = starter.block_count
    assert placement_for(starter, 0, True).n_gpu_layers == 0
    one = placement_for(starter, 1, True)  # the output layer takes the first slot
    assert one.output_on_gpu and one.blocks_on_gpu(n) == 0
    most = placement_for(starter, n, True)  # block 0 stays on the CPU
    assert most.output_on_gpu and most.blocks_on_gpu(n) == n - 1
    for full in (n + 1, 999, -1):
        assert placement_for(starter, full, True).blocks_on_gpu(n) == n
    assert placement_for(starter, -1, False).n_gpu_layers == 0  # no device: all on the CPU


def test_tied_embeddings_count_again_on_the_gpu(starter):
    on_cpu = estimate_memory(starter, EstimateParams(2048, n_gpu_layers=0, gpu_available=True))
    out_gpu = estimate_memory(starter, EstimateParams(2048, n_gpu_layers=1, gpu_available=True))
    total = on_cpu.part("weights")
    assert out_gpu.part("weights") == total + starter.token_embd_bytes
    assert out_gpu.part("weights", "cpu") == total - starter.output_bytes
    # token_embd itself never leaves the CPU
    full = estimate_memory(starter, EstimateParams(2048, n_gpu_layers=-1, gpu_available=True))
    assert full.part("weights", "cpu") == starter.input_bytes


def test_untied_output_is_counted_once(tmp_path):
    s = model_shape(read_header(write_tiny_gguf(tmp_path / "u.gguf", tied=False)))
    full = estimate_memory(s, EstimateParams(512, n_gpu_layers=-1, gpu_available=True))
    assert full.part("weights") == s.total_weight_bytes


def test_partial_offload_splits_kv_and_compute(starter):
    est = estimate_memory(starter, EstimateParams(4096, n_gpu_layers=16, gpu_available=True))
    per_layer = estimate_memory(starter, EstimateParams(4096)).part("kv") // 30
    assert est.part("kv", "gpu") == 15 * per_layer and est.part("kv", "cpu") == 15 * per_layer
    assert est.part("compute", "gpu") > est.part("compute", "cpu") > 0
    assert est.vram_bytes == sum(p.bytes for p in est.parts if p.device == "gpu")


def test_corrections_scale_compute_and_shift_the_engine_part(starter):
    base = estimate_memory(starter, EstimateParams(2048))
    fixed = estimate_memory(starter, EstimateParams(2048), Corrections(1.5, 100 * MIB, 3))
    assert fixed.part("compute") == pytest.approx(base.part("compute") * 1.5, abs=1)
    assert fixed.part("engine") == base.part("engine") + 100 * MIB
    assert fixed.part("kv") == base.part("kv") and fixed.part("weights") == base.part("weights")


def test_moe_reads_only_the_experts_in_use(tmp_path):
    s = model_shape(read_header(write_tiny_gguf(
        tmp_path / "moe.gguf", "qwen3moe", blocks=2, experts=8, experts_used=2, ff=32
    )))  # fmt: skip
    cpu, gpu = bytes_read_per_token(s, EstimateParams(512), 0)
    dense = sum(s.layer_bytes) - sum(s.layer_expert_bytes)
    expected = dense + sum(s.layer_expert_bytes) / 4 + s.output_bytes + s.token_embd_bytes
    assert gpu == 0 and cpu == pytest.approx(expected + s.n_embd * 4, abs=2)


def test_layers_without_kv_heads_have_no_cache(tmp_path):
    s = model_shape(read_header(write_tiny_gguf(
        tmp_path / "h.gguf", blocks=4, heads=4, heads_kv=[2, 0, 2, 0], key_length=16,
        value_length=16,
    )))  # fmt: skip
    est = estimate_memory(s, EstimateParams(256))
    assert est.part("kv") == 2 * 256 * 2 * (2 * 16 * 2)  # 2 layers x cells x (K+V) f16


@pytest.mark.parametrize(
    ("features", "repacked_types"),
    [((), set()), (("AVX2",), {12}), (("AVX2", "AVX512F"), {12}),
     (("NEON", "DOTPROD"), {12, 14})],
)  # fmt: skip
def test_cpu_repacked_weights(features, repacked_types):
    # Q4_K_M: most matrices Q4_K, attn_v / ffn_down Q6_K (repacked on ARM only), norms F32.
    shape = model_shape(llama3_8b_header("Q4_K_M"))
    plain = estimate_memory(shape, EstimateParams(4096))
    est = estimate_memory(shape, EstimateParams(4096, repack_types=cpu_repack_types(features)))
    expected = sum(
        b for layer in shape.layer_matrix_bytes for t, b in layer if t in repacked_types
    ) + sum(b for t, b in shape.output_matrix_bytes if t in repacked_types)
    assert est.repacked_bytes == expected
    assert est.ram_bytes == plain.ram_bytes  # a copy whose source pages the OS can drop
    assert est.buffer("model") == plain.buffer("model") + expected
    assert est.rss_at_load_bytes == plain.rss_at_load_bytes + expected
    offloaded = estimate_memory(
        shape,
        EstimateParams(4096, n_gpu_layers=-1, gpu_available=True, repack_types=frozenset({12})),
    )
    assert offloaded.repacked_bytes == 0  # only weights that stay on the CPU are repacked


# llama.cpp's buffers for the starter model at n_ctx 2048, f16 KV, offloaded to a Vulkan device
# (the Vulkan build on Mesa llvmpipe): n_gpu_layers -> (CPU_Mapped model, Vulkan0 model,
# CPU KV, Vulkan0 KV, Vulkan0 compute), MiB.
VULKAN_2048 = {
    1: (92.10, 28.69, 45.00, 0.00, 97.65),
    2: (92.10, 30.80, 43.50, 1.50, 97.12),
    16: (92.10, 60.40, 22.50, 22.50, 97.12),
    30: (30.80, 89.99, 1.50, 43.50, 97.12),
    31: (28.69, 92.10, 0.00, 45.00, 98.25),
}


@pytest.mark.parametrize("n_gpu_layers", sorted(VULKAN_2048))
def test_offloaded_buffers_match_llama_cpp(starter, n_gpu_layers):
    cpu_model, gpu_model, cpu_kv, gpu_kv, gpu_compute = VULKAN_2048[n_gpu_layers]
    est = estimate_memory(
        starter, EstimateParams(2048, n_gpu_layers=n_gpu_layers, gpu_available=True)
    )
    assert est.buffer("model", "cpu") / MIB == pytest.approx(cpu_model, abs=0.01)
    assert est.buffer("model", "gpu") / MIB == pytest.approx(gpu_model, abs=0.01)
    assert est.part("kv", "cpu") / MIB == pytest.approx(cpu_kv, abs=0.01)
    assert est.part("kv", "gpu") / MIB == pytest.approx(gpu_kv, abs=0.01)
    assert est.part("compute", "gpu") / MIB == pytest.approx(gpu_compute, rel=0.03)
    # the host keeps a few MiB of inputs (llama.cpp reported 4.26 MiB "Vulkan_Host compute")
    assert 2 * MIB < est.part("compute", "cpu") < 8 * MIB
    # RAM needed: only what stays on the CPU, not the mapped pages of offloaded tensors
    assert est.part("weights", "cpu") <= est.mapped_bytes
