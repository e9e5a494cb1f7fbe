"""`deskllm quality` against llama.cpp's own llama-perplexity, built from the same llama.cpp
sources as the engine (packaging/build_llama_perplexity.sh; .ci/run builds it first)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from deskllm.engine.domain import LoadParams
from deskllm.measure.quality import check_quality
from deskllm.measure.quality_text import sample_text

ROOT = Path(__file__).resolve().parents[2]
TOOL = Path(
    os.environ.get("DESKLLM_LLAMA_PERPLEXITY") or ROOT / ".engines" / "tools" / "llama-perplexity"
)
CTX = 128
# ~560 tokens: 4 chunks (llama-perplexity wants 2 at least), 252 tokens scored, so that a
# single token whose top choice flips moves same-top by less than the 0.5 points allowed
TEXT = sample_text()[:2500]

pytestmark = [
    pytest.mark.driver,
    pytest.mark.skipif(
        not TOOL.is_file(), reason=f"{TOOL} is absent: run packaging/build_llama_perplexity.sh"
    ),
]


def llama_perplexity(*args: str) -> str:
    # --no-repack: no extra buffer types (their AMX kernels crash on some machines), like
    # use_extra_bufts=False below: repacked weights round differently. Flash attention off,
    # as the engine loads by default.
    cmd = [str(TOOL), *args, "-c", str(CTX), "-t", "2", "--no-repack", "-fa", "off"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def figure(output: str, label: str) -> float:
    found = re.search(re.escape(label) + r"\s*:\s*([-+\d.]+)", output)
    assert found, f"{label!r} not in llama-perplexity's output:\n{output[-3000:]}"
    return float(found.group(1))


def test_our_kl_divergence_is_llama_perplexitys(quant_ladder, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    base = tmp_path / "base.kld"
    reference, model = quant_ladder["Q8_0"], quant_ladder["Q2_K"]
    llama_perplexity("-m", str(reference), "-f", str(text), "--kl-divergence-base", str(base))
    out = llama_perplexity("-m", str(model), "-f", str(text), "--kl-divergence-base",
                           str(base), "--kl-divergence")  # fmt: skip

    ours = check_quality(
        LoadParams(str(model), n_threads=2, use_extra_bufts=False),
        LoadParams(str(reference), n_threads=2, use_extra_bufts=False),
        TEXT,
        CTX,
    )
    assert ours.tokens == 4 * (CTX - 1 - CTX // 2)
    assert ours.mean_kld == pytest.approx(figure(out, "Mean    KLD"), rel=0.02)
    assert ours.same_top_pct == pytest.approx(figure(out, "Same top p"), abs=0.5)
    assert ours.ppl == pytest.approx(figure(out, "Mean PPL(Q)"), rel=0.01)
    assert ours.ppl_reference == pytest.approx(figure(out, "Mean PPL(base)"), rel=0.01)
    assert ours.median_kld == pytest.approx(figure(out, "Median  KLD"), rel=0.05, abs=1e-4)
