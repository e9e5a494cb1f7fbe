"""The `deskllm` command line, run as a user runs it: a real process, the real engine."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deskllm.store import ConversationStore, open_database


@pytest.fixture
def cli(deskllm_home: Path, session_home: Path, extra_bufts: bool):
    """Run `python -m deskllm ...` in this test's home, with the probe's cached answer."""
    if (session_home / "probes").is_dir():
        shutil.copytree(session_home / "probes", deskllm_home / "probes", dirs_exist_ok=True)
    env = os.environ | {"DESKLLM_HOME": str(deskllm_home), "HF_HUB_OFFLINE": "1"}

    def run(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "deskllm", *args],
            capture_output=True, text=True, env=env, timeout=timeout, **kw,
        )

    return run


def test_chat_prompt_streams_a_reply_and_stores_it(cli, deskllm_home):
    r = cli("chat", "--prompt", "What colour is the sky?", "--temperature", "0",
            "--max-tokens", "16", "--ctx", "1024", "--metrics")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "tok/s" in r.stderr and "cached" in r.stderr and "context" in r.stderr
    assert re.search(r"threads \d+/\d+", r.stderr)  # threads on Automatic: how many run
    store = ConversationStore(open_database(deskllm_home / "deskllm.sqlite3"))
    [conversation] = store.list()
    user, reply = store.messages(conversation.id)
    assert user.content == "What colour is the sky?"
    assert reply.status == "complete" and reply.content.strip() == r.stdout.strip()


def test_chat_with_speculation_reports_its_drafts(cli):
    quote = "The lighthouse stood on the rock for two hundred years; its keeper wrote a log."
    r = cli("chat", "--prompt", f"Here is a text.\n\n{quote}\n\nQuote it word for word.",
            "--temperature", "0", "--repeat-penalty", "1", "--max-tokens", "40", "--ctx", "1024",
            "--speculation", "ngram", "--metrics")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert re.search(r"drafts \d+% · [\d.]+ tok/pass", r.stderr), r.stderr


def test_chat_loads_record_calibration_and_the_next_load_applies_it(cli, deskllm_home):
    """Each `deskllm chat` load goes through the loader: it is recorded, and the next load's
    plan is corrected by it (the --metrics load line says by how many)."""
    args = ("chat", "--prompt", "Hi", "--max-tokens", "4", "--ctx", "1024", "--metrics")
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    assert "not calibrated yet" in first.stderr
    second = cli(*args)
    assert second.returncode == 0, second.stderr
    assert "calibrated by 1 earlier loads" in second.stderr
    db = open_database(deskllm_home / "deskllm.sqlite3")
    assert db["calibration"].count == 2


def test_chat_repl_reads_lines_until_eof(cli):
    r = cli("chat", "--temperature", "0", "--max-tokens", "8", "--ctx", "1024",
            input="Hello!\nHow are you?\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("> ") >= 2 and len(r.stdout.strip()) > 10


def test_chat_with_an_unknown_model_says_what_to_do(cli):
    r = cli("chat", "--model", "no-such-model", "--prompt", "hi")
    assert r.returncode != 0
    assert "no-such-model" in r.stderr and "deskllm models" in r.stderr


def test_chat_with_a_broken_file_names_it(cli, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model at all" * 10)
    r = cli("chat", "--model", str(broken), "--prompt", "hi")
    assert r.returncode == 1
    assert "broken.gguf" in r.stderr and "not a GGUF" in r.stderr


def test_models_lists_the_starter_model(cli, starter_model):
    r = cli("models", "--json")
    assert r.returncode == 0, r.stderr
    [model] = json.loads(r.stdout)
    assert model["source"] == "starter" and model["exists"]
    assert model["path"] == str(starter_model.resolve())
    assert model["architecture"] == "llama" and model["quant"] == "Q4_1"
    human = cli("models")
    assert "SmolLM2" in human.stdout and "Q4_1" in human.stdout


def test_self_test_passes_and_prints_one_json_line(cli):
    r = cli("--self-test")
    assert r.returncode == 0, r.stdout + r.stderr
    [line] = r.stdout.strip().splitlines()
    result = json.loads(line)
    assert result["ok"] is True
    assert set(result["checks"]) == {"hardware", "engine", "database", "documents", "qt"}
    assert result["checks"]["engine"]["tokens"] > 0
    assert result["checks"]["documents"]["dims"] == 384


def test_python_dash_m_and_help(cli):
    r = cli("--help")
    assert r.returncode == 0
    for command in ("chat", "models", "bench", "hw"):
        assert command in r.stdout


def test_bench_prints_every_key_as_json(cli):
    r = cli("bench", "--json", "--rounds", "1", "--ctx", "4096", timeout=900)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    for key in ("tg_tps", "raw_tg_tps", "native_tg_tps", "pp_tps", "ttft_s", "cached_ttft_s",
                "restore_s", "reeval_s", "stop_decode_s", "stop_prefill_s",
                "crash_recover_s"):
        assert isinstance(result[key], float) and result[key] > 0, key
    assert result["history_tokens"] >= 1200
    assert result["restored_from"] == "ram"
    # All of turn 1's prompt but its last token, which was read alone (runtime.eval_prompt).
    assert result["cached_tokens"] >= result["history_tokens"] - 1
    assert set(result["ratios"]) >= {"tg_over_raw", "cached_ttft_over_ttft",
                                     "restore_over_reeval"}
