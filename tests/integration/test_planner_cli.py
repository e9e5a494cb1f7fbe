"""`deskllm plan` as a user runs it (a real process), and calibration from `deskllm chat`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from hub_fixtures import MAIN_REPO, SPLIT_REPO

from deskllm.store import open_database

PROFILES = Path(__file__).parent.parent / "data" / "hardware"
LAPTOP = PROFILES / "laptop_rtx4070_8gb.json"
DESKTOP = PROFILES / "desktop_cpu_16gb.json"
QUANT_KEYS = {"file", "quant", "size_bytes", "memory_bytes", "fit", "n_gpu_layers",
              "tps_ceiling"}  # fmt: skip


def deskllm(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run in this test's env (DESKLLM_HOME, and HF_ENDPOINT when a test started a hub)."""
    return subprocess.run(
        [sys.executable, "-m", "deskllm", *args],
        capture_output=True, text=True, env=dict(os.environ), timeout=timeout,
    )  # fmt: skip


def plan_json(*args: str) -> dict:
    r = deskllm("plan", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_plan_json_on_this_machine(starter_model):
    out = plan_json(str(starter_model), "--ctx", "2048")
    assert {"model", "n_ctx", "kv_type", "quants", "recommended"} <= set(out)
    assert (out["n_ctx"], out["kv_type"]) == (2048, "f16")
    [q] = out["quants"]
    assert set(q) >= QUANT_KEYS and set(q["memory_bytes"]) == {"ram", "vram"}
    assert q["quant"] == "Q4_1" and q["size_bytes"] == starter_model.stat().st_size
    assert q["fit"] in ("gpu", "partial", "cpu")
    assert q["memory_bytes"]["ram"] > q["size_bytes"]
    rec = out["recommended"]
    assert rec["file"] == starter_model.name and rec["quant"] == "Q4_1" and rec["reason"]
    assert rec["load"]["n_ctx"] == 2048


def test_plan_for_a_saved_laptop_profile(starter_model):
    out = plan_json(str(starter_model), "--hardware", str(LAPTOP), "--kv", "q8_0")
    [q] = out["quants"]
    assert q["fit"] == "gpu" and q["n_gpu_layers"] == 31  # 30 blocks + the output layer
    assert q["memory_bytes"]["vram"] > q["size_bytes"]
    assert out["hardware"]["gpu"]["name"] == "NVIDIA GeForce RTX 4070 Laptop GPU"
    assert out["recommended"]["load"] == {
        "n_ctx": 4096, "n_gpu_layers": 31, "kv_type": "q8_0", "flash_attn": True,
    }  # fmt: skip


def test_plan_for_a_machine_where_nothing_fits(starter_model, tmp_path):
    profile = json.loads(DESKTOP.read_text())
    profile["memory"] = {"total_bytes": 64 << 20, "available_bytes": 50 << 20}
    tiny = tmp_path / "tiny.json"
    tiny.write_text(json.dumps(profile))
    out = plan_json(str(starter_model), "--hardware", str(tiny))
    assert out["recommended"] is None
    assert out["quants"][0]["fit"] == "too_big"
    text = deskllm("plan", str(starter_model), "--hardware", str(tiny))
    assert text.returncode == 0 and "Nothing fits" in text.stdout


def test_plan_a_folder_of_quants(quant_ladder, multipart, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    for label, path in quant_ladder.items():
        if label != "Q4_1":
            shutil.copy(path, folder / path.name)
    for shard in multipart:  # the Q4_1 as two shards: one quant
        shutil.copy(shard, folder / shard.name)
    out = plan_json(str(folder), "--hardware", str(DESKTOP))
    quants = [q["quant"] for q in out["quants"]]
    assert quants == ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_1", "Q3_K_M", "Q2_K"]
    q41 = out["quants"][quants.index("Q4_1")]
    assert q41["file"].endswith("-00001-of-00002.gguf")
    assert q41["size_bytes"] == sum(p.stat().st_size for p in multipart)
    assert {q["fit"] for q in out["quants"]} == {"cpu"}
    assert out["recommended"]["quant"] == "Q8_0"
    text = deskllm("plan", str(folder), "--hardware", str(DESKTOP))
    assert "Recommended:" in text.stdout and "Q8_0" in text.stdout


def test_plan_a_hub_repo(hub):
    out = plan_json(MAIN_REPO, "--hardware", str(LAPTOP))
    quants = {q["quant"] for q in out["quants"]}
    assert {"Q8_0", "Q4_K_M", "Q4_1", "Q2_K"} <= quants and "F16" not in quants  # no mmproj
    assert out["recommended"]["quant"] == "Q8_0"
    split = plan_json(SPLIT_REPO, "--hardware", str(DESKTOP))
    q41 = next(q for q in split["quants"] if q["quant"] == "Q4_1")
    assert q41["file"].startswith("Q4_1/") and q41["fit"] == "cpu"


def test_plan_refuses_what_is_not_a_model(tmp_path):
    r = deskllm("plan", str(tmp_path / "nothing here"))
    assert r.returncode == 2 and "not a file, a folder or a Hugging Face repo id" in r.stderr


def test_chat_records_the_load_for_calibration(starter_model, deskllm_home, session_home):
    if (session_home / "probes").is_dir():  # the crash-safe probe's cached answer
        shutil.copytree(session_home / "probes", deskllm_home / "probes", dirs_exist_ok=True)
    r = deskllm("chat", "--model", str(starter_model), "--prompt", "Hi", "--max-tokens", "4",
                "--temperature", "0", "--ctx", "1024", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    db = open_database(deskllm_home / "deskllm.sqlite3")
    [row] = list(db["calibration"].rows)
    assert row["architecture"] == "llama" and row["n_ctx"] == 1024
    assert abs(row["total_error"]) < 0.10


def test_a_broken_profile_is_named(starter_model, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = deskllm("plan", str(starter_model), "--hardware", str(bad))
    assert r.returncode != 0 and "bad.json" in r.stderr


def test_plan_a_model_bigger_than_this_machine(tmp_path):
    import psutil
    from planner_models import write_sparse_gguf

    huge = write_sparse_gguf(tmp_path / "huge-F16.gguf", 2 * psutil.virtual_memory().total)
    out = plan_json(str(huge))
    [q] = out["quants"]
    assert q["fit"] == "too_big" and q["quant"] == "F16"
    assert q["memory_bytes"]["ram"] > out["hardware"]["ram_available_bytes"]
    assert out["recommended"] is None


def test_the_recommendation_follows_the_usable_speed(quant_ladder, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    for path in quant_ladder.values():
        shutil.copy(path, folder / path.name)
    out = plan_json(str(folder), "--hardware", str(DESKTOP))
    assert out["recommended"]["quant"] == "Q8_0"
    assert "best quality reaching 5 tok/s" in out["recommended"]["reason"]
    # No file of a 135M model decodes at a million tokens/s: the fastest that fits is taken.
    out = plan_json(str(folder), "--hardware", str(DESKTOP), "--usable-tps", "1000000")
    fastest = max(out["quants"], key=lambda q: q["tps_ceiling"])
    assert out["recommended"]["quant"] == fastest["quant"] != "Q8_0"
    assert "none reaches 1000000 tok/s; fastest that fits" in out["recommended"]["reason"]


def test_a_speed_measured_here_replaces_the_ceiling(starter_model):
    from deskllm.store import ConversationStore

    store = ConversationStore(open_database())
    conv = store.create()
    store.add_message(conv.id, "assistant", "x", model=str(starter_model),
                      metrics={"tg_tps": 3.0})  # fmt: skip
    out = plan_json(str(starter_model), "--ctx", "2048")
    assert "none reaches 5 tok/s; fastest that fits (~3.0 tok/s measured)" in (
        out["recommended"]["reason"])  # fmt: skip
    # A profile of another machine ignores what was measured here.
    out = plan_json(str(starter_model), "--hardware", str(DESKTOP))
    assert "measured" not in out["recommended"]["reason"]
