from __future__ import annotations

from deskllm.store import open_database
from deskllm.store.quality_results import QualityResults


def result(model: str, kld: float) -> dict:
    return {
        "model": model, "reference": "/m/ref-Q8_0.gguf", "tokens": 2040, "mean_kld": kld,
        "median_kld": kld / 2, "kld_p99": kld * 10, "same_top_pct": 91.5, "ppl": 12.5,
        "ppl_reference": 12.0, "ppl_ratio": 12.5 / 12.0, "seconds": 30.0,
        "delta_p": {"mean": -0.01, "rms": 0.05, "p01": -0.2, "p05": -0.1, "p50": 0.0,
                    "p95": 0.05, "p99": 0.1},
    }  # fmt: skip


def test_a_result_is_kept_per_model_reference_text_and_context(tmp_path):
    db = open_database(tmp_path / "db.sqlite3")
    results = QualityResults(db)
    results.save(result("/m/a-Q4_0.gguf", 0.07), text_sha256="t1", n_ctx=512)
    results.save(result("/m/a-Q4_0.gguf", 0.08), text_sha256="t1", n_ctx=256)
    results.save(result("/m/a-Q4_0.gguf", 0.09), text_sha256="t2", n_ctx=512)
    results.save(result("/m/a-Q2_K.gguf", 0.40), text_sha256="t1", n_ctx=512)
    got = results.get("/m/a-Q4_0.gguf", "/m/ref-Q8_0.gguf", "t1", 512)
    assert got is not None
    assert got["mean_kld"] == 0.07 and got["delta_p"]["p99"] == 0.1 and got["tokens"] == 2040
    assert results.get("/m/a-Q4_0.gguf", "/m/other.gguf", "t1", 512) is None
    assert [r["mean_kld"] for r in results.for_model("/m/a-Q4_0.gguf")] == [0.09, 0.08, 0.07]


def test_checking_again_replaces_the_earlier_result(tmp_path):
    results = QualityResults(open_database(tmp_path / "db.sqlite3"))
    results.save(result("/m/a-Q4_0.gguf", 0.07), text_sha256="t1", n_ctx=512)
    results.save(result("/m/a-Q4_0.gguf", 0.06), text_sha256="t1", n_ctx=512)
    [only] = results.for_model("/m/a-Q4_0.gguf")
    assert only["mean_kld"] == 0.06
