"""`deskllm quality` on real quantizations of the starter model, in the real engine."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest
from signal_helpers import sigint_as_at_a_terminal

from deskllm.engine.domain import LoadParams
from deskllm.measure.quality import (
    JSON_KEYS,
    QualityCancelled,
    QualityError,
    QualityProgress,
    check_quality,
)
from deskllm.measure.quality_text import sample_text
from deskllm.store import ConversationStore, open_database
from deskllm.store.quality_results import QualityResults

CTX = 128
TEXT = sample_text()[:2000]  # ~450 tokens: 3 chunks of 128, 189 tokens scored


@pytest.fixture
def cli_env(deskllm_home, session_home, extra_bufts, tmp_path) -> dict[str, str]:
    """The command's environment: this test's home with the probe's cached answer, and its
    own temporary folder (to see that nothing is left in it)."""
    if (session_home / "probes").is_dir():
        shutil.copytree(session_home / "probes", deskllm_home / "probes", dirs_exist_ok=True)
    (tmp_path / "tmp").mkdir()
    return os.environ | {"DESKLLM_HOME": str(deskllm_home), "HF_HUB_OFFLINE": "1",
                         "TMPDIR": str(tmp_path / "tmp")}  # fmt: skip


@pytest.fixture
def cli(cli_env):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "deskllm", *args], capture_output=True,
                              text=True, env=cli_env, timeout=600)  # fmt: skip

    return run


@pytest.fixture
def cli_process(cli_env):
    started = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "deskllm", *args], env=cli_env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=sigint_as_at_a_terminal)  # fmt: skip
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def params(extra_bufts):
    def make(path) -> LoadParams:
        return LoadParams(str(path), n_threads=2, use_extra_bufts=extra_bufts)

    return make


def test_a_coarser_quantization_drifts_further_from_the_reference(quant_ladder, params):
    ref = params(quant_ladder["Q8_0"])
    q6 = check_quality(params(quant_ladder["Q6_K"]), ref, TEXT, CTX)
    q2 = check_quality(params(quant_ladder["Q2_K"]), ref, TEXT, CTX)
    assert q6.tokens == q2.tokens == 3 * (CTX - 1 - CTX // 2)
    assert 0 < q6.mean_kld < q2.mean_kld
    assert q6.median_kld <= q2.median_kld and q6.kld_p99 < q2.kld_p99
    assert q6.same_top_pct >= q2.same_top_pct
    assert abs(q6.ppl_ratio - 1) < abs(q2.ppl_ratio - 1)
    assert q2.ppl_reference == pytest.approx(q6.ppl_reference)  # the same reference pass
    assert q2.delta_p.rms > q6.delta_p.rms > 0
    assert q2.delta_p.p01 <= q2.delta_p.p05 <= q2.delta_p.p50 <= q2.delta_p.p95 <= q2.delta_p.p99


def test_a_file_against_itself_scores_zero(quant_ladder, params, tmp_path):
    q2 = params(quant_ladder["Q2_K"])
    seen: list[QualityProgress] = []
    work = tmp_path / "work"
    work.mkdir()
    r = check_quality(q2, q2, TEXT, CTX, on_progress=seen.append, workdir=work)
    assert abs(r.mean_kld) < 1e-5 and abs(r.median_kld) < 1e-5
    assert r.same_top_pct == 100.0
    assert r.ppl_ratio == pytest.approx(1, abs=1e-4)
    assert r.delta_p.rms < 1e-4
    assert [(p.stage, p.chunk, p.chunks) for p in seen] == [
        (stage, i, 3) for stage in ("reference", "model") for i in (1, 2, 3)
    ]
    assert list(work.iterdir()) == []  # the reference's log-probabilities are gone
    data = r.to_json()
    assert list(data) == list(JSON_KEYS)
    assert set(data["delta_p"]) == {"mean", "rms", "p01", "p05", "p50", "p95", "p99"}
    assert data["model"] == data["reference"] == str(quant_ladder["Q2_K"])
    json.dumps(data)  # plain numbers and strings only


def test_a_text_shorter_than_a_chunk_is_refused_in_words(starter_model, params):
    p = params(starter_model)
    with pytest.raises(QualityError, match="less than one chunk of 512"):
        check_quality(p, p, "Too short to score.", 512)


def test_cancel_ends_the_pass_and_leaves_nothing_behind(starter_model, params, tmp_path):
    cancel = threading.Event()
    p = params(starter_model)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(QualityCancelled):
        check_quality(p, p, TEXT, CTX, on_progress=lambda _p: cancel.set(), cancel=cancel,
                      workdir=work)  # fmt: skip
    assert multiprocessing.active_children() == []
    assert list(work.iterdir()) == []


def test_a_pass_that_dies_is_reported_with_the_reason(starter_model, params):
    def kill_the_pass(_p: QualityProgress) -> None:
        for child in multiprocessing.active_children():
            if child.name.startswith("deskllm-quality"):
                os.kill(child.pid, signal.SIGKILL)

    p = params(starter_model)
    with pytest.raises(QualityError, match="reference pass .*killed"):
        check_quality(p, p, TEXT, CTX, on_progress=kill_the_pass)


def test_cli_scores_a_file_and_stores_the_result(cli, quant_ladder, deskllm_home, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    r = cli("quality", str(quant_ladder["Q2_K"]), "--reference", str(quant_ladder["Q8_0"]),
            "--text", str(text), "--ctx", str(CTX), "--threads", "2", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert list(data) == list(JSON_KEYS)
    assert data["tokens"] == 189 and data["mean_kld"] > 0
    assert "reference chunk 3/3" in r.stderr and "model     chunk 3/3" in r.stderr
    stored = QualityResults(open_database(deskllm_home / "deskllm.sqlite3")).for_model(
        str(quant_ladder["Q2_K"])
    )
    assert len(stored) == 1
    assert stored[0]["mean_kld"] == data["mean_kld"] and stored[0]["delta_p"] == data["delta_p"]
    assert stored[0]["n_ctx"] == CTX and len(stored[0]["text_sha256"]) == 64


def test_cli_scores_a_stored_conversation(cli, starter_model, deskllm_home):
    store = ConversationStore(open_database(deskllm_home / "deskllm.sqlite3"))
    conversation = store.create("Bread", "You are a baker.", str(starter_model), {})
    paragraphs = [p for p in TEXT.split("\n\n") if p.strip()]
    for i, paragraph in enumerate(paragraphs):
        store.add_message(conversation.id, "user" if i % 2 else "assistant", paragraph)
    r = cli("quality", str(starter_model), "--reference", str(starter_model), "--conversation",
            conversation.id, "--ctx", "64", "--threads", "2", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["tokens"] >= 5 * 31 and data["same_top_pct"] == 100.0
    missing = cli("quality", str(starter_model), "--reference", str(starter_model),
                  "--conversation", "no-such-id")  # fmt: skip
    assert missing.returncode == 1 and "no conversation with id 'no-such-id'" in missing.stderr


def test_cli_ctrl_c_cancels_cleanly(cli_process, starter_model, tmp_path):
    proc = cli_process("quality", str(starter_model), "--reference", str(starter_model),
                       "--ctx", "128", "--threads", "2")  # fmt: skip
    line = b""
    while b"chunk 1/" not in line:  # the reference pass is under way
        byte = proc.stderr.read(1)
        assert byte, "the command ended before its first chunk"
        line += byte
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"cancelled" in err and b"Traceback" not in err
    assert list((tmp_path / "tmp").iterdir()) == []  # the log-probability file is gone
