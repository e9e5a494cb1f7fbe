"""The crash-safe probe for llama.cpp's extra buffer types, with real child processes."""

from __future__ import annotations

import json
import logging

from engine_helpers import failing_probe, segfaulting_probe

from deskllm.engine.extra_bufts_probe import _cache_file, extra_bufts_work


def test_the_real_probe_answers_and_is_remembered_per_build(starter_model):
    works = extra_bufts_work(str(starter_model))
    record = json.loads(_cache_file().read_text())
    assert record["works"] is works and record["exitcode"] in (0, -11)
    assert works == (record["exitcode"] == 0)
    # Answered from the cache: a probe that would fail is never started.
    assert extra_bufts_work(str(starter_model), probe=failing_probe) is works


def test_a_crashing_probe_means_off_and_is_remembered(starter_model, caplog):
    with caplog.at_level(logging.WARNING):
        assert extra_bufts_work(str(starter_model), probe=segfaulting_probe) is False
    assert "crash" in caplog.text
    record = json.loads(_cache_file().read_text())
    assert record == record | {"works": False, "exitcode": -11}
    # Remembered: no second crash on the next start.
    assert extra_bufts_work(str(starter_model)) is False


def test_an_ordinary_error_is_not_remembered(starter_model):
    assert extra_bufts_work(str(starter_model), probe=failing_probe) is False
    assert not _cache_file().exists()


def test_without_a_model_the_safe_answer_is_off():
    assert extra_bufts_work(None) is False
    assert not _cache_file().exists()
