"""`deskllm recommend` as a user runs it (a real process), offline, for the saved hardware
profiles; and with --refresh against the local fake Hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from curated_helpers import REPO, serve_curated_repo

from deskllm.catalog.curated import load_curated
from deskllm.catalog.quants import quality_tier
from deskllm.hardware import report_from_dict
from deskllm.planner.catalog_plan import plan_catalog

PROFILES = Path(__file__).parent.parent / "data" / "hardware"
ROW_KEYS = {"repo_id", "file", "quant", "params", "size_bytes", "fit", "n_gpu_layers",
            "tps_ceiling", "quality_tier", "license"}  # fmt: skip


def recommend(*args: str, offline: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "deskllm", "recommend", *args],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def recommend_json(*args: str, offline: bool = True) -> dict:
    r = recommend(*args, "--json", offline=offline)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def in_process(profile: str):
    report = report_from_dict(json.loads((PROFILES / profile).read_text()))
    return plan_catalog(load_curated(), report, n_ctx=4096)


@pytest.mark.parametrize("profile", sorted(p.name for p in PROFILES.glob("*.json")))
def test_offline_json_keeps_the_contract(profile):
    out = recommend_json("--hardware", str(PROFILES / profile))
    assert {"catalog_date", "offline", "rows", "recommended"} <= set(out)
    assert out["offline"] is True and out["catalog_date"] == load_curated().catalog_date
    catalog = load_curated()
    assert [r["repo_id"] for r in out["rows"]] == [m.repo_id for m in catalog.models]
    for row in out["rows"]:
        assert set(row) >= ROW_KEYS, row
        assert row["fit"] in ("gpu", "partial", "cpu", "too_big")
        assert row["quality_tier"] == quality_tier(row["quant"])
        model = catalog.model(row["repo_id"])
        assert row["file"] in [f.file for f in model.files] and row["size_estimated"]
        if row["fit"] == "too_big":  # nothing of this repo fits: its smallest file is shown
            assert row["size_bytes"] == min(f.size_bytes for f in model.files)
    best = out["recommended"]
    assert set(best) == {"repo_id", "file", "quant", "reason"}
    assert best["repo_id"] in best["reason"] and "tok/s" in best["reason"]


def test_an_8gb_laptop_gets_a_7_to_9b_model_wholly_on_its_gpu():
    out = recommend_json("--hardware", str(PROFILES / "laptop_rtx4070_8gb.json"))
    best = out["recommended"]
    model = load_curated().model(best["repo_id"])
    assert 7e9 <= model.params <= 9.3e9
    assert quality_tier(best["quant"]) in ("good", "near-lossless") and best["quant"] != "Q8_0"
    planned = in_process("laptop_rtx4070_8gb.json")
    assert planned.recommended_quant.file == best["file"]
    assert planned.recommended_quant.plan.fit == "gpu"
    assert "entirely on the GPU" in best["reason"]


@pytest.mark.parametrize("profile", ["desktop_cpu_16gb.json", "cloud_vm_2core_24gb.json"])
def test_a_cpu_machine_gets_a_model_that_reaches_5_tokens_per_s(profile):
    best = recommend_json("--hardware", str(PROFILES / profile))["recommended"]
    planned = in_process(profile)
    assert planned.recommended_quant.file == best["file"]
    assert planned.recommended_quant.plan.fit == "cpu"
    assert planned.recommended_quant.plan.tps_ceiling >= 5.0
    assert quality_tier(best["quant"]) in ("good", "near-lossless")
    # and nothing bigger at a good quality reaches 5 tok/s
    bigger = [
        p for r in planned.rows if r.model.params > planned.recommended.model.params
        for p in r.plans
        if quality_tier(p.quant) in ("good", "near-lossless")
        and p.plan.fit != "too_big" and (p.plan.tps_ceiling or 0) >= 5.0
    ]  # fmt: skip
    assert bigger == []


def test_a_higher_usable_speed_picks_a_smaller_model():
    desktop = str(PROFILES / "desktop_cpu_16gb.json")
    default = recommend_json("--hardware", desktop)["recommended"]
    fast = recommend_json("--hardware", desktop, "--usable-tps", "20")["recommended"]
    catalog = load_curated()
    assert catalog.model(fast["repo_id"]).params < catalog.model(default["repo_id"]).params
    assert "20 tok/s" in fast["reason"]


def test_the_table_names_the_recommendation():
    r = recommend("--hardware", str(PROFILES / "desktop_cpu_16gb.json"))
    assert r.returncode == 0, r.stderr
    assert "Recommended: " in r.stdout and "deskllm download " in r.stdout
    assert "Qwen2.5-0.5B-Instruct" in r.stdout and "~" in r.stdout


def test_refresh_reads_real_sizes_from_the_hub(hub, quant_ladder):
    serve_curated_repo(hub, quant_ladder)
    out = recommend_json("--hardware", str(PROFILES / "desktop_cpu_16gb.json"), "--refresh",
                         offline=False)  # fmt: skip
    row = next(r for r in out["rows"] if r["repo_id"] == REPO)
    assert row["size_estimated"] is False
    assert row["size_bytes"] == quant_ladder[row["quant"]].stat().st_size
    assert out["offline"] is False and out["refreshed_at"] is not None
    # Later, offline, the refreshed sizes are still what is planned.
    again = recommend_json("--hardware", str(PROFILES / "desktop_cpu_16gb.json"))
    assert next(r for r in again["rows"] if r["repo_id"] == REPO) == row


def test_offline_on_this_machine():
    out = recommend_json()
    assert out["hardware"] == "this machine" and out["offline"] is True
    assert out["recommended"] is not None  # a 0.5B model fits any machine that runs tests
    assert len(out["rows"]) == len(load_curated().models)
