"""`deskllm bench --suite` measures speculative decoding on the chosen configuration — off,
n-gram drafts and each installed model that can draft for the model — and the Automatic
speculation setting (the default) loads what it chose. Real engine, real models: a Q8_0 copy
of the starter model (made with llama_model_quantize) is the model, the starter model its
draft; Gemma 3 270M, installed beside them, speaks another vocabulary and is not tried."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from deskllm.database.connection import open_database
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, LoadParams, Sampling
from deskllm.llamacpp.requantize import requantize
from deskllm.loader import ModelLoader
from deskllm.measure.speculation_stage import SHAPES, choose_speculation
from deskllm.planner.measured_configs import current_keys, save_suite, stored_suite
from deskllm.store.library import ModelLibrary


def cli(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = os.environ | {"DESKLLM_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "deskllm", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def measured(tmp_path_factory, starter_model, gemma_model, session_home):
    """A quick suite of the Q8_0 copy with the starter model and Gemma installed:
    (its JSON, its stderr, the home it stored in, the model's path)."""
    home = tmp_path_factory.mktemp("spec-suite-home")
    if (session_home / "probes").is_dir():  # the hardware probes of this session, not again
        shutil.copytree(session_home / "probes", home / "probes", dirs_exist_ok=True)
    target = home / "starter-q8_0.gguf"
    requantize(starter_model, {"Q8_0": target})
    db = open_database(home / "deskllm.sqlite3")
    for path in (target, starter_model, gemma_model):
        ModelLibrary(db).add(path)
    db.close()
    run = cli(home, "bench", "--suite", "--quick", "--json", "--model", str(target))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout), run.stderr, home, target


def test_the_suite_measures_ngram_drafts_and_each_installed_draft(measured, starter_model):
    result, stderr, _home, _target = measured
    speculation = result["speculation"]
    rows = {row["label"]: row for row in speculation["measured"]}
    # The starter model drafts for its Q8_0 copy; Gemma (another vocabulary) is not tried.
    assert set(rows) == {"n-gram drafts", f"draft model {starter_model.name}"}, rows
    for row in rows.values():
        assert row["error"] is None, row
        for shape in SHAPES:
            assert row[f"{shape}_tps"] > 0 and row[f"{shape}_over_off"] > 0, row
    draft = rows[f"draft model {starter_model.name}"]
    assert draft["draft"] == str(starter_model) and draft["mode"] == "draft"
    assert draft["acceptance_copy"] > 0.8  # the same weights, quantized apart: nearly all taken
    assert rows["n-gram drafts"]["acceptance_copy"] > 0.3  # a quote is drafted from the prompt
    assert speculation["chosen"] == choose_speculation(speculation["measured"])
    assert f"automatic speculation: {speculation['chosen']['label']}" in stderr


def test_automatic_speculation_loads_what_the_suite_chose(measured, extra_bufts, monkeypatch):
    result, _stderr, home, target = measured
    monkeypatch.setenv("DESKLLM_HOME", str(home))
    db = open_database(home / "deskllm.sqlite3")
    assert stored_suite(db, current_keys(), str(target)) == result
    chosen = result["speculation"]["chosen"]
    with EngineClient() as client:
        loader = ModelLoader(client, db=db)
        loader.load(LoadParams(str(target), n_ctx=1024, speculation="auto",
                               use_extra_bufts=extra_bufts))  # fmt: skip
        check = loader.last_check
        quote = [ChatMessage("user", SHAPES["copy"])]
        done = client.chat(uuid.uuid4().hex, quote,
                           Sampling(temperature=0.0, max_tokens=48)).wait().done  # fmt: skip
    expected = {"off": ("off", ""), "auto": ("auto", ""), "draft": ("draft", chosen["draft"])}
    assert (check.params.speculation, check.params.draft_model_path) == expected[chosen["mode"]]
    assert check.speculation.startswith(f"{chosen['label']} ("), check.speculation
    assert done is not None
    assert (done.metrics.draft_n > 0) == (chosen["mode"] != "off"), done.metrics


def test_a_measured_draft_loads_and_drafts_and_a_gone_one_falls_back_to_ngram(
        measured, starter_model, extra_bufts, tmp_path, monkeypatch):  # fmt: skip
    """The loader's two ends of a stored "draft" choice: the draft loads beside the model and
    drafts each reply; a draft file that is gone leaves n-gram drafts, said why."""
    result, _stderr, home, target = measured
    monkeypatch.setenv("DESKLLM_HOME", str(home))
    row = next(r for r in result["speculation"]["measured"] if r["mode"] == "draft")
    moved = tmp_path / "draft-copy.gguf"
    shutil.copyfile(row["draft"], moved)
    db = open_database(tmp_path / "store.sqlite3")
    stored = result | {"speculation": result["speculation"] | {"chosen": {
        "mode": "draft", "draft": str(moved), "label": row["label"], "reason": "measured"}}}
    save_suite(db, stored)
    with EngineClient() as client:
        loader = ModelLoader(client, db=db)
        loader.load(LoadParams(str(target), n_ctx=1024, speculation="auto",
                               use_extra_bufts=extra_bufts))  # fmt: skip
        assert loader.last_check.params.draft_model_path == str(moved)
        quote = [ChatMessage("user", SHAPES["copy"])]
        done = client.chat(uuid.uuid4().hex, quote,
                           Sampling(temperature=0.0, max_tokens=48)).wait().done  # fmt: skip
        assert done is not None and done.metrics.draft_n_accepted > 0
        moved.unlink()
        check = loader.check(LoadParams(str(target), n_ctx=1024, speculation="auto",
                                        use_extra_bufts=extra_bufts))  # fmt: skip
    assert (check.params.speculation, check.params.draft_model_path) == ("auto", "")
    assert check.speculation == f"n-gram drafts: the measured draft model {moved} is gone"
    db.close()


def test_deskllm_chat_says_what_automatic_speculation_took(measured):
    """Automatic is the setting's default: `deskllm chat --metrics` names what it loaded."""
    result, _stderr, home, target = measured
    run = cli(home, "chat", "--model", str(target), "--prompt", "Say hi.", "--metrics",
              timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    label = result["speculation"]["chosen"]["label"]
    assert f"[automatic speculation: {label} (" in run.stderr, run.stderr
