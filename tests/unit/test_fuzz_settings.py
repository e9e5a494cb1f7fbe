"""Property-based tests: whatever is in the settings file (it is the user's, and may have been
edited by hand or cut short), loading it gives Settings of the right types, never an error."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deskllm import paths
from deskllm import settings as settings_mod

FIELDS = [f.name for f in dataclasses.fields(settings_mod.Settings)]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=10,
)  # fmt: skip
settings_objects = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=12), json_values,
                                   max_size=len(FIELDS) + 2)  # fmt: skip


def _check(loaded: settings_mod.Settings) -> None:
    defaults = settings_mod.Settings()
    for name in FIELDS:
        assert type(getattr(loaded, name)) is type(getattr(defaults, name)), name
    assert isinstance(loaded.validate(), list)  # problems are words, never an exception


@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(settings_objects)
def test_any_settings_object_loads_with_the_right_types(data):
    paths.settings_path().write_text(json.dumps(data), encoding="utf-8")
    _check(settings_mod.load())


@settings(max_examples=150, deadline=2000)
@given(json_values)
def test_any_json_document_loads(document):
    paths.settings_path().write_text(json.dumps(document), encoding="utf-8")
    _check(settings_mod.load())


@settings(max_examples=150, deadline=2000)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=400))
def test_damaged_bytes_of_a_real_settings_file_load(noise, cut):
    real = json.dumps(dataclasses.asdict(settings_mod.Settings(n_ctx=8192)), indent=2).encode()
    paths.settings_path().write_bytes(real[:cut] + noise)
    _check(settings_mod.load())
