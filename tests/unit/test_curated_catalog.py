"""The curated catalog shipped in resources/catalog: it parses, every entry plans on the saved
hardware profiles, bad entries are refused by name, and sizes come from the shape."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from deskllm.catalog.curated import (
    CuratedError,
    catalog_to_json,
    curated_path,
    load_curated,
    parse_curated,
)
from deskllm.catalog.quants import kl_divergence
from deskllm.catalog.synthetic_header import (
    ShapeFacts,
    estimated_file_size,
    parameter_count,
    synthetic_header,
)
from deskllm.hardware import report_from_dict
from deskllm.planner import FitPlanner
from deskllm.planner.model_shape import model_shape

ROOT = Path(__file__).parent.parent.parent
PROFILES = sorted((ROOT / "tests" / "data" / "hardware").glob("*.json"))
LLAMA_8B = ShapeFacts("llama", 32, 4096, 14336, 32, 8, 128256, 131072, False)


@pytest.fixture(scope="module")
def shipped() -> dict:
    return json.loads(curated_path().read_text(encoding="utf-8"))


def test_the_shipped_catalog_parses_and_covers_the_range(shipped):
    catalog = load_curated()
    assert catalog.catalog_date == shipped["catalog_date"]
    assert len(catalog.models) >= 30
    params = [m.params for m in catalog.models]
    assert min(params) <= 0.6e9 and max(params) >= 70e9
    assert any(m.is_moe for m in catalog.models) and len({m.family for m in catalog.models}) >= 8
    assert len({m.license for m in catalog.models}) >= 5
    for m in catalog.models:
        assert m.source and m.files, m.repo_id
        assert {f.quant for f in m.files} >= {"Q4_K_M", "Q2_K"}, m.repo_id
        assert all(f.size_estimated and f.sha256 is None for f in m.files), m.repo_id
        # the published parameter count and the shape agree (a typo in the shape would not)
        assert 0.8 < parameter_count(m.shape) / m.params < 1.2, m.repo_id
        assert catalog_to_json(catalog)["models"][catalog.models.index(m)] == next(
            e for e in shipped["models"] if e["repo_id"] == m.repo_id
        )


def test_estimated_sizes_match_real_files_of_a_known_model():
    # bartowski/Meta-Llama-3.1-8B-Instruct-GGUF as published: Q8_0 8.54 GB, Q6_K 6.60 GB,
    # Q5_K_M 5.73 GB, Q4_K_M 4.92 GB, Q3_K_M 4.02 GB, Q2_K 3.18 GB.
    real = {"Q8_0": 8.54e9, "Q6_K": 6.60e9, "Q5_K_M": 5.73e9, "Q4_K_M": 4.92e9,
            "Q3_K_M": 4.02e9, "Q2_K": 3.18e9}  # fmt: skip
    for quant, size in real.items():
        assert estimated_file_size(LLAMA_8B, quant) == pytest.approx(size, rel=0.03), quant


def test_a_synthetic_header_is_what_model_shape_reads():
    shape = model_shape(synthetic_header(LLAMA_8B, "Q4_K_M"))
    assert (shape.block_count, shape.n_embd, shape.n_vocab) == (32, 4096, 128256)
    assert shape.head_count_kv == (8,) * 32 and shape.context_length == 131072
    assert not shape.tied_embeddings
    moe = ShapeFacts("qwen3moe", 4, 256, 0, 8, 4, 1000, 4096, False, head_dim=64, experts=16,
                     experts_used=4, expert_feed_forward=128)  # fmt: skip
    moe_shape = model_shape(synthetic_header(moe, "Q8_0"))
    assert moe_shape.expert_count == 16 and moe_shape.expert_used_count == 4
    assert moe_shape.layer_expert_bytes[0] > 0.7 * moe_shape.layer_bytes[0]
    assert moe_shape.key_length == (64,) * 4
    gemma = load_curated().model("bartowski/google_gemma-3-12b-it-GGUF")
    g = model_shape(gemma.header("Q4_K_M"))
    assert g.sliding_window == 1024 and sum(g.swa_layers) == 40  # 5 of every 6 layers


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_every_row_plans_on_each_saved_profile(profile):
    planner = FitPlanner(report_from_dict(json.loads(profile.read_text())))
    for m in load_curated().models:
        plans = [planner.plan(m.header(f.quant), min(4096, m.shape.context)) for f in m.files]
        assert all(p.fit in ("gpu", "partial", "cpu", "too_big") for p in plans), m.repo_id
        assert all(p.tps_ceiling is None or p.tps_ceiling > 0 for p in plans), m.repo_id


def test_every_row_plans_on_this_machine():
    from deskllm.planner.machine import current_hardware

    planner = FitPlanner(current_hardware())
    for m in load_curated().models:
        plans = [planner.plan(m.header(f.quant), 2048) for f in m.files]
        assert {p.fit for p in plans} <= {"gpu", "partial", "cpu", "too_big"}, m.repo_id
        if m.params < 1e9:  # a 0.5B model runs anywhere
            assert all(p.fit != "too_big" for p in plans)


def test_every_quant_is_one_the_planner_ranks(shipped):
    for entry in shipped["models"]:
        assert all(kl_divergence(f["quant"]) is not None for f in entry["files"])


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda e: e.pop("license"), "missing 'license'"),
        (lambda e: e["shape"].update(layers="32"), "shape.layers should be int"),
        (lambda e: e["shape"].update(kv_heads=5), "multiple of shape.kv_heads"),
        (lambda e: e.update(files=[]), "no quant files"),
        (lambda e: e["files"][0].update(size_estimated=False), "comes with its sha256"),
        (lambda e: e["files"][0].update(file="x.bin"), "not a .gguf file"),
        (lambda e: e.update(repo_id="no-owner"), "is not owner/name"),
    ],
)
def test_a_bad_entry_is_refused_by_name(shipped, change, words):
    data = copy.deepcopy(shipped)
    entry = data["models"][3]
    change(entry)
    with pytest.raises(CuratedError, match="entry 3") as err:
        parse_curated(data)
    assert words in str(err.value)


def test_a_repo_listed_twice_or_a_missing_date_is_refused(shipped):
    data = copy.deepcopy(shipped)
    data["models"].append(copy.deepcopy(data["models"][0]))
    with pytest.raises(CuratedError, match="listed twice"):
        parse_curated(data)
    with pytest.raises(CuratedError, match="catalog_date"):
        parse_curated({"models": []})


def test_the_installer_ships_the_catalog():
    spec = (ROOT / "packaging" / "deskllm.spec").read_text()
    assert '"resources" / "catalog" / "curated.json"), "resources/catalog"' in spec


def test_a_header_gives_back_the_shape_it_was_built_from():
    from deskllm.catalog.synthetic_header import shape_facts

    for m in load_curated().models:
        assert shape_facts(m.header("Q4_K_M")) == m.shape, m.repo_id
