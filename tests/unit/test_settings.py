"""User settings: defaults, validation in plain words, a broken file, atomic saves."""

from __future__ import annotations

import json

from deskllm import paths, settings
from deskllm.loader import params_from_settings


def test_defaults_are_valid_and_round_trip():
    s = settings.load()
    assert s.validate() == []
    s.n_ctx = 8192
    s.kv_ram_budget_mb = 64
    settings.save(s)
    again = settings.load()
    assert again.n_ctx == 8192 and again.kv_ram_budget_mb == 64
    assert not list(paths.home().glob("*.tmp"))


def test_problems_are_named():
    s = settings.Settings(kv_type="q4_0", flash_attn=False, n_ctx=16, n_threads=-1)
    problems = " ".join(s.validate())
    assert "flash attention" in problems
    assert "at least 256" in problems
    assert "CPU threads" in problems
    assert settings.Settings(kv_type="q9").validate()


def test_a_broken_or_foreign_file_falls_back_to_defaults(caplog):
    paths.settings_path().write_text("{not json", encoding="utf-8")
    assert settings.load() == settings.Settings()
    assert "unreadable" in caplog.text
    paths.settings_path().write_text(json.dumps({"n_ctx": 1024, "from_the_future": 1}))
    assert settings.load().n_ctx == 1024


def test_load_params_take_settings_and_overrides():
    s = settings.Settings(n_ctx=3000, kv_type="q8_0", flash_attn=True, kv_disk_budget_mb=7)
    p = params_from_settings(s, "/m.gguf")
    assert (p.model_path, p.n_ctx, p.kv_type, p.flash_attn) == ("/m.gguf", 3000, "q8_0", True)
    assert p.kv_disk_budget_mb == 7
    q = params_from_settings(s, "/m.gguf", n_ctx=512, kv_type=None)
    assert q.n_ctx == 512 and q.kv_type == "q8_0"


def test_a_draft_model_loads_only_where_its_drafts_are_asked_for():
    s = settings.Settings(speculation="draft", draft_model="/small.gguf")
    assert params_from_settings(s, "/m.gguf").draft_model_path == "/small.gguf"
    # --speculation ngram on the command line: the settings' draft stays unloaded.
    assert params_from_settings(s, "/m.gguf", speculation="ngram").draft_model_path == ""
    # Another model of the server (its draft_model_path ""): none.
    assert params_from_settings(s, "/other.gguf", draft_model_path="").draft_model_path == ""
    off = settings.Settings(speculation="off", draft_model="/small.gguf")
    assert params_from_settings(off, "/m.gguf").draft_model_path == ""
    asked = params_from_settings(off, "/m.gguf", speculation="draft", draft_model_path="/d.gguf")
    assert (asked.speculation, asked.draft_model_path) == ("draft", "/d.gguf")


def test_a_value_of_the_wrong_type_falls_back_to_its_default(caplog):
    paths.settings_path().write_text(
        json.dumps({"n_ctx": "8192", "flash_attn": 1, "theme": ["dark"], "n_threads": 3})
    )
    loaded = settings.load()
    assert (loaded.n_ctx, loaded.flash_attn, loaded.theme) == (4096, False, "system")
    assert loaded.n_threads == 3
    assert "n_ctx='8192' is not a int" in caplog.text
    paths.settings_path().write_text("[1, 2]")
    assert settings.load() == settings.Settings()


def test_choices_are_declared_once():
    from deskllm.planner.memory import KV_TYPES

    assert set(settings.choices("kv_type")) == set(KV_TYPES)  # every type the planner sizes
    assert settings.choices("gpu_offload") == ("auto", "manual", "off")
    changes = settings.changed_fields(settings.Settings(), settings.Settings(theme="dark",
                                                                           n_ctx=1024))
    assert changes == {"theme": "now", "n_ctx": "next_load"}


def test_energy_settings_the_watts_figure_reaches_the_engine_and_a_price_is_a_number():
    assert settings.Settings().energy_watts == 0  # none: only measured counters
    assert params_from_settings(settings.Settings(energy_watts=65), "m.gguf").energy_watts == 65.0
    paths.settings_path().write_text(json.dumps({"electricity_price_per_kwh": 1}))
    assert settings.load().electricity_price_per_kwh == 1.0  # written by hand as a whole number
    paths.settings_path().write_text(json.dumps({"electricity_price_per_kwh": "cheap"}))
    assert settings.load().electricity_price_per_kwh == 0.0  # not a number: unknown
    problems = settings.Settings(electricity_price_per_kwh=-0.3).validate()
    assert problems == ["the electricity price must be 0 (unknown) or more"]
