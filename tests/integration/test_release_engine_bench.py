"""The benchmark's native decode loop runs the engine build DESKLLM_ENGINE_DIR names (the
release build here), not the llama-cpp-python the venv installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskllm.measure.engine_bench import _in_child, _native_tg

RELEASE_ENGINE = Path(__file__).resolve().parents[2] / ".engines" / "release"

pytestmark = [
    pytest.mark.driver,
    pytest.mark.skipif(
        not (RELEASE_ENGINE / "llama_cpp").is_dir(),
        reason="the release engine is not built (packaging/build_release_engine.sh)",
    ),
]


def test_the_native_decode_loop_runs_the_chosen_engine_build(
    monkeypatch, starter_model: Path, extra_bufts: bool
):
    monkeypatch.setenv("DESKLLM_ENGINE_DIR", str(RELEASE_ENGINE))
    result = _in_child(_native_tg, str(starter_model), 512, 2, extra_bufts)
    assert Path(result["library"]).resolve().is_relative_to(RELEASE_ENGINE.resolve())
    assert result["tps"] > 0
