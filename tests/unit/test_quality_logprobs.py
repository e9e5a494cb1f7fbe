"""The KL-divergence maths and the reference file, against float64 computed directly."""

from __future__ import annotations

import io

import numpy as np
import pytest

from deskllm.measure import logprobs
from deskllm.measure.quality import DeltaP, QualityError, summarize

N_VOCAB = 1001  # odd: the rows are padded to even


def log_softmax64(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def random_logits(seed: int, n: int = 40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, N_VOCAB)) * 4).astype(np.float32)


def stored(rows: np.ndarray) -> np.ndarray:
    """The log-probabilities a compact row stands for (scale * q + min_log_prob)."""
    heads = np.ascontiguousarray(rows[:, :4]).view(np.float32)
    return heads[:, :1] * rows[:, 4 : 4 + N_VOCAB].astype(np.float64) + heads[:, 1:2]


def test_compact_rows_keep_log_probs_to_half_a_step():
    logits = random_logits(1)
    rows = logprobs.compact_log_probs(logits)
    assert rows.shape == (40, logprobs.row_width(N_VOCAB)) and rows.dtype == np.uint16
    want = log_softmax64(logits)
    top = want.max(axis=1, keepdims=True)
    kept = want > top - logprobs.LOG_PROB_FLOOR
    step = np.ascontiguousarray(rows[:, :4]).view(np.float32)[:, :1]
    err = np.abs(stored(rows) - want)
    assert np.all(err[kept] <= np.broadcast_to(step, err.shape)[kept] * 0.5 + 1e-5)
    # below the floor every value is the floor itself
    assert np.allclose(stored(rows)[~kept], np.broadcast_to(top - 16, err.shape)[~kept], atol=1e-4)


def test_identical_distributions_score_zero_and_agree_on_top():
    logits = random_logits(2)
    truth = np.argsort(logits, axis=1)[np.arange(40), -1 - np.arange(40) % 20]  # a top-20 token
    s = logprobs.score_rows(logits, logprobs.compact_log_probs(logits), truth)
    assert np.all(np.abs(s.kld) < 1e-4)
    assert s.same_top.all()
    assert np.all(np.abs(s.delta_p) < 1e-4)
    assert np.allclose(s.nll, s.nll_reference, atol=2e-4)  # within half a stored step


def test_scores_match_a_direct_float64_computation():
    ref, cand = random_logits(3), random_logits(3) + random_logits(4) * 0.3
    truth = np.argsort(ref, axis=1)[np.arange(40), -1 - np.arange(40) % 30]
    s = logprobs.score_rows(cand, logprobs.compact_log_probs(ref), truth)
    lp_ref, lp_cand = log_softmax64(ref), log_softmax64(cand)
    kept = lp_ref > lp_ref.max(axis=1, keepdims=True) - logprobs.LOG_PROB_FLOOR
    kld = np.where(kept, np.exp(lp_ref) * (lp_ref - lp_cand), 0).sum(axis=1)
    idx = np.arange(40)
    assert s.kld == pytest.approx(kld, rel=2e-3, abs=1e-4)
    assert s.nll == pytest.approx(-lp_cand[idx, truth], abs=1e-4)
    assert s.nll_reference == pytest.approx(-lp_ref[idx, truth], abs=1e-3)
    assert s.delta_p == pytest.approx(
        np.exp(lp_cand[idx, truth]) - np.exp(lp_ref[idx, truth]), abs=1e-4
    )
    assert list(s.same_top) == list(ref.argmax(axis=1) == cand.argmax(axis=1))
    assert (s.kld > 0).all()


def test_file_layout_is_llama_perplexitys(tmp_path):
    n_ctx = 16
    tokens = np.arange(3 * n_ctx + 5, dtype=np.int32)  # the tail past whole chunks is dropped
    chunks = [logprobs.compact_log_probs(random_logits(10 + i, logprobs.scored_per_chunk(n_ctx)))
              for i in range(3)]  # fmt: skip
    path = tmp_path / "base.kld"
    with open(path, "wb") as f:
        logprobs.write_header(f, n_ctx, N_VOCAB, tokens)
        for rows in chunks:
            f.write(rows.tobytes())
    raw = path.read_bytes()
    assert raw[:8] == b"_logits_"
    assert np.frombuffer(raw[8:20], dtype="<i4").tolist() == [n_ctx, N_VOCAB, 3]
    header = logprobs.read_header(path)
    assert (header.n_ctx, header.n_vocab, header.n_chunk) == (n_ctx, N_VOCAB, 3)
    assert header.tokens.tolist() == list(range(3 * n_ctx))
    for i, rows in enumerate(chunks):
        assert np.array_equal(logprobs.chunk_rows(path, header, i), rows)
    width = logprobs.row_width(N_VOCAB)
    assert len(raw) == 20 + 3 * n_ctx * 4 + 3 * 7 * width * 2  # 7 scored of 16: 8 … 14


@pytest.mark.parametrize("cut", [3, 30, 20 + 48 * 4 + 100])
def test_truncated_or_foreign_files_are_refused(tmp_path, cut):
    out = io.BytesIO()
    logprobs.write_header(out, 16, N_VOCAB, np.arange(48, dtype=np.int32))
    out.write(logprobs.compact_log_probs(random_logits(5, 7)).tobytes())
    path = tmp_path / "base.kld"
    path.write_bytes(out.getvalue()[:cut])
    with pytest.raises(ValueError):
        header = logprobs.read_header(path)
        logprobs.chunk_rows(path, header, 0)
    path.write_bytes(b"not a log-probability file at all")
    with pytest.raises(ValueError, match="not a log-probability file"):
        logprobs.read_header(path)


def test_summary_uses_llama_perplexitys_percentiles():
    n = 200
    kld = np.arange(n, dtype=np.float64) / 100
    dp = np.linspace(-1, 1, n)
    scores = logprobs.TokenScores(
        kld=kld, nll=np.full(n, 2.0), nll_reference=np.full(n, 1.5), delta_p=dp,
        same_top=np.arange(n) % 4 != 0,
    )  # fmt: skip
    s = summarize(scores)
    assert s["tokens"] == n
    assert s["mean_kld"] == pytest.approx(kld.mean())
    assert s["median_kld"] == pytest.approx((kld[99] + kld[100]) / 2)  # even count: the mean
    # percentile(f): p = f*(n-1), linear between the sorted values at floor(p) and floor(p)+1
    p = 0.99 * (n - 1)
    lo, frac = int(p), p - int(p)
    assert s["kld_p99"] == pytest.approx(kld[lo] + frac * (kld[lo + 1] - kld[lo]))
    assert s["same_top_pct"] == 75.0
    assert s["ppl"] == pytest.approx(np.exp(2.0))
    assert s["ppl_reference"] == pytest.approx(np.exp(1.5))
    assert s["ppl_ratio"] == pytest.approx(np.exp(0.5))
    d: DeltaP = s["delta_p"]
    assert d.mean == pytest.approx(0, abs=1e-12)
    assert d.rms == pytest.approx(np.sqrt((dp**2).mean()))
    assert d.p50 == pytest.approx(0, abs=1e-12)
    assert d.p01 == pytest.approx(-d.p99) and d.p05 == pytest.approx(-d.p95)
    assert d.p01 < d.p05 < d.p50 < d.p95 < d.p99


def test_nothing_scored_is_an_error():
    empty = logprobs.TokenScores.concat([])
    with pytest.raises(QualityError):
        summarize(empty)
